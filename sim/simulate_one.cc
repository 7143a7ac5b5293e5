#include "sim/simulate_one.h"

#include <sstream>

#include "core/lower/checks.h"
#include "core/plan/pipeline.h"
#include "sim/engine.h"
#include "sim/scenario_options.h"
#include "sim/timeline_svg.h"

namespace pipescope::sim {

namespace {

std::string timeline_svg(const Scenario& s, const CheckedSchedule& cs, const SimResult& r, const TimeBreakdown& b,
                         const TimelineRequest& t) {
  const std::string title = timeline_title("simulated", s.name, cs.schedule(), r.iteration_s);
  PanelOptions po;
  po.all_replicas = t.all_replicas;
  po.first_rank = t.first_rank, po.last_rank = t.last_rank;
  po.window_start_s = t.window_start_s, po.window_end_s = t.window_end_s;
  po.row_group = t.row_group;
  SvgOptions so;
  so.width_px = t.width_px;
  so.comm = t.comm;
  so.title = t.title;
  so.compact = t.compact;
  so.breakdown = breakdown_line(b);
  const ProgramSpans spans = program_spans(cs.dag(), cs.schedule(), r);
  std::ostringstream os;
  write_timeline_svg(os, {timeline_panel(cs.schedule(), cs.placement(), spans, title, po)}, so);
  return os.str();
}

}  // namespace

SimulateOneResult simulate_one(const Scenario& s, const SimulateOneRequest& q) {
  auto prep = prepare(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  const SimResult r = simulate(s.cluster, cs, engine_options_for(s, q.collectives));
  SimulateOneResult out;
  out.report = make_report(s, cs, r);
  if (q.json) {
    std::ostringstream os;
    write_json(os, out.report);
    out.json = os.str();
  }
  if (q.trace) {
    std::ostringstream os;
    write_trace(os, cs, r, out.report.profile, q.trace_subset);
    out.trace = os.str();
  }
  if (q.timeline) out.timeline_svg = timeline_svg(s, cs, r, out.report.breakdown.mean, q.timeline_options);
  return out;
}

}  // namespace pipescope::sim
