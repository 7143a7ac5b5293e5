// SVG pipeline timelines (sim/timeline_svg.h): the picture is parsed back and checked against the closed forms
// (docs/papers.md) with ConstantCostModel and free communication (times from the DAG's
// earliest_finish, the communication-free critical path the engine reproduces), plus legibility rules for 96
// stages, determinism, errors, and `pipescope simulate --timeline` end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "sim/timeline_svg.h"
#include "tests/flat_placement.h"

namespace pipescope::sim {
namespace {

// ------------------------------------------------------------------------------------------ SVG parsing
struct Block {
  std::string kind;  // F, B, W, P, C, O
  double x = 0, w = 0;
  std::string title;
};
struct Row {
  std::vector<Block> blocks;
  double idle_x = 0, idle_w = 0;  // the idle band = the panel's time range
  std::vector<std::string> labels;
};
struct Panel {
  double x0 = 0, px_per_s = 0;
  std::vector<Row> rows;
  int row_labels = 0;
  int ticks = 0;
};
struct Svg {
  std::vector<Panel> panels;
  double width = 0, height = 0;
};

double attr(const std::string& el, const std::string& name) {
  const std::regex re(" " + name + "=\"([-0-9.e+]+)\"");
  std::smatch m;
  if (!std::regex_search(el, m, re)) throw std::runtime_error("no attribute " + name + " in " + el);
  return std::stod(m[1]);
}

Svg parse_svg(const std::string& text) {
  Svg svg;
  std::istringstream in(text);
  std::string line;
  Panel* panel = nullptr;
  Row* row = nullptr;
  const std::regex block_re("<rect class=\"b ([A-Z])[^\"]*\" [^>]*?(/>|><title>([^<]*)</title></rect>)");
  const std::regex text_re("<text class=\"t t[ld]\"[^>]*>([^<]*)</text>");
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("<svg ", 0) == 0) {
      svg.width = attr(line, "width");
      svg.height = attr(line, "height");
    } else if (line.rfind("<g class=\"panel\"", 0) == 0) {
      svg.panels.emplace_back();
      panel = &svg.panels.back();
      panel->x0 = attr(line, "data-x0");
      panel->px_per_s = attr(line, "data-px-per-s");
      panel->rows.resize(static_cast<std::size_t>(attr(line, "data-rows")));
    } else if (line.rfind("<g class=\"row\"", 0) == 0) {
      row = &panel->rows.at(static_cast<std::size_t>(attr(line, "data-row")));
    } else if (line.rfind("<rect class=\"idle\"", 0) == 0 && row) {
      row->idle_x = attr(line, "x");
      row->idle_w = attr(line, "width");
    } else if (std::regex_search(line, m, block_re) && row) {
      row->blocks.push_back({m[1], attr(line, "x"), attr(line, "width"), m[3]});
    } else if (std::regex_search(line, m, text_re) && row) {
      row->labels.push_back(m[1]);
    } else if (line.rfind("</g>", 0) == 0 && row) {
      row = nullptr;
    } else if (line.rfind("<text class=\"rl\"", 0) == 0 && panel) {
      panel->row_labels++;
    } else if (line.find("<text class=\"tk\"") != std::string::npos && line.find("time (") == std::string::npos &&
               panel) {
      panel->ticks++;
    }
  }
  return svg;
}

int count(const Row& r, const std::string& kind) {
  return static_cast<int>(
      std::count_if(r.blocks.begin(), r.blocks.end(), [&](const Block& b) { return b.kind == kind; }));
}
// Seconds of compute-lane idle time: the band minus the F/B/W/optimizer blocks.
double idle_s(const Panel& p, const Row& r) {
  double busy = 0;
  for (const auto& b : r.blocks)
    if (b.kind != "P" && b.kind != "C") busy += b.w;
  return (r.idle_w - busy) / p.px_per_s;
}
double first_start_s(const Panel& p, const Row& r) { return (r.blocks.front().x - r.idle_x) / p.px_per_s; }
double trailing_idle_s(const Panel& p, const Row& r) {
  const Block& last = r.blocks.back();
  return (r.idle_x + r.idle_w - last.x - last.w) / p.px_per_s;
}

