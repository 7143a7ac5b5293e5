// `pipescope repro <paper> ...`: registry of paper reproductions (cli/repro.h), and the one simulation call
// they share.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/repro.h"
#include "core/atomic_file.h"
#include "sim/run_scenario.h"

namespace pipescope::cli {

SimFigures simulate_figures(const Scenario& s) {
  const sim::RunResult r = sim::run_isolated(s);
  if (!(r.iteration_s > 0)) throw std::runtime_error("simulation of " + s.source + " gave no iteration time");
  return SimFigures{r.iteration_s, r.tflops_per_gpu, r.peak_memory_bytes / 1e9, r.oom};
}

Scenario with_token_slices(Scenario s, const std::vector<int>& slice_tokens) {
  s.schedule.kind = ScheduleKind::TeraPipe;
  s.schedule.slicing = "explicit";
  s.schedule.slice_tokens = slice_tokens;
  s.schedule.seq_slices = static_cast<int>(slice_tokens.size());
  s.parallel.micro_batch_size = 1;
  return s;
}

void check_repro_json(const std::string& path) {
  if (path == "-") throw InputError("--json -: standard output carries the table; write the JSON to a file");
  check_output_paths({{"--json", path}});
}

void write_repro_json(const std::string& path, const std::string& json_text) {
  write_file_atomic(path, json_text + "\n", "--json");
}

Command add_repro(CLI::App& app) {
  auto* sub = app.add_subcommand("repro", "Reproduce a paper's results table in simulation");
  sub->require_subcommand(1);
  // One line per paper.
  auto papers = std::make_shared<std::vector<Command>>(std::vector<Command>{
      add_repro_terapipe(*sub),
      add_repro_megatron(*sub),
      add_repro_seq1f1b(*sub),
      add_repro_vtrain(*sub),
  });
  return {sub, [papers] {
            for (auto& c : *papers)
              if (c.app->parsed()) return c.run();
            return kExitInput;
          }};
}

}  // namespace pipescope::cli
