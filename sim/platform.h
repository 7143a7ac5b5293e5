#pragma once
// Platform builder: one SimGrid host per GPU, intra-node links (NVSwitch star / cube mesh / PCIe),
// NICs and the inter-node fabric (star or fat tree), from a ClusterSpec. Applies CM02, TCP-gamma 0 and
// no crosstraffic (plain alpha-beta behaviour, spec/simgrid.md section 7) before any zone exists.
// Must be called once per process after the SimGrid Engine is created.
//
// Latency convention: every latency in ClusterSpec is per link *port*. A GPU-to-GPU NVLink route crosses
// two ports (alpha = 2 * nvlink_latency_s), an inter-node route crosses the two GPUs' intra-node ports and
// the two NICs (alpha = 2 * intra + 2 * nic_latency_s). sim/README.md describes every zone and route.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"

namespace simgrid::s4u {
class Host;
class Link;
class NetZone;
}  // namespace simgrid::s4u

namespace pipescope::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;  // index = global GPU index
  simgrid::s4u::Host* timer = nullptr;    // pure delays (many cores, speed 1)
  // The links of each node's zone (NIC, NVLink / PCIe ports, bridge, cube-mesh pairs; split-duplex links as
  // their UP and DOWN halves), in the same construction order on every node: link k of node a plays the
  // role of link k of node b, which is what the engine's replica-symmetry check compares.
  std::vector<std::vector<simgrid::s4u::Link*>> node_links;
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

// Throws std::invalid_argument on an impossible cluster (no nodes, cube mesh without 8 GPUs, bandwidth 0).
Platform build_platform(const ClusterSpec& c);
// The same platform with the root zone still open, so that add_route_zone can add to it; routes between GPUs
// can already be resolved. Call seal_platform before the simulation starts.
Platform build_platform_open(const ClusterSpec& c);
void seal_platform(Platform& pf);

// The links of the route SimGrid resolves between two hosts, in route order, and its latency.
std::vector<simgrid::s4u::Link*> route_links(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst,
                                             double* latency_s);

// Resolved routes (a route cache): SimGrid 3.32 resolves the route of every comm again through the zone
// hierarchy (a third of the engine's time on big fat trees). add_route_zone adds one flat Full zone whose
// hosts stand for GPUs, with an explicit route per requested pair: exactly the links SimGrid resolved between
// the real GPU hosts, in the same order. Latency is summed over the links in order there, so a pair whose
// resolved latency is not reproduced bit for bit by that sum is left out (the engine then uses the real
// hosts). A mirror route leads from a GPU to its mirror host over any given links (the engine's quotient of
// data-parallel rings). Needs a platform from build_platform_open.
struct ZoneRoute {
  std::int32_t src = 0, dst = 0;  // GPUs; with `mirror` the route ends at src's mirror host (dst ignored)
  bool mirror = false;
  std::vector<simgrid::s4u::Link*> links;  // in route order
};
struct RouteZone {
  std::vector<simgrid::s4u::Host*> host;    // per GPU: its stand-in (nullptr when no route was added for it)
  std::vector<simgrid::s4u::Host*> mirror;  // per GPU: its mirror host (nullptr when none)
  std::size_t routes = 0;                   // routes added
};
RouteZone add_route_zone(Platform& pf, const std::vector<ZoneRoute>& routes);
// The latency a Full zone gives a route: its links' latencies summed in order from 0.
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

// Cube-mesh NVLink adjacency of a p3.16xlarge / DGX-1V node (spec/calibration.md 8.2): number of NVLink
// links between local GPUs a and b (0 = "SYS", no NVLink; 1 = NV1; 2 = NV2).
int cube_mesh_links(int a, int b);

}  // namespace pipescope::sim
