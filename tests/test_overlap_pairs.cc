// Overlapped pairs (core/ir/schedule.h Overlap, core/lower/overlap.h): the DualPipeV generator, the pairs' text and CSV
// forms, the checker's rules for pairs (structure, no dependency inside a pair, a pair starts when both halves can),
// the lowering (receives before the pair, sends after it) and the engine's semantics (the pair's communication runs
// beside its compute; everything after the pair waits for both).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/ir/schedule.h"
#include "core/ir/schedule_check.h"
#include "core/ir/schedule_csv.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/lower/overlap.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

std::string check_error(const Schedule& s) {
  try {
    check_schedule(s);
  } catch (const CheckError& e) {
    return e.what();
  }
  return "";
}

TEST(DualPipeV, EveryShapeChecksAndSteadyStateIsPaired) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {2 * p, 2 * p + 1, 3 * p + 2}) {
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const Schedule s = make_dualpipev(p, uniform_microbatches(m, 1, 16, 1), 16);
      EXPECT_EQ(s.style, StageStyle::V);
      EXPECT_EQ(s.v, 2);
      EXPECT_NO_THROW(check_schedule(s));
      // Rank r pairs (m - 2p + r + 1) + (p - r - 1) steps of its steady state twice, less the tip's first.
      for (int r = 0; r < p; r++) {
        std::size_t pairs = 0;
        const auto& ops = s.per_rank[r];
        for (std::size_t i = 0; i < ops.size(); i++) {
          if (ops[i].overlap != Overlap::First) continue;
          pairs++;
          EXPECT_EQ(ops[i].kind, OpKind::Forward);
          EXPECT_EQ(ops[i + 1].kind, OpKind::Backward);
          EXPECT_NE(ops[i].chunk, ops[i + 1].chunk);
        }
        const int steady = m - 2 * p + r + 1;
        EXPECT_EQ(pairs, static_cast<std::size_t>(2 * steady - (r == p - 1 ? 1 : 0) + (p - r - 1)));
      }
    }
  EXPECT_THROW(make_dualpipev(4, uniform_microbatches(7, 1, 16, 1), 16), std::invalid_argument);
}

TEST(DualPipeV, TextAndCsvShowPairsAndRoundTrip) {
  const Schedule s = make_dualpipev(2, uniform_microbatches(5, 1, 16, 1), 16);
  const std::string text = schedule_text(s);
  EXPECT_NE(text.find("r0: 0F0 0F1 0F2 0F0c1 0I0c1 0W0c1 0F1c1 (0F3;0B1c1) (0F2c1;0B0)"), std::string::npos) << text;
  const std::string csv = schedule_to_csv(s);
  EXPECT_NE(csv.find(",3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,"), std::string::npos) << csv;
  const Schedule back = schedule_from_csv(csv, "x.csv", {s.p, s.v, s.microbatches, s.seq_len});
  EXPECT_EQ(back.per_rank, s.per_rank);
  EXPECT_EQ(schedule_text(back), text);
}

CsvScheduleShape shape(int p, int v, int m) { return {p, v, uniform_microbatches(m, 1, 8, 1), 8}; }

std::string csv_error(const std::string& text, const CsvScheduleShape& sh) {
  try {
    schedule_from_csv(text, "pairs.csv", sh);
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const CheckError& e) {
    return e.what();
  }
  return "";
}

