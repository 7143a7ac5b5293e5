#include "core/cost/tp_overlap.h"

#include <cstdint>
#include <vector>

#include "core/cost/nccl_model.h"

namespace pipescope {

namespace {

double tp_collective_seconds(const Scenario& s, double bytes, bool allgather) {
  const int t = s.parallel.tp;
  if (t <= 1 || bytes <= 0) return 0.0;
  const ClusterSpec& c = s.cluster;
  std::vector<std::int32_t> ring(static_cast<std::size_t>(t));
  for (int i = 0; i < t; i++) ring[static_cast<std::size_t>(i)] = i;
  const double hop_bw = c.fabric == IntraNodeFabric::PCIe ? c.pcie_bw_Bps : c.nvlink_bw_Bps;
  return nccl_collective_seconds(nccl_ring_group(c, ring, [&](std::int32_t, std::int32_t) { return hop_bw; }), bytes,
                                 allgather);
}

}  // namespace

double tp_allreduce_seconds(const Scenario& s, double bytes) { return tp_collective_seconds(s, bytes, false); }

double tp_allgather_seconds(const Scenario& s, double bytes) { return tp_collective_seconds(s, bytes, true); }

}  // namespace pipescope
