// Conformance suite: one parameterised test over every registered schedule (core/model/schedule_registry.h). For each:
// the static checker accepts it, every op of its grid appears exactly once, its makespan under constant costs
// and free communication equals its closed form, the memory model's in-flight peak equals the schedule's own
// count and its closed form, and two simulations of the default scenario with it write byte-identical JSON.
// Adding a schedule = its generator, its registry row and its rows in kMakespan / kPeak below (a test fails
// when a registered schedule has none).
//
// Closed forms (p ranks, m micro-batches, per-stage costs tF, tI, tW with tB = tI + tW, v chunks per rank,
// k token slices, free communication):
//   gpipe, 1f1b                   (m + p - 1)(tF + tB)                       m >= p for 1f1b
//   interleaved                   (m + (p - 1)/v)(tF + tB)                   m % p == 0, m > p
//   terapipe                      (m k + p - 1)(tF + tB)/k
//   seq1f1b                       (m + (p - 1)/k)(tF + tB)
//   seq1f1b-i                     (m + (p - 1)/(v k))(tF + tB)
//   zb-h1                         m(tF + tI + tW) + (p - 1)(tF + tI - tW)    m >= p, tW <= min(tF, tI)
//       (1F1B's bubble (p-1)(tF + tI + tW) less 2(p-1)tW: each rank's deferred W ops fill the cool-down)
//   zb-h2                         m(tF + tI + tW) + (p - 1) tF               m >= p, tI <= min(tF, tW)
//       (what is left is the pipeline fill, one forward per hop: no bubble after the warm-up, so zero bubble
//        in the paper's sense at tF = tI = tW)
//   zb-v                          3 m t + (p - 1) t / 2                      tF = tI = tW = t, m >= 2p - 1
//       (half a stage's forward per hop: the V puts both halves of the model on every rank)
//   dualpipev                     3 m t + (p - 1) t                          tF = tI = tW = t, m >= 2p
//       (DeepSeek's DualPipe bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2p chunk-stages, per chunk F = W = t/2,
//        B = t and F&B = F + B when communication is free: the pairs run their two halves back to back)
//   dualpipe                      1.5 m t + (p/2 - 1) t                      tF = tI = tW = t, p even, m even >= 2p
//       (DeepSeek's (PP/2 - 1)(F&B + B - 3W) with PP = p: each op runs a whole model stage of two copies, priced
//        t/2 here like any v = 2 chunk; each rank runs m forwards and m backwards, half of each direction)
// Peak in-flight activations (whole stage-micro-batches, the worst rank): gpipe m, 1f1b min(p, m), zb-h1
// min(p, m), zb-h2 min(2p - 1, m), zb-v p (m >= 2p - 1), dualpipev p + 1/2 (one chunk more than zb-v: the pair's
// forward is held beside its backward; DeepSeek's PP + 1 chunk-stages), dualpipe (p + 1)/2 (DeepSeek's PP + 1 whole
// stages, counted in half-stage chunk units like every v = 2 schedule), interleaved (2(p-1) + (v-1)p + 1)/v, terapipe
// m, seq1f1b (p + k - 1)/k, seq1f1b-i ((v-1)p + 2(p-1) + k)/(v k).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

constexpr int kSeqLen = 64;

struct Shape {
  int p, m, k;  // k: token slices of the schedules that take them
};
struct Costs {
  double tF, tI, tW;
  double tB() const { return tI + tW; }
};

int slices_of(const ScheduleEntry& e, const Shape& sh) { return e.traits.sliced() ? sh.k : 1; }
int chunks_of(const ScheduleEntry& e) { return e.traits.fit_v(1); }

Schedule build(const ScheduleEntry& e, const Shape& sh) {
  return e.generate(sh.p, chunks_of(e), uniform_microbatches(sh.m, 1, kSeqLen, slices_of(e, sh)), kSeqLen);
}

using test::flat_placement;