TEST(OverlapPairs, CsvRejectsMalformedPairsNamingTheCell) {
  const auto sh = shape(2, 1, 2);
  EXPECT_NE(csv_error("0F0,(0F1)OVERLAP_F_B,0B0,0B1\n1F0,1B0,1F1,1B1\n", sh).find("rank 0 (row 1, column 2)"),
            std::string::npos);
  EXPECT_NE(csv_error("0F0,(0F1;0B0;0B1)OVERLAP_F_B\n1F0,1B0,1F1,1B1\n", sh).find("(<action>;<action>)OVERLAP_F_B"),
            std::string::npos);
  EXPECT_NE(csv_error("0F0,(0F1;0SEND_F0)OVERLAP_F_B,0B0,0B1\n1F0,1B0,1F1,1B1\n", sh).find("one compute action"),
            std::string::npos);
  EXPECT_NE(csv_error("0F0,(0F1;0B0)OVERLAP,0B1\n1F0,1B0,1F1,1B1\n", sh).find("OVERLAP_F_B"), std::string::npos);
  // The checker's pair rules apply to files: two forwards are no pair; a pair that deadlocks only as a pair.
  EXPECT_NE(csv_error("(0F0;0F1)OVERLAP_F_B,0B0,0B1\n1F0,1B0,1F1,1B1\n", sh).find("pairs.csv: overlapped pair"),
            std::string::npos);
  EXPECT_NE(csv_error("0F0,0B0,0F1,0B1\n1F0,(1B0;1F1)OVERLAP_F_B,1B1\n", sh).find("deadlocks"), std::string::npos);
  // A well-formed pair loads.
  const Schedule s = schedule_from_csv("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n1F0,1B0,1F1,1B1\n", "pairs.csv", sh);
  EXPECT_EQ(s.per_rank[0][1].overlap, Overlap::First);
  EXPECT_EQ(s.per_rank[0][2].overlap, Overlap::Second);
}

// A 2-rank, 2-micro-batch schedule with one pair on rank `r` at positions i, i + 1.
Schedule with_pair(std::vector<std::vector<std::string>> ops, int r, std::size_t i) {
  Schedule s = schedule_skeleton("test", 2, 1, uniform_microbatches(2, 1, 8, 1), 8);
  for (int q = 0; q < 2; q++)
    for (const auto& t : ops[q]) s.per_rank[q].push_back(parse_op(t, s));
  pair_ops(s.per_rank[r], i);
  return s;
}

TEST(OverlapPairs, CheckerRulesForPairs) {
  // Fine: 1F1B with rank 0's steady step paired.
  EXPECT_EQ(check_error(with_pair({{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}}, 0, 1)), "");
  // Two forwards are no pair.
  EXPECT_NE(check_error(with_pair({{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}}, 0, 0))
                .find("one forward and one backward"),
            std::string::npos);
  // A backward paired with its own forward needs the op it runs with.
  EXPECT_NE(check_error(with_pair({{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}}, 1, 0))
                .find("the op it is paired with"),
            std::string::npos);
  // Unclosed and unopened pairs.
  Schedule s = with_pair({{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}}, 0, 1);
  s.per_rank[0][2].overlap = Overlap::None;
  EXPECT_NE(check_error(s).find("does not close"), std::string::npos);
  s.per_rank[0][1].overlap = Overlap::None;
  s.per_rank[0][2].overlap = Overlap::Second;
  EXPECT_NE(check_error(s).find("no op opens"), std::string::npos);
  // Run one after the other this order works (1B0, 0B0, 0F1, 1F1); as a pair (1B0;1F1) needs 0F1 before 1B0 starts,
  // and 0F1 waits for 0B0, which waits for 1B0: a deadlock.
  EXPECT_NE(
      check_error(with_pair({{"0F0", "0B0", "0F1", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}}, 1, 1)).find("deadlocks"),
      std::string::npos);
}

