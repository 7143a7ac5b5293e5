// NCCL's own cost model, reduced to what a training step needs: the latency tables and protocol bandwidth
// shares of NCCL 2.x's tuning (src/graph/tuning.cc: base latency per algorithm and protocol, per-hop latency per
// link class), the ring / tree step counts, and the group's bus bandwidth from the cluster description.
//
//   ring:  steps = 2(n-1) (all-reduce) or n-1 (all-gather), 2(N-1) / N-1 of them between nodes (N nodes);
//          latency = base + intra steps * hop_intra + inter steps * hop_net;
//          time = latency + bytes * steps / n / (bus_bw * protocol share)
//   tree (all-reduce across nodes): latency = base + 2 ((ranks per node - 1) hop_intra + log2 N hop_net);
//          time = latency + 2 bytes / (bus_bw * 0.92 * protocol share)   (NCCL's tree bandwidth derating)
//   protocol share of the link bandwidth: LL 1/2 (a 4-byte flag per 4 bytes), LL128 120/128, Simple 1.
//   bus_bw = min(intra-node bandwidth if a node holds more than one member, NIC bandwidth reached if more
//   than one node), each at NCCL's achieved share (nccl_nvlink_efficiency, nccl_nic_efficiency).
#include "core/cost/nccl_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/model/placement.h"

namespace pipescope {
namespace {

constexpr int kRing = 0, kTree = 1;
// Microseconds. [algorithm][protocol LL, LL128, Simple].
constexpr double kBaseLat_us[2][3] = {{3.6, 10.0, 8.4}, {4.4, 4.4, 0.0}};
constexpr double kHopNvlink_us[2][3] = {{0.47, 1.9, 3.4}, {0.52, 1.25, 28.0}};
constexpr double kHopPcie_us[2][3] = {{1.0, 2.5, 5.7}, {1.0, 1.9, 28.0}};
constexpr double kHopNet_us[2][3] = {{2.7, 4.0, 14.0}, {5.0, 8.5, 28.0}};
constexpr double kProtoShare[3] = {0.5, 120.0 / 128.0, 1.0};
constexpr double kTreeDerate = 0.92;

double bus_bw(const NcclGroup& g) {
  double bw = std::numeric_limits<double>::infinity();
  if (g.ranks_per_node > 1) bw = std::min(bw, g.intra_bw_Bps * nccl_nvlink_efficiency());
  if (g.nodes > 1) bw = std::min(bw, g.inter_bw_Bps * nccl_nic_efficiency());
  return bw;
}

}  // namespace

const char* to_string(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::Ring:
      return "ring";
    case NcclAlgo::Tree:
      return "tree";
  }
  return "?";
}

const char* to_string(NcclProto p) {
  switch (p) {
    case NcclProto::LL:
      return "LL";
    case NcclProto::LL128:
      return "LL128";
    case NcclProto::Simple:
      return "Simple";
  }
  return "?";
}

// nccl-tests all_reduce_perf on 8 A100 over NVSwitch reaches about 230 GB/s bus bandwidth of NVLink3's 300 GB/s
// per direction; across nodes NCCL over InfiniBand reaches about 23 of a HDR NIC's 25 GB/s.
double nccl_nvlink_efficiency() { return 0.77; }
double nccl_nic_efficiency() { return 0.92; }

NcclGroup nccl_group(const ClusterSpec& cluster, int ranks, int nodes, int ranks_per_node, double intra_route_bw_Bps) {
  NcclGroup g;
  g.ranks = ranks;
  g.nodes = nodes;
  g.ranks_per_node = ranks_per_node;
  g.intra_bw_Bps = intra_route_bw_Bps;
  // The node's NICs shared by all its GPUs, which run their groups' collectives at the same time (every
  // tensor-parallel group of a layer, every data-parallel ring of a step): this group's share.
  const int gpus = std::max(1, cluster.gpus_per_node);
  g.inter_bw_Bps =
      cluster.nic_data_Bps() * std::max(1, cluster.nics_per_node) * std::min(gpus, std::max(1, ranks_per_node)) / gpus;
  g.nvlink = cluster.fabric != IntraNodeFabric::PCIe;
  return g;
}

NcclChoice nccl_collective(const NcclGroup& g, double bytes, bool allgather) {
  NcclChoice best;
  best.seconds = std::numeric_limits<double>::infinity();
  if (g.ranks <= 1 || bytes <= 0) {
    best.seconds = 0;
    return best;
  }
  const double bw = bus_bw(g);
  if (!(bw > 0) || !std::isfinite(bw))
    throw std::invalid_argument("nccl model: group of " + std::to_string(g.ranks) + " ranks has no bandwidth");
  const auto& hop_intra = g.nvlink ? kHopNvlink_us : kHopPcie_us;
  const int n = g.ranks, N = std::max(1, g.nodes);
  for (int p = 0; p < 3; p++) {
    const double steps = allgather ? n - 1 : 2.0 * (n - 1);
    const double inter = allgather ? N - 1 : 2.0 * (N - 1);
    NcclChoice c;
    c.algo = NcclAlgo::Ring;
    c.proto = static_cast<NcclProto>(p);
    c.latency_s = 1e-6 * (kBaseLat_us[kRing][p] + (steps - inter) * hop_intra[kRing][p] + inter * kHopNet_us[kRing][p]);
    c.bus_bw_Bps = bw * kProtoShare[p];
    c.seconds = c.latency_s + bytes * steps / n / c.bus_bw_Bps;
    if (c.seconds < best.seconds) best = c;
    if (allgather || N <= 1) continue;
    NcclChoice t;
    t.algo = NcclAlgo::Tree;
    t.proto = static_cast<NcclProto>(p);
    t.latency_s = 1e-6 * (kBaseLat_us[kTree][p] + 2.0 * ((g.ranks_per_node - 1) * hop_intra[kTree][p] +
                                                         std::log2(static_cast<double>(N)) * kHopNet_us[kTree][p]));
    t.bus_bw_Bps = bw * kTreeDerate * kProtoShare[p];
    t.seconds = t.latency_s + 2.0 * bytes / t.bus_bw_Bps;
    if (t.seconds < best.seconds) best = t;
  }
  return best;
}

