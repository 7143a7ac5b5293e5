// `pipescope simulate [SCENARIO] [--json F] [--trace F] [--timeline F.svg] [--compare a,b,c]`
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/cost/profile_cost.h"
#include "core/model/megatron_emit.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"
#include "core/model/torchtitan_config.h"
#include "core/util/atomic_file.h"
#include "sim/schedule_compare.h"
#include "sim/simulate_one.h"
#include "sim/svg_render.h"

namespace pipescope::cli {
namespace {

struct SimulateOptions {
  std::string scenario;
  std::string json, trace;
  std::vector<std::string> compare;
  std::string schedule;         // --schedule NAME: the scenario with another registered schedule
  bool list_schedules = false;  // --list-schedules: the registry, one schedule per line
  std::string collectives;
  std::string profile;          // --profile FILE: a calibration profile in place of the scenario's device
  std::string timeline;         // --timeline FILE.svg | .pdf | .png
  std::string timeline_format;  // --timeline-format: svg | pdf | png (default: from the file name)
  bool timeline_comm = false, timeline_all_replicas = false, timeline_compact = false;
  double timeline_width_px = 1600;
  std::string timeline_title;   // --timeline-title: the picture's heading (default: the command and scenario file)
  std::string timeline_window;  // --timeline-window T0:T1 (seconds)
  std::string timeline_ranks;   // --timeline-ranks A:B (pipeline ranks, inclusive)
  int timeline_group = 1;       // --timeline-group N: one row per N stages
  std::string trace_ranks;      // --trace-ranks A:B (pipeline ranks, inclusive)
  std::string trace_replicas;   // --trace-replicas A:B (data-parallel replicas, inclusive)
  bool fail_on_oom = false;     // exit 2 when a rank does not fit in device memory
  std::string emit;             // --emit megatron: the framework's launch arguments instead of a simulation
};

// "A:B" as two numbers; either side may be empty (then `lo` / `hi` stays as it was). Bad input: InputError naming the
// flag.
void parse_pair(const std::string& flag, const std::string& text, double& lo, double& hi) {
  const std::size_t colon = text.find(':');
  auto num = [&](const std::string& part, double& out) {
    if (part.empty()) return;
    char* end = nullptr;
    const double x = std::strtod(part.c_str(), &end);
    if (*end != '\0' || !std::isfinite(x) || x < 0)
      throw InputError(flag + " " + text + ": '" + part + "' is not a number >= 0");
    out = x;
  };
  if (colon == std::string::npos) throw InputError(flag + " " + text + ": give START:END, e.g. 0.5:0.8");
  num(text.substr(0, colon), lo);
  num(text.substr(colon + 1), hi);
}

// "A:B" as a range of whole numbers (B -1 when left out): pipeline ranks or replicas. Bad input: InputError.
void parse_whole_range(const std::string& flag, const std::string& text, int& first, int& last) {
  if (text.empty()) return;
  double a = 0, b = -1;
  parse_pair(flag, text, a, b);
  if (a != std::floor(a) || (b >= 0 && b != std::floor(b)) || a > 1e6 || b > 1e6)
    throw InputError(flag + " " + text + ": give whole numbers, e.g. 0:7");
  first = static_cast<int>(a), last = static_cast<int>(b);
}

sim::TraceSubset trace_subset(const SimulateOptions& o) {
  sim::TraceSubset t;
  parse_whole_range("--trace-ranks", o.trace_ranks, t.first_rank, t.last_rank);
  parse_whole_range("--trace-replicas", o.trace_replicas, t.first_replica, t.last_replica);
  return t;
}

// Ranks or replicas the scenario does not have are refused before the run, not after it.
void check_within(const std::string& flag, const std::string& text, int first, int last, int count, const char* what) {
  if (first >= count || last >= count || (last >= 0 && first > last))
    throw InputError(flag + " " + text + ": the scenario's " + what + " are 0:" + std::to_string(count - 1));
}

void check_subsets(const Scenario& s, const SimulateOptions& o) {
  int a = 0, b = -1;
  parse_whole_range("--timeline-ranks", o.timeline_ranks, a, b);
  check_within("--timeline-ranks", o.timeline_ranks, a, b, s.parallel.pp, "pipeline ranks");
  const sim::TraceSubset t = trace_subset(o);
  check_within("--trace-ranks", o.trace_ranks, t.first_rank, t.last_rank, s.parallel.pp, "pipeline ranks");
  check_within("--trace-replicas", o.trace_replicas, t.first_replica, t.last_replica, s.parallel.dp,
               "data-parallel replicas");
}

sim::SimulateOneRequest one_request(const SimulateOptions& o) {
  sim::SimulateOneRequest q;
  q.collectives = o.collectives;
  q.json = !o.json.empty(), q.trace = !o.trace.empty(), q.timeline = !o.timeline.empty();
  q.timeline_options = {o.timeline_comm, o.timeline_all_replicas, o.timeline_compact, o.timeline_width_px, ""};
  // The file name, not the path it was given by: pictures go into papers.
  q.timeline_options.title =
      "pipescope simulate " +
      (o.scenario.empty() ? std::string("(default scenario)") : std::filesystem::path(o.scenario).filename().string());
  if (!o.timeline_title.empty()) q.timeline_options.title = o.timeline_title;
  if (!o.timeline_window.empty())
    parse_pair("--timeline-window", o.timeline_window, q.timeline_options.window_start_s,
               q.timeline_options.window_end_s);
  parse_whole_range("--timeline-ranks", o.timeline_ranks, q.timeline_options.first_rank, q.timeline_options.last_rank);
  q.timeline_options.row_group = o.timeline_group;
  q.trace_subset = trace_subset(o);
  return q;
}

int run_compare(const Scenario& base, const SimulateOptions& o) {
  sim::RunOptions ro;
  ro.collectives = o.collectives;
  ro.report_json = !o.json.empty();
  ro.trace_json = !o.trace.empty();
  ro.trace_subset = trace_subset(o);
  const sim::ScheduleComparison c = sim::compare_schedules(
      base, o.compare, ro, [](const std::string& w) { std::fprintf(stderr, "warning: %s\n", w.c_str()); },
      [](const Scenario& s) { std::fprintf(stderr, "simulating %s ...\n", s.name.c_str()); });
  // With --json - or --trace -, stdout carries the file and the table goes to stderr.
  FILE* out = o.json == "-" || o.trace == "-" ? stderr : stdout;
  sim::print_comparison(out, base, c);
  std::fflush(out);
  // Outputs are rendered in memory and written atomically after the runs (core/util/atomic_file.h).
  if (!o.json.empty()) write_file_atomic(o.json, sim::comparison_json(c), "--json");
  if (!o.trace.empty()) {  // streamed from the variants' files (a trace per variant may be hundreds of MB)
    AtomicFileWriter w(o.trace, "--trace");
    sim::write_comparison_trace(c, w);
    w.commit();
  }
  for (const sim::RunOutcome& r : c.outcomes)
    if (!r.ok() || (r.result.oom && o.fail_on_oom)) return kExitSchedule;
  return 0;
}

int run_simulate(const SimulateOptions& o) {
  if (o.list_schedules) {
    std::fputs(schedule_list_text().c_str(), stdout);
    return 0;
  }
  // A scenario file takes --profile before it is validated; the built-in default takes it here.
  Scenario s = o.scenario.empty() ? default_scenario() : load_scenario(o.scenario, o.profile);
  if (o.scenario.empty() && !o.profile.empty()) s = use_profile(s, o.profile);
  // After the inputs are read: an output may not overwrite one of them.
  check_output_paths({{"--json", o.json}, {"--trace", o.trace}, {"--timeline", o.timeline}});
  if (!o.schedule.empty()) {
    if (!o.compare.empty()) throw InputError("--schedule picks one schedule; --compare runs several: give one");
    s = sim::schedule_variant(s, sim::schedule_named(o.schedule, "--schedule"));
  }
  if (!o.emit.empty()) {  // a translation of the scenario, nothing simulated (core/model/megatron_emit.h)
    if (!o.compare.empty()) throw InputError("--emit writes one configuration; it cannot go with --compare");
    try {
      std::fputs((o.emit == "megatron" ? megatron_command(s) : torchtitan_toml(s)).c_str(), stdout);
    } catch (const std::invalid_argument& e) {
      throw InputError(e.what());
    }
    return 0;
  }
  if (!o.compare.empty() && !o.timeline.empty())
    throw InputError("--timeline draws one run; it cannot be combined with --compare");
  if ((o.json == "-") + (o.trace == "-") + (o.timeline == "-") > 1)
    throw InputError("only one of --json, --trace, --timeline can write to standard output (-)");
  check_subsets(s, o);
  if (!o.compare.empty()) return run_compare(s, o);
  // Outputs are rendered in memory and written atomically after the run (core/util/atomic_file.h).
  const sim::SimulateOneResult run = sim::simulate_one(s, one_request(o));
  const sim::Report& rep = run.report;
  // An output written to standard output ("-") gets it alone; the table then goes to stderr.
  const bool stdout_taken = o.json == "-" || o.trace == "-" || o.timeline == "-";
  std::ostream& table = stdout_taken ? std::cerr : std::cout;
  sim::print_table(table, rep);
  if (!s.sim.profile.empty()) table << cost_sources_text(s) << "\n";  // which profile part timed the ops
  table.flush();
  if (!o.json.empty()) write_file_atomic(o.json, run.json, "--json");
  if (!o.trace.empty()) write_file_atomic(o.trace, run.trace, "--trace");
  if (!o.timeline.empty())
    write_file_atomic(o.timeline, sim::render_svg(run.timeline_svg, timeline_format(o.timeline, o.timeline_format)),
                      "--timeline");
  if (o.fail_on_oom)
    for (const auto& rm : rep.memory.ranks)
      if (rm.oom) {
        std::fprintf(stderr, "error: --fail-on-oom: the memory model says a rank does not fit in device memory\n");
        return kExitSchedule;
      }
  return 0;
}

}  // namespace

Command add_simulate(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* sub = app.add_subcommand("simulate", "Simulate one training iteration of a scenario on SimGrid");
  sub->add_option("scenario", o->scenario, "Scenario YAML file (default: the built-in default scenario)");
  sub->add_option("--json", o->json,
                  "Write the report as JSON to this file (- for stdout; with --compare, every variant)");
  sub->add_option(
      "--trace", o->trace,
      "Write a Chrome/Perfetto trace-event file (one track per GPU; - for stdout; with --compare, every variant)");
  sub->add_option("--trace-ranks", o->trace_ranks,
                  "Trace: keep only the GPUs of pipeline ranks A:B (inclusive), e.g. 0:3");
  sub->add_option("--trace-replicas", o->trace_replicas,
                  "Trace: keep only the GPUs of data-parallel replicas A:B (inclusive), e.g. 0:0 for one replica");
  sub->add_option("--compare", o->compare, "Run schedule variants side by side, e.g. gpipe,1f1b,interleaved")
      ->delimiter(',');
  sub->add_option("--schedule", o->schedule,
                  "Simulate the scenario with this registered schedule instead (see --list-schedules)");
  sub->add_flag("--fail-on-oom", o->fail_on_oom,
                "Exit with code 2 when the memory model says a rank does not fit in device memory");
  sub->add_option("--emit", o->emit,
                  "megatron: print the Megatron-LM pretrain_gpt.py arguments that run the scenario; torchtitan: its "
                  "TorchTitan job TOML (nothing simulated)")
      ->check(CLI::IsMember({"megatron", "torchtitan"}));
  sub->add_flag("--list-schedules", o->list_schedules, "List the registered schedules (name, traits, help) and exit");
  sub->add_option("--profile", o->profile,
                  "Device profile (pipescope calibrate, or calib/profiles/*.yaml) in place of the scenario's device");
  sub->add_option("--collectives", o->collectives, "Collective model: ring | aggregate | analytic | auto")
      ->check(CLI::IsMember({"ring", "aggregate", "analytic", "auto"}));
  sub->add_option("--timeline", o->timeline,
                  "Write the pipeline timeline (one row per pipeline stage) as SVG, PDF or PNG (by the file name)");
  sub->add_option("--timeline-format", o->timeline_format,
                  "Timeline format: svg | pdf | png (default: from --timeline)")
      ->check(CLI::IsMember({"svg", "pdf", "png"}));
  sub->add_flag("--timeline-comm", o->timeline_comm, "Timeline: draw communication as a strip under each row");
  sub->add_flag("--timeline-all-replicas", o->timeline_all_replicas,
                "Timeline: a row for every data-parallel replica's stages (default: replica 0)");
  sub->add_flag("--timeline-compact", o->timeline_compact,
                "Timeline: no labels, edges or tooltips (automatic from 96 rows)");
  sub->add_option("--timeline-width", o->timeline_width_px, "Timeline width in pixels (default 1600)")
      ->check(finite_range(200.0, 100000.0));
  sub->add_option("--timeline-title", o->timeline_title,
                  "Timeline: the picture's heading (default: the command and the scenario file's name)");
  sub->add_option("--timeline-window", o->timeline_window,
                  "Timeline: draw only START:END seconds of the iteration, e.g. 2.5:3 (either side may be left out)");
  sub->add_option("--timeline-ranks", o->timeline_ranks,
                  "Timeline: draw only pipeline ranks A:B (inclusive), e.g. 0:7");
  sub->add_option("--timeline-group", o->timeline_group,
                  "Timeline: one row per N consecutive stages, shaded by the share of them busy in the colour of the "
                  "op kind most of them run (long pipelines)")
      ->check(CLI::Range(1, 100000));
  return {sub, [o] { return run_simulate(*o); }};
}

}  // namespace pipescope::cli
