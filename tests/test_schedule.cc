// Schedule IR and generators: canonical text, golden orders (docs/papers.md#megatron), property tests over
// a (p, m, v) grid, and closed-form makespans with free communication (docs/papers.md#megatron).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

using test::flat_placement;

// Spec notation "F5b" on rank r -> op_text form "<r>F4c1" (1-based micro-batch, chunk letter a/b).
std::string spec_line(int r, const std::string& line) {
  std::istringstream in(line);
  std::string tok, out = "r" + std::to_string(r) + ":";
  while (in >> tok) {
    std::string t = std::to_string(r) + tok[0];
    std::size_t k = 1;
    int mb = 0;
    while (k < tok.size() && std::isdigit(static_cast<unsigned char>(tok[k]))) mb = mb * 10 + (tok[k++] - '0');
    t += std::to_string(mb - 1);
    if (k < tok.size() && tok[k] != 'a') t += "c" + std::to_string(tok[k] - 'a');
    out += " " + t;
  }
  return out + "\n";
}

// Makespan with free communication: the latest earliest-finish time of any DAG node.
double makespan(const Schedule& s, const ConstantCosts& cc, int dp = 1) {
  const ConstantCostModel cost(cc);
  const LoweredSchedule ls = lower(s, dp, 1, cost);
  const Placement pl = flat_placement(dp, s.p, 1);
  const CheckedSchedule cs = check(ls, pl);
  const auto f = earliest_finish(cs.dag());
  return *std::max_element(f.begin(), f.end());
}

ConstantCosts unit_costs(int v = 1, int seq_len = 1) {
  ConstantCosts cc;
  cc.forward_s = 1.0;
  cc.backward_s = 2.0;
  cc.v = v;
  cc.seq_len = seq_len;
  return cc;
}

// ------------------------------------------------------------------------------------------ canonical text

TEST(ScheduleText, RoundTrip) {
  std::vector<Op> ops;
  for (OpKind kind : {OpKind::Forward, OpKind::Backward, OpKind::BackwardInput, OpKind::BackwardWeight})
    for (int rank : {0, 3, 17})
      for (int chunk : {0, 1, 3})
        for (int mb : {0, 7, 123})
          for (int slice : {0, 2, 11}) {
            Op op;
            op.kind = kind;
            op.rank = rank;
            op.chunk = chunk;
            op.stage = chunk == 0 ? rank : -1;  // the one-argument parser cannot know p
            op.microbatch = mb;
            op.slice = slice;
            ops.push_back(op);
          }
  std::set<std::string> texts;
  for (const Op& op : ops) {
    const std::string t = op_text(op);
    EXPECT_EQ(parse_op(t), op) << t;
    EXPECT_EQ(op_text(parse_op(t)), t);
    texts.insert(t);
  }
  EXPECT_EQ(texts.size(), ops.size());  // distinct ops, distinct texts
}

TEST(ScheduleText, Examples) {
  Op op;
  op.rank = 2;
  EXPECT_EQ(op_text(op), "2F0");
  op.kind = OpKind::Backward;
  op.rank = 1;
  op.microbatch = 3;
  op.chunk = 1;
  EXPECT_EQ(op_text(op), "1B3c1");
  op.slice = 2;
  EXPECT_EQ(op_text(op), "1B3c1s2");
  const Op e = parse_op("3B7c1s0");  // explicit zero suffixes are accepted
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.kind, OpKind::Backward);
  EXPECT_EQ(e.microbatch, 7);
  EXPECT_EQ(e.chunk, 1);
  EXPECT_EQ(e.slice, 0);
  EXPECT_EQ(parse_op("0F5s2").slice, 2);
  EXPECT_EQ(parse_op("0F5s2").stage, 0);
  EXPECT_EQ(parse_op("1I2").kind, OpKind::BackwardInput);
  EXPECT_EQ(parse_op("1W2c1").kind, OpKind::BackwardWeight);
  op.kind = OpKind::BackwardWeight;
  EXPECT_EQ(op_text(op), "1W3c1s2");
  for (OpKind k : {OpKind::Forward, OpKind::Backward, OpKind::BackwardInput, OpKind::BackwardWeight})
    EXPECT_EQ(std::string(1, kind_letter(k)), std::string("FBIW").substr(static_cast<std::size_t>(kind_index(k)), 1));
}

