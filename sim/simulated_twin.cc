#include "sim/simulated_twin.h"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "sim/child_process.h"
#include "sim/engine.h"
#include "sim/scenario_options.h"
#include "sim/timeline_svg.h"

namespace pipescope::sim {
namespace {

// The child's answer: "OK", then the raw doubles iteration, pipeline end, node count, start and end per node.
std::string encode_twin(const SimResult& r) {
  std::vector<double> v{r.iteration_s, r.pipeline_end_s, static_cast<double>(r.timing.size())};
  for (const auto& t : r.timing) v.insert(v.end(), {t.start, t.end});
  return "OK" + std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

SimResult decode_twin(const std::string& got) {
  if (got.rfind("OK", 0) != 0 || (got.size() - 2) % sizeof(double) != 0)
    throw std::runtime_error("the simulation process returned a malformed answer");
  std::vector<double> v((got.size() - 2) / sizeof(double));
  std::memcpy(v.data(), got.data() + 2, v.size() * sizeof(double));
  SimResult r;
  r.iteration_s = v.at(0);
  r.pipeline_end_s = v.at(1);
  const auto nodes = static_cast<std::size_t>(v.at(2));
  if (v.size() != 3 + 2 * nodes) throw std::runtime_error("simulation result is truncated");
  r.timing.resize(nodes);
  for (std::size_t i = 0; i < nodes; i++) r.timing[i] = {v[3 + 2 * i], v[4 + 2 * i]};
  r.total = nodes;
  return r;
}

}  // namespace

SimResult simulate_in_child(const Scenario& s, const CheckedSchedule& cs, const std::string& collectives) {
  return decode_twin(
      run_in_child([&] { return encode_twin(simulate(s.cluster, cs, engine_options_for(s, collectives))); }));
}

std::vector<double> node_seconds(const SimResult& r) {
  std::vector<double> out;
  out.reserve(r.timing.size());
  for (const NodeTiming& t : r.timing) out.push_back(t.end - t.start);
  return out;
}

std::string twin_timeline_svg(const Scenario& s, const CheckedSchedule& cs, const Placement& pl,
                              const SimResult& simulated, const MeasuredPanel& measured) {
  const LoweredSchedule& ls = cs.schedule();
  ProgramSpans spans(measured.spans.size());
  for (std::size_t w = 0; w < spans.size(); w++)
    for (const auto& [start, end] : measured.spans[w]) spans[w].push_back({start, end});
  PanelOptions po;
  po.all_replicas = true;
  SvgOptions so;
  so.title = "pipescope validate: simulated and measured (" + measured.backend + ")";
  so.comm = true;
  so.shared_scale = true;
  const std::vector<TimelinePanel> panels = {
      timeline_panel(ls, pl, program_spans(cs.dag(), ls, simulated),
                     timeline_title("simulated", s.name, ls, simulated.iteration_s), po),
      timeline_panel(ls, pl, spans, timeline_title("measured " + measured.backend, s.name, ls, measured.end_s), po)};
  std::ostringstream svg;
  write_timeline_svg(svg, panels, so);
  return svg.str();
}

}  // namespace pipescope::sim
