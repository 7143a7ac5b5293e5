#pragma once
// Platform builder: one SimGrid host per GPU, intra-node links (NVSwitch star / cube mesh / PCIe),
// NICs and the inter-node fabric (star or fat tree), from a ClusterSpec. Applies CM02, TCP-gamma 0 and
// no crosstraffic (plain alpha-beta behaviour, spec/simgrid.md section 7) before any zone exists.
// Must be called once per process after the SimGrid Engine is created.
//
// Latency convention: every latency in ClusterSpec is per link *port*. A GPU-to-GPU NVLink route crosses
// two ports (alpha = 2 * nvlink_latency_s), an inter-node route crosses the two GPUs' intra-node ports and
// the two NICs (alpha = 2 * intra + 2 * nic_latency_s). sim/README.md describes every zone and route.

#include <string>
#include <vector>

#include "core/config.h"

namespace simgrid::s4u {
class Host;
}

namespace pipescope::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;  // index = global GPU index
  simgrid::s4u::Host* timer = nullptr;    // pure delays (many cores, speed 1)
};

// Set the network-model configuration. Call right after the Engine constructor. Items the user already
// set through --cfg= arguments (`user_args`, as passed to the Engine) are left alone.
void configure_network_model();
void configure_network_model(const std::vector<std::string>& user_args);

// Throws std::invalid_argument on an impossible cluster (no nodes, cube mesh without 8 GPUs, bandwidth 0).
Platform build_platform(const ClusterSpec& c);
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
