#pragma once
// Static checker: proves a lowered schedule can run before anything runs it.
// - every compute op of the schedule appears exactly once, backward after its forward on the same rank;
// - every semantic dependency (core/ir/schedule.h op_dependencies) is satisfied: on the same rank by an
//   earlier op, across ranks by a matched Send/Recv pair that orders the producer before the consumer;
// - every Send has exactly one matching Recv of equal size, and vice versa;
// - collective calls match across their group members (same sequence, equal sizes);
// - the dependency-only dry run terminates; if not, the ops that form a cycle are reported.
// The simulator and the runtime refuse a LoweredSchedule without a CheckedSchedule token.

#include <string>
#include <vector>

#include "core/ir/schedule_check.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"

namespace pipescope {

// Proof that check() accepted this schedule; only check() can make one.
class CheckedSchedule {
 public:
  const LoweredSchedule& schedule() const { return *ls_; }
  const Dag& dag() const { return dag_; }
  const Placement& placement() const { return *placement_; }

 private:
  friend CheckedSchedule check(const LoweredSchedule&, const Placement&);
  CheckedSchedule(const LoweredSchedule& ls, const Placement& pl, Dag dag)
      : ls_(&ls), placement_(&pl), dag_(std::move(dag)) {}
  const LoweredSchedule* ls_;
  const Placement* placement_;
  Dag dag_;
};

// Throws CheckError naming the offending ops (canonical text) on the first violation found.
CheckedSchedule check(const LoweredSchedule& ls, const Placement& placement);

}  // namespace pipescope
