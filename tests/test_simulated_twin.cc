// validate's simulated twin (sim/simulated_twin.h): the schedule simulated in a child with every node's times, the
// durations the comparison reads, and the two-panel timeline.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/lower/checks.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "sim/simulated_twin.h"

namespace pipescope::sim {
namespace {

struct Twin {
  Scenario s;
  std::unique_ptr<Prepared> prep;
  CheckedSchedule cs;
};
Twin default_twin() {
  Scenario s = default_scenario();
  auto prep = prepare(s);
  CheckedSchedule cs = check(prep->lowered, prep->placement);
  return {std::move(s), std::move(prep), std::move(cs)};
}

TEST(SimulatedTwin, EveryNodeTimedInAChild) {
  const Twin t = default_twin();
  const SimResult r = simulate_in_child(t.s, t.cs, "");
  EXPECT_GT(r.iteration_s, 0);
  EXPECT_GT(r.pipeline_end_s, 0);
  EXPECT_LE(r.pipeline_end_s, r.iteration_s);
  ASSERT_EQ(r.timing.size(), t.cs.dag().size());
  EXPECT_EQ(r.total, r.timing.size());
  const std::vector<double> d = node_seconds(r);
  ASSERT_EQ(d.size(), r.timing.size());
  for (std::size_t i = 0; i < d.size(); i++) EXPECT_EQ(d[i], r.timing[i].end - r.timing[i].start);
  // A second run in this process: the engine ran in the child, not here.
  EXPECT_EQ(simulate_in_child(t.s, t.cs, "").iteration_s, r.iteration_s);
}

TEST(SimulatedTwin, TimelineDrawsBothPanels) {
  const Twin t = default_twin();
  const SimResult r = simulate_in_child(t.s, t.cs, "");
  const LoweredSchedule& ls = t.cs.schedule();
  MeasuredPanel m{"cpu-f64", std::vector<std::vector<std::pair<double, double>>>(ls.per_worker.size()), 0.5};
  for (std::size_t w = 0; w < ls.per_worker.size(); w++)
    for (std::size_t i = 0; i < ls.per_worker[w].size(); i++) m.spans[w].push_back({0.001 * i, 0.001 * i + 0.0005});
  const std::string svg = twin_timeline_svg(t.s, t.cs, t.prep->placement, r, m);
  EXPECT_EQ(svg.rfind("<svg", 0) == 0 || svg.rfind("<?xml", 0) == 0, true) << svg.substr(0, 80);
  EXPECT_NE(svg.find("pipescope validate: simulated and measured (cpu-f64)"), std::string::npos);
  EXPECT_NE(svg.find("simulated: default"), std::string::npos);
  EXPECT_NE(svg.find("measured cpu-f64: default"), std::string::npos);
}

}  // namespace
}  // namespace pipescope::sim
