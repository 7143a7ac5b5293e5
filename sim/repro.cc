#include "sim/repro.h"

#include <stdexcept>

#include "core/util/atomic_file.h"
#include "sim/run_scenario.h"

namespace pipescope::sim {

SimFigures simulate_figures(const Scenario& s) {
  const RunResult r = run_isolated(s);
  if (!(r.iteration_s > 0)) throw std::runtime_error("simulation of " + s.source + " gave no iteration time");
  return SimFigures{r.iteration_s, r.tflops_per_gpu, r.peak_memory_bytes / 1e9, r.oom};
}

void check_repro_json(const std::string& path) {
  if (path == "-") throw std::invalid_argument("--json -: standard output carries the table; write the JSON to a file");
  check_output_paths({{"--json", path}});
}

void write_repro_json(const std::string& path, const std::string& json_text) {
  write_file_atomic(path, json_text + "\n", "--json");
}

}  // namespace pipescope::sim
