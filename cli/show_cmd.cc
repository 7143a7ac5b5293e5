// `pipescope show [SCENARIO] [--lowered] [--csv FILE]`: print the schedule (canonical op text per rank) and run
// the static checker, without simulating; --csv also writes the schedule in PyTorch pipelining's CSV format
// (core/ir/schedule_csv.h), which `schedule: {kind: file, file: FILE}` reads back. The op notation is explained in
// docs/schedule-ir.md; long programs wrap at --width columns, continuation lines indented.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/ir/schedule_csv.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/util/atomic_file.h"

namespace pipescope::cli {
namespace {
struct ShowOptions {
  std::string scenario;
  bool lowered = false;
  int worker = -1;
  std::string csv;
  int width = 100;  // wrap columns; 0: one line per rank / worker
};

// "w3:" followed by the op texts, wrapped at `width` columns (continuation lines indented under the first op).
void print_wrapped(std::ostream& os, const std::string& label, const std::vector<std::string>& ops, int width) {
  const std::string indent(label.size(), ' ');
  std::size_t col = label.size();
  os << label;
  for (const auto& t : ops) {
    if (width > 0 && col > indent.size() && col + 1 + t.size() > static_cast<std::size_t>(width)) {
      os << '\n' << indent;
      col = indent.size();
    }
    os << ' ' << t;
    col += 1 + t.size();
  }
  os << '\n';
}

int run_show(const ShowOptions& o) {
  Scenario s = o.scenario.empty() ? default_scenario() : load_scenario(o.scenario);
  check_output_paths({{"--csv", o.csv}});
  auto prep = prepare(s);
  if (o.worker >= 0 && !o.lowered) throw InputError("--worker selects a lowered program: give it with --lowered");
  if (o.worker >= prep->lowered.workers())
    throw InputError("--worker " + std::to_string(o.worker) + ": this scenario has workers 0.." +
                     std::to_string(prep->lowered.workers() - 1) + " (dp x pp)");
  if (!o.lowered) {
    for (std::size_t r = 0; r < prep->schedule.per_rank.size(); ++r)
      print_wrapped(std::cout, "r" + std::to_string(r) + ":", rank_words(prep->schedule, r), o.width);
  } else {
    for (int w = 0; w < prep->lowered.workers(); ++w) {
      if (o.worker >= 0 && w != o.worker) continue;
      std::vector<std::string> ops;
      for (const auto& op : prep->lowered.per_worker[w])
        ops.push_back(op.kind == LOpKind::Compute ? paired_op_text(op.op) : lowered_text(op));
      print_wrapped(std::cout, "w" + std::to_string(w) + ":", ops, o.width);
    }
  }
  CheckedSchedule cs = check(prep->lowered, prep->placement);
  std::printf("check: ok (%zu DAG nodes)\n", cs.dag().size());
  if (!o.csv.empty()) {
    write_file_atomic(o.csv, schedule_to_csv(prep->schedule), "--csv");
    std::size_t actions = prep->schedule.op_count();
    for (const auto& acts : prep->schedule.shard_actions) actions += acts.size();
    std::printf("wrote %s: %d rows (ranks), %zu actions\n", o.csv.c_str(), prep->schedule.p, actions);
  }
  return 0;
}
}  // namespace

Command add_show(CLI::App& app) {
  auto o = std::make_shared<ShowOptions>();
  auto* sub = app.add_subcommand(
      "show", "Print a scenario's schedule and run the static checker (notation: docs/schedule-ir.md)");
  sub->add_option("scenario", o->scenario, "Scenario YAML file (default: built-in)");
  sub->add_flag("--lowered", o->lowered, "Print the lowered per-worker programs (sends, receives, collectives)");
  sub->add_option("--worker", o->worker, "Only this worker (with --lowered; worker = replica * pp + rank)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--width", o->width, "Wrap each program at this many columns (default 100; 0: no wrapping)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option(
      "--csv", o->csv,
      "Also write the schedule as a PyTorch pipelining CSV (one row per rank; schedule kind file reads it)");
  return {sub, [o] { return run_show(*o); }};
}
}  // namespace pipescope::cli