// Rank 1 of a 2-rank pipeline running (1F1;1B0) as a pair, tensor-parallel collectives on every op: the pair's
// receives come before it and its sends after it; costed with compute and communication, the pair lasts
// max(compute, communication), not their sum.
TEST(OverlapPairs, LoweringAndEngineRunCommunicationBesideCompute) {
  const Schedule s = with_pair({{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1F1", "1B0", "1B1"}}, 1, 1);
  ASSERT_EQ(check_error(s), "");
  ConstantCosts cc;
  cc.forward_s = 1;
  cc.backward_s = 2;
  cc.tp_bytes = 1e6;
  cc.tp_calls_fwd = 1;
  cc.p2p_bytes = 1e3;
  cc.seq_len = 8;
  const ConstantCostModel cost(cc);
  const LoweredSchedule plain = lower(s, 1, 2, cost);
  const LoweredSchedule ls = overlap_pairs(plain, 1.25);
  // Rank 1's program: recv(1F1) before the pair, the pair's collectives marked, its send after the pair.
  const auto& prog = ls.per_worker[1];
  std::string order;
  for (const LoweredOp& l : prog) order += lowered_text(l) + (l.overlap ? "*" : "") + " ";
  EXPECT_NE(order.find("recv(0F1<-0) 1F1 allreduce"), std::string::npos) << order;
  std::size_t marked = 0;
  for (const LoweredOp& l : prog) marked += l.overlap;
  EXPECT_EQ(marked, 2u) << order;
  for (const LoweredOp& l : prog) {
    if (l.kind == LOpKind::Compute && l.op.paired()) {
      EXPECT_DOUBLE_EQ(l.seconds, 1.25 * (l.op.kind == OpKind::Forward ? 1.0 : 2.0));
    }
  }
  // Timed with each TP call taking 1.5 s: the pair's compute (1.25 + 2.5) and its two calls (1.5 + 1.5) run side by
  // side; the pair is on the critical path (rank 0's backwards wait for it), so the iteration is shorter by the
  // difference.
  const Placement pl = test::flat_placement(1, 2, 2);
  auto span = [&](const LoweredSchedule& x) {
    const CheckedSchedule cs = check(x, pl);
    const Dag& dag = cs.dag();
    const auto f = earliest_finish(dag, [&](std::uint32_t n) {
      const DagNode& d = dag.nodes[n];
      switch (d.kind) {
        case DagKind::Compute:
          return d.amount;
        case DagKind::Collective:
          return 1.5 * d.count;
        case DagKind::Transfer:
        case DagKind::Join:
          return 0.0;
      }
      return 0.0;
    });
    return *std::max_element(f.begin(), f.end());
  };
  EXPECT_LT(span(ls), span(plain));
  // Megatron's combined 1F1B keeps the tensor-parallel collectives on the compute stream: nothing to hide here, so
  // nothing marked, nothing slowed, the same iteration.
  const LoweredSchedule ep_only = overlap_pairs(plain, 1.25, PairHides::ExpertParallel);
  for (const auto& w : ep_only.per_worker)
    for (const LoweredOp& l : w) EXPECT_FALSE(l.overlap);
  EXPECT_DOUBLE_EQ(span(ep_only), span(plain));
  EXPECT_NEAR(span(plain) - span(ls), (1.0 + 1.5 + 2.0 + 1.5) - std::max(1.25 + 2.5, 1.5 + 1.5), 1e-9);
}

TEST(OverlapPairs, ComputeFactorFromTheDevice) {
  EXPECT_DOUBLE_EQ(overlap_compute_factor(132, 20), 132.0 / 112);
  EXPECT_DOUBLE_EQ(overlap_compute_factor(132, 0), 1.0);
  EXPECT_DOUBLE_EQ(overlap_compute_factor(0, 0), 1.0);
  EXPECT_THROW(overlap_compute_factor(132, 132), std::invalid_argument);
  EXPECT_THROW(overlap_compute_factor(132, -1), std::invalid_argument);
}

// Megatron's combined 1F1B: every steady-state forward with the backward after it; a one-chunk 1F1B's last rank, whose
// backward is of the forward's own micro-batch, runs its steps alone.
TEST(Combined1F1B, PairsTheSteadyState) {
  const auto mbs = uniform_microbatches(8, 1, 16, 1);
  const Schedule one = pair_steady_state(make_1f1b(4, mbs, 16));
  EXPECT_NO_THROW(check_schedule(one));
  for (int r = 0; r < 4; r++) {
    std::size_t pairs = 0;
    for (const Op& op : one.per_rank[r]) pairs += op.overlap == Overlap::First;
    // The steady state has m - w steps, w = p - r - 1 warm-up forwards; the last rank pairs none.
    EXPECT_EQ(pairs, r == 3 ? 0u : static_cast<std::size_t>(8 - warmup_1f1b(4, 8, r))) << "rank " << r;
  }
  const Schedule il = pair_steady_state(make_interleaved(4, 2, mbs, 16));
  EXPECT_NO_THROW(check_schedule(il));
  EXPECT_GT(pair_count(il), 0u);
  EXPECT_NE(schedule_text(il).find("(3F"), std::string::npos);  // the last rank pairs its chunks' steps
}

}  // namespace
}  // namespace pipescope
