// Seq1F1B / Seq1F1B-I generators and computation-wise partitioning (docs/papers.md#seq1f1b): golden orders (6.3, 7.3),
// warm-up counts, properties over a (p, m, k, n) grid, closed-form bubbles and peak in-flight activations with
// equal costs and free communication, and the reference cwp splits (docs/papers.md#seq1f1b).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/memory/memory_model.h"
#include "core/model/presets.h"
#include "core/model/seq1f1b.h"
#include "core/plan/pipeline.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

using test::flat_placement;

// Spec notation on device d (1-based): "F3.2" / "B1.2c1" -> op_text "<d-1>F2s1" / "<d-1>B0c1s1".
std::vector<std::string> spec_tokens(int dev, const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  std::string tok;
  while (in >> tok) {
    int mb = 0, seg = 0, chunk = 0;
    char dot = 0, c = 0;
    std::istringstream t(tok.substr(1));
    t >> mb >> dot >> seg;
    if (t >> c && c == 'c') t >> chunk;
    std::string s = std::to_string(dev - 1) + tok[0] + std::to_string(mb - 1);
    if (chunk != 0) s += "c" + std::to_string(chunk);
    if (seg != 1) s += "s" + std::to_string(seg - 1);
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> rank_tokens(const Schedule& s, int r) {
  std::vector<std::string> out;
  for (const Op& op : s.per_rank[r]) out.push_back(op_text(op));
  return out;
}

void expect_prefix(const Schedule& s, int dev, const std::string& line) {
  const auto want = spec_tokens(dev, line), got = rank_tokens(s, dev - 1);
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(got.begin(), got.begin() + want.size()), want) << "device " << dev;
}
void expect_suffix(const Schedule& s, int dev, const std::string& line) {
  const auto want = spec_tokens(dev, line), got = rank_tokens(s, dev - 1);
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(got.end() - want.size(), got.end()), want) << "device " << dev;
}

int forwards_before_first_backward(const Schedule& s, int r) {
  int n = 0;
  for (const Op& op : s.per_rank[r]) {
    if (op.kind == OpKind::Backward) break;
    n++;
  }
  return n;
}

// Makespan with free communication (communication-free critical path of the checked DAG).
double makespan(const Schedule& s, int v) {
  ConstantCosts cc;
  cc.forward_s = 1.0;
  cc.backward_s = 2.0;
  cc.v = v;
  cc.seq_len = s.seq_len;
  const ConstantCostModel cost(cc);
  const LoweredSchedule ls = lower(s, 1, 1, cost);
  const CheckedSchedule cs = check(ls, flat_placement(1, s.p, 1));
  const auto f = earliest_finish(cs.dag());
  return *std::max_element(f.begin(), f.end());
}

// ------------------------------------------------------------------------------------------ golden orders

TEST(Seq1F1B, GoldenOrderP4M8K2) {  // docs/papers.md#seq1f1b
  const Schedule s = make_seq1f1b(4, uniform_microbatches(8, 1, 64, 2), 64);
  EXPECT_EQ(s.name, "seq1f1b");
  expect_prefix(s, 1, "F1.1 F1.2 F2.1 F2.2 F3.1 B1.2 F3.2 B1.1 F4.1 B2.2 F4.2 B2.1 F5.1 B3.2");
  expect_suffix(s, 1, "F8.2 B6.1 B7.2 B7.1 B8.2 B8.1");
  expect_prefix(s, 2, "F1.1 F1.2 F2.1 F2.2 B1.2 F3.1 B1.1 F3.2 B2.2 F4.1");
  expect_suffix(s, 2, "F8.2 B7.2 B7.1 B8.2 B8.1");
  expect_prefix(s, 3, "F1.1 F1.2 F2.1 B1.2 F2.2 B1.1 F3.1 B2.2 F3.2 B2.1");
  expect_suffix(s, 3, "F8.2 B7.1 B8.2 B8.1");
  expect_prefix(s, 4, "F1.1 F1.2 B1.2 F2.1 B1.1 F2.2 B2.2 F3.1 B2.1 F3.2");
  expect_suffix(s, 4, "F8.2 B8.2 B8.1");
}