TEST(ScheduleText, VStyleStagesRoundTrip) {
  // ZB-V: rank r holds stages r (chunk 0) and 2p-1-r (chunk 1).
  const Schedule s = make_zb_v(4, uniform_microbatches(8, 1, 64, 1), 64);
  EXPECT_EQ(s.style, StageStyle::V);
  for (int g = 0; g < s.stages(); g++) {
    const int r = s.rank_of_stage(g), c = s.chunk_of_stage(g);
    EXPECT_EQ(r, g < 4 ? g : 7 - g) << g;
    EXPECT_EQ(s.stage_of(r, c), g);
  }
  EXPECT_EQ(parse_op("1I3c1", s).stage, 6);
  EXPECT_EQ(parse_op("0W0c1", s).stage, 7);
  for (const auto& ops : s.per_rank)
    for (const Op& op : ops) EXPECT_EQ(parse_op(op_text(op), s), op) << op_text(op);
}

TEST(ScheduleText, MalformedTextIsRejected) {
  for (const char* bad : {"", "F0", "2X0", "2F", "2Fc1", "2F0c", "2F0s", "2F0x1", "2F0s1c1", "2F0c1c1", "-1F0", "2F01",
                          "02F1", "2F0 ", "2F99999999999"}) {
    EXPECT_THROW(parse_op(bad), std::invalid_argument) << bad;
  }
  try {
    parse_op("2Q0");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2Q0"), std::string::npos) << e.what();
  }
}

TEST(ScheduleText, ScheduleAwareParseFillsStageAndTokens) {
  const Schedule s = make_interleaved(4, 2, uniform_microbatches(8, 1, 64, 1), 64);
  const Op op = parse_op("1B3c1", s);
  EXPECT_EQ(op.stage, 5);
  EXPECT_EQ(op.tok_begin, 0);
  EXPECT_EQ(op.tok_end, 64);
  EXPECT_THROW(parse_op("4F0", s), std::invalid_argument);    // rank >= p
  EXPECT_THROW(parse_op("1F0c2", s), std::invalid_argument);  // chunk >= v
  EXPECT_THROW(parse_op("1F8", s), std::invalid_argument);    // micro-batch >= m
  EXPECT_THROW(parse_op("1F0s1", s), std::invalid_argument);  // unsliced
  // Every op of the schedule parses back to itself.
  for (const auto& ops : s.per_rank)
    for (const Op& o : ops) EXPECT_EQ(parse_op(op_text(o), s), o);
  const Schedule t = make_gpipe(2, uniform_microbatches(2, 1, 10, 3), 10);
  const Op sl = parse_op("1B1s2", t);
  EXPECT_EQ(sl.tok_begin, 6);
  EXPECT_EQ(sl.tok_end, 10);
}

TEST(ScheduleText, ScheduleTextOneLinePerRank) {
  const Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 8, 1), 8);
  EXPECT_EQ(schedule_text(s), "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1\n");
  EXPECT_EQ(s.op_count(), 8u);
}

// ------------------------------------------------------------------------------------------ micro-batches

TEST(ScheduleMicrobatches, UniformSlicesLastTakesRemainder) {
  const auto mbs = uniform_microbatches(3, 2, 10, 3);
  ASSERT_EQ(mbs.size(), 3u);
  EXPECT_EQ(mbs[2].seq_begin, 4);
  EXPECT_EQ(mbs[2].seq_count, 2);
  EXPECT_EQ(mbs[0].slice_begin, (std::vector<std::int32_t>{0, 3, 6}));
  const Schedule s = make_gpipe(1, mbs, 10);
  EXPECT_EQ(s.per_rank[0][2].tokens(), 4);  // slice 2 of micro-batch 0: tokens 6..10
  EXPECT_THROW(uniform_microbatches(0, 1, 8, 1), std::invalid_argument);
  EXPECT_THROW(uniform_microbatches(2, 0, 8, 1), std::invalid_argument);
  EXPECT_THROW(uniform_microbatches(2, 1, 8, 9), std::invalid_argument);
  EXPECT_THROW(uniform_microbatches(2, 1, 8, 0), std::invalid_argument);
}

