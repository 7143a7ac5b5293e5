#pragma once
// The simulated twin of a measured run (`pipescope validate`): the same checked schedule simulated in a forked
// child (SimGrid allows one engine per process, and the measured run's launcher must not inherit one), with every
// DAG node's times, and the timeline that draws the twin above the measured run.

#include <string>
#include <utility>
#include <vector>

#include "core/lower/checks.h"
#include "core/model/config.h"
#include "core/model/placement.h"
#include "sim/report.h"

namespace pipescope::sim {

// `cs` of scenario `s` simulated in a child: iteration, pipeline end and every node's start and end (the rest of
// SimResult stays empty). `collectives` overrides the scenario's collective model when non-empty.
SimResult simulate_in_child(const Scenario& s, const CheckedSchedule& cs, const std::string& collectives);
// Each node's duration, end - start.
std::vector<double> node_seconds(const SimResult& r);

// The measured panel's input: op spans [worker][op] as (start, end) in seconds, and the iteration's end.
struct MeasuredPanel {
  std::string backend;
  std::vector<std::vector<std::pair<double, double>>> spans;
  double end_s = 0;
};
// The simulated run above the measured one, one time axis for both (their lengths compare by eye), every replica,
// communication shown: SVG text (sim/svg_render.h turns it into PDF / PNG).
std::string twin_timeline_svg(const Scenario& s, const CheckedSchedule& cs, const Placement& pl,
                              const SimResult& simulated, const MeasuredPanel& measured);

}  // namespace pipescope::sim
