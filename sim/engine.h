#pragma once
// The SimGrid engine: replays a checked, lowered schedule on a platform with a just-in-time DAG driver
// (activities created only when ready; docs/simulator.md). Per-GPU compute is serialised by
// the DAG's program-order edges; transfers are Comm::sendto_init host-to-host; collectives expand into
// ring steps (2(n-1) steps of n concurrent comms) sharing links with pipeline traffic.
//
// One simulation per process (SimGrid's Engine is a singleton): simulate() creates the Engine itself and
// may be called only once per process (a second call throws std::logic_error). Run sweeps and tests in
// subprocesses. sim/README.md documents every modelling choice.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/lower/checks.h"
#include "core/model/config.h"
#include "sim/collectives.h"
#include "sim/engine_options.h"
#include "sim/report.h"

namespace pipescope::sim {

SimResult simulate(const ClusterSpec& cluster, const CheckedSchedule& cs, const EngineOptions& opt);

// ---------------------------------------------------------------- lower level (tests, benchmarks)
// simulate_dag takes the DAG with its annotations (sim/engine_options.h).
// Validates the DAG against the cluster, creates the Engine and the platform, and runs the DAG.
// Throws std::invalid_argument on bad options / out-of-range GPUs, std::runtime_error on deadlock.
SimResult simulate_dag(const ClusterSpec& cluster, const Dag& dag, const DagAnnotations& ann, const EngineOptions& opt);

// The deadlock diagnostic: how many nodes never completed and up to 10 of them, each with how many of
// its predecessors are unfinished. `timing[i].end < 0` marks an unfinished node.
std::string deadlock_message(const Dag& dag, const std::vector<NodeTiming>& timing,
                             const std::function<std::string(std::uint32_t)>& node_name);

}  // namespace pipescope::sim
