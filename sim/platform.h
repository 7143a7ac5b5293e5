#pragma once
// Platform builder: one SimGrid host per GPU, intra-node links (NVSwitch star / cube mesh / PCIe), one link per
// NIC and the inter-node fabric (star, fat tree with oversubscription, rail-optimised), from a ClusterSpec.
// Applies CM02, TCP-gamma 0 and no crosstraffic (plain alpha-beta behaviour, docs/simulator.md)
// before any zone exists. Must be called once per process after the SimGrid Engine is created.
//
// Every host lives in one flat SimGrid zone whose routes are computed from the topology on request
// (platform.cc FabricZone): no per-pair route table, no zone hierarchy to walk, O(GPUs) memory.
//
// Latency convention: every latency in ClusterSpec is per link *port*. A GPU-to-GPU NVLink route crosses
// two ports (alpha = 2 * nvlink_latency_s), an inter-node route crosses the two GPUs' intra-node ports and
// the two NICs (alpha = 2 * intra + 2 * nic_latency_s); fabric links add no latency. sim/README.md
// describes every zone and route.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace simgrid::s4u {
class Host;
class Link;
class NetZone;
}  // namespace simgrid::s4u

namespace pipescope::sim {

class FabricZone;  // platform.cc

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;  // index = global GPU index
  simgrid::s4u::Host* timer = nullptr;    // pure delays (many cores, speed 1)
  // The links of each node (NICs, NVLink / PCIe ports, bridge, cube-mesh pairs; split-duplex links as their
  // UP and DOWN halves), in the same construction order on every node: link k of node a plays the role of
  // link k of node b, which is what the engine's replica-symmetry check compares.
  std::vector<std::vector<simgrid::s4u::Link*>> node_links;
  // Fabric links: leaf uplinks as UP (leaf to spine) and DOWN halves, per leaf (empty for a star).
  std::vector<simgrid::s4u::Link*> fabric_links;
  FabricZone* zone = nullptr;             // the flat zone holding every host
  simgrid::s4u::NetZone* root = nullptr;  // left open by build_platform_open until seal_platform
};

// Set the network-model configuration. Call right after the Engine constructor. Items the user already
// set through --cfg= arguments (`user_args`, as passed to the Engine) are left alone.
void configure_network_model();
void configure_network_model(const std::vector<std::string>& user_args);

// Piecewise link times by message size (EngineOptions::link_tables): installs SimGrid latency and bandwidth
// factor callbacks so that a comm of S bytes on a route of class c (inter if it crosses a NIC) takes
// piecewise_seconds(tables[c], S): the segment's intercept as latency, the rest as transfer time. Call after
// the root zone exists. No-op for an empty map.
void install_link_tables(const std::map<std::string, std::vector<std::pair<double, double>>>& tables);

// Throws std::invalid_argument on an impossible cluster (no nodes, cube mesh without 8 GPUs, bandwidth 0,
// oversubscription <= 0, nodes not a multiple of nodes_per_leaf).
Platform build_platform(const ClusterSpec& c);
// The same platform with the zones still open, so that add_mirrors can add hosts; routes between GPUs can
// already be resolved. Call seal_platform before the simulation starts.
Platform build_platform_open(const ClusterSpec& c);
void seal_platform(Platform& pf);

// The links of the route SimGrid resolves between two hosts, in route order, and its latency.
std::vector<simgrid::s4u::Link*> route_links(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst,
                                             double* latency_s);

// Mirror hosts (the engine's quotient of data-parallel rings): one host per listed GPU, reached from that GPU
// over exactly the given links in order (latency summed in that order). Needs an open platform. Returns,
// per GPU, its mirror host (nullptr for GPUs without one).
struct MirrorRoute {
  std::int32_t gpu = 0;
  std::vector<simgrid::s4u::Link*> links;  // in route order
};
std::vector<simgrid::s4u::Host*> add_mirrors(Platform& pf, const std::vector<MirrorRoute>& mirrors);
// The latency of a route: its links' latencies summed in order from 0.
double summed_latency(const std::vector<simgrid::s4u::Link*>& links);
// The checks build_platform runs, without SimGrid (so callers can fail before creating an Engine).
void validate_cluster(const ClusterSpec& c);

// The route between two hosts as SimGrid resolved it: summed latency, bottleneck bandwidth, link names.
struct RouteInfo {
  double latency_s = 0;
  double bandwidth_Bps = 0;  // minimum over the links (infinity for an empty route)
  std::vector<std::string> links;
};
RouteInfo route_info(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst);

// Cube-mesh NVLink adjacency of a p3.16xlarge / DGX-1V node (docs/calibration.md): number of NVLink
// links between local GPUs a and b (0 = "SYS", no NVLink; 1 = NV1; 2 = NV2).
int cube_mesh_links(int a, int b);

}  // namespace pipescope::sim
