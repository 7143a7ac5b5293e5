#pragma once
// How stage 2 of `pipescope search` times one node of a replica's DAG (core/search_estimate.h): compute at the cost
// model's seconds, a transfer at latency plus bytes over the link between its two GPUs, a collective as the
// simulator's collective model times it over the group's rings (data-parallel groups ringed over the rank's real
// dp peers), no contention. Shared by the direct estimate (from a lowered schedule) and the structure cache's
// re-timing (core/search_retime.h), so that both take the same arithmetic.

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "core/dag.h"
#include "core/lowering.h"
#include "core/placement.h"

namespace pipescope {

// What a node's duration depends on: its DAG kind and its lowered op's values. Only the fields that the node's kind
// uses are set (compute: seconds; transfer: bytes, worker, peer; collective: kind, async, bytes, count, lead, group).
struct CostedOp {
  DagKind dag = DagKind::Join;
  LOpKind kind = LOpKind::Compute;
  bool async = false;
  double seconds = 0, bytes = 0, lead_s = 0;
  std::int32_t count = 1;
  std::int32_t worker = -1, peer = -1, group = -1;
};

// The values of DAG node n of `ls` (as build_dag made it from ls.per_worker[n.worker][n.index]).
CostedOp costed_op(const LoweredSchedule& ls, const DagNode& n);

// The candidate's links and collective groups (`groups` of its one-replica lowering; `full` its placement).
class ReplicaTiming {
 public:
  ReplicaTiming(const Scenario& s, const Placement& full, const std::vector<CollGroup>& groups);
  ~ReplicaTiming();
  ReplicaTiming(const ReplicaTiming&) = delete;
  ReplicaTiming& operator=(const ReplicaTiming&) = delete;
  double duration_s(const CostedOp& op);

  using Rings = std::vector<std::vector<std::int32_t>>;

 private:
  struct Group;
  const Scenario& s_;
  const Placement& full_;
  bool nccl_;
  std::vector<Rings> rings_;
  std::vector<Group> groups_;
};

}  // namespace pipescope
