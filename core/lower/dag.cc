// Walks of the dependency DAG (core/lower/dag.h): the dry run, the communication-free critical path, node names.
#include "core/lower/dag.h"

#include <algorithm>
#include <functional>

#include "core/ir/schedule_check.h"
#include "core/util/graph.h"

namespace pipescope {

std::size_t dry_run(const Dag& dag) { return kahn_completed(dag.size(), dag.succ_begin, dag.succ, dag.preds); }

std::vector<double> earliest_finish(const Dag& dag) {
  return earliest_finish(dag, [&](std::uint32_t u) {
    const DagNode& n = dag.nodes[u];
    return n.kind == DagKind::Compute ? n.amount : 0.0;
  });
}

std::vector<double> earliest_finish(const Dag& dag, const std::function<double(std::uint32_t)>& duration_s) {
  std::vector<std::uint32_t> pending(dag.preds);
  std::vector<double> start(dag.size(), 0.0), finish(dag.size(), 0.0);
  const std::size_t done = kahn_walk(
      dag.size(), dag.succ_begin, dag.succ, pending, [&](std::uint32_t u) { finish[u] = start[u] + duration_s(u); },
      [&](std::uint32_t u, std::uint32_t s) { start[s] = std::max(start[s], finish[u]); });
  if (done != dag.size())
    throw CheckError("earliest_finish: the DAG has a cycle (" + std::to_string(dag.size() - done) + " of " +
                         std::to_string(dag.size()) + " nodes never become ready)",
                     {});
  return finish;
}

std::string dag_node_text(const Dag& dag, const LoweredSchedule& ls, std::uint32_t node) {
  const DagNode& n = dag.nodes.at(node);
  if (n.worker < 0 || n.index < 0 || static_cast<std::size_t>(n.worker) >= ls.per_worker.size() ||
      static_cast<std::size_t>(n.index) >= ls.per_worker[n.worker].size())
    return "node " + std::to_string(node);
  return lowered_op_name(ls, n.worker, static_cast<std::size_t>(n.index));
}

}  // namespace pipescope
