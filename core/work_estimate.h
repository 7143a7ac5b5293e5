#pragma once
// A work estimate before any work: from the scenario alone, the number of schedule ops and simulator DAG nodes,
// and from them the time and memory a run will take. Above the documented limit (docs/limits.md) or above the
// machine's available memory a run is refused with the estimate and the option that overrides it
// (`--allow-large`), instead of running for hours or dying of std::bad_alloc. The cost per op is measured on the
// 1F1B default family (bench/README.md has the command); the estimate is an order of magnitude, not a promise.

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/config.h"

namespace pipescope {

struct WorkEstimate {
  double ops = 0;            // lowered ops over all workers (compute, p2p, collectives, optimizer)
  double planner_cells = 0;  // TeraPipe's slice-time table entries (slicing dp), 0 otherwise
  double seconds = 0;        // estimated wall time of one simulation
  double bytes = 0;          // estimated peak memory of one simulation
  std::string text() const;  // "4.2e+06 ops, about 20 s and 1.7 GB"
};

// Limits of one run without --allow-large.
inline constexpr double kMaxOps = 1e7;
inline constexpr double kMaxPlannerCells = 4e6;

class WorkTooLarge : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

WorkEstimate estimate_work(const Scenario& s);

// Process-wide: `--allow-large` lifts the fixed limits (the available-memory check stays). Set once by main().
void set_allow_large(bool allow);
bool allow_large();

// Throws WorkTooLarge naming the scenario, the estimate and the override when `s` is over the limits;
// `runs` multiplies the estimate (sweep grids, plan tables). Called by prepare() for every simulation.
void check_work(const Scenario& s, double runs = 1);
// The same for a count of runs alone (sweep and plan grids): over kMaxRuns without --allow-large is refused.
inline constexpr double kMaxRuns = 10000;
void check_run_count(double runs, double seconds_each, const std::string& what);

// Memory the kernel reports as available (MemAvailable of /proc/meminfo), or 0 when unknown.
double available_memory_bytes();

}  // namespace pipescope
