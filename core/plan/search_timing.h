#pragma once
// How stage 2 of `pipescope search` times one node of a replica's DAG (core/plan/search_estimate.h): compute at the
// cost model's seconds, a transfer at latency plus bytes over the link between its two GPUs, a collective as the
// simulator's collective model times it over the group's rings (data-parallel groups ringed over the rank's real
// dp peers), no contention. Shared by the direct estimate (from a lowered schedule) and the structure cache's
// re-timing (core/plan/search_retime.h), so that both take the same arithmetic.

#include <cstdint>
#include <vector>

#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/model/config.h"
#include "core/model/placement.h"

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

// The values of DAG node n whose lowered op is l (as build_dag made n from it). Inline: stage 2's structure check
// takes it for every node.
inline CostedOp costed_op(const LoweredOp& l, const DagNode& n) {
  CostedOp c;
  c.dag = n.kind;
  c.kind = l.kind;
  switch (n.kind) {
    case DagKind::Compute:
      c.seconds = l.seconds;
      break;
    case DagKind::Transfer:
      c.bytes = l.bytes;
      c.worker = n.worker;
      c.peer = l.peer;
      break;
    case DagKind::Collective:
      c.async = l.async && (l.kind == LOpKind::AllReduce || l.kind == LOpKind::AllGather ||
                            l.kind == LOpKind::ReduceScatter || l.kind == LOpKind::AllToAll);
      c.bytes = l.bytes;
      c.count = l.count;
      c.lead_s = l.async ? l.lead_s : 0.0;
      c.group = n.group;
      break;
    case DagKind::Join:
      break;
  }
  return c;
}
// The same for DAG node n of `ls` (its op: ls.per_worker[n.worker][n.index]).
inline CostedOp costed_op(const LoweredSchedule& ls, const DagNode& n) {
  return costed_op(ls.per_worker[static_cast<std::size_t>(n.worker)][static_cast<std::size_t>(n.index)], n);
}

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
  void share_link(std::size_t g);
  const Scenario& s_;
  const Placement& full_;
  bool nccl_;
  std::vector<Rings> rings_;
  std::vector<Group> groups_;
};

}  // namespace pipescope
