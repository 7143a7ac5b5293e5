#pragma once
// The one call that runs a scenario: scenario -> schedule, lowering, static checks, SimGrid, report, reduced to
// the figures every command prints (RunResult). run_scenario() runs in this process (once: SimGrid allows one
// Engine per process); run_isolated() and run_scenarios() run each scenario in a forked child
// (sim/child_process.h) and carry the result back in one encoding (sim/run_result.h). simulate
// --compare, sweep, repro, plan --simulate, search and the benchmarks all go through here.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "sim/child_process.h"
#include "sim/report.h"
#include "sim/run_result.h"

namespace pipescope::sim {

struct RunOptions {
  std::string collectives;   // overrides the scenario's sim.collectives when non-empty
  bool report_json = false;  // fill RunResult::report_json
  bool trace_json = false;   // fill RunResult::trace_json
  TraceSubset trace_subset;  // the ranks and replicas the trace keeps
  TraceLayout trace_layout;  // its pids and flow ids in a file of several runs (simulate --compare)
  std::string trace_file;    // write the trace to this file instead of RunResult::trace_json (large traces)
};

// In this process: at most once per process. Throws what the pipeline throws (std::invalid_argument for an
// impossible schedule, CheckError for a rejected one, std::runtime_error for a deadlock).
RunResult run_scenario(const Scenario& s, const RunOptions& o = {});

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