TEST(Seq1F1BInterleaved, CodeGroupingReferenceOrder) {  // docs/papers.md#seq1f1b, Eq. 6: 11 warm-up forwards
  const Schedule s = make_seq1f1b_interleaved(4, 2, uniform_microbatches(8, 1, 64, 2), 64, Seq1F1BGrouping::Code);
  EXPECT_EQ(s.name, "seq1f1b-i");
  expect_prefix(s, 1,
                "F1.1c0 F1.2c0 F2.1c0 F2.2c0 F1.1c1 F1.2c1 F2.1c1 F2.2c1 F3.1c0 F3.2c0 F4.1c0 F4.2c0 B1.2c1 F3.1c1 "
                "B1.1c1");
  EXPECT_EQ(forwards_before_first_backward(s, 0), 12);  // 11 warm-up + the first steady forward
}

TEST(Seq1F1BInterleaved, FigureGroupingReferenceOrder) {  // docs/papers.md#seq1f1b, Figure 2: 16, 14, 12, 10
  const Schedule s = make_seq1f1b_interleaved(4, 2, uniform_microbatches(8, 1, 64, 2), 64, Seq1F1BGrouping::Figure);
  expect_prefix(s, 1,
                "F1.1c0 F1.2c0 F2.1c0 F2.2c0 F3.1c0 F3.2c0 F4.1c0 F4.2c0 F1.1c1 F1.2c1 F2.1c1 F2.2c1 F3.1c1 F3.2c1 "
                "F4.1c1 F4.2c1 B1.2c1 F5.1c0 B1.1c1 F5.2c0 B2.2c1");
  for (int r = 0; r < 4; r++) EXPECT_EQ(forwards_before_first_backward(s, r), 16 - 2 * r) << "rank " << r;
}

TEST(Seq1F1BInterleaved, CodeGroupingRejectsPNotMultipleOfK) {
  try {
    make_seq1f1b_interleaved(4, 2, uniform_microbatches(8, 1, 60, 3), 60, Seq1F1BGrouping::Code);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("p % k == 0"), std::string::npos) << e.what();
  }
  // The figure grouping has no such restriction.
  const Schedule s = make_seq1f1b_interleaved(4, 2, uniform_microbatches(8, 1, 60, 3), 60, Seq1F1BGrouping::Figure);
  check_schedule(s);
}

TEST(Seq1F1B, KEqualsOneIs1F1B) {
  const auto mbs = uniform_microbatches(8, 1, 16, 1);
  EXPECT_EQ(schedule_text(make_seq1f1b(4, mbs, 16)), schedule_text(make_1f1b(4, mbs, 16)));
  EXPECT_EQ(schedule_text(make_seq1f1b_interleaved(4, 2, mbs, 16)), schedule_text(make_interleaved(4, 2, mbs, 16)));
}

// ------------------------------------------------------------------------------------------ properties