TEST(ScheduleMicrobatches, ExplicitSlices) {
  const auto mbs = sliced_microbatches(2, 1, {5, 2, 1});
  EXPECT_EQ(mbs[1].slice_begin, (std::vector<std::int32_t>{0, 5, 7}));
  const Schedule s = make_gpipe(2, mbs, 8);
  EXPECT_EQ(s.name, "terapipe");
  EXPECT_EQ(s.per_rank[1][1].tok_begin, 5);
  EXPECT_EQ(s.per_rank[1][1].tok_end, 7);
  EXPECT_THROW(sliced_microbatches(2, 1, {}), std::invalid_argument);
  EXPECT_THROW(sliced_microbatches(2, 1, {4, 0}), std::invalid_argument);
  // Slices that reach beyond the sequence.
  EXPECT_THROW(make_gpipe(2, sliced_microbatches(2, 1, {4, 4}), 4), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------ golden orders

TEST(ScheduleGolden, OneFOneBMegatronP4M8) {
  const char* spec[] = {
      "F1 F2 F3 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 B6 B7 B8",
      "F1 F2 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 F8 B6 B7 B8",
      "F1 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 F8 B7 B8",
      "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8",
  };
  std::string expected;
  for (int r = 0; r < 4; r++) expected += spec_line(r, spec[r]);
  EXPECT_EQ(schedule_text(make_1f1b(4, uniform_microbatches(8, 1, 16, 1), 16)), expected);
}

TEST(ScheduleGolden, InterleavedMegatronP4M8V2) {
  const char* spec[] = {
      "F1a F2a F3a F4a F1b F2b F3b F4b F5a F6a F7a B1b F8a B2b F5b B3b F6b B4b F7b B1a F8b B2a B3a B4a B5b B6b B7b "
      "B8b B5a B6a B7a B8a",
      "F1a F2a F3a F4a F1b F2b F3b F4b F5a B1b F6a B2b F7a B3b F8a B4b F5b B1a F6b B2a F7b B3a F8b B4a B5b B6b B7b "
      "B8b B5a B6a B7a B8a",
      "F1a F2a F3a F4a F1b F2b F3b B1b F4b B2b F5a B3b F6a B4b F7a B1a F8a B2a F5b B3a F6b B4a F7b B5b F8b B6b B7b "
      "B8b B5a B6a B7a B8a",
      "F1a F2a F3a F4a F1b B1b F2b B2b F3b B3b F4b B4b F5a B1a F6a B2a F7a B3a F8a B4a F5b B5b F6b B6b F7b B7b F8b "
      "B8b B5a B6a B7a B8a",
  };
  std::string expected;
  for (int r = 0; r < 4; r++) expected += spec_line(r, spec[r]);
  const Schedule s = make_interleaved(4, 2, uniform_microbatches(8, 1, 16, 1), 16);
  EXPECT_EQ(schedule_text(s), expected);
  EXPECT_EQ(s.per_rank[1][4].stage, 5);  // F1b on rank 1 = virtual stage chunk * p + rank
}

TEST(ScheduleGolden, GPipeAndTeraPipeOrder) {
  EXPECT_EQ(schedule_text(make_gpipe(2, uniform_microbatches(3, 1, 4, 1), 4)),
            "r0: 0F0 0F1 0F2 0B2 0B1 0B0\nr1: 1F0 1F1 1F2 1B2 1B1 1B0\n");
  // TeraPipe: slices in order forward, reversed backward, micro-batches reversed.
  EXPECT_EQ(schedule_text(make_gpipe(1, uniform_microbatches(2, 1, 4, 2), 4)),
            "r0: 0F0 0F0s1 0F1 0F1s1 0B1s1 0B1 0B0s1 0B0\n");
}

TEST(ScheduleGolden, InterleavedMEqualsPIsAllWarmUp) {
  const Schedule s = make_interleaved(4, 2, uniform_microbatches(4, 1, 4, 1), 4);
  for (int r = 0; r < 4; r++) {
    const auto& ops = s.per_rank[r];
    for (std::size_t i = 0; i < ops.size(); i++)
      EXPECT_EQ(ops[i].kind, i < ops.size() / 2 ? OpKind::Forward : OpKind::Backward) << r << " " << i;
  }
}

TEST(ScheduleGolden, PeakInFlightChunkMicrobatches) {
  // docs/papers.md#megatron: interleaved peaks per rank = min(W_r + 1, m v).
  auto peaks = [](const Schedule& s) {
    std::vector<int> out;
    for (const auto& ops : s.per_rank) {
      int live = 0, peak = 0;
      for (const Op& op : ops) peak = std::max(peak, live += is_backward(op.kind) ? -1 : 1);
      out.push_back(peak);
    }
    return out;
  };
  EXPECT_EQ(peaks(make_interleaved(4, 2, uniform_microbatches(8, 1, 1, 1), 1)), (std::vector<int>{11, 9, 7, 5}));
  const auto p8 = peaks(make_interleaved(8, 2, uniform_microbatches(16, 1, 1, 1), 1));
  EXPECT_EQ(p8.front(), 23);
  EXPECT_EQ(p8.back(), 9);
  const auto p84 = peaks(make_interleaved(8, 4, uniform_microbatches(64, 1, 1, 1), 1));
  EXPECT_EQ(p84.front(), 39);
  EXPECT_EQ(p84.back(), 25);
  EXPECT_EQ(peaks(make_1f1b(4, uniform_microbatches(8, 1, 1, 1), 1)), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(peaks(make_gpipe(4, uniform_microbatches(8, 1, 1, 1), 1)), (std::vector<int>{8, 8, 8, 8}));
}

TEST(ScheduleGenerators, InvalidArguments) {
  const auto mbs = uniform_microbatches(6, 1, 8, 1);
  try {
    make_interleaved(4, 2, mbs, 8);
    FAIL() << "m % p != 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("m % p == 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_interleaved(3, 0, mbs, 8), std::invalid_argument);
  EXPECT_THROW(make_1f1b(0, mbs, 8), std::invalid_argument);
  EXPECT_THROW(make_gpipe(2, {}, 8), std::invalid_argument);
  EXPECT_THROW(make_1f1b(2, uniform_microbatches(2, 1, 8, 2), 8), std::invalid_argument);  // sliced: Seq1F1B
  EXPECT_THROW(make_interleaved(2, 2, uniform_microbatches(2, 1, 8, 2), 8), std::invalid_argument);
  EXPECT_THROW(make_gpipe(2, mbs, 0), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------ properties

struct Counts {
  std::map<std::tuple<int, int, int, int, int>, int> seen;  // (kind, stage, mb, slice, chunk) -> count
};

// Every op once, B after its F on the same rank, counts per kind, warm-up (forwards before the first
// backward) = min(W_r + 1, total).
void expect_properties(const Schedule& s, const std::vector<int>& warmup) {
  SCOPED_TRACE(s.name + " p=" + std::to_string(s.p) + " m=" + std::to_string(s.m) + " v=" + std::to_string(s.v));
  std::set<std::tuple<int, int, int, int>> all;
  const int k = s.slices(0);
  for (int r = 0; r < s.p; r++) {
    const auto& ops = s.per_rank[r];
    std::map<std::tuple<int, int, int>, std::size_t> fwd_at;
    int f = 0, b = 0;
    for (std::size_t i = 0; i < ops.size(); i++) {
      const Op& op = ops[i];
      ASSERT_EQ(op.rank, r);
      ASSERT_EQ(op.stage, op.chunk * s.p + r);
      EXPECT_TRUE(all.insert({static_cast<int>(op.kind), op.stage, op.microbatch, op.slice}).second) << op_text(op);
      if (op.kind == OpKind::Forward) {
        f++;
        fwd_at[{op.stage, op.microbatch, op.slice}] = i;
      } else {
        b++;
        EXPECT_EQ(fwd_at.count({op.stage, op.microbatch, op.slice}), 1u) << "backward before forward: " << op_text(op);
      }
    }
    EXPECT_EQ(f, s.m * s.v * k);
    EXPECT_EQ(b, s.m * s.v * k);
    if (!warmup.empty()) {
      int lead = 0;
      while (lead < static_cast<int>(ops.size()) && ops[lead].kind == OpKind::Forward) lead++;
      EXPECT_EQ(lead, std::min(warmup[r] + 1, s.m * s.v * k)) << "rank " << r;
    }
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(2 * s.m * s.v * k * s.p));
  EXPECT_NO_THROW(check_schedule(s));
}

void expect_lowers_and_runs(const Schedule& s, int dp) {
  ConstantCosts cc = unit_costs(s.v);
  cc.p2p_bytes = 1e6;
  cc.grad_bytes = 1e6;
  const ConstantCostModel cost(cc);
  const LoweredSchedule ls = lower(s, dp, 1, cost);
  const Placement pl = flat_placement(dp, s.p, 1);
  const CheckedSchedule cs = check(ls, pl);
  EXPECT_EQ(dry_run(cs.dag()), cs.dag().size());
}

const int kP[] = {1, 2, 3, 4, 7, 8, 16, 64};
const int kM[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 24, 31, 64, 128};

TEST(ScheduleProperties, GPipeAnd1F1BGrid) {
  for (int p : kP)
    for (int m : kM) {
      const auto mbs = uniform_microbatches(m, 1, 1, 1);
      std::vector<int> w;
      for (int r = 0; r < p; r++) {
        w.push_back(warmup_1f1b(p, m, r));
        EXPECT_EQ(w.back(), std::min(p - r - 1, m));
      }
      const Schedule g = make_gpipe(p, mbs, 1);
      expect_properties(g, std::vector<int>(p, m));
      const Schedule o = make_1f1b(p, mbs, 1);
      expect_properties(o, w);
      {  // lowering + checker + dry run
        expect_lowers_and_runs(g, 1);
        expect_lowers_and_runs(o, m % 3 == 0 ? 2 : 1);
      }
    }
}

TEST(ScheduleProperties, InterleavedGrid) {
  for (int p : kP)
    for (int m : kM) {
      if (m % p != 0) {
        EXPECT_THROW(make_interleaved(p, 2, uniform_microbatches(m, 1, 1, 1), 1), std::invalid_argument);
        continue;
      }
      for (int v = 1; v <= 4; v++) {
        const Schedule s = make_interleaved(p, v, uniform_microbatches(m, 1, 1, 1), 1);
        std::vector<int> w;
        for (int r = 0; r < p; r++) {
          w.push_back(warmup_interleaved(p, m, v, r));
          EXPECT_EQ(w.back(), m == p ? m * v : std::min(2 * (p - r - 1) + (v - 1) * p, m * v));
        }
        expect_properties(s, w);
        expect_lowers_and_runs(s, v == 3 ? 2 : 1);
      }
    }
}

TEST(ScheduleProperties, SlicedGPipeGrid) {
  for (int p : {1, 2, 3, 8})
    for (int m : {1, 2, 5})
      for (int k : {1, 2, 3, 7}) {
        const Schedule s = make_gpipe(p, uniform_microbatches(m, 1, 14, k), 14);
        expect_properties(s, std::vector<int>(p, m * k));
        expect_lowers_and_runs(s, 1);
      }
}

TEST(ScheduleProperties, DependenciesFollowTheSpec) {
  const Schedule s = make_gpipe(2, uniform_microbatches(1, 1, 8, 4), 8);
  auto deps = [&](OpKind kind, int stage, int slice) { return op_dependencies(s, OpKey{kind, stage, 0, slice}); };
  EXPECT_TRUE(deps(OpKind::Forward, 0, 0).empty());
  EXPECT_EQ(deps(OpKind::Forward, 1, 2), (std::vector<OpKey>{{OpKind::Forward, 0, 0, 2}, {OpKind::Forward, 1, 0, 1}}));
  EXPECT_EQ(deps(OpKind::Backward, 0, 1),
            (std::vector<OpKey>{{OpKind::Forward, 0, 0, 1}, {OpKind::Backward, 1, 0, 1}, {OpKind::Backward, 0, 0, 2}}));
  EXPECT_EQ(deps(OpKind::Backward, 1, 3), (std::vector<OpKey>{{OpKind::Forward, 1, 0, 3}}));
  // Split backward: I(g) needs F(g) and the input gradient of stage g+1 from whichever op produces it there; W
  // needs its I. A mixed schedule (stage 1 fused, stage 0 split) takes stage 1's B.
  Schedule z = make_zb_h1(3, uniform_microbatches(3, 1, 8, 1), 8);
  const OpKeyIndex zi(z);
  EXPECT_EQ(op_dependencies(zi, OpKey{OpKind::BackwardInput, 1, 2, 0}),
            (std::vector<OpKey>{{OpKind::Forward, 1, 2, 0}, {OpKind::BackwardInput, 2, 2, 0}}));
  EXPECT_EQ(op_dependencies(zi, OpKey{OpKind::BackwardWeight, 1, 2, 0}),
            (std::vector<OpKey>{{OpKind::BackwardInput, 1, 2, 0}}));
  for (auto& ops : z.per_rank)  // stage 2 back to fused B: drop its W ops, its I ops become B
    if (ops.front().stage == 2) {
      std::vector<Op> keep;
      for (Op o : ops) {
        if (o.kind == OpKind::BackwardWeight) continue;
        if (o.kind == OpKind::BackwardInput) o.kind = OpKind::Backward;
        keep.push_back(o);
      }
      ops = keep;
    }
  const OpKeyIndex mixed(z);
  EXPECT_FALSE(mixed.split(2, 0, 0));
  EXPECT_TRUE(mixed.split(1, 0, 0));
  EXPECT_EQ(op_dependencies(mixed, OpKey{OpKind::BackwardInput, 1, 0, 0}),
            (std::vector<OpKey>{{OpKind::Forward, 1, 0, 0}, {OpKind::Backward, 2, 0, 0}}));
  EXPECT_NO_THROW(check_schedule(z));
  // Every slot maps back to its key.
  for (std::size_t slot = 0; slot < mixed.size(); slot++)
    EXPECT_EQ(mixed.slot(mixed.key(slot)), static_cast<std::int64_t>(slot));
  OpKey a{OpKind::Forward, 1, 0, 0}, b{OpKind::Forward, 1, 0, 1};
  EXPECT_TRUE(a < b);
  EXPECT_FALSE(b < a);
  EXPECT_FALSE(a < a);
}

// ------------------------------------------------------------------------------------------ closed forms

TEST(ScheduleClosedForm, GPipeAnd1F1BMakespan) {
  for (int p : {1, 2, 4, 7, 8})
    for (int m : {1, 3, 8, 16})
      for (auto [tf, tb] : {std::pair{1.0, 2.0}, std::pair{1.5, 2.25}}) {
        ConstantCosts cc = unit_costs();
        cc.forward_s = tf;
        cc.backward_s = tb;
        const auto mbs = uniform_microbatches(m, 1, 1, 1);
        const double expect = (m + p - 1) * (tf + tb);
        EXPECT_NEAR(makespan(make_gpipe(p, mbs, 1), cc), expect, 1e-9) << "gpipe p=" << p << " m=" << m;
        EXPECT_NEAR(makespan(make_1f1b(p, mbs, 1), cc), expect, 1e-9) << "1f1b p=" << p << " m=" << m;
        // Bubble ratio (p - 1) / m.
        const double ideal = m * (tf + tb);
        EXPECT_NEAR((makespan(make_1f1b(p, mbs, 1), cc) - ideal) / ideal, (p - 1.0) / m, 1e-9);
      }
}

TEST(ScheduleClosedForm, MegatronTable) {
  // docs/papers.md#megatron, t_f = 1, t_b = 2.
  struct Row {
    int p, m, v;
    double plain, interleaved;
  };
  for (const Row& row : {Row{4, 8, 2, 33, 28.5}, Row{8, 16, 2, 69, 58.5}, Row{8, 64, 4, 213, 197.25}}) {
    const auto mbs = uniform_microbatches(row.m, 1, 1, 1);
    EXPECT_NEAR(makespan(make_1f1b(row.p, mbs, 1), unit_costs()), row.plain, 1e-9);
    EXPECT_NEAR(makespan(make_gpipe(row.p, mbs, 1), unit_costs()), row.plain, 1e-9);
    EXPECT_NEAR(makespan(make_interleaved(row.p, row.v, mbs, 1), unit_costs(row.v)), row.interleaved, 1e-9);
  }
}

TEST(ScheduleClosedForm, InterleavedMakespanAndBubble) {
  for (int p : {2, 3, 4, 8})
    for (int mult : {1, 2, 3})
      for (int v : {2, 3, 4}) {
        const int m = p * mult;
        const double expect = (m + (p - 1.0) / v) * 3.0;
        const double t = makespan(make_interleaved(p, v, uniform_microbatches(m, 1, 1, 1), 1), unit_costs(v));
        EXPECT_NEAR(t, expect, 1e-9) << "p=" << p << " m=" << m << " v=" << v;
        EXPECT_NEAR((t - 3.0 * m) / (3.0 * m), (p - 1.0) / (v * m), 1e-9);
      }
}

TEST(ScheduleClosedForm, SlicedGPipe) {
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 2, 4})
      for (int k : {1, 2, 4, 8}) {
        const double expect = (m * k + p - 1) * 3.0 / k;
        const Schedule s = make_gpipe(p, uniform_microbatches(m, 1, 64, k), 64);
        EXPECT_NEAR(makespan(s, unit_costs(1, 64)), expect, 1e-9) << "p=" << p << " m=" << m << " k=" << k;
      }
}

TEST(ScheduleClosedForm, DataParallelReplicasAndOptimizerWithFreeCommunication) {
  ConstantCosts cc = unit_costs();
  cc.optimizer_s = 0.25;
  EXPECT_NEAR(makespan(make_1f1b(4, uniform_microbatches(8, 1, 1, 1), 1), cc, 3), 33.25, 1e-9);
}

// ------------------------------------------------------------------------------------------ zero bubble

TEST(ZeroBubble, EveryShapeIsAcceptedAndLowers) {
  // Including m < p and m < 2p - 1 (ZB-V plans for 2p - 1 micro-batches and drops the missing ones).
  for (int p = 1; p <= 6; p++)
    for (int m = 1; m <= 3 * p; m++) {
      const auto mbs = uniform_microbatches(m, 1, 1, 1);
      for (const Schedule& s : {make_zb_h1(p, mbs, 1), make_zb_h2(p, mbs, 1), make_zb_v(p, mbs, 1)}) {
        EXPECT_NO_THROW(check_schedule(s)) << s.name << " p=" << p << " m=" << m;
        EXPECT_EQ(s.op_count(), static_cast<std::size_t>(3 * s.stages() * m)) << s.name;
        EXPECT_GT(makespan(s, unit_costs(s.v)), 0.0);
      }
    }
  EXPECT_THROW(make_zb_h1(2, uniform_microbatches(2, 1, 8, 2), 8), std::invalid_argument);  // no token slices
  EXPECT_THROW(make_zb_v(0, uniform_microbatches(2, 1, 1, 1), 1), std::invalid_argument);
}

TEST(ZeroBubble, GoldenOrders) {
  const Schedule h1 = make_zb_h1(4, uniform_microbatches(8, 1, 1, 1), 1);
  // Rank r: 1F1B's warm-up, then F I per step, W from step r on (the first r W ops wait for the cool-down).
  EXPECT_EQ(schedule_text(h1).substr(0, schedule_text(h1).find('\n')),
            "r0: 0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7");
  EXPECT_EQ(schedule_text(h1).substr(schedule_text(h1).rfind("r3:")),
            "r3: 3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7\n");
  const Schedule v = make_zb_v(2, uniform_microbatches(3, 1, 1, 1), 1);
  EXPECT_EQ(schedule_text(v),
            "r0: 0F0 0F1 0F2 0F0c1 0I0c1 0W0c1 0F1c1 0I1c1 0W1c1 0I0 0W0 0F2c1 0I2c1 0W2c1 0I1 0W1 0I2 0W2\n"
            "r1: 1F0 1F0c1 1F1 1F1c1 1I0c1 1W0c1 1F2 1I0 1W0 1F2c1 1I1c1 1W1c1 1I1 1I2c1 1I2 1W1 1W2c1 1W2\n");
}
}  // namespace
}  // namespace pipescope
