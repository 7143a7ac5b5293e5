// SVG charts (sim/chart_svg.h). Geometry: the picture's title, then per chart a title line, a legend wrapped at the
// right margin, the plot area and its axes. Lines and scatter share a value axis pair (linear from zero, or
// logarithmic); stacked bars are horizontal so that long row names (a search's configurations) stay readable.
#include "sim/chart_svg.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "sim/svg_style.h"
#include "sim/xml_escape.h"

namespace pipescope::sim {

namespace {

constexpr double kFont = 12, kPlotH = 300, kBarH = 18, kBarGap = 6;

void check_chart(const Chart& c, std::size_t index) {
  const std::string where = "chart " + std::to_string(index) + " (" + c.title + ")";
  if (c.series.empty()) throw std::invalid_argument(where + ": no series to draw");
  for (const ChartSeries& s : c.series) {
    if (c.kind != ChartKind::StackedBars && s.x.size() != s.y.size())
      throw std::invalid_argument(where + ": series '" + s.name + "' has " + std::to_string(s.x.size()) + " x and " +
                                  std::to_string(s.y.size()) + " y values");
    if (c.kind == ChartKind::StackedBars && s.y.size() != c.categories.size())
      throw std::invalid_argument(where + ": part '" + s.name + "' has " + std::to_string(s.y.size()) + " values for " +
                                  std::to_string(c.categories.size()) + " bars");
    for (const std::vector<double>* v : {&s.x, &s.y})
      for (double x : *v) {
        if (!std::isfinite(x)) throw std::invalid_argument(where + ": a value that is not finite");
        if (c.kind == ChartKind::StackedBars && x < 0) throw std::invalid_argument(where + ": a negative bar part");
        if (c.log_axes && x <= 0) throw std::invalid_argument(where + ": a value <= 0 on logarithmic axes");
      }
  }
}

// One value axis: the data range made round, its ticks and the text of each.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  double step = 1;                  // linear ticks' spacing (formatting)
  double to_unit(double v) const {  // 0 at lo, 1 at hi
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
};

// `whole`: the values are whole numbers (ranks, micro-batch sizes): ticks too.
Axis make_axis(double min_v, double max_v, bool log, bool from_zero, double target_ticks, bool whole = false) {
  Axis a;
  a.log = log;
  if (log) {
    a.lo = std::pow(10.0, std::floor(std::log10(min_v)));
    a.hi = std::pow(10.0, std::ceil(std::log10(max_v)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
    const bool dense = std::log10(a.hi / a.lo) <= 2;  // two decades or less: 1, 2, 5 per decade
    for (double d = a.lo; d <= a.hi * 1.0001; d *= 10)
      for (double m : {1.0, 2.0, 5.0})
        if ((m == 1.0 || dense) && d * m <= a.hi * 1.0001) a.ticks.push_back(d * m);
    return a;
  }
  a.lo = from_zero ? std::min(0.0, min_v) : min_v;
  a.hi = max_v;
  if (a.hi <= a.lo) {  // one value: a range around it
    const double pad = a.lo == 0 ? 1 : std::abs(a.lo) * 0.1;
    a.hi = a.lo + pad;
    if (!from_zero) a.lo -= pad;
  }
  a.step = svg::nice_step(a.hi - a.lo, target_ticks);
  if (whole) a.step = std::max(1.0, std::round(a.step));
  a.lo = std::floor(a.lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(a.hi / a.step - 1e-9) * a.step;
  for (double t = a.lo; t <= a.hi + a.step * 1e-6; t += a.step) a.ticks.push_back(std::abs(t) < a.step * 1e-9 ? 0 : t);
  return a;
}

// A tick's text: large values with k / M / G, decimals from the tick spacing.
std::string tick_label(const Axis& a, double v) {
  if (v == 0) return "0";
  const double top = std::max(std::abs(a.lo), std::abs(a.hi));
  const char* suffix = "";
  double div = 1;
  if (top >= 1e9)
    suffix = "G", div = 1e9;
  else if (top >= 1e6)
    suffix = "M", div = 1e6;
  else if (top >= 1e4)
    suffix = "k", div = 1e3;
  if (a.log) {
    std::ostringstream s;
    s << v / div;
    return s.str() + suffix;
  }
  return svg::tick_text(v / div, a.step / div) + suffix;
}

struct Legend {
  std::string svg;
  double height = 0;
};

// Swatches and names left to right, wrapped at `right`: a dot per series of points, a block per bar part.
Legend legend(const Chart& c, double left, double right, double top) {
  Legend l;
  if (c.series.size() < 2 && c.kind != ChartKind::StackedBars) return l;
  double x = left, y = top;
  for (std::size_t i = 0; i < c.series.size(); i++) {
    const double w = 22 + svg::text_width(c.series[i].name, kFont);
    if (x + w > right && x > left) x = left, y += 18;
    const std::string colour = svg::kPalette[i % svg::kColours];
    if (c.kind == ChartKind::StackedBars)
      l.svg += "<rect x=\"" + svg::f2(x) + "\" y=\"" + svg::f2(y) + "\" width=\"16\" height=\"12\" fill=\"" + colour +
               "\"/>";
    else
      l.svg += "<circle cx=\"" + svg::f2(x + 8) + "\" cy=\"" + svg::f2(y + 6) + "\" r=\"4\" fill=\"" + colour + "\"/>";
    l.svg += "<text class=\"lg\" x=\"" + svg::f2(x + 21) + "\" y=\"" + svg::f2(y + 10) + "\">" +
             xml_escape(c.series[i].name) + "</text>\n";
    x += w + 14;
  }
  l.height = y - top + 22;
  return l;
}

// Lines and scatter: the plot area [x0, x0 + w] x [y0, y0 + h].
void draw_points(std::ostream& os, const Chart& c, double x0, double y0, double w, double h) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const ChartSeries& s : c.series)
    for (std::size_t i = 0; i < s.x.size(); i++)
      xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]), ymin = std::min(ymin, s.y[i]),
      ymax = std::max(ymax, s.y[i]);
  if (xmin > xmax) xmin = 0, xmax = 1, ymin = 0, ymax = 1;  // no points at all
  const bool cat = !c.categories.empty();
  if (c.diagonal) xmin = ymin = std::min(xmin, ymin), xmax = ymax = std::max(xmax, ymax);
  bool whole_x = true;
  for (const ChartSeries& s : c.series)
    for (double x : s.x) whole_x = whole_x && x == std::round(x);
  Axis ax =
      cat ? Axis{} : make_axis(xmin, xmax, c.log_axes, c.kind == ChartKind::Scatter && !c.log_axes, w / 110, whole_x);
  if (cat) ax.lo = -0.5, ax.hi = static_cast<double>(c.categories.size()) - 0.5;
  const Axis ay = make_axis(ymin, ymax, c.log_axes, !c.log_axes, h / 50);
  auto X = [&](double v) { return svg::round2(x0 + ax.to_unit(v) * w); };
  auto Y = [&](double v) { return svg::round2(y0 + h - ay.to_unit(v) * h); };
  // Grid and ticks.
  for (double t : ay.ticks)
    os << "<line class=\"grid\" x1=\"" << svg::f2(x0) << "\" y1=\"" << svg::f2(Y(t)) << "\" x2=\"" << svg::f2(x0 + w)
       << "\" y2=\"" << svg::f2(Y(t)) << "\"/><text class=\"yt\" x=\"" << svg::f2(x0 - 6) << "\" y=\""
       << svg::f2(Y(t) + 4) << "\">" << tick_label(ay, t) << "</text>\n";
  if (cat) {
    const double room = w / static_cast<double>(c.categories.size());
    for (std::size_t i = 0; i < c.categories.size(); i++)
      os << "<text class=\"xt\" x=\"" << svg::f2(X(static_cast<double>(i))) << "\" y=\"" << svg::f2(y0 + h + 16) << "\""
         << svg::fit_font(c.categories[i], kFont, room - 4) << ">" << xml_escape(c.categories[i]) << "</text>\n";
  } else {
    for (double t : ax.ticks)
      os << "<line class=\"grid\" x1=\"" << svg::f2(X(t)) << "\" y1=\"" << svg::f2(y0) << "\" x2=\"" << svg::f2(X(t))
         << "\" y2=\"" << svg::f2(y0 + h) << "\"/><text class=\"xt\" x=\"" << svg::f2(X(t)) << "\" y=\""
         << svg::f2(y0 + h + 16) << "\">" << tick_label(ax, t) << "</text>\n";
  }
  os << "<rect class=\"frame\" x=\"" << svg::f2(x0) << "\" y=\"" << svg::f2(y0) << "\" width=\"" << svg::f2(w)
     << "\" height=\"" << svg::f2(h) << "\"/>\n";
  if (c.diagonal) {  // y = x over the range both axes show
    const double lo = std::max(ax.lo, ay.lo), hi = std::min(ax.hi, ay.hi);
    os << "<line class=\"diag\" x1=\"" << svg::f2(X(lo)) << "\" y1=\"" << svg::f2(Y(lo)) << "\" x2=\"" << svg::f2(X(hi))
       << "\" y2=\"" << svg::f2(Y(hi)) << "\"/>\n";
  }
  for (std::size_t k = 0; k < c.series.size(); k++) {
    const ChartSeries& s = c.series[k];
    const std::string colour = svg::kPalette[k % svg::kColours];
    std::vector<std::size_t> order(s.x.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s.x[a] < s.x[b]; });
    if ((c.kind == ChartKind::Lines || s.joined) && order.size() > 1) {
      os << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
      for (std::size_t i : order) os << svg::f2(X(s.x[i])) << ',' << svg::f2(Y(s.y[i])) << ' ';
      os << "\"/>\n";
    }
    for (std::size_t i : order)
      os << "<circle cx=\"" << svg::f2(X(s.x[i])) << "\" cy=\"" << svg::f2(Y(s.y[i])) << "\" r=\"3.5\" fill=\""
         << colour << "\"/>\n";
  }
}

