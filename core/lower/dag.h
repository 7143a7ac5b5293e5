#pragma once
// The dependency DAG of a lowered schedule: what the static checker's dry run and the simulator's
// just-in-time driver both walk. Built once from the per-worker programs under the execution semantics
// documented in core/lower/lowering.h; no SimGrid here.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/lower/lowered_schedule.h"
#include "core/model/placement.h"

namespace pipescope {

enum class DagKind : std::uint8_t {
  Compute,     // gpu, seconds
  Transfer,    // gpu -> gpu2, bytes (one matched Send/Recv pair)
  Collective,  // group, bytes per call, count calls; expanded by the engine (ring steps or analytic)
  Join,        // zero-cost synchronisation point (a Recv completing)
};

struct DagNode {
  DagKind kind = DagKind::Compute;
  std::int32_t worker = -1;  // owning worker (sender for transfers; first member for collectives)
  std::int32_t index = -1;   // position in that worker's program (LoweredSchedule::per_worker)
  std::int32_t gpu = -1;     // compute GPU / transfer source
  std::int32_t gpu2 = -1;    // transfer destination
  std::int32_t group = -1;   // collective group
  std::int32_t count = 1;    // collective calls folded together
  double amount = 0;         // seconds (Compute) or bytes (Transfer, Collective per call)
  double lead_s = 0;         // Collective: starts this long after its predecessors complete (overlapped buckets)
};

struct Dag {
  std::vector<DagNode> nodes;
  // Successors in CSR form: succ[succ_begin[i] .. succ_begin[i+1]).
  std::vector<std::uint32_t> succ_begin;
  std::vector<std::uint32_t> succ;
  std::vector<std::uint32_t> preds;  // number of predecessors per node
  // Per collective group: the GPU rings that run the call concurrently (from Placement). TP group: one
  // ring of its tp GPUs; DP group: tp rings of dp GPUs each; embedding group: tp rings of 2 GPUs.
  std::vector<std::vector<std::vector<std::int32_t>>> rings;
  // node_of[worker][index] = DAG node of that lowered op (-1 for ops folded into another node: a Send,
  // whose Transfer node carries the Send's worker and index). All members of a collective call map to
  // its one node, whose worker/index are those of the group's first member.
  std::vector<std::vector<std::int32_t>> node_of;

  std::size_t size() const { return nodes.size(); }
};

// Throws CheckError (core/lower/checks.h) when sends/receives or collectives cannot be matched.
Dag build_dag(const LoweredSchedule& ls, const Placement& placement);
// Dag::rings alone: the GPU rings of every collective group of `ls` under `placement` (the search re-times one
// DAG under many placements).
std::vector<std::vector<std::vector<std::int32_t>>> collective_rings(const LoweredSchedule& ls,
                                                                     const Placement& placement);

// Dependency-only dry run (Kahn's algorithm). Returns the number of nodes that completed;
// == size() iff the DAG is acyclic.
std::size_t dry_run(const Dag& dag);

// Earliest finish time of every node when Compute nodes take `amount` seconds and everything else is
// free (communication-free critical path; each GPU's ops are already chained by program order).
// The closed-form tests and `simulate --engine analytic` use it. Throws CheckError on a cycle.
std::vector<double> earliest_finish(const Dag& dag);
// The same with each node taking duration_s(node) (the search's estimate: transfers and collectives costed too).
std::vector<double> earliest_finish(const Dag& dag, const std::function<double(std::uint32_t)>& duration_s);

// Human-readable name of a DAG node, using the lowered op's canonical text.
std::string dag_node_text(const Dag& dag, const LoweredSchedule& ls, std::uint32_t node);

}  // namespace pipescope