// ------------------------------------------------------------------------------------------ schedules
using test::flat_placement;

// A schedule lowered with ConstantCostModel (forward 1 s, backward 2 s per stage, free communication) and its
// per-node times: compute nodes run [finish - duration, finish), everything else takes no time.
struct Run {
  LoweredSchedule ls;
  Placement pl;
  std::unique_ptr<CheckedSchedule> cs;
  SimResult r;
};

std::unique_ptr<Run> run(const Schedule& s, int dp = 1, int v = 1, int seq_len = 1) {
  auto out = std::make_unique<Run>();
  ConstantCosts cc;
  cc.forward_s = 1.0;
  cc.backward_s = 2.0;
  cc.v = v;
  cc.seq_len = seq_len;
  const ConstantCostModel cost(cc);
  out->ls = lower(s, dp, 1, cost);
  out->pl = flat_placement(dp, s.p, 1);
  out->cs = std::make_unique<CheckedSchedule>(check(out->ls, out->pl));
  const Dag& dag = out->cs->dag();
  const std::vector<double> f = earliest_finish(dag);
  out->r.timing.resize(dag.size());
  for (std::size_t i = 0; i < dag.size(); i++) {
    const double d = dag.nodes[i].kind == DagKind::Compute ? dag.nodes[i].amount : 0.0;
    out->r.timing[i] = {f[i] - d, f[i]};
    out->r.iteration_s = std::max(out->r.iteration_s, f[i]);
  }
  return out;
}

std::string svg_of(const Run& x, const SvgOptions& so = {}, const PanelOptions& po = {}) {
  std::ostringstream os;
  const TimelinePanel p = timeline_panel(x.ls, x.pl, program_spans(x.cs->dag(), x.ls, x.r),
                                         timeline_title("test", "t", x.ls, x.r.iteration_s), po);
  write_timeline_svg(os, {p}, so);
  return os.str();
}

constexpr double kTol = 0.02;  // seconds; blocks are placed to 0.01 px at ~40 px per second

// ------------------------------------------------------------------------------------------ closed forms
TEST(Timeline, OneFOneBBubblesWhereTheClosedFormPutsThem) {
  const int p = 4, m = 8;
  const double tf = 1, tb = 2;
  const auto x = run(make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1));
  const Svg svg = parse_svg(svg_of(*x));
  ASSERT_EQ(svg.panels.size(), 1u);
  const Panel& pn = svg.panels[0];
  ASSERT_EQ(pn.rows.size(), static_cast<std::size_t>(p));
  const double T = (m + p - 1) * (tf + tb);  // makespan
  EXPECT_NEAR(pn.rows[0].idle_w / pn.px_per_s, T, kTol);
  for (int r = 0; r < p; r++) {
    const Row& row = pn.rows[r];
    EXPECT_EQ(count(row, "F"), m) << "rank " << r;
    EXPECT_EQ(count(row, "B"), m) << "rank " << r;
    // Warm-up: rank r waits r forward slots; cool-down: it finishes r backward slots early.
    EXPECT_NEAR(first_start_s(pn, row), r * tf, kTol) << "rank " << r;
    EXPECT_NEAR(trailing_idle_s(pn, row), r * tb, kTol) << "rank " << r;
    // Total bubble per rank: (p - 1)(tf + tb), i.e. phi = (p-1)/(m+p-1).
    EXPECT_NEAR(idle_s(pn, row), (p - 1) * (tf + tb), kTol) << "rank " << r;
    // 1F1B order on the picture: W_r = p - r - 1 warm-up forwards, then forward/backward alternate.
    const int w = warmup_1f1b(p, m, r);
    for (int i = 0; i <= w; i++) EXPECT_EQ(row.blocks[i].kind, "F") << "rank " << r << " block " << i;
    EXPECT_EQ(row.blocks[w + 1].kind, "B") << "rank " << r;
    // Idle gaps inside the steady state: on the last rank there are none (F and B alternate back to back).
    if (r == p - 1) {
      for (std::size_t i = 1; i < row.blocks.size(); i++)
        EXPECT_NEAR(row.blocks[i].x, row.blocks[i - 1].x + row.blocks[i - 1].w, 0.011);
    }
  }
  // Labels: micro-batch numbers, every one of them fits at this size.
  EXPECT_EQ(pn.rows[0].labels.size(), static_cast<std::size_t>(2 * m));
  EXPECT_EQ(pn.rows[0].labels.front(), "0");
  EXPECT_EQ(pn.rows[0].blocks.front().title.rfind("0F0 ", 0), 0u);
}

