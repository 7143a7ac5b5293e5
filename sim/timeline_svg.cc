// SVG pipeline timelines (sim/timeline_svg.h). Geometry: a header (title, legend), then per panel a title
// line, the rows and a time axis. Blocks are <rect class="b F c3" ...> inside <g class="row" data-row="r">;
// fills come from a small stylesheet (one rule per palette colour and kind), which keeps 100k-block pictures
// small. Coordinates are rounded to 0.01 px from the interval ends, so adjacent blocks share an edge exactly.
#include "sim/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <stdexcept>

#include "sim/svg_style.h"
#include "sim/xml_escape.h"

namespace pipescope::sim {

namespace {

// Fill of a compute block: forward is the colour mixed half-way to white, weight-gradient a quarter, backward
// the colour itself.
// Backward is the colour darkened a fifth, so that forward and backward differ in lightness even where blocks
// are too thin for labels (dense sliced runs). colour < 0: the neutral grey the legend uses for op kinds.
svg::Rgb block_fill(BlockKind k, int colour) {
  const svg::Rgb base = colour < 0 ? svg::Rgb{0.55, 0.55, 0.55} : svg::parse_hex(svg::kPalette[colour]);
  const svg::Rgb white{1, 1, 1}, black{0, 0, 0};
  if (k == BlockKind::Forward) return svg::mix(base, white, 0.5);
  if (k == BlockKind::WeightGrad) return svg::mix(base, white, 0.2);
  return svg::mix(base, black, 0.2);
}

const char* kind_class(BlockKind k) {
  switch (k) {
    case BlockKind::Forward:
      return "F";
    case BlockKind::Backward:
      return "B";
    case BlockKind::WeightGrad:
      return "W";
    case BlockKind::P2P:
      return "P";
    case BlockKind::Collective:
      return "C";
    case BlockKind::Optimizer:
      return "O";
  }
  return "F";
}

bool is_comm(BlockKind k) { return k == BlockKind::P2P || k == BlockKind::Collective; }
bool is_compute(BlockKind k) {
  return k == BlockKind::Forward || k == BlockKind::Backward || k == BlockKind::WeightGrad;
}

void validate(const std::vector<TimelinePanel>& panels, const SvgOptions& opt) {
  if (!(opt.width_px >= 200) || !std::isfinite(opt.width_px))
    throw std::invalid_argument("timeline: width must be at least 200 px");
  for (std::size_t p = 0; p < panels.size(); p++) {
    const TimelinePanel& pn = panels[p];
    if (!std::isfinite(pn.end_s) || pn.end_s < 0)
      throw std::invalid_argument("timeline: panel " + std::to_string(p) + ": end_s must be finite and >= 0");
    for (std::size_t i = 0; i < pn.intervals.size(); i++) {
      const TimelineInterval& iv = pn.intervals[i];
      const std::string where = "timeline: panel " + std::to_string(p) + " interval " + std::to_string(i) +
                                (iv.name.empty() ? "" : " (" + iv.name + ")");
      if (iv.row < 0 || iv.row >= static_cast<int>(pn.rows.size()))
        throw std::invalid_argument(where + ": row " + std::to_string(iv.row) + " outside the panel's " +
                                    std::to_string(pn.rows.size()) + " rows");
      if (!std::isfinite(iv.start_s) || !std::isfinite(iv.end_s) || iv.end_s < iv.start_s || iv.start_s < 0)
        throw std::invalid_argument(where + ": needs 0 <= start <= end, finite");
    }
  }
}

double panel_end(const TimelinePanel& p) {
  if (p.end_s > 0) return p.end_s;
  double e = 0;
  for (const auto& iv : p.intervals) e = std::max(e, iv.end_s);
  return e;
}

}  // namespace

void write_timeline_svg(std::ostream& os, const std::vector<TimelinePanel>& panels, const SvgOptions& opt) {
  validate(panels, opt);

  // ---- vertical geometry, shared by all panels
  std::size_t total_rows = 0;
  bool any_w = false, any_opt = false, any_p2p = false, any_coll = false, any_pair = false, any_b = false,
       any_i = false;
  for (const auto& p : panels) {
    total_rows += p.rows.size();
    for (const auto& iv : p.intervals) {
      any_w = any_w || iv.kind == BlockKind::WeightGrad;
      any_b = any_b || (iv.kind == BlockKind::Backward && !iv.input_grad);
      any_i = any_i || (iv.kind == BlockKind::Backward && iv.input_grad);
      any_opt = any_opt || iv.kind == BlockKind::Optimizer;
      any_p2p = any_p2p || iv.kind == BlockKind::P2P;
      any_coll = any_coll || iv.kind == BlockKind::Collective;
      any_pair = any_pair || iv.pair != Overlap::None;
    }
  }
  // Rows share about 760 px: 4 stages get 30 px rows, 96 stages 7.9 px, never below 4 px.
  const double rh = std::clamp(760.0 / static_cast<double>(std::max<std::size_t>(1, total_rows)), 4.0, 30.0);
  const double pad = rh >= 10 ? rh * 0.14 : rh * 0.08;  // gap between rows
  const double bh = rh - pad;
  const double compute_h = opt.comm ? bh * 0.66 : bh;
  const double comm_gap = opt.comm ? bh * 0.04 : 0;
  const double comm_h = opt.comm ? bh - compute_h - comm_gap : 0;
  const bool compact = opt.compact || total_rows >= kCompactRows;
  const double label_fs = std::min(12.0, compute_h * 0.62);
  const bool block_labels = label_fs >= 6.5 && !compact;
  // Row labels: at least 8 px; when rows are thinner than that, only every step-th row is labelled.
  const double row_fs = std::clamp(rh * 0.75, 8.0, 12.0);
  int row_step = 1;
  while (row_step * rh < row_fs + 1.5) row_step *= 2;

  double label_w = 0;
  for (const auto& p : panels)
    for (const auto& r : p.rows) label_w = std::max(label_w, svg::text_width(r, row_fs));
  const double ml = std::min(std::clamp(label_w + 14, 70.0, 280.0), 0.4 * opt.width_px);
  const double mr = 36;
  const double W = opt.width_px;
  const double plot_w = W - ml - mr;

  double shared_end = 0;
  for (const auto& p : panels) shared_end = std::max(shared_end, panel_end(p));

  // ---- header: title, then the legend laid out left to right and wrapped at the right margin
  bool any_chunk = false, any_hue = false, any_share = false;  // hues: micro-batch blocks; shares: aggregate rows
  for (const auto& p : panels)
    for (const auto& iv : p.intervals) {
      any_chunk = any_chunk || (is_compute(iv.kind) && iv.chunk > 0);
      any_hue = any_hue || (is_compute(iv.kind) && iv.microbatch >= 0);
      any_share = any_share || iv.share < 1;
    }
  std::string legend;
  double lx = ml, ly = 37;
  const double right = W - 8;
  auto room = [&](double w) {
    if (lx + w > right && lx > ml) lx = ml, ly += 19;
  };
  auto swatch = [&](const std::string& cls, const std::string& text, const std::string& overlay = "") {
    room(21 + svg::text_width(text, 12));
    legend +=
        "<rect class=\"" + cls + "\" x=\"" + svg::f2(lx) + "\" y=\"" + svg::f2(ly) + "\" width=\"16\" height=\"12\"/>";
    if (!overlay.empty())
      legend += "<rect fill=\"url(#" + overlay + ")\" x=\"" + svg::f2(lx) + "\" y=\"" + svg::f2(ly) +
                "\" width=\"16\" height=\"12\"/>";
    legend += "<text class=\"lg\" x=\"" + svg::f2(lx + 21) + "\" y=\"" + svg::f2(ly + 10) + "\">" + xml_escape(text) +
              "</text>\n";
    lx += 21 + svg::text_width(text, 12) + 16;
  };
  // Plain text, wrapped between words: each line's run of words is one <text>, so the renderer's own spacing
  // applies (a <text> per word spread them by the width estimate).
  auto words = [&](const std::string& text) {
    std::string run;
    double run_x = lx;
    auto flush = [&] {
      if (!run.empty())
        legend += "<text class=\"lg\" x=\"" + svg::f2(run_x) + "\" y=\"" + svg::f2(ly + 10) + "\">" + xml_escape(run) +
                  "</text>";
      run.clear();
    };
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t j = text.find(' ', i);
      if (j == std::string::npos) j = text.size();
      const std::string w = text.substr(i, j - i);
      const std::string joined = run.empty() ? w : run + " " + w;
      if (lx + svg::text_width(joined, 12) > right && (!run.empty() || lx > ml)) {
        flush();
        lx = ml, ly += 19;
        run_x = lx;
        run = w;
      } else {
        if (run.empty()) run_x = lx;
        run = joined;
      }
      i = j + 1;
    }
    lx = run_x + svg::text_width(run + " ", 12);
    flush();
    legend += "\n";
    lx += 10;
  };
  auto phrase = [&](const std::string& text) {  // kept on one line
    room(svg::text_width(text, 12));
    legend +=
        "<text class=\"lg\" x=\"" + svg::f2(lx) + "\" y=\"" + svg::f2(ly + 10) + "\">" + xml_escape(text) + "</text>\n";
    lx += svg::text_width(text, 12) + 10;
  };
  // Op kinds in neutral grey: the hue is the micro-batch's.
  swatch("F cg", "F forward");
  if (any_b) swatch("B cg", any_i ? "B backward, I input gradient" : "B backward");
  if (!any_b && any_i) swatch("B cg", "I input gradient");
  if (any_w) swatch("W cg", "W weight gradient");
  if (any_opt) swatch("O", "optimizer");
  if (opt.comm && any_p2p) swatch("P", "point-to-point");
  if (opt.comm && any_coll) swatch("C", "collective");
  if (any_pair) swatch("pr", "overlapped pair (forward | backward)");
  swatch("idle", "idle");
  if (any_hue) {
    lx = ml, ly += 19;
    phrase("micro-batch:");
    for (int c = 0; c < svg::kColours; c++) {
      room(30);
      legend += "<rect class=\"F c" + std::to_string(c) + "\" x=\"" + svg::f2(lx) + "\" y=\"" + svg::f2(ly) +
                "\" width=\"8\" height=\"12\"/><rect class=\"B c" + std::to_string(c) + "\" x=\"" + svg::f2(lx + 8) +
                "\" y=\"" + svg::f2(ly) + "\" width=\"8\" height=\"12\"/><text class=\"lg\" x=\"" + svg::f2(lx + 19) +
                "\" y=\"" + svg::f2(ly + 10) + "\">" + std::to_string(c) + "</text>\n";
      lx += 19 + svg::text_width(std::to_string(c), 12) + 8;
    }
    phrase("(hue repeats every " + std::to_string(svg::kColours) + ")");
  }
  if (any_chunk) {
    swatch("F cg", "chunk 0");
    swatch("F cg", "chunk 1", "k1");
    swatch("F cg", "chunk 2", "k2");
    swatch("F cg", "chunk 3+", "k3");
  }
  lx = ml, ly += 19;
  words(std::string(any_share ? "each row stands for several stages: the shade is the share of them busy, in the "
                                "colour of the op kind most of them run"
                              : "block label: micro-batch[.slice][c<chunk>], counted from 0") +
        (opt.comm ? "; thin strip under each row = communication" : "") + (compact ? "; compact: no labels" : ""));
  if (!opt.breakdown.empty()) {
    lx = ml, ly += 19;
    words(opt.breakdown);
  }
  const double header_h = std::ceil(ly + 12 + 14);