double bar_total(const Chart& c, std::size_t bar) {
  double t = 0;
  for (const ChartSeries& s : c.series) t += s.y[bar];
  return t;
}

// Stacked bars: one row per category, parts left to right.
void draw_bars(std::ostream& os, const Chart& c, double x0, double y0, double w, double label_w) {
  double top = 0;
  for (std::size_t i = 0; i < c.categories.size(); i++) top = std::max(top, bar_total(c, i));
  const Axis ax = make_axis(0, top > 0 ? top : 1, false, true, w / 110);
  const double h = static_cast<double>(c.categories.size()) * (kBarH + kBarGap);
  auto X = [&](double v) { return svg::round2(x0 + ax.to_unit(v) * w); };
  for (double t : ax.ticks)
    os << "<line class=\"grid\" x1=\"" << svg::f2(X(t)) << "\" y1=\"" << svg::f2(y0) << "\" x2=\"" << svg::f2(X(t))
       << "\" y2=\"" << svg::f2(y0 + h) << "\"/><text class=\"xt\" x=\"" << svg::f2(X(t)) << "\" y=\""
       << svg::f2(y0 + h + 16) << "\">" << tick_label(ax, t) << "</text>\n";
  for (std::size_t i = 0; i < c.categories.size(); i++) {
    const double y = y0 + static_cast<double>(i) * (kBarH + kBarGap) + kBarGap / 2;
    os << "<text class=\"rl\" x=\"" << svg::f2(x0 - 6) << "\" y=\"" << svg::f2(y + kBarH * 0.72) << "\""
       << svg::fit_font(c.categories[i], kFont, label_w - 10) << ">" << xml_escape(c.categories[i]) << "</text>\n";
    double at = 0;
    for (std::size_t k = 0; k < c.series.size(); k++) {
      const double v = c.series[k].y[i];
      if (v <= 0) continue;
      os << "<rect x=\"" << svg::f2(X(at)) << "\" y=\"" << svg::f2(y) << "\" width=\"" << svg::f2(X(at + v) - X(at))
         << "\" height=\"" << svg::f2(kBarH) << "\" fill=\"" << svg::kPalette[k % svg::kColours] << "\"><title>"
         << xml_escape(c.series[k].name) << "</title></rect>\n";
      at += v;
    }
  }
  os << "<rect class=\"frame\" x=\"" << svg::f2(x0) << "\" y=\"" << svg::f2(y0) << "\" width=\"" << svg::f2(w)
     << "\" height=\"" << svg::f2(h) << "\"/>\n";
}

