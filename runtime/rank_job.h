#pragma once
// One measured run as command-line flags, shared by `pipescope validate` (which fits the scenario, launches
// the MPI job and compares) and `pipescope-rank` (the program each MPI rank runs), so that every rank
// rebuilds exactly the scenario validate fitted: same file, same overrides, same lowering.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "runtime/job.h"
#include "runtime/scenario_fit.h"

namespace pipescope::runtime {

struct RankJob {
  std::string scenario;  // YAML file; empty = the built-in default scenario
  // Shrinking: 0 / empty keeps the scenario's value (runtime/scenario_fit.h).
  std::string schedule;
  int layers = 0, hidden = 0, heads = 0, ffn = 0, vocab = 0, seq_len = 0;
  int dp = 0, pp = 0, tp = 0, v = 0, micro_batch_size = 0, global_batch = 0, slices = 0;
  int experts = 0, top_k = 0, expert_ffn = 0, ep = 0;  // mixture of experts
  std::vector<int> slice_tokens;
  std::vector<int> stage_layers;  // layers per virtual stage (parallel.stage_layers); empty keeps the scenario's
  // The run.
  std::string backend = "cpu-f64";
  int iterations = 3, warmup = 1;
  double watchdog_s = 300;
  bool no_check = false;  // skip gathering the final gradients / parameters (no reference comparison)

  void add_scenario_option(CLI::App& app);
  void add_shrink_options(CLI::App& app);
  void add_run_options(CLI::App& app);
  // The flags (scenario first) that reproduce this job in another process.
  std::vector<std::string> args() const;
  ScenarioOverrides overrides() const;
  // The scenario with the overrides applied (fit_scenario); throws ScenarioError on a bad scenario.
  Scenario fitted_scenario() const;
  JobOptions job_options() const;
};

}  // namespace pipescope::runtime