  // ---- total height
  const double panel_title_h = 22, axis_h = 36, panel_gap = 12;
  double H = header_h;
  for (const auto& p : panels) H += panel_title_h + static_cast<double>(p.rows.size()) * rh + axis_h + panel_gap;
  H = std::ceil(H);

  // ---- document, stylesheet
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg::f2(W) << "\" height=\"" << svg::f2(H)
     << "\" viewBox=\"0 0 " << svg::f2(W) << ' ' << svg::f2(H)
     << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n<style>\n"
     << ".bg{fill:#fff}.idle{fill:#e9e9e9}.cbg{fill:#f6f6f6}.grid{stroke:#cfcfcf;stroke-width:.6}\n"
     << ".e{stroke:#fff;stroke-width:.6}.O{fill:#8a8a8a}.P{fill:#6f6f6f;fill-opacity:.55}"
     << ".C{fill:#262626;fill-opacity:.6}\n"
     << ".t{font-size:" << svg::f2(label_fs) << "px;text-anchor:middle}.tl{fill:#fff}.td{fill:#1a1a1a}\n"
     << ".rl{font-size:" << svg::f2(row_fs) << "px;text-anchor:end;fill:#333}.h{font-size:16px;font-weight:bold}"
     << ".pt{font-size:13px;font-weight:bold;fill:#222}.lg{font-size:12px;fill:#333}"
     << ".ax{stroke:#555;stroke-width:1}.tk{font-size:11px;text-anchor:middle;fill:#444}\n";
  if (any_pair) os << ".pr{fill:none;stroke:#111;stroke-width:1.6}\n";
  for (int c = -1; c < svg::kColours; c++)
    for (BlockKind k : {BlockKind::Forward, BlockKind::Backward, BlockKind::WeightGrad})
      os << '.' << kind_class(k) << ".c" << (c < 0 ? std::string("g") : std::to_string(c))
         << "{fill:" << svg::hex(block_fill(k, c)) << '}';
  // Chunk hatches: chunk 1 "/", chunk 2 "\\", chunk 3 and up crossed.
  os << "\n</style>\n<defs>"
     << "<pattern id=\"k1\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#000\" stroke-opacity=\".4\" "
        "stroke-width=\"1.4\"/></pattern>"
     << "<pattern id=\"k2\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(-45)\">"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#000\" stroke-opacity=\".4\" "
        "stroke-width=\"1.4\"/></pattern>"
     << "<pattern id=\"k3\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#000\" stroke-opacity=\".4\" stroke-width=\"1.2\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"5\" y2=\"0\" stroke=\"#000\" stroke-opacity=\".4\" "
        "stroke-width=\"1.2\"/></pattern>"
     << "</defs>\n<rect class=\"bg\" x=\"0\" y=\"0\" width=\"" << svg::f2(W) << "\" height=\"" << svg::f2(H)
     << "\"/>\n";
  os << "<text class=\"h\" x=\"" << svg::f2(ml) << "\" y=\"24\"" << svg::fit_font(opt.title, 16, W - 8 - ml) << ">"
     << xml_escape(opt.title) << "</text>\n<g class=\"legend\">\n"
     << legend << "</g>\n";