double makespan(const Schedule& s, const Costs& c) {
  ConstantCosts cc;
  cc.forward_s = c.tF;
  cc.backward_s = c.tB();
  cc.weight_share = c.tW / c.tB();
  cc.v = s.v;
  cc.seq_len = kSeqLen;
  const ConstantCostModel cost(cc);
  const LoweredSchedule ls = lower(s, 1, 1, cost);
  const Placement pl = flat_placement(1, s.p, 1);
  const CheckedSchedule cs = check(ls, pl);
  const auto f = earliest_finish(cs.dag());
  return *std::max_element(f.begin(), f.end());
}

using MakespanForm = std::function<std::optional<double>(const Shape&, int v, const Costs&)>;

// The closed forms of the header comment; nullopt where the form's conditions do not hold.
const std::map<std::string, MakespanForm>& makespan_forms() {
  static const std::map<std::string, MakespanForm> forms = {
      {"gpipe",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> { return (s.m + s.p - 1) * (c.tF + c.tB()); }},
      {"1f1b",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < s.p) return std::nullopt;
         return (s.m + s.p - 1) * (c.tF + c.tB());
       }},
      {"interleaved",
       [](const Shape& s, int v, const Costs& c) -> std::optional<double> {
         if (s.m % s.p != 0 || s.m == s.p) return std::nullopt;
         return (s.m + (s.p - 1.0) / v) * (c.tF + c.tB());
       }},
      {"terapipe",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         return (s.m * s.k + s.p - 1.0) * (c.tF + c.tB()) / s.k;
       }},
      {"seq1f1b",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < s.p) return std::nullopt;
         return (s.m + (s.p - 1.0) / s.k) * (c.tF + c.tB());
       }},
      {"seq1f1b-i",
       [](const Shape& s, int v, const Costs& c) -> std::optional<double> {
         if (s.m % s.p != 0 || s.m == s.p || s.p % s.k != 0) return std::nullopt;
         return (s.m + (s.p - 1.0) / (v * s.k)) * (c.tF + c.tB());
       }},
      {"zb-h1",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < s.p || c.tW > std::min(c.tF, c.tI)) return std::nullopt;
         return s.m * (c.tF + c.tI + c.tW) + (s.p - 1) * (c.tF + c.tI - c.tW);
       }},
      {"zb-h2",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < s.p || c.tI > std::min(c.tF, c.tW)) return std::nullopt;
         return s.m * (c.tF + c.tI + c.tW) + (s.p - 1) * c.tF;
       }},
      {"zb-v",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < 2 * s.p - 1 || c.tF != c.tI || c.tI != c.tW) return std::nullopt;
         return 3 * s.m * c.tF + (s.p - 1) * c.tF / 2;
       }},
      {"dualpipev",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < 2 * s.p || c.tF != c.tI || c.tI != c.tW) return std::nullopt;
         return 3 * s.m * c.tF + (s.p - 1) * c.tF;
       }},
      {"dualpipe",
       [](const Shape& s, int, const Costs& c) -> std::optional<double> {
         if (s.m < 2 * s.p || s.p % 2 != 0 || s.m % 2 != 0 || c.tF != c.tI || c.tI != c.tW) return std::nullopt;
         return 1.5 * s.m * c.tF + (s.p / 2 - 1) * c.tF;
       }},
  };
  return forms;
}

using PeakForm = std::function<double(const Shape&, int v)>;

const std::map<std::string, PeakForm>& peak_forms() {
  static const std::map<std::string, PeakForm> forms = {
      {"gpipe", [](const Shape& s, int) { return double(s.m); }},
      {"1f1b", [](const Shape& s, int) { return double(std::min(s.p, s.m)); }},
      {"interleaved", [](const Shape& s, int v) { return (2.0 * (s.p - 1) + (v - 1) * s.p + 1) / v; }},
      {"terapipe", [](const Shape& s, int) { return double(s.m); }},
      {"seq1f1b", [](const Shape& s, int) { return (s.p + s.k - 1.0) / s.k; }},
      {"seq1f1b-i", [](const Shape& s, int v) { return ((v - 1.0) * s.p + 2.0 * (s.p - 1) + s.k) / (v * s.k); }},
      {"zb-h1", [](const Shape& s, int) { return double(std::min(s.p, s.m)); }},
      {"zb-h2", [](const Shape& s, int) { return double(std::min(2 * s.p - 1, s.m)); }},
      {"zb-v", [](const Shape& s, int) { return double(s.p); }},
      {"dualpipev", [](const Shape& s, int) { return s.p + 0.5; }},
      {"dualpipe", [](const Shape& s, int) { return (s.p + 1) / 2.0; }},
  };
  return forms;
}