// Each rank runs F and B of every (micro-batch, segment, own chunk) once; F(m,j) before F(m,j+1),
// B(m,j+1) before B(m,j), F before B; the static checker accepts the lowered schedule.
void expect_properties(const Schedule& s, int k) {
  const std::string what = s.name + " p=" + std::to_string(s.p) + " m=" + std::to_string(s.m) +
                           " k=" + std::to_string(k) + " v=" + std::to_string(s.v);
  for (int r = 0; r < s.p; r++) {
    std::map<std::tuple<int, int, int, int>, int> pos;  // (kind, chunk, mb, seg) -> index
    const auto& ops = s.per_rank[r];
    ASSERT_EQ(ops.size(), static_cast<std::size_t>(2 * s.m * k * s.v)) << what;
    for (std::size_t i = 0; i < ops.size(); i++) {
      const Op& op = ops[i];
      ASSERT_EQ(op.rank, r);
      ASSERT_EQ(op.stage, op.chunk * s.p + r);
      ASSERT_TRUE(pos.emplace(std::make_tuple(int(op.kind), op.chunk, op.microbatch, op.slice), int(i)).second)
          << what << ": duplicate " << op_text(op);
    }
    for (int c = 0; c < s.v; c++)
      for (int mb = 0; mb < s.m; mb++)
        for (int j = 0; j < k; j++) {
          const int f = pos.at({0, c, mb, j}), b = pos.at({1, c, mb, j});
          EXPECT_LT(f, b) << what;
          if (j + 1 < k) {
            EXPECT_LT(f, pos.at({0, c, mb, j + 1})) << what;
            EXPECT_GT(b, pos.at({1, c, mb, j + 1})) << what;
          }
        }
  }
  check_schedule(s);
  ConstantCosts cc;
  cc.v = s.v;
  cc.seq_len = s.seq_len;
  const ConstantCostModel cost(cc);
  EXPECT_NO_THROW(check(lower(s, 1, 1, cost), flat_placement(1, s.p, 1))) << what;
}

TEST(Seq1F1B, PropertiesOverGrid) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 16})
      for (int k : {1, 2, 3, 4}) {
        const int seq = 12 * k;
        const Schedule s = make_seq1f1b(p, uniform_microbatches(m, 1, seq, k), seq);
        expect_properties(s, k);
        for (int r = 0; r < p; r++) {
          EXPECT_EQ(warmup_seq1f1b(p, m, k, r), std::min(p - r - 2 + k, m * k));
          // The warm-up plus the first steady forward (unless everything is warm-up).
          const int w = warmup_seq1f1b(p, m, k, r);
          EXPECT_EQ(forwards_before_first_backward(s, r), std::min(w + 1, m * k)) << p << " " << m << " " << k;
        }
      }
}

TEST(Seq1F1BInterleaved, PropertiesOverGrid) {
  for (auto g : {Seq1F1BGrouping::Code, Seq1F1BGrouping::Figure})
    for (int p : {1, 2, 4, 8})
      for (int mult : {1, 2, 3})
        for (int k : {1, 2, 4})
          for (int n : {2, 3}) {
            if (g == Seq1F1BGrouping::Code && p % k != 0) continue;
            const int m = p * mult, seq = 8 * k;
            const Schedule s = make_seq1f1b_interleaved(p, n, uniform_microbatches(m, 1, seq, k), seq, g);
            expect_properties(s, k);
            for (int r = 0; r < p; r++) {
              const int w = warmup_seq1f1b_interleaved(p, m, k, n, r, g);
              EXPECT_EQ(forwards_before_first_backward(s, r), std::min(w + 1, m * n * k));
            }
          }
}

// ------------------------------------------------------------------------------------------ closed forms

TEST(Seq1F1B, BubbleClosedForm) {  // phi = (p-1)/(k*m+p-1): makespan = (m + (p-1)/k) * t, t = F + B = 3
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p})
      for (int k : {1, 2, 4}) {
        const int seq = 16 * k;
        const Schedule s = make_seq1f1b(p, uniform_microbatches(m, 1, seq, k), seq);
        const double T = makespan(s, 1);
        EXPECT_NEAR(T, (m + double(p - 1) / k) * 3.0, 1e-9) << p << " " << m << " " << k;
        EXPECT_NEAR(1.0 - m * 3.0 / T, double(p - 1) / (k * m + p - 1), 1e-12);
      }
}

TEST(Seq1F1BInterleaved, BubbleClosedForm) {  // phi = (p-1)/(n*k*m+p-1), both groupings (docs/papers.md#seq1f1b)
  for (auto g : {Seq1F1BGrouping::Code, Seq1F1BGrouping::Figure})
    for (int p : {2, 4, 8})
      for (int mult : {2, 4})
        for (int k : {1, 2})
          for (int n : {2, 3}) {
            const int m = p * mult, seq = 16 * k;
            const Schedule s = make_seq1f1b_interleaved(p, n, uniform_microbatches(m, 1, seq, k), seq, g);
            const double T = makespan(s, n);
            EXPECT_NEAR(T, (m + double(p - 1) / (n * k)) * 3.0, 1e-9) << p << " " << m << " " << k << " " << n;
            EXPECT_NEAR(1.0 - m * 3.0 / T, double(p - 1) / (n * k * m + p - 1), 1e-12);
          }
}

