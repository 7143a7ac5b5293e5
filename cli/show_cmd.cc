// `pipescope show [SCENARIO] [--lowered] [--csv FILE]`: print the schedule (canonical op text per rank) and run
// the static checker, without simulating; --csv also writes the schedule in PyTorch pipelining's CSV format
// (core/schedule_csv.h), which `schedule: {kind: file, file: FILE}` reads back.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>

#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/pipeline.h"
#include "core/scenario.h"
#include "core/schedule_csv.h"

namespace pipescope::cli {
namespace {
struct ShowOptions {
  std::string scenario;
  bool lowered = false;
  int worker = -1;
  std::string csv;
};

int run_show(const ShowOptions& o) {
  Scenario s = o.scenario.empty() ? default_scenario() : load_scenario(o.scenario);
  check_output_paths({{"--csv", o.csv}});
  auto prep = prepare(s);
  if (o.worker >= prep->lowered.workers())
    throw InputError("--worker " + std::to_string(o.worker) + ": this scenario has workers 0.." +
                     std::to_string(prep->lowered.workers() - 1));
  if (!o.lowered) {
    std::cout << schedule_text(prep->schedule);
  } else {
    for (int w = 0; w < prep->lowered.workers(); ++w) {
      if (o.worker >= 0 && w != o.worker) continue;
      std::cout << "w" << w << ":";
      for (const auto& op : prep->lowered.per_worker[w]) std::cout << ' ' << lowered_text(op);
      std::cout << '\n';
    }
  }
  CheckedSchedule cs = check(prep->lowered, prep->placement);
  std::printf("check: ok (%zu DAG nodes)\n", cs.dag().size());
  if (!o.csv.empty()) {
    write_file_atomic(o.csv, schedule_to_csv(prep->schedule), "--csv");
    std::printf("wrote %s: %d rows (ranks), %zu actions\n", o.csv.c_str(), prep->schedule.p, prep->schedule.op_count());
  }
  return 0;
}
}  // namespace

Command add_show(CLI::App& app) {
  auto o = std::make_shared<ShowOptions>();
  auto* sub = app.add_subcommand("show", "Print a scenario's schedule and run the static checker");
  sub->add_option("scenario", o->scenario, "Scenario YAML file (default: built-in)");
  sub->add_flag("--lowered", o->lowered, "Print the lowered per-worker programs (sends, receives, collectives)");
  sub->add_option("--worker", o->worker, "Only this worker (with --lowered)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  sub->add_option(
      "--csv", o->csv,
      "Also write the schedule as a PyTorch pipelining CSV (one row per rank; schedule kind file reads it)");
  return {sub, [o] { return run_show(*o); }};
}
}  // namespace pipescope::cli