// Shapes every schedule can take (m a multiple of p, m >= 2p - 1, p % k == 0 for Seq1F1B-I's grouping).
const Shape kShapes[] = {{4, 8, 2}, {2, 4, 2}, {4, 12, 4}, {2, 6, 1}};
const Costs kCosts[] = {{1, 1, 1}, {2, 1, 1}, {1, 1.5, 0.5}, {0.5, 0.5, 0.5}};

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  const ScheduleEntry& entry() const { return *find_schedule(GetParam()); }
};

TEST_P(Conformance, CheckerAcceptsAndEveryOpOnce) {
  for (const Shape& sh : kShapes) {
    const Schedule s = build(entry(), sh);
    EXPECT_EQ(s.name.empty(), false);
    EXPECT_NO_THROW(check_schedule(s)) << GetParam() << " p=" << sh.p << " m=" << sh.m;
    const OpKeyIndex index(s);
    std::vector<int> seen(index.size(), 0);
    std::size_t split = 0, fused = 0;
    for (const auto& ops : s.per_rank)
      for (const Op& op : ops) {
        ASSERT_GE(index.slot(key_of(op)), 0) << op_text(op);
        seen[static_cast<std::size_t>(index.slot(key_of(op)))]++;
        split += op.kind == OpKind::BackwardInput;
        fused += op.kind == OpKind::Backward;
      }
    for (std::size_t slot = 0; slot < index.size(); slot++)
      EXPECT_EQ(seen[slot], index.expected(index.key(slot)) ? 1 : 0) << op_text(op_of(s, index.key(slot)));
    // The registry's trait says which backward form the generator emits.
    std::size_t units = 0;  // (stage, micro-batch, slice)s on the micro-batches' routes (half the stages in DualPipe)
    for (int mb = 0; mb < sh.m; mb++) units += static_cast<std::size_t>(s.route_end(mb) - s.route_begin(mb));
    units *= static_cast<std::size_t>(slices_of(entry(), sh));
    // DualPipeV splits only the backwards whose W fills a bubble.
    if (entry().traits.overlapped)
      EXPECT_EQ(split + fused, units) << GetParam();
    else
      EXPECT_EQ(entry().traits.split_backward ? split : fused, units) << GetParam();
    EXPECT_EQ(s.v, chunks_of(entry()));
    EXPECT_EQ(s.style, entry().traits.style);
  }
}

TEST_P(Conformance, MakespanMatchesClosedForm) {
  const auto it = makespan_forms().find(GetParam());
  ASSERT_NE(it, makespan_forms().end()) << "no closed-form makespan for registered schedule " << GetParam();
  int checked = 0;
  for (const Shape& sh : kShapes)
    for (const Costs& c : kCosts) {
      const Schedule s = build(entry(), sh);
      const std::optional<double> want = it->second(sh, s.v, c);
      if (!want) continue;
      checked++;
      EXPECT_NEAR(makespan(s, c), *want, 1e-9) << GetParam() << " p=" << sh.p << " m=" << sh.m << " k=" << sh.k
                                               << " tF=" << c.tF << " tI=" << c.tI << " tW=" << c.tW;
    }
  EXPECT_GT(checked, 0) << "the closed form of " << GetParam() << " applies to none of the test shapes";
}

Scenario memory_scenario(const ScheduleEntry& e, const Schedule& s) {
  Scenario sc = default_scenario();
  sc.parallel.dp = 1;
  sc.parallel.tp = 1;
  sc.parallel.pp = s.p;
  sc.parallel.v = s.v;
  sc.schedule.kind = e.kind;
  sc.model.seq_len = kSeqLen;
  sc.model.layers = 24;  // divisible by p * v of every shape here
  return sc;
}

