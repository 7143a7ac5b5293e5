// `pipescope plot` (sim/plot.h, sim/chart_svg.h): charts from real outputs of sweep (its CSV and its JSON draw the
// same picture), search and simulate --compare, a fidelity file, and the refusals of files it cannot draw.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/chart_svg.h"
#include "sim/plot.h"

namespace pipescope::sim {
namespace {

const std::string kBin = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope";
const std::string kDir = std::string(PIPESCOPE_BINARY_DIR) + "/tests";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string svg_of(const Plot& p) {
  std::ostringstream os;
  write_charts_svg(os, p.charts, ChartOptions{1200, "t"});
  return os.str();
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) n++;
  return n;
}

TEST(Plot, SweepCsvAndJsonDrawTheSamePicture) {
  const std::string csv = kDir + "/plot_sweep.csv", json = kDir + "/plot_sweep.json";
  ASSERT_EQ(run(kBin + " sweep --vary parallel.micro_batch_size=1,2,4 --vary schedule.kind=1f1b,gpipe --out " + csv +
                " --json " + json + " -j 2 2>/dev/null"),
            0);
  const Plot a = plot_output(slurp(csv), csv, {}), b = plot_output(slurp(json), json, {});
  EXPECT_EQ(a.kind, "sweep");
  ASSERT_EQ(a.charts.size(), 3u);  // tokens/s, peak memory, breakdown
  EXPECT_EQ(a.charts[0].kind, ChartKind::Lines);
  EXPECT_TRUE(a.charts[0].categories.empty());  // micro-batch sizes are numbers
  ASSERT_EQ(a.charts[0].series.size(), 2u);     // one line per schedule
  EXPECT_EQ(a.charts[0].series[0].name, "schedule.kind=1f1b");
  EXPECT_EQ(a.charts[0].series[0].x, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(a.charts[2].categories.size(), 6u);
  EXPECT_EQ(svg_of(a), svg_of(b));
  // The schedule on the x axis: categories, one line per micro-batch size.
  const Plot c = plot_output(slurp(json), json, PlotRequest{"schedule.kind", "iteration_s", 12});
  EXPECT_EQ(c.charts[0].categories, (std::vector<std::string>{"1f1b", "gpipe"}));
  EXPECT_EQ(c.charts[0].series.size(), 3u);
  EXPECT_THROW(plot_output(slurp(json), json, PlotRequest{"model.layers", "tokens_per_s", 12}), std::invalid_argument);
  EXPECT_THROW(plot_output(slurp(json), json, PlotRequest{"", "schedule", 12}), std::invalid_argument);
  // The command: a PNG, and the same bad input as exit 1.
  const std::string png = kDir + "/plot_sweep.png";
  ASSERT_EQ(run(kBin + " plot " + csv + " --out " + png + " 2>/dev/null"), 0);
  EXPECT_EQ(slurp(png).substr(1, 3), "PNG");
  EXPECT_EQ(run(kBin + " plot " + csv + " --x model.layers --out " + png + " 2>/dev/null"), 1);
}

TEST(Plot, SearchAndCompareAndSimulate) {
  const std::string search = kDir + "/plot_search.json", cmp = kDir + "/plot_compare.json",
                    sim = kDir + "/plot_simulate.json";
  ASSERT_EQ(run(kBin + " search " + std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml -q -j 2 --json " +
                search + " >/dev/null 2>&1"),
            0);
  const Plot s = plot_output(slurp(search), search, PlotRequest{"", "tokens_per_s", 5});
  EXPECT_EQ(s.kind, "search");
  ASSERT_EQ(s.charts.size(), 2u);
  EXPECT_EQ(s.charts[0].kind, ChartKind::Scatter);
  EXPECT_EQ(s.charts[0].series.back().name, "Pareto front");  // drawn last, on top
  EXPECT_TRUE(s.charts[0].series.back().joined);
  EXPECT_EQ(s.charts[1].categories.size(), 5u);
  ASSERT_EQ(run(kBin + " simulate --compare 1f1b,gpipe --json " + cmp + " >/dev/null 2>&1"), 0);
  const Plot c = plot_output(slurp(cmp), cmp, {});
  EXPECT_EQ(c.kind, "compare");
  EXPECT_EQ(c.charts[0].categories, (std::vector<std::string>{"1f1b", "gpipe"}));
  EXPECT_EQ(c.charts[1].series.size(), 2u);
  ASSERT_EQ(run(kBin + " simulate --json " + sim + " >/dev/null 2>&1"), 0);
  const Plot one = plot_output(slurp(sim), sim, {});
  EXPECT_EQ(one.charts[0].categories.size(), 4u);  // pp 4: a bar per stage of replica 0
  EXPECT_EQ(one.charts[1].categories.size(), 4u);  // memory per rank
  // Bars: every stage's parts sum to its iteration.
  const std::string svg = svg_of(one);
  EXPECT_GT(count(svg, "<title>forward compute</title>"), 0u);
}

TEST(Plot, FidelityScatterOnLogAxesWhenTheSetsSpanDecades) {
  const std::string f = R"({"schema": "pipescope.fidelity/1", "sets": [
    {"name": "a", "mape": 0.05, "rows": [{"line": 2, "row": "x", "group": "g", "measured_s": 0.5, "simulated_s": 0.55},
                                         {"line": 3, "row": "y", "group": "g", "skipped": "no"}]},
    {"name": "b", "mape": 0.1, "rows": [{"line": 2, "row": "z", "group": "g", "measured_s": 40, "simulated_s": 36}]}]})";
  const Plot p = plot_output(f, "f.json", {});
  ASSERT_EQ(p.charts.size(), 1u);
  EXPECT_TRUE(p.charts[0].log_axes);
  EXPECT_TRUE(p.charts[0].diagonal);
  EXPECT_EQ(p.charts[0].series[0].name, "a (MAPE 5.0%)");
  EXPECT_EQ(p.charts[0].series[0].x.size(), 1u);  // the skipped row is not a point
  EXPECT_NE(svg_of(p).find("class=\"diag\""), std::string::npos);
}

TEST(Plot, RefusesWhatItCannotDraw) {
  EXPECT_THROW(plot_output("", "e.json", {}), std::invalid_argument);
  EXPECT_THROW(plot_output("{\"schema\": \"pipescope.validate/1\"}", "v.json", {}), std::invalid_argument);
  EXPECT_THROW(plot_output("{not json", "x.json", {}), std::invalid_argument);
  EXPECT_THROW(plot_output("a,b\n1,2\n", "x.csv", {}), std::invalid_argument);
  try {
    plot_output("{\"schema\": \"pipescope.search/1\", \"results\": [{\"configuration\": \"c\"}]}", "s.json", {});
    ADD_FAILURE() << "no row ran: expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("s.json: no row of the search ran"), std::string::npos) << e.what();
  }
  Chart bad;
  bad.series = {{"s", {1, 2}, {1}}};
  std::ostringstream os;
  EXPECT_THROW(write_charts_svg(os, {bad}, {}), std::invalid_argument);
  bad.kind = ChartKind::StackedBars;
  bad.categories = {"a"};
  bad.series = {{"s", {}, {-1}}};
  EXPECT_THROW(write_charts_svg(os, {bad}, {}), std::invalid_argument);
  bad.kind = ChartKind::Scatter;
  bad.log_axes = true;
  bad.series = {{"s", {0}, {1}}};
  EXPECT_THROW(write_charts_svg(os, {bad}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::sim
