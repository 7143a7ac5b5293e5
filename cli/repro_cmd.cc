// `pipescope repro <paper> ...`: registry of paper reproductions (cli/repro.h), and the one simulation call
// they share.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/fork_run.h"
#include "cli/repro.h"
#include "core/pipeline.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "sim/scenario_options.h"

namespace pipescope::cli {

SimFigures simulate_figures(const Scenario& s) {
  const std::string out = run_in_child([&] {
    auto prep = prepare(s);
    CheckedSchedule cs = check(prep->lowered, prep->placement);
    const sim::SimResult r = sim::simulate(s.cluster, cs, sim::engine_options_for(s));
    const sim::Report rep = sim::make_report(s, cs, r);
    double peak = 0;
    for (const auto& rm : rep.memory.ranks) peak = std::max(peak, rm.peak_bytes);
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.17g %.17g %.17g %d", rep.iteration_s, rep.tflops_per_gpu, peak / 1e9,
                  rep.memory.any_oom() ? 1 : 0);
    return std::string(buf);
  });
  SimFigures f;
  int oom = 0;
  if (std::sscanf(out.c_str(), "%lf %lf %lf %d", &f.iteration_s, &f.tflops_per_gpu, &f.peak_mem_GB, &oom) != 4 ||
      !(f.iteration_s > 0))
    throw std::runtime_error("malformed answer from the simulation process of " + s.source + ": " + out);
  f.oom = oom != 0;
  return f;
}

Scenario with_token_slices(Scenario s, const std::vector<int>& slice_tokens) {
  s.schedule.kind = ScheduleKind::TeraPipe;
  s.schedule.slicing = "explicit";
  s.schedule.slice_tokens = slice_tokens;
  s.schedule.seq_slices = static_cast<int>(slice_tokens.size());
  s.parallel.micro_batch_size = 1;
  return s;
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