// A large run drawn in part: a rank subset and a time window (blocks cut at its edges, the axis reading the
// iteration's time); the legend names only the backward kinds present.
TEST(Timeline, WindowRanksAndTheKindsPresent) {
  const int p = 4, m = 8;
  const auto x = run(make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1));
  PanelOptions po;
  po.first_rank = 1, po.last_rank = 2;
  po.window_start_s = 5, po.window_end_s = 10;
  const std::string text = svg_of(*x, {}, po);
  const Svg svg = parse_svg(text);
  const Panel& pn = svg.panels.at(0);
  ASSERT_EQ(pn.rows.size(), 2u);
  EXPECT_NE(text.find(">stage 1"), std::string::npos);
  EXPECT_EQ(text.find(">stage 0"), std::string::npos);
  for (const Row& row : pn.rows) {
    ASSERT_FALSE(row.blocks.empty());
    for (const auto& b : row.blocks) EXPECT_LE((b.x + b.w - pn.x0) / pn.px_per_s, 5.0 + kTol);  // within the window
    EXPECT_NEAR(row.idle_w / pn.px_per_s, 5.0, kTol);                                           // the axis spans 5 s
  }
  // The axis reads the iteration's seconds: its ticks run from 5 to 10.
  EXPECT_TRUE(std::regex_search(text, std::regex("class=\"tk\"[^>]*>5(\\.0)?<")));
  EXPECT_TRUE(std::regex_search(text, std::regex("class=\"tk\"[^>]*>10(\\.0)?<")));
  EXPECT_FALSE(std::regex_search(text, std::regex("class=\"tk\"[^>]*>0(\\.0)?<")));
  EXPECT_NE(text.find(">B backward<"), std::string::npos);
  EXPECT_EQ(text.find("input gradient"), std::string::npos);  // 1F1B has no I
  const std::string zb = svg_of(*run(make_zb_h1(p, uniform_microbatches(m, 1, 1, 1), 1)));
  EXPECT_NE(zb.find(">I input gradient<"), std::string::npos);
  EXPECT_NE(zb.find(">W weight gradient<"), std::string::npos);
  EXPECT_EQ(zb.find(">B backward"), std::string::npos);
  // Ranks outside the pipeline, an empty window: refused.
  po.last_rank = p;
  EXPECT_THROW(svg_of(*x, {}, po), std::invalid_argument);
  po.last_rank = 2, po.window_end_s = 5;
  EXPECT_THROW(svg_of(*x, {}, po), std::invalid_argument);
}

TEST(Timeline, GPipeGapBetweenForwardsAndBackwards) {
  const int p = 4, m = 4;
  const double tf = 1, tb = 2;
  const auto x = run(make_gpipe(p, uniform_microbatches(m, 1, 1, 1), 1));
  const Panel pn = parse_svg(svg_of(*x)).panels.at(0);
  for (int r = 0; r < p; r++) {
    const Row& row = pn.rows[r];
    ASSERT_EQ(row.blocks.size(), static_cast<std::size_t>(2 * m));
    // All forwards, then one gap of (p - 1 - r)(tf + tb) before the first backward.
    const Block& last_f = row.blocks[m - 1];
    const Block& first_b = row.blocks[m];
    EXPECT_EQ(last_f.kind, "F");
    EXPECT_EQ(first_b.kind, "B");
    EXPECT_NEAR((first_b.x - last_f.x - last_f.w) / pn.px_per_s, (p - 1 - r) * (tf + tb), kTol) << "rank " << r;
    EXPECT_NEAR(first_start_s(pn, row), r * tf, kTol);
    EXPECT_NEAR(idle_s(pn, row), (p - 1) * (tf + tb), kTol);
  }
}

