// simulate(): a checked, lowered schedule -> DAG annotations -> simulate_dag(). Kept apart from the
// driver so that bare-DAG runs (tests, benchmarks) need nothing from the lowering.
#include <algorithm>

#include "core/lower/dag.h"
#include "sim/engine.h"

namespace pipescope::sim {

SimResult simulate(const ClusterSpec& cluster, const CheckedSchedule& cs, const EngineOptions& opt) {
  const Dag& dag = cs.dag();
  const LoweredSchedule& ls = cs.schedule();
  const Placement& pl = cs.placement();

  DagAnnotations ann;
  ann.workers = ls.workers();
  ann.replicas = ls.dp;
  ann.group_tags.resize(dag.rings.size(), CollTag::None);
  ann.group_node_dedup.resize(dag.rings.size());
  for (std::size_t g = 0; g < dag.rings.size() && g < ls.groups.size(); g++) {
    ann.group_tags[g] = ls.groups[g].tag;
    ann.group_node_dedup[g] = ls.groups[g].node_dedup;
  }
  ann.allgather.assign(dag.size(), 0);
  for (std::uint32_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind == DagKind::Collective && n.worker >= 0 && n.index >= 0)
      ann.allgather[i] = static_cast<std::uint8_t>(coll_shape(ls.per_worker[n.worker][n.index].kind));
  }
  // Each TP rank of a worker sends its own share to the same TP rank of the peer (docs/papers.md#megatron); with
  // context parallelism each context-parallel rank its own tokens' share.
  if (pl.width() > 1) {
    ann.lanes.assign(static_cast<std::size_t>(cluster.total_gpus()), {});
    for (int w = 0; w < pl.dp * pl.p; w++) {
      auto& lane = ann.lanes[pl.gpu_of(w, 0)];
      for (int t = 0; t < pl.width(); t++) lane.push_back(pl.gpu_of(w, t));
    }
  }
  ann.node_name = [&dag, &ls](std::uint32_t i) { return dag_node_text(dag, ls, i); };

  SimResult r = simulate_dag(cluster, dag, ann, opt);

  // Pipeline end: the last compute op of the pipeline proper (optimizer steps excluded).
  r.pipeline_end_s = 0;
  for (std::uint32_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind != DagKind::Compute || n.worker < 0 || n.index < 0) continue;
    if (ls.per_worker[n.worker][n.index].kind == LOpKind::Compute)
      r.pipeline_end_s = std::max(r.pipeline_end_s, r.timing[i].end);
  }
  return r;
}

}  // namespace pipescope::sim