Scenario mem_scenario(int pp, int v, int seq_len) {
  Scenario s;
  s.name = "test";
  s.source = "<test>";
  s.model = *model_preset("megatron-1.7b");
  s.model.layers = 48;
  s.model.seq_len = seq_len;
  s.cluster = *cluster_preset("dgx-a100");
  s.parallel.pp = pp;
  s.parallel.v = v;
  return s;
}

TEST(Seq1F1B, PeakInFlightClosedForm) {  // docs/papers.md#seq1f1b: stage i holds (p-i+k-1)/k micro-batch units
  for (int p : {2, 4, 8})
    for (int k : {1, 2, 4}) {
      const int m = 2 * p, seq = 64 * k;
      const Schedule s = make_seq1f1b(p, uniform_microbatches(m, 1, seq, k), seq);
      const MemoryReport rep = memory_report(mem_scenario(p, 1, seq), s);
      for (int r = 0; r < p; r++)
        EXPECT_NEAR(rep.ranks[r].max_in_flight, double(p - r + k - 1) / k, 1e-12) << p << " " << k << " " << r;
    }
  // Worked values of docs/papers.md#seq1f1b (k = 4, n = 2): stage-0 peak 2.75 / 3.25 (code) / 6.25 (figure) at p = 8.
  const auto mbs = uniform_microbatches(16, 1, 256, 4);
  EXPECT_NEAR(memory_report(mem_scenario(8, 1, 256), make_seq1f1b(8, mbs, 256)).ranks[0].max_in_flight, 2.75, 1e-12);
  EXPECT_NEAR(memory_report(mem_scenario(8, 2, 256), make_seq1f1b_interleaved(8, 2, mbs, 256)).ranks[0].max_in_flight,
              3.25, 1e-12);
  EXPECT_NEAR(memory_report(mem_scenario(8, 2, 256), make_seq1f1b_interleaved(8, 2, mbs, 256, Seq1F1BGrouping::Figure))
                  .ranks[0]
                  .max_in_flight,
              6.25, 1e-12);
  const auto mbs4 = uniform_microbatches(8, 1, 256, 4);
  EXPECT_NEAR(memory_report(mem_scenario(4, 2, 256), make_seq1f1b_interleaved(4, 2, mbs4, 256)).ranks[0].max_in_flight,
              1.75, 1e-12);
}

TEST(Seq1F1BInterleaved, PeakInFlightPerStage) {  // ((n-1)p + 2(p-i-1) + k)/(nk), code grouping
  for (int p : {4, 8})
    for (int k : {1, 2, 4})
      for (int n : {2, 3}) {
        const int m = 2 * p, seq = 64 * k;
        const Schedule s = make_seq1f1b_interleaved(p, n, uniform_microbatches(m, 1, seq, k), seq);
        const MemoryReport rep = memory_report(mem_scenario(p, n, seq), s);
        for (int r = 0; r < p; r++)
          EXPECT_NEAR(rep.ranks[r].max_in_flight, double((n - 1) * p + 2 * (p - r - 1) + k) / (n * k), 1e-12)
              << p << " " << k << " " << n << " " << r;
      }
}

// ------------------------------------------------------------------------------------------ partitioning

ModelSpec model(int L, int h, int nh) {
  ModelSpec m;
  m.layers = L;
  m.hidden = h;
  m.heads = nh;
  m.ffn_hidden = 4 * h;
  m.vocab = 32000;
  return m;
}

