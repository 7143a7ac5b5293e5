// `pipescope simulate [SCENARIO] [--json F] [--trace F] [--timeline F.svg] [--compare a,b,c]`
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/atomic_file.h"
#include "core/pipeline.h"
#include "core/profile.h"
#include "core/profile_cost.h"
#include "core/scenario.h"
#include "core/scenario_vary.h"
#include "core/schedule_registry.h"
#include "core/work_estimate.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "sim/run_scenario.h"
#include "sim/scenario_options.h"
#include "sim/svg_render.h"
#include "sim/timeline_svg.h"

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
  bool fail_on_oom = false;  // exit 2 when a rank does not fit in device memory
};

const ScheduleEntry& kind_from_string(const std::string& name, const char* flag = "--compare") {
  if (const ScheduleEntry* e = find_schedule(name)) return *e;
  throw InputError(std::string(flag) + ": unknown schedule '" + name + "' (valid: " + schedule_names() + ")");
}

// The same scenario with another schedule kind (core/scenario_vary.h), named and checked.
Scenario variant(const Scenario& base, const ScheduleEntry& e) {
  Scenario s = with_schedule(base, e.kind);
  s.name = base.name + "/" + e.name;
  validate_scenario(s);
  return s;
}

sim::Report run_one(const Scenario& s, const SimulateOptions& o, std::ostream* json, std::ostream* trace,
                    std::ostream* timeline = nullptr) {
  auto prep = prepare(s);
  CheckedSchedule cs = check(prep->lowered, prep->placement);
  sim::SimResult r = sim::simulate(s.cluster, cs, sim::engine_options_for(s, o.collectives));
  sim::Report rep = sim::make_report(s, cs, r);
  if (json) sim::write_json(*json, rep);
  if (trace) sim::write_trace(*trace, cs, r, rep.profile);
  if (timeline) {
    const std::string title = sim::timeline_title("simulated", s.name, cs.schedule(), r.iteration_s);
    sim::PanelOptions po;
    po.all_replicas = o.timeline_all_replicas;
    sim::SvgOptions so;
    so.width_px = o.timeline_width_px;
    so.comm = o.timeline_comm;
    // The file name, not the path it was given by: pictures go into papers.
    so.title = "pipescope simulate " + (o.scenario.empty() ? std::string("(default scenario)")
                                                           : std::filesystem::path(o.scenario).filename().string());
    so.compact = o.timeline_compact;
    const sim::ProgramSpans spans = sim::program_spans(cs.dag(), cs.schedule(), r);
    sim::write_timeline_svg(*timeline, {sim::timeline_panel(cs.schedule(), cs.placement(), spans, title, po)}, so);
  }
  return rep;
}

int run_compare(const Scenario& base, const SimulateOptions& o) {
  std::vector<Scenario> variants;
  for (const auto& k : o.compare) {
    const ScheduleEntry& e = kind_from_string(k);
    if (e.traits.sliced() && !e.traits.from_file && base.schedule.seq_slices == 1)  // a file has its own slices
      std::fprintf(stderr,
                   "warning: %s with one slice per micro-batch (schedule.seq_slices = 1) runs as its unsliced "
                   "schedule; set schedule.seq_slices (k) in the scenario to compare slicing\n",
                   e.name);
    variants.push_back(variant(base, e));
  }
  for (const auto& s : variants) {  // refused here (exit 1), not as a failed row
    check_work(s);
    make_schedule(s);  // a variant the scenario cannot give (slicing, layout) is bad input, as with --schedule
  }
  // SimGrid allows one Engine per process: each variant runs in a forked child (sim/run_scenario.h).
  sim::RunOptions ro{o.collectives};
  ro.report_json = !o.json.empty();
  ro.trace_json = !o.trace.empty();
  std::vector<sim::RunOutcome> res;
  for (const auto& s : variants) {
    std::fprintf(stderr, "simulating %s ...\n", s.name.c_str());
    sim::RunOutcome v;
    try {
      v.result = sim::run_isolated(s, ro);
    } catch (const std::exception& e) {
      v.error = e.what();
    }
    res.push_back(v);
  }
  // With --json - or --trace -, stdout carries the file and the table goes to stderr.
  FILE* out = o.json == "-" || o.trace == "-" ? stderr : stdout;
  std::fprintf(out, "scenario %s (%s): %d GPUs, dp %d, pp %d, tp %d, global batch %d\n", base.name.c_str(),
               base.source.c_str(), base.cluster.total_gpus(), base.parallel.dp, base.parallel.pp, base.parallel.tp,
               base.parallel.global_batch);
  std::fprintf(out, "%-14s %3s %14s %14s %10s %10s %12s %12s %s\n", "schedule", "v", "iteration_s", "pipeline_s",
               "idle_phi", "bubble_b", "TFLOP/s/GPU", "peak_mem_GB", "");
  int rc = 0;
  std::vector<std::string> reports;
  std::vector<std::pair<std::string, std::string>> traces, failed;
  for (std::size_t i = 0; i < res.size(); i++) {
    const char* name = to_string(variants[i].schedule.kind);
    if (!res[i].ok()) {
      std::fprintf(out, "%-14s error: %s\n", name, res[i].error.c_str());
      failed.emplace_back(name, res[i].error);
      rc = kExitSchedule;
      continue;
    }
    const sim::RunResult& v = res[i].result;
    std::fprintf(out, "%-14s %3d %14.9f %14.9f %10.4f %10.4f %12.2f %12.2f %s\n", name, v.v, v.iteration_s,
                 v.pipeline_end_s, v.bubble_idle_fraction, v.bubble_ratio, v.tflops_per_gpu, v.peak_memory_bytes / 1e9,
                 v.oom ? "OOM" : "");
    if (v.oom && o.fail_on_oom) rc = kExitSchedule;
    reports.push_back(v.report_json);
    traces.emplace_back(name, v.trace_json);
  }
  std::fprintf(out,
               "idle_phi = bubble time / makespan (mean over ranks); bubble_b = bubble / ideal time (Megatron); "
               "v = chunks per rank\n");
  std::fflush(out);
  // Outputs are rendered in memory and written atomically after the runs (core/atomic_file.h).
  if (!o.json.empty()) {
    std::ostringstream json;
    sim::write_compare_json(json, reports, failed);
    write_file_atomic(o.json, json.str(), "--json");
  }
  if (!o.trace.empty()) {
    std::ostringstream trace;
    sim::write_merged_traces(trace, traces);
    write_file_atomic(o.trace, trace.str(), "--trace");
  }
  return rc;
}