TEST(Timeline, InterleavedBubbleShrinksByV) {
  const int p = 4, m = 8, v = 2;
  const auto x = run(make_interleaved(p, v, uniform_microbatches(m, 1, 1, 1), 1), 1, v);
  const Panel pn = parse_svg(svg_of(*x)).panels.at(0);
  for (int r = 0; r < p; r++) {
    EXPECT_EQ(count(pn.rows[r], "F"), m * v);
    // (p - 1)(tf + tb) / v per rank (docs/papers.md#megatron).
    EXPECT_NEAR(idle_s(pn, pn.rows[r]), (p - 1) * 3.0 / v, kTol) << "rank " << r;
  }
  // Chunks are in the labels.
  const auto& l = pn.rows[0].labels;
  EXPECT_NE(std::find(l.begin(), l.end(), "0c1"), l.end());
}

TEST(Timeline, TeraPipeSlicesAreLabelledAndFillTheBubble) {
  const int p = 4, m = 2, k = 4;
  // TeraPipe: GPipe over k token slices per micro-batch; makespan (m + (p-1)/k) t with t = tf + tb.
  const Schedule s = make_gpipe(p, uniform_microbatches(m, 1, 8, k), 8);
  const auto x = run(s, 1, 1, 8);
  const Panel pn = parse_svg(svg_of(*x)).panels.at(0);
  const double t = 3.0;
  EXPECT_NEAR(pn.rows[0].idle_w / pn.px_per_s, (m + (p - 1.0) / k) * t, kTol);
  for (int r = 0; r < p; r++) {
    EXPECT_EQ(count(pn.rows[r], "F"), m * k);
    EXPECT_NEAR(idle_s(pn, pn.rows[r]), (p - 1.0) / k * t, kTol);
  }
  const auto& l = pn.rows[0].labels;
  for (const char* want : {"0.0", "0.3", "1.2"}) EXPECT_NE(std::find(l.begin(), l.end(), want), l.end()) << want;
}

TEST(Timeline, ReplicasAndCommunication) {
  const auto x = run(make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1), 2);
  EXPECT_EQ(parse_svg(svg_of(*x)).panels.at(0).rows.size(), 2u);  // replica 0
  PanelOptions all;
  all.all_replicas = true;
  const std::string text = svg_of(*x, {}, all);
  EXPECT_EQ(parse_svg(text).panels.at(0).rows.size(), 4u);
  EXPECT_NE(text.find(">d1 stage 1 \xC2\xB7 gpu 3<"), std::string::npos);

  // Communication strips appear only when asked for.
  TimelinePanel p;
  p.rows = {"a", "b"};
  p.intervals = {{0, 0.0, 1.0, BlockKind::Forward, 0, "0", "a0"},
                 {0, 1.0, 1.5, BlockKind::P2P, -1, "", "send"},
                 {1, 1.5, 2.5, BlockKind::Collective, -1, "", "allreduce"},
                 {1, 2.5, 3.0, BlockKind::Optimizer, -1, "opt", "opt"}};
  std::ostringstream without, with;
  write_timeline_svg(without, {p}, {});
  SvgOptions so;
  so.comm = true;
  write_timeline_svg(with, {p}, so);
  const Svg a = parse_svg(without.str()), b = parse_svg(with.str());
  EXPECT_EQ(count(a.panels[0].rows[0], "P") + count(a.panels[0].rows[1], "C"), 0);
  EXPECT_EQ(count(b.panels[0].rows[0], "P"), 1);
  EXPECT_EQ(count(b.panels[0].rows[1], "C"), 1);
  EXPECT_EQ(count(b.panels[0].rows[1], "O"), 1);
  EXPECT_NE(with.str().find(">point-to-point<"), std::string::npos);
  EXPECT_EQ(without.str().find(">point-to-point<"), std::string::npos);
}

