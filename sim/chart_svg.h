#pragma once
// Charts as SVG for `pipescope plot`: lines (a metric over a swept key), scatter (memory against throughput,
// simulated against measured) and horizontal stacked bars (where each run's time goes). Several charts go one
// under another into one picture; sim/svg_render.h turns it into PDF or PNG as it does the timelines, with the
// same palette and number formatting (sim/svg_style.h). Deterministic: the same charts give the same bytes.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace pipescope::sim {

enum class ChartKind : std::uint8_t { Lines, Scatter, StackedBars };

struct ChartSeries {
  std::string name;
  // Lines / Scatter: points (x[i], y[i]); with Chart::categories, x is a category's index. StackedBars: y[i] is
  // this part's length in bar i (x unused).
  std::vector<double> x, y;
  bool joined = false;  // Scatter: the points joined in x order (a Pareto front)
};

struct Chart {
  ChartKind kind = ChartKind::Lines;
  std::string title, x_label, y_label;
  std::vector<std::string> categories;  // Lines: x tick labels at 0, 1, ...; StackedBars: one bar each, top down
  std::vector<ChartSeries> series;
  bool diagonal = false;  // Scatter: the line y = x (simulated = measured)
  bool log_axes = false;  // Scatter: both axes logarithmic (values must be > 0)
};

struct ChartOptions {
  double width_px = 1200;
  std::string title;  // the picture's first line
};

// Throws std::invalid_argument on a chart with nothing to draw, series of unequal x / y lengths, a non-finite
// value, a negative bar part, a value <= 0 on log axes, or a width below 400 px.
void write_charts_svg(std::ostream& os, const std::vector<Chart>& charts, const ChartOptions& opt);

}  // namespace pipescope::sim
