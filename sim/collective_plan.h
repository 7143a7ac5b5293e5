#pragma once
// The collective plan, fixed before the run: ring orders, the algorithm of each group and, for the delay-based
// algorithms, each ring's route figures. Always derived from the whole DAG, so that folding replicas
// (replica_fold.h) changes no choice.

#include <cstdint>
#include <vector>

#include "core/cost/nccl_model.h"
#include "sim/collectives.h"
#include "sim/engine_internal.h"
#include "sim/platform.h"

namespace pipescope::sim {

// Per group, per ring: bottleneck latency (max over edges) and bandwidth (min over edges).
struct RingRoute {
  double alpha = 0, bw = 0;
  NcclGroup nccl;  // the ring as an NCCL communicator (Analytic: core/cost/nccl_model.h)
};

struct CollectivePlan {
  std::vector<Rings> rings;  // Dag::rings in the order they run
  std::vector<CollAlgo> algo;
  std::vector<std::vector<RingRoute>> routes;  // per group, per ring (non-ring algorithms only)
  std::vector<std::uint8_t> used;              // per group: some collective node moves bytes on it
};

// Needs the platform's routes (build_platform_open); reads no simulated time. `ann` (may be null): the groups' tags
// and DeepEP node deduplication; the expert-parallel all-to-alls run Analytic whatever the option says (no explicit
// steps for them yet).
CollectivePlan plan_collectives(const ClusterSpec& cluster, const Dag& dag, const EngineOptions& opt,
                                const Platform& pf, const DagAnnotations* ann = nullptr);

}  // namespace pipescope::sim