// A legend a paper can use: op kinds in neutral grey (the swatches were all micro-batch 0's blue), the micro-batch
// hues, chunk hatches when chunks are drawn; nothing runs past a narrow width; compact from 96 rows.
TEST(Timeline, LegendByKindHueAndChunkWithinTheWidth) {
  TimelinePanel p;
  p.title = std::string(140, 'x');  // a long panel title gets a smaller font instead of running off the page
  p.rows = {"a", "b"};
  p.intervals = {{0, 0.0, 1.0, BlockKind::Forward, 0, "0c0", "a0"},
                 {0, 1.0, 2.0, BlockKind::Forward, 1, "1c1", "a1", 1},
                 {1, 1.0, 2.0, BlockKind::Backward, 1, "1c1", "b1", 1}};
  SvgOptions so;
  so.width_px = 700;
  so.title = "pipescope simulate interleaved-small.yaml";
  std::ostringstream os;
  write_timeline_svg(os, {p}, so);
  const std::string text = os.str();
  for (const char* want : {"class=\"F cg\"", "class=\"B cg\"", ">F forward<", ">B backward<", "class=\"B c9\"",
                           ">chunk 1<", "fill=\"url(#k1)\""})
    EXPECT_NE(text.find(want), std::string::npos) << want;
  // Legend text stays inside 700 px (at the writer's 0.62 em per character).
  const std::regex lg("<text class=\"lg\" x=\"([0-9.]+)\" y=\"[0-9.]+\">([^<]*)</text>");
  int n = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), lg); it != std::sregex_iterator(); ++it, n++)
    EXPECT_LE(std::stod((*it)[1]) + (*it)[2].length() * 12 * 0.62, 700.0) << (*it)[2];
  EXPECT_GT(n, 10);
  // A line's words are one <text> (the renderer spaces them), and the parenthetical is not split.
  for (const char* want :
       {">block label: micro-batch[.slice][c&lt;chunk&gt;], counted from 0<", ">(hue repeats every 10)<"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
  EXPECT_NE(text.find("<text class=\"pt\" x=\"70.00\" y=\""), std::string::npos);
  EXPECT_NE(text.find("style=\"font-size:"), std::string::npos);
  // The chunk-1 blocks carry a hatch over their colour; chunk 0 does not.
  std::size_t hatches = 0;
  for (std::size_t at = text.find("<rect fill=\"url(#k1)\" x="); at != std::string::npos;
       at = text.find("<rect fill=\"url(#k1)\" x=", at + 1))
    hatches++;
  EXPECT_EQ(hatches, 2u + 1u);  // two blocks + the legend's swatch
  // 96 rows: compact (no tooltips, no labels).
  TimelinePanel big;
  for (int r = 0; r < 96; r++) {
    big.rows.push_back("stage " + std::to_string(r));
    big.intervals.push_back({r, 0.0, 1.0, BlockKind::Forward, r, std::to_string(r), "op" + std::to_string(r)});
  }
  std::ostringstream bo;
  write_timeline_svg(bo, {big}, {});
  EXPECT_EQ(bo.str().find("<title>"), std::string::npos);
  EXPECT_NE(bo.str().find("; compact: no labels<"), std::string::npos);
}

// ------------------------------------------------------------------------------------------ legibility
TEST(Timeline, NinetySixStagesStayLegible) {
  const int p = 96, m = 8;
  const auto x = run(make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1));
  const std::string text = svg_of(*x);
  const Svg svg = parse_svg(text);
  const Panel& pn = svg.panels.at(0);
  ASSERT_EQ(pn.rows.size(), 96u);
  EXPECT_LE(svg.height, 1000);  // rows shrink
  EXPECT_GT(svg.height, 96 * 4);
  // Row labels at >= 8 px font: every other row here.
  EXPECT_EQ(pn.row_labels, 48);
  // Blocks are too thin for text: no label is drawn.
  for (const auto& r : pn.rows) EXPECT_TRUE(r.labels.empty());
  // Closed form still holds on every row.
  for (int r = 0; r < p; r++) EXPECT_NEAR(idle_s(pn, pn.rows[r]), (p - 1) * 3.0, 0.05) << "rank " << r;
  EXPECT_GE(pn.ticks, 5);
  EXPECT_NE(text.find("class=\"legend\""), std::string::npos);
  EXPECT_NE(text.find(">time (s)<"), std::string::npos);

  // A 4-stage picture labels every row, with larger rows.
  const Svg small = parse_svg(svg_of(*run(make_1f1b(4, uniform_microbatches(m, 1, 1, 1), 1))));
  EXPECT_EQ(small.panels.at(0).row_labels, 4);
}

