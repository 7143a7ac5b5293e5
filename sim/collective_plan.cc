// plan_collectives (collective_plan.h): NCCL-like ring orders, the option's algorithm per group, and route
// figures for the groups that run as delays or aggregate comms.
#include "sim/collective_plan.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <tuple>

namespace pipescope::sim {

namespace {

// Only groups whose collectives move bytes need routes: the others never start a flow.
std::vector<std::uint8_t> groups_in_use(const Dag& dag, const std::vector<Rings>& rings) {
  std::vector<std::uint8_t> used(rings.size(), 0);
  for (std::size_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind == DagKind::Collective && n.amount > 0 && !rings[n.group].empty()) used[n.group] = 1;
  }
  return used;
}

RingRoute ring_route(const ClusterSpec& cluster, const Ring& ring, const Platform& pf) {
  RingRoute rr{0.0, std::numeric_limits<double>::infinity(), {}};
  const std::size_t n = ring.size();
  for (std::size_t i = 0; n > 1 && i < n; i++) {
    RouteInfo ri = route_info(pf.gpus[ring[i]], pf.gpus[ring[(i + 1) % n]]);
    rr.alpha = std::max(rr.alpha, ri.latency_s);
    rr.bw = std::min(rr.bw, ri.bandwidth_Bps);
  }
  rr.nccl = nccl_ring_group(
      cluster, ring, [&](std::int32_t a, std::int32_t b) { return route_info(pf.gpus[a], pf.gpus[b]).bandwidth_Bps; });
  return rr;
}

}  // namespace

CollectivePlan plan_collectives(const ClusterSpec& cluster, const Dag& dag, const EngineOptions& opt,
                                const Platform& pf, const DagAnnotations* ann) {
  CollectivePlan cp;
  // Ring orders: NCCL follows NVLink inside cube-mesh nodes; other fabrics treat every GPU pair alike.
  cp.rings = dag.rings;
  if (cluster.fabric == IntraNodeFabric::CubeMesh)
    for (auto& group : cp.rings)
      for (auto& ring : group) ring = nvlink_ring_order(ring, cluster.gpus_per_node, cube_mesh_links);
  cp.used = groups_in_use(dag, cp.rings);
  cp.algo.assign(cp.rings.size(), collective_algorithm(opt.collectives));
  const std::size_t tagged = ann ? std::min(ann->group_tags.size(), cp.algo.size()) : 0;
  // An all-to-all has no ring steps: explicit runs start every pair's flow at once (aggregate).
  for (std::size_t g = 0; g < tagged; g++)
    if (ann->group_tags[g] == CollTag::ExpertParallel && cp.algo[g] == CollAlgo::Ring) cp.algo[g] = CollAlgo::Aggregate;
  cp.routes.resize(cp.rings.size());
  for (std::size_t g = 0; g < cp.rings.size(); g++) {
    if (cp.algo[g] == CollAlgo::Ring || !cp.used[g]) continue;
    for (const auto& ring : cp.rings[g]) {
      cp.routes[g].push_back(ring_route(cluster, ring, pf));
      if (ann && g < ann->group_node_dedup.size()) cp.routes[g].back().nccl.dedup = ann->group_node_dedup[g];
    }
  }
  return cp;
}

}  // namespace pipescope::sim
