// `pipescope plot FILE --out CHART.png|svg|pdf [--x KEY] [--y COLUMN] [--top N] [--title T] [--width PX]`: charts of
// a file pipescope wrote (sweep CSV or JSON, search, simulate, simulate --compare, fidelity JSON; sim/plot.h), drawn
// by the timelines' renderer.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/util/atomic_file.h"
#include "core/util/input_file.h"
#include "sim/plot.h"

namespace pipescope::cli {
namespace {

struct PlotOptions {
  std::string input, out, format, title;
  sim::PlotRequest request;
  double width_px = 1200;
};

int run_plot(const PlotOptions& o) {
  const std::string text = read_input_file(o.input, "pipescope output");  // regular, bounded, UTF-8
  check_output_paths({{"--out", o.out}});
  const sim::Plot plot = sim::plot_output(text, o.input, o.request);
  sim::ChartOptions co;
  co.width_px = o.width_px;
  co.title =
      o.title.empty() ? "pipescope " + plot.kind + ": " + std::filesystem::path(o.input).filename().string() : o.title;
  std::ostringstream svg;
  sim::write_charts_svg(svg, plot.charts, co);
  write_file_atomic(o.out, sim::render_svg(svg.str(), timeline_format(o.out, o.format)), "--out");
  std::printf("plot: %zu chart%s of a %s file, wrote %s\n", plot.charts.size(), plot.charts.size() == 1 ? "" : "s",
              plot.kind.c_str(), o.out.c_str());
  return 0;
}

}  // namespace

Command add_plot(CLI::App& app) {
  auto o = std::make_shared<PlotOptions>();
  auto* sub = app.add_subcommand(
      "plot", "Draw charts of a file pipescope wrote (sweep CSV/JSON, search, simulate, --compare, fidelity JSON)");
  sub->add_option("file", o->input, "The file to draw")->required();
  sub->add_option("--out,-o", o->out, "The picture: .svg, .pdf or .png (by the name, or --format)")->required();
  sub->add_option("--format", o->format, "svg | pdf | png (default: from --out)")
      ->check(CLI::IsMember({"svg", "pdf", "png"}));
  sub->add_option("--x", o->request.x, "Sweep: the swept key on the x axis (default: the first)");
  sub->add_option("--y", o->request.y, "Sweep: the result column on the y axis (default tokens_per_s)");
  sub->add_option("--top", o->request.top, "Search: the best rows drawn as bars (default 12)")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--title", o->title, "The picture's heading (default: the kind of file and its name)");
  sub->add_option("--width", o->width_px, "Width in pixels (default 1200)")->check(finite_range(400.0, 20000.0));
  return {sub, [o] { return run_plot(*o); }};
}

}  // namespace pipescope::cli