TEST(Timeline, LabelsDropWhenTheyDoNotFit) {
  TimelinePanel p;
  p.rows = {"r"};
  p.intervals = {{0, 0.0, 1.0, BlockKind::Forward, 1, "wide", "x"},
                 {0, 1.0, 1.001, BlockKind::Backward, 1, "12.3", "y"}};
  p.end_s = 2;
  std::ostringstream os;
  write_timeline_svg(os, {p}, {});
  const auto labels = parse_svg(os.str()).panels.at(0).rows.at(0).labels;
  EXPECT_EQ(labels, std::vector<std::string>{"wide"});
}

TEST(Timeline, DeterministicAndEscaped) {
  const auto x = run(make_1f1b(4, uniform_microbatches(8, 1, 1, 1), 1));
  EXPECT_EQ(svg_of(*x), svg_of(*x));
  TimelinePanel p;
  p.title = "a<b & \"c\"";
  p.rows = {"<row>"};
  std::ostringstream os;
  write_timeline_svg(os, {p}, {});
  EXPECT_NE(os.str().find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(os.str().find("&lt;row&gt;"), std::string::npos);
  EXPECT_EQ(os.str().find("<row>"), std::string::npos);
}

TEST(Timeline, MultiplePanelsSharedOrOwnScale) {
  TimelinePanel a, b;
  a.rows = b.rows = {"r"};
  a.intervals = {{0, 0.0, 1.0, BlockKind::Forward, 0, "0", ""}};
  b.intervals = {{0, 0.0, 4.0, BlockKind::Forward, 0, "0", ""}};
  std::ostringstream own, shared;
  write_timeline_svg(own, {a, b}, {});
  SvgOptions so;
  so.shared_scale = true;
  write_timeline_svg(shared, {a, b}, so);
  const Svg o = parse_svg(own.str()), s = parse_svg(shared.str());
  ASSERT_EQ(o.panels.size(), 2u);
  EXPECT_NEAR(o.panels[0].rows[0].blocks[0].w, o.panels[1].rows[0].blocks[0].w, 0.011);  // both span the width
  EXPECT_NEAR(s.panels[1].rows[0].blocks[0].w, 4 * s.panels[0].rows[0].blocks[0].w, 0.05);
}

TEST(Timeline, BadInputThrows) {
  TimelinePanel p;
  p.rows = {"r"};
  p.intervals = {{1, 0.0, 1.0, BlockKind::Forward, 0, "", "x"}};
  std::ostringstream os;
  EXPECT_THROW(write_timeline_svg(os, {p}, {}), std::invalid_argument);
  p.intervals = {{0, 2.0, 1.0, BlockKind::Forward, 0, "", "x"}};
  EXPECT_THROW(write_timeline_svg(os, {p}, {}), std::invalid_argument);
  p.intervals = {{0, 0.0, std::nan(""), BlockKind::Forward, 0, "", "x"}};
  EXPECT_THROW(write_timeline_svg(os, {p}, {}), std::invalid_argument);
  p.intervals.clear();
  SvgOptions narrow;
  narrow.width_px = 50;
  EXPECT_THROW(write_timeline_svg(os, {p}, narrow), std::invalid_argument);

  const auto x = run(make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1));
  ProgramSpans spans = program_spans(x->cs->dag(), x->ls, x->r);
  spans.pop_back();
  EXPECT_THROW(timeline_panel(x->ls, x->pl, spans, ""), std::invalid_argument);
  SimResult truncated = x->r;
  truncated.timing.pop_back();
  EXPECT_THROW(program_spans(x->cs->dag(), x->ls, truncated), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------ CLI
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(TimelineCli, DefaultScenarioSimulated) {
  const std::string exe = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope";
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/timeline_a.svg", b = dir + "/timeline_b.svg";
  ASSERT_EQ(sh(exe + " simulate --timeline " + a + " > /dev/null"), 0);
  ASSERT_EQ(sh(exe + " simulate --timeline " + b + " > /dev/null"), 0);
  const std::string text = slurp(a);
  EXPECT_EQ(text, slurp(b));  // byte-identical
  const Svg svg = parse_svg(text);
  const Panel& pn = svg.panels.at(0);
  // Default scenario: pp 4, m 16 (1F1B), replica 0 of 2.
  ASSERT_EQ(pn.rows.size(), 4u);
  double prev_start = -1;
  for (int r = 0; r < 4; r++) {
    EXPECT_EQ(count(pn.rows[r], "F"), 16);
    EXPECT_EQ(count(pn.rows[r], "B"), 16);
    EXPECT_EQ(count(pn.rows[r], "O"), 1);
    // Warm-up staircase: each stage starts after the previous one.
    EXPECT_GT(first_start_s(pn, pn.rows[r]), prev_start);
    prev_start = first_start_s(pn, pn.rows[r]);
  }
  EXPECT_NE(text.find("simulated: default \xC2\xB7 1f1b \xC2\xB7 dp 2 \xC2\xB7 pp 4"), std::string::npos);

  ASSERT_EQ(sh(exe + " simulate --timeline " + a + " --timeline-all-replicas --timeline-comm > /dev/null"), 0);
  const Svg all = parse_svg(slurp(a));
  EXPECT_EQ(all.panels.at(0).rows.size(), 8u);
  int comm = 0;
  for (const auto& r : all.panels[0].rows) comm += count(r, "P") + count(r, "C");
  EXPECT_GT(comm, 0);

  EXPECT_EQ(sh(exe + " simulate --timeline /nonexistent-dir/x.svg > /dev/null 2>&1"), 1);
  EXPECT_EQ(sh(exe + " simulate --timeline " + a + " --compare gpipe,1f1b > /dev/null 2>&1"), 1);
}

#ifndef PIPESCOPE_MPI_CHILD_ENV
#define PIPESCOPE_MPI_CHILD_ENV ""
#endif

// The measured lane: `pipescope validate` (CPU backend under mpirun) draws the simulated run above the measured one.
TEST(TimelineCli, ValidateDrawsSimulatedAndMeasured) {
  const std::string dir = std::string(PIPESCOPE_BINARY_DIR);
  if (sh("command -v mpirun > /dev/null") != 0 || sh("test -x " + dir + "/pipescope-rank") != 0)
    GTEST_SKIP() << "needs mpirun and pipescope-rank";
  const std::string svg = ::testing::TempDir() + "/timeline_validate.svg";
  ASSERT_EQ(sh(std::string(PIPESCOPE_MPI_CHILD_ENV) + dir +
               "/pipescope validate --pp 2 --dp 1 --tp 1 --layers 4 --hidden 32 --heads 4 --vocab 64 " +
               "--seq-len 16 --global-batch 4 --iterations 1 --warmup 0 --timeline " + svg + " > /dev/null 2>&1"),
            0);
  const std::string text = slurp(svg);
  const Svg s = parse_svg(text);
  ASSERT_EQ(s.panels.size(), 2u);
  EXPECT_NE(text.find(">simulated: "), std::string::npos);
  EXPECT_NE(text.find(">measured cpu-f64: "), std::string::npos);
  for (const Panel& p : s.panels) {
    ASSERT_EQ(p.rows.size(), 2u);
    for (const Row& r : p.rows) {
      EXPECT_EQ(count(r, "F"), 4);  // m = 4 micro-batches
      EXPECT_EQ(count(r, "B"), 4);
      EXPECT_EQ(count(r, "O"), 1);
      EXPECT_GT(count(r, "P"), 0);  // sends and receives, drawn as the communication strip
    }
  }
  // One time axis for both (they were drawn on different scales): the same pixels per second.
  EXPECT_EQ(s.panels[0].px_per_s, s.panels[1].px_per_s);
  // Both lanes run the same program: the compute blocks appear in the same order on every row.
  for (std::size_t r = 0; r < 2; r++) {
    std::vector<std::string> order[2];
    for (int p = 0; p < 2; p++)
      for (const auto& b : s.panels[p].rows[r].blocks)
        if (b.kind == "F" || b.kind == "B") order[p].push_back(b.title.substr(0, b.title.find(' ')));
    EXPECT_EQ(order[0], order[1]) << "row " << r;
  }
}

}  // namespace
// DualPipeV: each overlapped pair is framed once and labelled with both micro-batches; the legend says what a frame is.
TEST(Timeline, OverlappedPairsAreOneFramedBlock) {
  const Schedule s = make_dualpipev(2, uniform_microbatches(5, 1, 1, 1), 1);
  const auto x = run(s, 1, 2);
  const std::string svg = svg_of(*x);
  std::size_t frames = 0;
  for (std::size_t at = svg.find("class=\"pr\" x="); at != std::string::npos; at = svg.find("class=\"pr\" x=", at + 1))
    frames++;
  EXPECT_EQ(frames, pair_count(s) + 1);                       // and the legend's swatch
  EXPECT_NE(svg.find(">3c0|1c1</text>"), std::string::npos);  // (0F3;0B1c1) on rank 0
  EXPECT_NE(svg.find("overlapped pair (forward | backward)"), std::string::npos);
  // Without pairs nothing of it: the picture of a schedule without pairs is unchanged.
  const std::string plain = svg_of(*run(make_zb_v(2, uniform_microbatches(5, 1, 1, 1), 1), 1, 2));
  EXPECT_EQ(plain.find(".pr{"), std::string::npos);
}

}  // namespace pipescope::sim

