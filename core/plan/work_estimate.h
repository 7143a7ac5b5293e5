#pragma once
// A work estimate before any work: from the scenario alone, the number of schedule ops and simulator DAG nodes,
// and from them the time and memory a run will take. Above the documented limit (docs/limits.md) or above the
// machine's available memory a run is refused with the estimate and the option that overrides it
// (`--allow-large`), instead of running for hours or dying of std::bad_alloc. The cost per op is measured on the
// 1F1B default family (bench/README.md has the command); the estimate is an order of magnitude, not a promise.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

struct WorkEstimate {
  double ops = 0;            // lowered ops over all workers (compute, p2p, collectives, optimizer)
  double pipeline_ops = 0;   // the schedule's ops of one pipeline (what search's stage 1 builds per point)
  double planner_cells = 0;  // TeraPipe's slice-time table entries (slicing dp), 0 otherwise
  // Member pairs of the data-parallel gradient collectives of a run that is not folded to one replica: each
  // member's collective waits on every other, dp^2 per stage chunk.
  double collective_pairs = 0;
  double simulated_ops = 0;  // of ops, those the simulator runs (one replica's when the run folds)
  double seconds = 0;        // estimated wall time of one simulation (in a forked child: add kSecondsPerRun)
  double bytes = 0;          // estimated peak memory of one simulation
  // The `pipescope simulate` command's: the process's start (executable, libraries) and the simulation.
  double command_seconds() const;
  std::string text() const;  // "4.2e+06 ops, about 20 s and 1.7 GB"
};

// The measured rates the estimates are made of (bench/README.md has the commands). About 60 MB for the executable
// and its libraries before any work.
inline constexpr double kBaseBytes = 60e6;
// ... and about 50 ms to start it (measured: the default scenario's `simulate`, 40-60 ms in all).
inline constexpr double kStartSeconds = 0.05;
// A simulation in a forked child (sweep rows, search's stage 3, plan --simulate): the fork, the platform and the
// report around the schedule's own cost. Measured: a 20-point sweep of scenarios/default.yaml (about 3000 ops
// each) takes 0.3 s, 15 ms a run all included.
inline constexpr double kSecondsPerRun = 0.02;
// Search's stages 1 and 2 (stage 1 builds every valid point's schedule and memory model, stage 2 one replica's
// DAG of the survivors): a fixed cost per valid point and a cost per op of its one-pipeline schedule. Measured:
// `search` on scenarios/default.yaml (1148 points, about 900 valid) spends 0.5 s in them; with global_batch 2048
// 18 s (the whole search 16-18 s, estimated 30 s), with 16384 115 s (estimated 3.95 minutes in all). Rounded up. The
// memory model alone on a GPipe schedule (plan --max-batch on terapipe/setting-1.yaml at 1e5 GB: 1.9e8 ops in 47 s, 490
// MB at 1.9e7 ops) is about as fast, at 25 B per op.
inline constexpr double kSecondsPerSearchPoint = 5e-4;
inline constexpr double kSecondsPerSearchOp = 1e-6;
inline constexpr double kBytesPerModelOp = 40;
// "%.3g" of x: how the estimates print their figures.
std::string estimate_figure(double x);

// Limits of one run without --allow-large.
inline constexpr double kMaxOps = 1e7;
inline constexpr double kMaxCollectivePairs = 1e9;
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
// Grids of runs, before any of them: a sweep's points, a search's candidates, a plan's tables (and its
// simulations). Over the limits below without --allow-large, or over the available memory at all, the command is
// refused with the estimate and the override (docs/limits.md), before anything runs.
inline constexpr double kMaxRuns = 10000;        // sweep points
inline constexpr double kMaxGridSeconds = 3600;  // estimated wall time of a whole grid
struct GridEstimate {
  std::string what;   // "sweep", "search", "plan": the message's first word
  double points = 0;  // runs, candidates or table cells
  std::string unit = "runs";
  double max_points = 0;     // the limit on `points` (0: none)
  double seconds = 0;        // estimated wall time of everything (divided by the parallel jobs)
  double bytes = 0;          // estimated peak memory: the largest point (sweep: the runs that run at once)
  double largest_ops = 0;    // the largest point's ops (search: its one-pipeline schedule, which stage 1 builds)
  std::string largest;       // and its description
  std::string hint;          // how to make the grid smaller
  std::string text() const;  // "1e+06 runs, about 83.3 hours"
};
// A sweep of `points` runs of about `seconds_each` each, `jobs` at a time (before its variants are built).
GridEstimate estimate_sweep(double points, double seconds_each, int jobs);
// The same from the runs themselves, once built (each one's estimate_work).
GridEstimate estimate_sweep(const std::vector<Scenario>& runs, int jobs);
// `pipescope plan`: `tables` slice-time tables over seq_len / grain units, and with `simulate` the simulations of
// the uniform slicings (1, 2, 4, ... slices) and of the DP's scheme.
GridEstimate estimate_plan(const Scenario& s, int grain, int tables, bool simulate);
// `pipescope plan --max-batch`: the GPipe baseline's peak grows by one sequence's activations per sequence, so the
// batch that fills `limit_bytes` is known from batches 1 and 2; finding it builds schedules of up to twice that
// batch about 2 + log2(batch) times (core/memory/memory_model.h max_batch_gpipe).
GridEstimate estimate_max_batch(const Scenario& s, double limit_bytes);
// Throws WorkTooLarge with the estimate and the override when `g` is over the limits or needs more than
// `available_bytes` (default: available_memory_bytes(); 0 = unknown).
void check_grid(const GridEstimate& g, double available_bytes = -1);

// Memory the kernel reports as available (MemAvailable of /proc/meminfo), or 0 when unknown.
double available_memory_bytes();

}  // namespace pipescope