TEST_P(Conformance, InFlightPeakMatchesScheduleAndClosedForm) {
  const auto it = peak_forms().find(GetParam());
  ASSERT_NE(it, peak_forms().end()) << "no closed-form in-flight peak for registered schedule " << GetParam();
  for (const Shape& sh : kShapes) {
    const Schedule s = build(entry(), sh);
    const MemoryReport rep = memory_report(memory_scenario(entry(), s), s);
    double worst = 0;
    for (int r = 0; r < s.p; r++) {
      // Independent count: a forward brings its token share of one chunk in, B or W takes it out.
      double live = 0, peak = 0;
      for (const Op& op : s.per_rank[r]) {
        const double unit = double(op.tokens()) / kSeqLen / s.v;
        switch (op.kind) {
          case OpKind::Forward:
            live += unit;
            break;
          case OpKind::Backward:
          case OpKind::BackwardWeight:
            live -= unit;
            break;
          case OpKind::BackwardInput:
            break;
        }
        peak = std::max(peak, live);
      }
      EXPECT_NEAR(rep.ranks[r].max_in_flight, peak, 1e-12) << GetParam() << " rank " << r;
      worst = std::max(worst, rep.ranks[r].max_in_flight);
    }
    EXPECT_NEAR(worst, it->second(sh, s.v), 1e-12) << GetParam() << " p=" << sh.p << " m=" << sh.m << " k=" << sh.k;
  }
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST_P(Conformance, SimulationJsonIsByteIdenticalOnRerun) {
  const std::string bin = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope";
  const std::string dir = ::testing::TempDir();
  std::string out[2];
  for (int i = 0; i < 2; i++) {
    const std::string json = dir + "conformance_" + GetParam() + "_" + std::to_string(i) + ".json";
    const std::string cmd = bin + " simulate --schedule " + GetParam() + " --json " + json + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    out[i] = slurp(json);
    std::remove(json.c_str());
  }
  EXPECT_FALSE(out[0].empty());
  EXPECT_EQ(out[0], out[1]) << GetParam();
  // (TeraPipe without slices is GPipe, and reports itself so: the default scenario has whole sequences.)
  if (!entry().traits.sliced()) {
    EXPECT_NE(out[0].find("\"schedule\": \"" + GetParam() + "\""), std::string::npos) << out[0].substr(0, 400);
  }
}

// Every generator (kind file reads a schedule instead: tests/test_schedule_csv.cc loads each of these back).
std::vector<std::string> generated_schedules() {
  std::vector<std::string> v;
  for (const ScheduleEntry& e : schedule_registry())
    if (!e.traits.from_file) v.emplace_back(e.name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, Conformance, ::testing::ValuesIn(generated_schedules()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// Registry invariants: names unique, every kind has one row, lookups agree.
TEST(ScheduleRegistry, NamesUniqueAndLookupsAgree) {
  const auto& rows = schedule_registry();
  for (std::size_t i = 0; i < rows.size(); i++) {
    EXPECT_EQ(find_schedule(rows[i].name), &rows[i]);
    EXPECT_EQ(&schedule_entry(rows[i].kind), &rows[i]);
    EXPECT_STREQ(to_string(rows[i].kind), rows[i].name);
    EXPECT_NE(std::string(rows[i].help), "");
    for (std::size_t j = i + 1; j < rows.size(); j++) EXPECT_STRNE(rows[i].name, rows[j].name);
  }
  EXPECT_EQ(find_schedule("no-such-schedule"), nullptr);
  EXPECT_EQ(schedule_names_if([](const ScheduleTraits& t) { return t.sliced(); }),
            "terapipe, seq1f1b, seq1f1b-i or file");
  EXPECT_EQ(schedule_names_if([](const ScheduleTraits& t) { return t.split_backward; }),
            "zb-h1, zb-h2, zb-v, dualpipev or dualpipe");
}

}  // namespace
}  // namespace pipescope