// One line per registered schedule: name, traits, help (scripts loop over the first column).
int list_schedules() {
  for (const ScheduleEntry& e : schedule_registry()) {
    const ScheduleTraits& t = e.traits;
    std::string traits = t.fixed_v > 0 ? "v=" + std::to_string(t.fixed_v) : t.interleaved ? "v>1" : "v=1";
    if (t.sliced()) traits += ",sliced";
    if (t.split_backward) traits += ",split-backward";
    if (t.m_multiple_of_p) traits += ",m%pp==0";
    switch (t.style) {
      case StageStyle::Loop:
        break;
      case StageStyle::V:
        traits += ",v-shape";
        break;
    }
    std::printf("%-12s %-32s %s\n", e.name, traits.c_str(), e.help);
  }
  return 0;
}

int run_simulate(const SimulateOptions& o) {
  if (o.list_schedules) return list_schedules();
  // A scenario file takes --profile before it is validated; the built-in default takes it here.
  Scenario s = o.scenario.empty() ? default_scenario() : load_scenario(o.scenario, o.profile);
  if (o.scenario.empty() && !o.profile.empty()) s = use_profile(s, o.profile);
  // After the inputs are read: an output may not overwrite one of them.
  check_output_paths({{"--json", o.json}, {"--trace", o.trace}, {"--timeline", o.timeline}});
  if (!o.schedule.empty()) {
    if (!o.compare.empty()) throw InputError("--schedule picks one schedule; --compare runs several: give one");
    s = variant(s, kind_from_string(o.schedule, "--schedule"));
  }
  if (!o.compare.empty() && !o.timeline.empty())
    throw InputError("--timeline draws one run; it cannot be combined with --compare");
  if ((o.json == "-") + (o.trace == "-") + (o.timeline == "-") > 1)
    throw InputError("only one of --json, --trace, --timeline can write to standard output (-)");
  if (!o.compare.empty()) return run_compare(s, o);
  // Outputs are rendered in memory and written atomically after the run (core/atomic_file.h).
  std::ostringstream json, trace, timeline;
  sim::Report rep = run_one(s, o, o.json.empty() ? nullptr : &json, o.trace.empty() ? nullptr : &trace,
                            o.timeline.empty() ? nullptr : &timeline);
  // An output written to standard output ("-") gets it alone; the table then goes to stderr.
  const bool stdout_taken = o.json == "-" || o.trace == "-" || o.timeline == "-";
  std::ostream& table = stdout_taken ? std::cerr : std::cout;
  sim::print_table(table, rep);
  if (!s.sim.profile.empty()) table << cost_sources_text(s) << "\n";  // which profile part timed the ops
  table.flush();
  if (!o.json.empty()) write_file_atomic(o.json, json.str(), "--json");
  if (!o.trace.empty()) write_file_atomic(o.trace, trace.str(), "--trace");
  if (!o.timeline.empty())
    write_file_atomic(o.timeline, sim::render_svg(timeline.str(), timeline_format(o.timeline, o.timeline_format)),
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
  sub->add_option("--compare", o->compare, "Run schedule variants side by side, e.g. gpipe,1f1b,interleaved")
      ->delimiter(',');
  sub->add_option("--schedule", o->schedule,
                  "Simulate the scenario with this registered schedule instead (see --list-schedules)");
  sub->add_flag("--fail-on-oom", o->fail_on_oom,
                "Exit with code 2 when the memory model says a rank does not fit in device memory");
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
  return {sub, [o] { return run_simulate(*o); }};
}

}  // namespace pipescope::cli