namespace pipescope::sim {
namespace {

// Long pipelines: rows grouped, each group's row shaded by the share of its rows busy, in the commonest op kind.
TEST(TimelineAggregate, GroupsRowsIntoShares) {
  TimelinePanel in;
  in.rows = {"stage 0", "stage 1", "stage 2", "stage 3", "stage 4"};
  auto add = [&](int row, double a, double b, BlockKind k) {
    TimelineInterval iv;
    iv.row = row, iv.start_s = a, iv.end_s = b, iv.kind = k, iv.microbatch = 0, iv.label = "0";
    in.intervals.push_back(iv);
  };
  add(0, 0, 1, BlockKind::Forward);
  add(1, 0, 2, BlockKind::Forward);
  add(2, 1, 3, BlockKind::Backward);
  add(3, 2, 3, BlockKind::Collective);  // communication: left out
  add(4, 0, 1, BlockKind::Optimizer);
  const TimelinePanel out = aggregate_rows(in, 2);
  ASSERT_EQ(out.rows.size(), 3u);
  EXPECT_EQ(out.rows[0], "stage 0 \xE2\x80\xA6 stage 1");
  EXPECT_EQ(out.rows[2], "stage 4");  // the last group holds one row
  ASSERT_EQ(out.intervals.size(), 4u);
  const TimelineInterval& a = out.intervals[0];
  EXPECT_EQ(a.row, 0);
  EXPECT_EQ(a.kind, BlockKind::Forward);
  EXPECT_DOUBLE_EQ(a.start_s, 0);
  EXPECT_DOUBLE_EQ(a.end_s, 1);
  EXPECT_DOUBLE_EQ(a.share, 1);
  EXPECT_EQ(a.microbatch, -1);  // the kind's grey, not a micro-batch hue
  EXPECT_DOUBLE_EQ(out.intervals[1].start_s, 1);
  EXPECT_DOUBLE_EQ(out.intervals[1].share, 0.5);
  EXPECT_EQ(out.intervals[1].name, "1 of 2 busy");
  const TimelineInterval& c = out.intervals[2];
  EXPECT_EQ(c.row, 1);
  EXPECT_EQ(c.kind, BlockKind::Backward);
  EXPECT_DOUBLE_EQ(c.start_s, 1);
  EXPECT_DOUBLE_EQ(c.end_s, 3);
  EXPECT_DOUBLE_EQ(c.share, 0.5);
  EXPECT_EQ(out.intervals[3].kind, BlockKind::Optimizer);
  EXPECT_DOUBLE_EQ(out.intervals[3].share, 1);

  std::ostringstream svg;
  write_timeline_svg(svg, {out}, SvgOptions{});
  EXPECT_NE(svg.str().find("fill-opacity=\"0.50\""), std::string::npos);
  EXPECT_NE(svg.str().find("share of them busy"), std::string::npos);
  EXPECT_EQ(svg.str().find("micro-batch:"), std::string::npos);  // no micro-batch hues drawn

  EXPECT_EQ(aggregate_rows(in, 1).intervals.size(), in.intervals.size());
  EXPECT_THROW(aggregate_rows(in, 0), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::sim
