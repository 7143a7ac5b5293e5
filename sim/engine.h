#pragma once
// The SimGrid engine: replays a checked, lowered schedule on a platform with a just-in-time DAG driver
// (activities created only when ready; spec/simgrid.md section 4.2). Per-GPU compute is serialised by
// the DAG's program-order edges; transfers are Comm::sendto_init host-to-host; collectives expand into
// ring steps (2(n-1) steps of n concurrent comms) sharing links with pipeline traffic.
//
// One simulation per process (SimGrid's Engine is a singleton): simulate() creates the Engine itself and
// may be called only once per process.

#include <string>
#include <vector>

#include "core/checks.h"
#include "core/config.h"
#include "sim/report.h"

namespace pipescope::sim {

struct EngineOptions {
  std::string collectives = "auto";   // ring | aggregate | analytic | auto
  std::vector<std::string> simgrid_args;  // extra --cfg=/--log= arguments
};

SimResult simulate(const ClusterSpec& cluster, const CheckedSchedule& cs, const EngineOptions& opt);

}  // namespace pipescope::sim
