#pragma once
// Static checker: proves a lowered schedule can run before anything runs it.
// - every compute op of the schedule appears exactly once, backward after its forward on the same rank;
// - every semantic dependency (core/schedule.h op_dependencies) is satisfied: on the same rank by an
//   earlier op, across ranks by a matched Send/Recv pair that orders the producer before the consumer;
// - every Send has exactly one matching Recv of equal size, and vice versa;
// - collective calls match across their group members (same sequence, equal sizes);
// - the dependency-only dry run terminates; if not, the ops that form a cycle are reported.
// The simulator and the runtime refuse a LoweredSchedule without a CheckedSchedule token.

#include <stdexcept>
#include <string>
#include <vector>

#include "core/dag.h"
#include "core/lowering.h"
#include "core/placement.h"

namespace pipescope {

class CheckError : public std::runtime_error {
 public:
  CheckError(const std::string& what, std::vector<std::string> ops) : std::runtime_error(what), ops_(std::move(ops)) {}
  const std::vector<std::string>& ops() const { return ops_; }  // canonical texts of offending ops

 private:
  std::vector<std::string> ops_;
};

// Throws CheckError(what, ops): the checks' and the DAG builder's one way to report a violation.
[[noreturn]] void fail_check(const std::string& what, std::vector<std::string> ops);

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

// Checks of the compute-only schedule (ops once each, dependencies orderable per rank); throws CheckError.
void check_schedule(const Schedule& s);

}  // namespace pipescope
