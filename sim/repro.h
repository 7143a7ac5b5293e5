#pragma once
// What the paper tables (`pipescope repro <paper>`, sim/repro_*.h) share: the one simulation call, a paper's
// slicing scheme as a scenario, and the --json file. Each table prints to the stream it is given, keeps going past
// a row that fails (printed as an error line) and returns the first such failure, whose exit code the command
// reports.

#include <exception>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/scenario_vary.h"

namespace pipescope::sim {

// What the tables read from one simulation of a scenario, run in a forked child (sim/run_scenario.h run_isolated:
// SimGrid allows one engine per process). Throws std::runtime_error with the child's error.
struct SimFigures {
  double iteration_s = 0, tflops_per_gpu = 0, peak_mem_GB = 0;  // peak: the worst rank
  bool oom = false;
};
SimFigures simulate_figures(const Scenario& s);
// A slicing scheme as a scenario: core/model/scenario_vary.h (the TeraPipe development set uses it too).
using pipescope::with_token_slices;
// A table's --json: checked before the run (standard output carries the table, so "-" is refused:
// std::invalid_argument) and written atomically after it.
void check_repro_json(const std::string& path);
void write_repro_json(const std::string& path, const std::string& json_text);

}  // namespace pipescope::sim