double label_width(const Chart& c, double W) {
  if (c.kind != ChartKind::StackedBars) return 80;
  double lw = 0;
  for (const std::string& s : c.categories) lw = std::max(lw, svg::text_width(s, kFont));
  return std::clamp(lw + 16, 80.0, 0.4 * W);
}

}  // namespace

void write_charts_svg(std::ostream& os, const std::vector<Chart>& charts, const ChartOptions& opt) {
  if (!(opt.width_px >= 400) || !std::isfinite(opt.width_px))
    throw std::invalid_argument("chart: width must be at least 400 px");
  if (charts.empty()) throw std::invalid_argument("chart: nothing to draw");
  for (std::size_t i = 0; i < charts.size(); i++) check_chart(charts[i], i);
  const double W = opt.width_px, mr = 30;
  std::ostringstream body;
  double y = 36;
  for (const Chart& c : charts) {
    const double ml = label_width(c, W);
    body << "<text class=\"ct\" x=\"" << svg::f2(ml) << "\" y=\"" << svg::f2(y + 16) << "\""
         << svg::fit_font(c.title, 14, W - ml - mr) << ">" << xml_escape(c.title) << "</text>\n";
    y += 26;
    const Legend l = legend(c, ml, W - mr, y);
    body << l.svg;
    y += l.height + 6;
    const double h =
        c.kind == ChartKind::StackedBars ? static_cast<double>(c.categories.size()) * (kBarH + kBarGap) : kPlotH;
    if (c.kind == ChartKind::StackedBars)
      draw_bars(body, c, ml, y, W - ml - mr, ml);
    else
      draw_points(body, c, ml, y, W - ml - mr, h);
    body << "<text class=\"al\" x=\"" << svg::f2(ml + (W - ml - mr) / 2) << "\" y=\"" << svg::f2(y + h + 34) << "\">"
         << xml_escape(c.x_label) << "</text>\n";
    if (!c.y_label.empty())
      body << "<text class=\"al\" transform=\"translate(16 " << svg::f2(y + h / 2) << ") rotate(-90)\">"
           << xml_escape(c.y_label) << "</text>\n";
    y += h + 56;
  }
  const double H = y;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg::f2(W) << "\" height=\"" << svg::f2(H)
     << "\" viewBox=\"0 0 " << svg::f2(W) << ' ' << svg::f2(H)
     << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n<style>\n"
     << ".h{font-size:16px;font-weight:bold}.ct{font-size:14px;font-weight:bold}.lg{font-size:12px;fill:#333}\n"
     << ".xt{font-size:11px;text-anchor:middle;fill:#333}.yt{font-size:11px;text-anchor:end;fill:#333}\n"
     << ".rl{font-size:12px;text-anchor:end;fill:#333}.al{font-size:12px;text-anchor:middle;fill:#333}\n"
     << ".grid{stroke:#e3e3e3;stroke-width:1}.frame{fill:none;stroke:#888;stroke-width:1}\n"
     << ".diag{stroke:#888;stroke-width:1;stroke-dasharray:5 4}\n</style>\n"
     << "<rect x=\"0\" y=\"0\" width=\"" << svg::f2(W) << "\" height=\"" << svg::f2(H) << "\" fill=\"#fff\"/>\n"
     << "<text class=\"h\" x=\"12\" y=\"24\"" << svg::fit_font(opt.title, 16, W - 24) << ">" << xml_escape(opt.title)
     << "</text>\n"
     << body.str() << "</svg>\n";
}

}  // namespace pipescope::sim
