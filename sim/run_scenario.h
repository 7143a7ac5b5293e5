#pragma once
// The one call that runs a scenario: scenario -> schedule, lowering, static checks, SimGrid, report, reduced to
// the figures every command prints (RunResult). run_scenario() runs in this process (once: SimGrid allows one
// Engine per process); run_isolated() and run_scenarios() run each scenario in a forked child
// (sim/child_process.h) and carry the result back in one encoding (JSON, sim/run_scenario.cc). simulate
// --compare, sweep, repro, plan --simulate, search and the benchmarks all go through here.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "sim/child_process.h"

namespace pipescope::sim {

struct RunResult {
  // What was run (from the report and the schedule).
  std::string scenario, schedule;
  int gpus = 0, dp = 1, pp = 1, tp = 1, v = 1, m = 0;
  int micro_batch_size = 1, global_batch = 1, seq_len = 0;
  int slices = 0;            // most token slices of any micro-batch
  std::string slice_tokens;  // micro-batch 0's slice lengths, space-separated
  // The simulated figures (Report).
  double iteration_s = 0, pipeline_end_s = 0, bubble_idle_fraction = 0, bubble_ratio = 0;
  double tflops_per_gpu = 0, model_tflops_per_gpu = 0;
  double tokens_per_s = 0;       // global_batch * seq_len / iteration_s
  double peak_memory_bytes = 0;  // the worst rank's modelled peak
  bool oom = false;              // some rank exceeds the device memory
  // The report as JSON and the trace (write_json, write_trace), when RunOptions asked for them (simulate
  // --compare --json / --trace); empty otherwise.
  std::string report_json, trace_json;
  // How the run went (benchmarks; never part of a deterministic output).
  double wall_s = 0, sim_wall_s = 0, activities = 0, dag_nodes = 0, peak_rss_kb = 0;
};

struct RunOptions {
  std::string collectives;   // overrides the scenario's sim.collectives when non-empty
  bool report_json = false;  // fill RunResult::report_json
  bool trace_json = false;   // fill RunResult::trace_json
};

// In this process: at most once per process. Throws what the pipeline throws (std::invalid_argument for an
// impossible schedule, CheckError for a rejected one, std::runtime_error for a deadlock).
RunResult run_scenario(const Scenario& s, const RunOptions& o = {});

// The one encoding of a RunResult across a pipe (JSON; doubles round-trip exactly).
std::string encode(const RunResult& r);
RunResult decode(const std::string& text);

// run_scenario in a forked child. Throws std::runtime_error with the child's error message.
RunResult run_isolated(const Scenario& s, const RunOptions& o = {}, const ChildOptions& c = {});

// One scenario's outcome in a batch: its result, or why it failed.
struct RunOutcome {
  RunResult result;
  std::string error;  // empty when it ran
  bool ok() const { return error.empty(); }
};

// Every scenario in its own child, up to `jobs` at once; outcomes in input order (identical for every `jobs`).
// `done(i, outcome)` is called as each finishes (for progress).
// Once `stop()` is true no further scenario starts; those not run fail with sim::kNotRun.
std::vector<RunOutcome> run_scenarios(const std::vector<Scenario>& scenarios, const RunOptions& o, int jobs,
                                      const std::function<void(std::size_t, const RunOutcome&)>& done = {},
                                      const std::function<bool()>& stop = {});

}  // namespace pipescope::sim
