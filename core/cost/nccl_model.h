#pragma once
// Collectives as NCCL runs them (docs/cost-model.md "Communication"): for one call NCCL picks the algorithm
// (ring, or tree for a multi-node all-reduce) and the protocol (LL, LL128, Simple) with the least predicted time,
// latency + bytes / algorithm bandwidth, from per-step hardware latencies and the group's bus bandwidth. The
// group's bus bandwidth is the slower of its intra-node fabric (NVLink per GPU, at NCCL's achieved share) and,
// across nodes, the NICs its GPUs reach: NCCL runs one channel per NIC, so a ring with k GPUs on a node crosses
// the node boundary through its share of the NICs: k / (GPUs per node) of them (one NIC per GPU on a DGX).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

enum class NcclAlgo : std::uint8_t { Ring, Tree };
enum class NcclProto : std::uint8_t { LL, LL128, Simple };
const char* to_string(NcclAlgo a);
const char* to_string(NcclProto p);

// One communicator as the cost model sees it.
struct NcclGroup {
  int ranks = 1;
  int nodes = 1;            // distinct nodes of the members
  int ranks_per_node = 1;   // most members on one node
  double intra_bw_Bps = 0;  // per GPU per direction inside a node (NVLink / PCIe route bottleneck)
  double inter_bw_Bps = 0;  // per direction out of a node for this group: NICs it reaches x NIC bandwidth
  bool nvlink = true;       // intra-node hops over NVLink (false: PCIe / host path latencies)
  // All-to-all with per-node deduplication (DeepEP's dispatch): the buffer is dedup.picks copies of each token, and a
  // token crosses the network once per node it goes to (NodeDedup, core/model/config.h). Empty: every copy crosses.
  NodeDedup dedup;
};

struct NcclChoice {
  NcclAlgo algo = NcclAlgo::Ring;
  NcclProto proto = NcclProto::Simple;
  double latency_s = 0, bus_bw_Bps = 0, seconds = 0;
};

// The group of `ranks` GPUs spread as given over nodes of `cluster` (intra_route_bw_Bps: the slowest
// intra-node hop of the ring, which for NVSwitch is the per-GPU NVLink bandwidth).
NcclGroup nccl_group(const ClusterSpec& cluster, int ranks, int nodes, int ranks_per_node, double intra_route_bw_Bps);

// The group of one ring of GPU ids (gpus_per_node numbering) as NCCL sees it: members per node, and the
// intra-node bandwidth: the slowest intra-node hop (hop_bw_Bps(a, b), as the platform routes it), except on a
// cube mesh where NCCL runs a channel per NVLink and a member's bandwidth is all its links to the others.
// The simulator's analytic collectives and the search's estimate both use it.
NcclGroup nccl_ring_group(const ClusterSpec& cluster, const std::vector<std::int32_t>& ring,
                          const std::function<double(std::int32_t, std::int32_t)>& hop_bw_Bps);

// Best algorithm and protocol for an all-reduce (allgather = false) or all-gather of `bytes` (per rank's full
// buffer, as NCCL's count). Throws std::invalid_argument on a group without bandwidth.
NcclChoice nccl_collective(const NcclGroup& g, double bytes, bool allgather = false);
double nccl_collective_seconds(const NcclGroup& g, double bytes, bool allgather = false);

// An all-to-all of `bytes` per rank (its whole send buffer, n equal chunks, its own included) as NCCL runs it: one
// grouped send / receive per peer, all at once, so the time is one launch and hop latency plus the slower of the
// two paths: each rank's chunks to the other members of its node over NVLink, and each node's chunks to the
// members on other nodes through the NICs the group reaches (the receivers' side is symmetric).
double nccl_alltoall_seconds(const NcclGroup& g, double bytes);
// With g.dedup.items > 0: the share of the cross-node copies that cross the network, the expected nodes a token's
// picks land on other than its own over its expected picks there. For I items on N nodes and k picks uniform over
// them: (N - 1) (1 - C(I - I/N, k) / C(I, k)) over k (N - 1) / N. With G groups of which M are picked (the picks
// uniform over the M groups' items, the groups a uniform M-subset): a node whose share of j picked groups holds
// x items each is missed with probability C(M I/G - j x, k) / C(M I/G, k), j hypergeometric; the expected nodes hit,
// N (1 - P(missed)), are spread evenly over the nodes, so the share is N (1 - P(missed)) / k. 1 otherwise.
double node_dedup_share(const NcclGroup& g);

// NCCL's achieved share of the raw link bandwidth for bulk transfers (docs/cost-model.md sources).
double nccl_nvlink_efficiency();
double nccl_nic_efficiency();

}  // namespace pipescope