TEST(Cwp, ReferenceSplits) {  // docs/papers.md#seq1f1b (the authors' solver, V = 32000, TP rounding)
  struct Row {
    int L, h, nh, tp, s;
    std::vector<int> want;
  };
  const std::vector<Row> rows = {
      {32, 2560, 32, 1, 16384, {5301, 4230, 3627, 3226}},     {32, 2560, 32, 1, 24576, {8549, 6276, 5205, 4546}},
      {32, 2560, 32, 1, 32768, {12019, 8252, 6703, 5794}},    {32, 4096, 32, 8, 32768, {11080, 8408, 7064, 6216}},
      {32, 4096, 32, 8, 65536, {25128, 16248, 13000, 11160}}, {32, 4096, 32, 8, 131072, {55880, 30816, 24008, 20368}},
      {40, 5120, 40, 8, 32768, {10680, 8448, 7224, 6416}},    {40, 5120, 40, 8, 49152, {17216, 12528, 10368, 9040}},
      {40, 5120, 40, 8, 65536, {24208, 16464, 13344, 11520}}, {64, 6144, 64, 8, 32768, {10376, 8472, 7344, 6576}},
      {64, 6144, 64, 8, 49152, {16696, 12608, 10568, 9280}},  {64, 6144, 64, 8, 65536, {23464, 16616, 13624, 11832}},
  };
  for (const Row& r : rows) {
    const auto got = cwp_split_lengths(r.s, 4, seq1f1b_flop_cost(model(r.L, r.h, r.nh)), r.tp);
    EXPECT_EQ(got, r.want) << "h " << r.h << " s " << r.s;
  }
}

TEST(Cwp, EqualCostAndUniformRatios) {
  const CausalCost c{100.0, 1.0};
  const auto len = cwp_split_lengths(10000, 5, c, 1);
  int sum = 0;
  for (int l : len) sum += l;
  EXPECT_EQ(sum, 10000);
  for (double r : segment_cost_ratios(len, c)) EXPECT_NEAR(r, 1.0, 2e-3);
  EXPECT_EQ(split_points({3, 4, 5}), (std::vector<int>{3, 7}));
  EXPECT_EQ(uniform_split_lengths(10, 3), (std::vector<int>{3, 3, 4}));
  // 2.7B at s = 16384: uniform split cost ratios 1 : 1.24 : 1.47 : 1.71 (per-layer cost without vocabulary).
  const CausalCost layer{24.0 * 2560 * 2560, (4.0 * 80 + 3) * 32};
  const auto u = segment_cost_ratios(uniform_split_lengths(16384, 4), layer);
  const std::vector<double> want = {1, 1.24, 1.47, 1.71};
  for (int i = 0; i < 4; i++) EXPECT_NEAR(u[i], want[i], 0.006);
  EXPECT_THROW(cwp_split_lengths(10, 4, c, 8), std::invalid_argument);  // rounding empties a segment
}

TEST(Seq1F1B, MakeScheduleDispatchesSlicing) {
  Scenario s = mem_scenario(4, 1, 32768);
  s.model = model(32, 4096, 32);
  s.model.seq_len = 32768;
  s.parallel.tp = 8;
  s.parallel.global_batch = 8;
  s.schedule.kind = ScheduleKind::Seq1F1B;
  s.schedule.seq_slices = 4;
  s.schedule.slicing = "cwp";
  Schedule sch = make_schedule(s);
  EXPECT_EQ(sch.name, "seq1f1b");
  EXPECT_EQ(sch.microbatches[0].slice_begin, (std::vector<int>{0, 11080, 19488, 26552}));
  EXPECT_EQ(split_points(seq1f1b_split_lengths(s)), (std::vector<int>{11080, 19488, 26552}));
  s.schedule.slicing = "uniform";
  EXPECT_EQ(make_schedule(s).microbatches[0].slice_begin, (std::vector<int>{0, 8192, 16384, 24576}));
  s.schedule.kind = ScheduleKind::Seq1F1BInterleaved;
  s.parallel.v = 2;
  sch = make_schedule(s);
  EXPECT_EQ(sch.name, "seq1f1b-i");
  EXPECT_EQ(sch.v, 2);
}

}  // namespace
}  // namespace pipescope
