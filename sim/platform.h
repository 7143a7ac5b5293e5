#pragma once
// Platform builder: one SimGrid host per GPU, intra-node links (NVSwitch star / cube mesh / PCIe),
// NICs and the inter-node fabric (star or fat tree), from a ClusterSpec. Applies CM02, TCP-gamma 0 and
// no crosstraffic (plain alpha-beta behaviour, spec/simgrid.md section 7) before any zone exists.
// Must be called once per process after the SimGrid Engine is created.

#include <vector>

#include "core/config.h"

namespace simgrid::s4u { class Host; }

namespace pipescope::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;   // index = global GPU index
  simgrid::s4u::Host* timer = nullptr;     // pure delays (many cores, speed 1)
};

// Set the network-model configuration. Call right after the Engine constructor.
void configure_network_model();
Platform build_platform(const ClusterSpec& c);

}  // namespace pipescope::sim
