#include "sim/run_scenario.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/lower/checks.h"
#include "core/plan/pipeline.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "sim/scenario_options.h"

namespace pipescope::sim {

namespace {

void describe_schedule(const Schedule& sch, RunResult& out) {
  out.slices = 0;
  for (int mb = 0; mb < sch.m; mb++) out.slices = std::max(out.slices, sch.slices(mb));
  out.slice_tokens.clear();
  if (sch.microbatches.empty()) return;
  const auto& sb = sch.microbatches[0].slice_begin;
  for (std::size_t i = 0; i < sb.size(); i++)
    out.slice_tokens += (i ? " " : "") + std::to_string((i + 1 < sb.size() ? sb[i + 1] : sch.seq_len) - sb[i]);
}

}  // namespace

RunResult run_scenario(const Scenario& s, const RunOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto prep = prepare(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  const SimResult r = simulate(s.cluster, cs, engine_options_for(s, o.collectives));
  // The JSON report carries the reserved bytes; the figures a RunResult keeps need only the live peak.
  const Report rep = make_report(s, cs, r, o.report_json ? AllocatorReplay::On : AllocatorReplay::Off);
  RunResult out;
  static_cast<RunFigures&>(out) = rep;
  describe_schedule(prep->schedule, out);
  out.breakdown = rep.breakdown.mean;
  for (const auto& rm : rep.memory.ranks)
    out.peak_memory_bytes = std::max(out.peak_memory_bytes, rm.peak_bytes), out.oom = out.oom || rm.oom;
  if (o.report_json) {
    std::ostringstream os;
    write_json(os, rep);
    out.report_json = os.str();
  }
  if (!o.trace_file.empty()) {
    std::ofstream f(o.trace_file, std::ios::binary | std::ios::trunc);
    write_trace(f, cs, r, rep.profile, o.trace_subset, o.trace_layout);
    f.flush();
    if (!f) throw std::runtime_error("cannot write the trace to " + o.trace_file);
  } else if (o.trace_json) {
    std::ostringstream os;
    write_trace(os, cs, r, rep.profile, o.trace_subset, o.trace_layout);
    out.trace_json = os.str();
  }
  out.sim_wall_s = r.wall_s;
  out.activities = static_cast<double>(r.activities);
  out.dag_nodes = static_cast<double>(r.total);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  out.peak_rss_kb = static_cast<double>(ru.ru_maxrss);
  return out;
}

RunResult run_isolated(const Scenario& s, const RunOptions& o, const ChildOptions& c) {
  return decode(run_in_child([&] { return encode(run_scenario(s, o)); }, c));
}

std::vector<RunOutcome> run_scenarios(const std::vector<Scenario>& scenarios, const RunOptions& o, int jobs,
                                      const std::function<void(std::size_t, const RunOutcome&)>& done,
                                      const std::function<bool()>& stop) {
  auto outcome = [](const ChildAnswer& a) {
    RunOutcome r;
    if (!a.ok) {
      r.error = a.text;
      return r;
    }
    try {
      r.result = decode(a.text);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  };
  const auto answers = run_children(
      scenarios.size(), [&](std::size_t i) { return encode(run_scenario(scenarios[i], o)); }, jobs,
      [&](std::size_t i, const ChildAnswer& a) {
        if (done) done(i, outcome(a));
      },
      {}, stop);
  std::vector<RunOutcome> out;
  out.reserve(answers.size());
  for (const auto& a : answers) out.push_back(outcome(a));
  return out;
}

}  // namespace pipescope::sim