  // ---- panels
  double y = header_h;
  for (std::size_t pi = 0; pi < panels.size(); pi++) {
    const TimelinePanel& p = panels[pi];
    double end = opt.shared_scale ? shared_end : panel_end(p);
    if (!(end > 0)) end = 1.0;  // empty panel: an axis of 1 s
    const double pps = plot_w / end;
    const svg::Unit unit = svg::unit_for(end);
    auto px = [&](double t) { return svg::round2(ml + t * pps); };
    const double rows_top = y + panel_title_h;
    const double rows_h = static_cast<double>(p.rows.size()) * rh;

    char num[64];
    std::snprintf(num, sizeof num, "%.17g", pps);
    os << "<g class=\"panel\" data-panel=\"" << pi << "\" data-x0=\"" << svg::f2(ml) << "\" data-px-per-s=\"" << num
       << "\" data-rows=\"" << p.rows.size() << "\">\n";
    os << "<text class=\"pt\" x=\"" << svg::f2(ml) << "\" y=\"" << svg::f2(y + 15) << "\""
       << svg::fit_font(p.title, 13, W - 8 - ml) << ">" << xml_escape(p.title) << "</text>\n";

    // Grid lines and ticks.
    const double step = svg::nice_step(end * unit.factor, plot_w / 110.0) / unit.factor;
    std::vector<double> ticks;  // at multiples of step on the axis's own reading (offset + t)
    const double first = std::ceil(p.offset_s / step - 1e-9) * step - p.offset_s;
    for (int k = 0;; k++) {
      const double t = first + k * step;
      if (t > end * (1 + 1e-9)) break;
      ticks.push_back(t);
    }
    for (double t : ticks)
      os << "<line class=\"grid\" x1=\"" << svg::f2(px(t)) << "\" y1=\"" << svg::f2(rows_top) << "\" x2=\""
         << svg::f2(px(t)) << "\" y2=\"" << svg::f2(rows_top + rows_h) << "\"/>\n";

    // Intervals grouped by row, in start order (stable: the input order breaks ties).
    std::vector<std::size_t> order(p.intervals.size());
    for (std::size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = p.intervals[a];
      const auto& z = p.intervals[b];
      if (x.row != z.row) return x.row < z.row;
      return x.start_s < z.start_s;
    });
    std::size_t k = 0;
    for (int r = 0; r < static_cast<int>(p.rows.size()); r++) {
      const double ry = rows_top + r * rh + pad / 2;
      os << "<g class=\"row\" data-row=\"" << r << "\">\n";
      os << "<rect class=\"idle\" x=\"" << svg::f2(px(0)) << "\" y=\"" << svg::f2(ry) << "\" width=\""
         << svg::f2(px(end) - px(0)) << "\" height=\"" << svg::f2(compute_h) << "\"/>\n";
      if (opt.comm)
        os << "<rect class=\"cbg\" x=\"" << svg::f2(px(0)) << "\" y=\"" << svg::f2(ry + compute_h + comm_gap)
           << "\" width=\"" << svg::f2(px(end) - px(0)) << "\" height=\"" << svg::f2(comm_h) << "\"/>\n";
      std::string labels;  // drawn after the row's blocks so that no block covers a label
      double pair_x0 = 0;  // the open overlapped pair's left edge and its first block's label
      std::string pair_label;
      for (; k < order.size() && p.intervals[order[k]].row == r; k++) {
        const TimelineInterval& iv = p.intervals[order[k]];
        if (is_comm(iv.kind) && !opt.comm) continue;
        const double x0 = px(iv.start_s), x1 = px(iv.end_s);
        const double w = svg::round2(x1 - x0);
        const bool comm = is_comm(iv.kind);
        const double by = comm ? ry + compute_h + comm_gap : ry;
        const double h = comm ? comm_h : compute_h;
        const int colour = iv.microbatch >= 0 ? iv.microbatch % svg::kColours : 0;
        std::string cls = std::string("b ") + kind_class(iv.kind);
        if (is_compute(iv.kind)) cls += iv.microbatch >= 0 ? " c" + std::to_string(colour) : std::string(" cg");
        if (!comm && w >= 4 && !compact) cls += " e";
        os << "<rect class=\"" << cls << "\" x=\"" << svg::f2(x0) << "\" y=\"" << svg::f2(by) << "\" width=\""
           << svg::f2(w) << "\" height=\"" << svg::f2(h) << '"';
        if (iv.share < 1) os << " fill-opacity=\"" << svg::f2(iv.share) << '"';
        if (opt.tooltips && !compact && !iv.name.empty()) {
          char t[96];
          std::snprintf(t, sizeof t, " %.6g-%.6g %s", (p.offset_s + iv.start_s) * unit.factor,
                        (p.offset_s + iv.end_s) * unit.factor, unit.name);
          os << "><title>" << xml_escape(iv.name) << t << "</title></rect>\n";
        } else {
          os << "/>\n";
        }
        if (is_compute(iv.kind) && iv.chunk > 0 && w >= 1)  // the chunk's hatch over the micro-batch colour
          os << "<rect fill=\"url(#k" << std::min(iv.chunk, 3) << ")\" x=\"" << svg::f2(x0) << "\" y=\"" << svg::f2(by)
             << "\" width=\"" << svg::f2(w) << "\" height=\"" << svg::f2(h) << "\"/>\n";
        if (!comm && iv.pair == Overlap::First) {
          pair_x0 = x0, pair_label = iv.label;
          continue;
        }
        if (!comm && iv.pair == Overlap::Second) {  // one frame and one label over both blocks
          const double pw = svg::round2(x1 - pair_x0);
          os << "<rect class=\"pr\" x=\"" << svg::f2(pair_x0) << "\" y=\"" << svg::f2(by) << "\" width=\""
             << svg::f2(pw) << "\" height=\"" << svg::f2(h) << "\"/>\n";
          const std::string both = pair_label + "|" + iv.label;
          if (block_labels && pw >= svg::text_width(both, label_fs) + 3)
            labels += "<text class=\"t td\" x=\"" + svg::f2(pair_x0 + pw / 2) + "\" y=\"" +
                      svg::f2(ry + compute_h / 2 + label_fs * 0.36) + "\">" + xml_escape(both) + "</text>\n";
          continue;
        }
        if (!comm && block_labels && !iv.label.empty() && w >= svg::text_width(iv.label, label_fs) + 3) {
          const bool light_text =
              is_compute(iv.kind) ? svg::luminance(block_fill(iv.kind, colour)) < 0.5 : iv.kind == BlockKind::Optimizer;
          labels += "<text class=\"t " + std::string(light_text ? "tl" : "td") + "\" x=\"" + svg::f2(x0 + w / 2) +
                    "\" y=\"" + svg::f2(ry + compute_h / 2 + label_fs * 0.36) + "\">" + xml_escape(iv.label) +
                    "</text>\n";
        }
      }
      os << labels << "</g>\n";
    }
    // Row labels: every row_step-th row when rows are thinner than the label font.
    for (int r = 0; r < static_cast<int>(p.rows.size()); r += row_step)
      os << "<text class=\"rl\" x=\"" << svg::f2(ml - 6) << "\" y=\""
         << svg::f2(rows_top + r * rh + rh / 2 + row_fs * 0.35) << "\">" << xml_escape(p.rows[r]) << "</text>\n";
    // Time axis.
    const double ay = rows_top + rows_h + 2;
    os << "<g class=\"axis\"><line class=\"ax\" x1=\"" << svg::f2(px(0)) << "\" y1=\"" << svg::f2(ay) << "\" x2=\""
       << svg::f2(px(end)) << "\" y2=\"" << svg::f2(ay) << "\"/>\n";
    for (double t : ticks)
      os << "<line class=\"ax\" x1=\"" << svg::f2(px(t)) << "\" y1=\"" << svg::f2(ay) << "\" x2=\"" << svg::f2(px(t))
         << "\" y2=\"" << svg::f2(ay + 5) << "\"/><text class=\"tk\" x=\"" << svg::f2(px(t)) << "\" y=\""
         << svg::f2(ay + 17) << "\">" << svg::tick_text((p.offset_s + t) * unit.factor, step * unit.factor)
         << "</text>\n";
    os << "<text class=\"tk\" x=\"" << svg::f2(ml + plot_w / 2) << "\" y=\"" << svg::f2(ay + 31) << "\">time ("
       << unit.name << ")</text></g>\n</g>\n";
    y += panel_title_h + rows_h + axis_h + panel_gap;
  }
  os << "</svg>\n";
}