double nccl_collective_seconds(const NcclGroup& g, double bytes, bool allgather) {
  return nccl_collective(g, bytes, allgather).seconds;
}

namespace {

// C(n - m, k) / C(n, k): k picks among n items, none among m given ones.
double none_among(double n, double m, int k) {
  double p = 1;
  for (int i = 0; i < k; i++) p *= std::max(0.0, n - m - i) / (n - i);
  return p;
}

// C(a, j) C(b, c - j) / C(a + b, c): j of the a marked among c drawn from a + b.
double hypergeometric(int a, int b, int c, int j) {
  if (j > a || c - j > b || j < 0 || c - j < 0) return 0;
  const auto lc = [](int n, int r) { return std::lgamma(n + 1.0) - std::lgamma(r + 1.0) - std::lgamma(n - r + 1.0); };
  return std::exp(lc(a, j) + lc(b, c - j) - lc(a + b, c));
}

}  // namespace

double node_dedup_share(const NcclGroup& g) {
  const NodeDedup& d = g.dedup;
  const int N = g.nodes, I = d.items, k = d.picks;
  if (I <= 0 || k <= 0 || N <= 1 || I % N != 0 || k > I) return 1.0;
  const int G = d.groups, M = d.group_picks;
  // No groups, or groups that do not tile the nodes (neither a whole number per node nor whole nodes per group).
  if (G <= 0 || M <= 0 || M >= G || I % G != 0 || (G % N != 0 && N % G != 0)) {
    const double nodes_hit = (N - 1) * (1 - none_among(I, I / N, k)), copies = k * (N - 1.0) / N;
    return std::min(1.0, nodes_hit / copies);
  }
  const int of_node = G >= N ? G / N : 1;                                       // groups with items on a given node
  const double x = G >= N ? 1.0 * I / G : 1.0 * I / N, pool = 1.0 * M * I / G;  // its items in each; the picked's
  double missed = 0;
  for (int j = 0; j <= std::min(of_node, M); j++)
    missed += hypergeometric(of_node, G - of_node, M, j) * none_among(pool, j * x, k);
  return std::min(1.0, N * (1 - missed) / k);
}

double nccl_alltoall_seconds(const NcclGroup& g, double bytes) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double n = g.ranks, local = std::min(g.ranks_per_node, g.ranks);
  const double chunk = bytes / n;
  double t = 0;
  if (local > 1) {
    if (!(g.intra_bw_Bps > 0))
      throw std::invalid_argument("nccl model: all-to-all group of " + std::to_string(g.ranks) +
                                  " ranks has no intra-node bandwidth");
    t = std::max(t, (local - 1) * chunk / (g.intra_bw_Bps * nccl_nvlink_efficiency()));
  }
  if (g.nodes > 1) {
    if (!(g.inter_bw_Bps > 0))
      throw std::invalid_argument("nccl model: all-to-all group across " + std::to_string(g.nodes) +
                                  " nodes has no NIC bandwidth");
    t = std::max(t, node_dedup_share(g) * local * (n - local) * chunk / (g.inter_bw_Bps * nccl_nic_efficiency()));
  }
  const auto& hop_intra = g.nvlink ? kHopNvlink_us : kHopPcie_us;
  const int simple = static_cast<int>(NcclProto::Simple);
  const double hop = g.nodes > 1 ? kHopNet_us[kRing][simple] : hop_intra[kRing][simple];
  return 1e-6 * (kBaseLat_us[kRing][simple] + hop) + t;
}

NcclGroup nccl_ring_group(const ClusterSpec& cluster, const std::vector<std::int32_t>& ring,
                          const std::function<double(std::int32_t, std::int32_t)>& hop_bw_Bps) {
  const std::size_t n = ring.size();
  const int G = std::max(1, cluster.gpus_per_node);
  double intra_bw = std::numeric_limits<double>::infinity();
  std::vector<int> nodes;  // each member's node (sorted below: members per node are its runs)
  nodes.reserve(n);
  for (std::size_t i = 0; n > 1 && i < n; i++) {
    const std::int32_t a = ring[i], b = ring[(i + 1) % n];
    nodes.push_back(a / G);
    if (a / G == b / G) intra_bw = std::min(intra_bw, hop_bw_Bps(a, b));
  }
  if (!std::isfinite(intra_bw)) intra_bw = cluster.nvlink_bw_Bps;
  if (cluster.fabric == IntraNodeFabric::CubeMesh) {
    intra_bw = std::numeric_limits<double>::infinity();
    for (std::int32_t a : ring) {
      int links = 0;
      for (std::int32_t b : ring)
        if (a != b && a / G == b / G) links += cube_mesh_nvlinks(a % G, b % G);
      intra_bw = std::min(intra_bw, links > 0 ? links * cluster.nvlink_bw_Bps : cluster.pcie_bw_Bps);
    }
  }
  std::sort(nodes.begin(), nodes.end());
  int most = 1, distinct = 0;
  for (std::size_t i = 0; i < nodes.size();) {
    std::size_t j = i;
    while (j < nodes.size() && nodes[j] == nodes[i]) j++;
    most = std::max(most, static_cast<int>(j - i));
    distinct++;
    i = j;
  }
  return nccl_group(cluster, static_cast<int>(n), std::max(1, distinct), most, intra_bw);
}

}  // namespace pipescope
