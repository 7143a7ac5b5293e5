#pragma once
// `pipescope repro <paper>`: one sub-subcommand per reproduced paper. Each paper's file defines one
// `Command add_repro_<paper>(CLI::App& repro)` that adds its subcommand under `repro`; cli/repro_cmd.cc lists
// them.

#include <vector>

#include "cli/commands.h"
#include "core/config.h"

namespace pipescope::cli {

// What the repro tables read from one simulation of a scenario. Each runs in a forked child (sim/run_scenario.h
// run_isolated): SimGrid allows one engine per process. Throws std::runtime_error with the child's error.
struct SimFigures {
  double iteration_s = 0, tflops_per_gpu = 0, peak_mem_GB = 0;  // peak: the worst rank
  bool oom = false;
};
SimFigures simulate_figures(const Scenario& s);  // cli/repro_cmd.cc
// `s` run as TeraPipe with micro-batches of one sequence, each cut into `slice_tokens` (explicit slicing):
// a plan's or a paper's scheme, to simulate.
Scenario with_token_slices(Scenario s, const std::vector<int>& slice_tokens);  // cli/repro_cmd.cc
// A table's --json: checked before the run (stdout carries the table, so "-" is refused) and written atomically
// after it (cli/repro_cmd.cc).
void check_repro_json(const std::string& path);
void write_repro_json(const std::string& path, const std::string& json_text);

Command add_repro_terapipe(CLI::App& repro);  // cli/repro_terapipe.cc
Command add_repro_megatron(CLI::App& repro);  // cli/repro_megatron.cc
Command add_repro_seq1f1b(CLI::App& repro);   // cli/repro_seq1f1b.cc
Command add_repro_vtrain(CLI::App& repro);    // cli/repro_vtrain.cc
// `pipescope plan` for kind seq1f1b / seq1f1b-i: split points, segment costs and the four methods' peak memory.
int print_seq1f1b_plan(const Scenario& s);  // cli/repro_seq1f1b.cc

}  // namespace pipescope::cli