// ---------------------------------------------------------------- aggregate rows

namespace {

constexpr BlockKind kBusyKinds[] = {BlockKind::Forward, BlockKind::Backward, BlockKind::WeightGrad,
                                    BlockKind::Optimizer};

int busy_slot(BlockKind k) {
  switch (k) {
    case BlockKind::Forward:
      return 0;
    case BlockKind::Backward:
      return 1;
    case BlockKind::WeightGrad:
      return 2;
    case BlockKind::Optimizer:
      return 3;
    case BlockKind::P2P:
    case BlockKind::Collective:
      return -1;
  }
  return -1;
}

// One aggregate row from the busy intervals of `rows` source rows: a sweep over their starts and ends.
void aggregate_one(const std::vector<const TimelineInterval*>& ivs, int rows, int out_row, TimelinePanel& out) {
  struct Edge {
    double t;
    int slot, delta;
  };
  std::vector<Edge> edges;
  for (const TimelineInterval* iv : ivs) {
    edges.push_back({iv->start_s, busy_slot(iv->kind), +1});
    edges.push_back({iv->end_s, busy_slot(iv->kind), -1});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  int count[4] = {0, 0, 0, 0};
  for (std::size_t i = 0; i < edges.size();) {
    const double t = edges[i].t;
    for (; i < edges.size() && edges[i].t == t; i++) count[edges[i].slot] += edges[i].delta;
    if (i == edges.size()) break;
    const int busy = count[0] + count[1] + count[2] + count[3];
    if (busy <= 0) continue;
    int top = 0;
    for (int k = 1; k < 4; k++)
      if (count[k] > count[top]) top = k;
    const double share = std::min(1.0, static_cast<double>(busy) / rows);
    TimelineInterval* prev = out.intervals.empty() ? nullptr : &out.intervals.back();
    if (prev && prev->row == out_row && prev->end_s == t && prev->kind == kBusyKinds[top] && prev->share == share) {
      prev->end_s = edges[i].t;  // the same shade goes on
      continue;
    }
    TimelineInterval iv;
    iv.row = out_row;
    iv.start_s = t;
    iv.end_s = edges[i].t;
    iv.kind = kBusyKinds[top];
    iv.share = share;
    iv.name = std::to_string(std::min(busy, rows)) + " of " + std::to_string(rows) + " busy";
    out.intervals.push_back(iv);
  }
}

}  // namespace

TimelinePanel aggregate_rows(const TimelinePanel& in, int group) {
  if (group < 1) throw std::invalid_argument("timeline: rows are grouped by at least 1, got " + std::to_string(group));
  if (group == 1) return in;
  TimelinePanel out = in;
  out.rows.clear();
  out.intervals.clear();
  const int n = static_cast<int>(in.rows.size());
  std::vector<std::vector<const TimelineInterval*>> of_group(static_cast<std::size_t>((n + group - 1) / group));
  for (const TimelineInterval& iv : in.intervals)
    if (busy_slot(iv.kind) >= 0 && iv.end_s > iv.start_s && iv.row >= 0 && iv.row < n)
      of_group[static_cast<std::size_t>(iv.row / group)].push_back(&iv);
  for (int g = 0; g * group < n; g++) {
    const int first = g * group, last = std::min(n, first + group) - 1;
    out.rows.push_back(first == last ? in.rows[first] : in.rows[first] + " \xE2\x80\xA6 " + in.rows[last]);
    aggregate_one(of_group[static_cast<std::size_t>(g)], last - first + 1, g, out);
  }
  return out;
}

// ---------------------------------------------------------------- panels from a lowered schedule

TimelinePanel timeline_panel(const LoweredSchedule& ls, const Placement& pl, const ProgramSpans& spans,
                             const std::string& title, const PanelOptions& opt) {
  if (spans.size() != ls.per_worker.size())
    throw std::invalid_argument("timeline: " + std::to_string(spans.size()) + " workers of timings for " +
                                std::to_string(ls.per_worker.size()) + " workers in the schedule");
  bool sliced = false;
  for (int mb = 0; mb < static_cast<int>(ls.schedule.microbatches.size()); mb++)
    sliced = sliced || ls.schedule.slices(mb) > 1;
  const bool chunks = ls.schedule.v > 1;

  const int last = opt.last_rank < 0 ? ls.p - 1 : opt.last_rank;
  if (opt.first_rank < 0 || opt.first_rank > last || last >= ls.p)
    throw std::invalid_argument("timeline: ranks " + std::to_string(opt.first_rank) + ":" + std::to_string(last) +
                                " are not within the pipeline's 0:" + std::to_string(ls.p - 1));
  const double t0 = opt.window_start_s, t1 = opt.window_end_s;
  if (!(t0 >= 0) || (t1 >= 0 && !(t1 > t0)) || !std::isfinite(t0) || !std::isfinite(t1))
    throw std::invalid_argument("timeline: the window needs 0 <= start < end (seconds)");
  TimelinePanel panel;
  panel.title = title;
  panel.offset_s = t0;
  if (t1 >= 0) panel.end_s = t1 - t0;
  const int workers = ls.workers();
  const int shown = opt.all_replicas ? workers : std::min(workers, ls.p);
  std::vector<int> row_of(static_cast<std::size_t>(shown), -1);  // worker -> row (-1: not drawn)
  for (int w = 0; w < shown; w++) {
    const int d = w / std::max(1, ls.p), r = w % std::max(1, ls.p);
    if (r < opt.first_rank || r > last) continue;
    std::string label = opt.all_replicas && ls.dp > 1 ? "d" + std::to_string(d) + " " : "";
    label += "stage " + std::to_string(r);
    if (static_cast<std::size_t>(w) * pl.tp < pl.gpu.size()) label += " \xC2\xB7 gpu " + std::to_string(pl.gpu_of(w));
    row_of[static_cast<std::size_t>(w)] = static_cast<int>(panel.rows.size());
    panel.rows.push_back(label);
  }
  for (int w = 0; w < shown; w++) {
    const auto& prog = ls.per_worker[w];
    if (spans[w].size() != prog.size())
      throw std::invalid_argument("timeline: worker " + std::to_string(w) + " has " + std::to_string(spans[w].size()) +
                                  " timings for " + std::to_string(prog.size()) + " ops");
    if (row_of[static_cast<std::size_t>(w)] < 0) continue;
    for (std::size_t i = 0; i < prog.size(); i++) {
      const OpSpan& s = spans[w][i];
      // Cut to the window (blocks across its edges drawn in part), shifted so that the window starts at 0.
      const double start = std::max(s.start, t0), end = t1 >= 0 ? std::min(s.end, t1) : s.end;
      if (!(end > start)) continue;
      const LoweredOp& l = prog[i];
      TimelineInterval iv;
      iv.row = row_of[static_cast<std::size_t>(w)];
      iv.start_s = start - t0;
      iv.end_s = end - t0;
      switch (l.kind) {
        case LOpKind::Compute:
          switch (l.op.kind) {
            case OpKind::Forward:
              iv.kind = BlockKind::Forward;
              break;
            case OpKind::Backward:
              iv.kind = BlockKind::Backward;
              break;
            case OpKind::BackwardInput:
              iv.kind = BlockKind::Backward;
              iv.input_grad = true;
              break;
            case OpKind::BackwardWeight:
              iv.kind = BlockKind::WeightGrad;
              break;
          }
          iv.microbatch = l.op.microbatch;
          iv.chunk = l.op.chunk;
          iv.pair = l.op.overlap;
          iv.label = std::to_string(l.op.microbatch);
          if (sliced) iv.label += "." + std::to_string(l.op.slice);
          if (chunks) iv.label += "c" + std::to_string(l.op.chunk);
          break;
        case LOpKind::Optimizer:
          iv.kind = BlockKind::Optimizer;
          iv.label = "opt";
          break;
        case LOpKind::Send:
        case LOpKind::Recv:
          iv.kind = BlockKind::P2P;
          break;
        case LOpKind::AllReduce:
        case LOpKind::AllGather:
        case LOpKind::ReduceScatter:
        case LOpKind::AllToAll:
          iv.kind = BlockKind::Collective;
          break;
      }
      iv.name = lowered_op_name(ls, w, i);
      panel.intervals.push_back(std::move(iv));
    }
  }
  return aggregate_rows(panel, opt.row_group);
}

ProgramSpans program_spans(const Dag& dag, const LoweredSchedule& ls, const SimResult& r) {
  if (r.timing.size() != dag.size())
    throw std::invalid_argument("timeline: " + std::to_string(r.timing.size()) + " node timings for a DAG of " +
                                std::to_string(dag.size()) + " nodes");
  ProgramSpans spans(ls.per_worker.size());
  for (std::size_t w = 0; w < spans.size(); w++) spans[w].resize(ls.per_worker[w].size());
  auto put = [&](std::int32_t w, std::int32_t i, const NodeTiming& t) {
    if (w < 0 || i < 0 || static_cast<std::size_t>(w) >= spans.size() || static_cast<std::size_t>(i) >= spans[w].size())
      throw std::invalid_argument("timeline: DAG node refers to op " + std::to_string(i) + " of worker " +
                                  std::to_string(w) + " outside the schedule");
    spans[w][i] = {t.start, t.end};
  };
  // Transfers carry their send's (worker, index); every other node with an owner is that op itself.
  for (std::uint32_t n = 0; n < dag.size(); n++) {
    const DagNode& d = dag.nodes[n];
    if (d.worker >= 0 && d.index >= 0) put(d.worker, d.index, r.timing[n]);
  }
  // Every member of a collective call maps to the call's one node.
  for (std::size_t w = 0; w < dag.node_of.size() && w < spans.size(); w++)
    for (std::size_t i = 0; i < dag.node_of[w].size() && i < spans[w].size(); i++) {
      const std::int32_t n = dag.node_of[w][i];
      if (n >= 0 && dag.nodes[n].kind == DagKind::Collective) spans[w][i] = {r.timing[n].start, r.timing[n].end};
    }
  return spans;
}

std::string timeline_title(const std::string& prefix, const std::string& scenario, const LoweredSchedule& ls,
                           double iteration_s) {
  const Schedule& s = ls.schedule;
  int k = 1;
  for (int mb = 0; mb < static_cast<int>(s.microbatches.size()); mb++) k = std::max(k, s.slices(mb));
  const svg::Unit u = svg::unit_for(iteration_s);
  char b[256];
  std::snprintf(b, sizeof b, " \xC2\xB7 dp %d \xC2\xB7 pp %d \xC2\xB7 tp %d \xC2\xB7 v %d \xC2\xB7 m %d \xC2\xB7 k %d",
                ls.dp, ls.p, ls.tp, s.v, s.m, k);
  char t[64];
  std::snprintf(t, sizeof t, " \xC2\xB7 iteration %.4g %s", iteration_s * u.factor, u.name);
  return prefix + ": " + scenario + " \xC2\xB7 " + s.name + b + t;
}

}  // namespace pipescope::sim
