// The time breakdown (core/lower/time_breakdown.h): every worker's parts sum to the iteration time, the pipeline
// bubble of a schedule with free communication is its closed form, and exposed communication is charged by kind.
#include <gtest/gtest.h>

#include <vector>

#include "core/ir/schedule.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/lower/time_breakdown.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

struct Timed {
  LoweredSchedule ls;
  Dag dag;
  std::vector<double> start, end;
  double makespan = 0;
};

// A 1F1B iteration timed by the communication-aware critical path: transfers take `p2p_s`, collectives `coll_s`.
Timed timed(const ConstantCosts& cc, int p, int m, int dp, int tp, double p2p_s, double coll_s) {
  Timed t;
  const ConstantCostModel cost(cc);
  t.ls = lower(make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1), dp, tp, cost);
  t.dag = build_dag(t.ls, test::flat_placement(dp, p, tp, 8, 0));
  auto duration = [&](std::uint32_t u) {
    const DagNode& n = t.dag.nodes[u];
    switch (n.kind) {
      case DagKind::Compute:
        return n.amount;
      case DagKind::Transfer:
        return p2p_s;
      case DagKind::Collective:
        return coll_s;
      case DagKind::Join:
        return 0.0;
    }
    return 0.0;
  };
  t.end = earliest_finish(t.dag, duration);
  t.start.resize(t.end.size());
  for (std::uint32_t u = 0; u < t.dag.size(); u++) {
    t.start[u] = t.end[u] - duration(u);
    t.makespan = std::max(t.makespan, t.end[u]);
  }
  return t;
}

RunBreakdown breakdown(const Timed& t, double recompute_share = 0, double cp_wait = 0) {
  OpShares shares;
  shares.recompute_s = [=](const Op& op, int) { return op.kind == OpKind::Forward ? 0.0 : recompute_share; };
  shares.cp_wait_s = [=](const Op&, int) { return cp_wait; };
  return time_breakdown(t.dag, t.ls, t.start, t.end, t.makespan, shares);
}

TEST(TimeBreakdown, FreeCommunicationLeavesTheClosedFormBubble) {
  ConstantCosts cc;  // forward 1 s, backward 2 s per micro-batch and stage
  const int p = 4, m = 8;
  const Timed t = timed(cc, p, m, 1, 1, 0, 0);
  const double ideal = m * 3.0;
  EXPECT_DOUBLE_EQ(t.makespan, (m + p - 1) * 3.0);
  const RunBreakdown b = breakdown(t);
  ASSERT_EQ(b.per_worker.size(), static_cast<std::size_t>(p));
  for (const TimeBreakdown& w : b.per_worker) {
    EXPECT_NEAR(w.total_s(), t.makespan, 1e-9);
    EXPECT_DOUBLE_EQ(w.forward_s, m * 1.0);
    EXPECT_DOUBLE_EQ(w.backward_s, m * 2.0);
    EXPECT_NEAR(w.bubble_s, t.makespan - ideal, 1e-9);  // (p - 1) slots of f + b
    EXPECT_EQ(w.tp_comm_s + w.dp_comm_s + w.p2p_s + w.cp_comm_s, 0.0);
  }
}

TEST(TimeBreakdown, ExposedCommunicationIsChargedByKind) {
  ConstantCosts cc;
  cc.tp_calls_fwd = 2;
  cc.tp_bytes = 1e6;
  cc.grad_bytes = 1e6;
  cc.optimizer_s = 0.5;
  cc.p2p_bytes = 1e6;  // a message of no bytes is a join, not a transfer
  const Timed t = timed(cc, 2, 4, 2, 2, 0.25, 0.1);
  const RunBreakdown b = breakdown(t, 0.5);
  ASSERT_EQ(b.per_worker.size(), 4u);
  for (const TimeBreakdown& w : b.per_worker) {
    EXPECT_NEAR(w.total_s(), t.makespan, 1e-9);
    EXPECT_GT(w.tp_comm_s, 0.0);  // the blocking TP all-reduce after every op
    EXPECT_GT(w.dp_comm_s, 0.0);  // the gradient all-reduce before the optimizer
    EXPECT_DOUBLE_EQ(w.optimizer_s, 0.5);
    EXPECT_DOUBLE_EQ(w.recompute_s, 4 * 0.5);  // the share recomputed, out of backward
    EXPECT_DOUBLE_EQ(w.backward_s + w.recompute_s, 4 * 2.0);
  }
  // Stage 1 waits for each activation's transfer: exposed p2p on the receiving worker.
  EXPECT_GT(b.per_worker[1].p2p_s, 0.0);
  EXPECT_NEAR(b.mean.total_s(), t.makespan, 1e-9);
}

// A context-parallel wait inside an op comes out of the op's own kind first: forward and backward keep the rest, the
// recomputed share comes out of what the backward has left.
TEST(TimeBreakdown, ContextParallelWaitsComeOutOfTheOpsOwnTime) {
  ConstantCosts cc;  // forward 1 s, backward 2 s
  const int p = 2, m = 4;
  const Timed t = timed(cc, p, m, 1, 1, 0, 0);
  const RunBreakdown b = breakdown(t, 0.5, 0.25);
  for (const TimeBreakdown& w : b.per_worker) {
    EXPECT_NEAR(w.total_s(), t.makespan, 1e-9);
    EXPECT_DOUBLE_EQ(w.cp_comm_s, 2 * m * 0.25);  // every forward and backward
    EXPECT_DOUBLE_EQ(w.forward_s, m * 0.75);
    EXPECT_DOUBLE_EQ(w.recompute_s, m * 0.5);
    EXPECT_DOUBLE_EQ(w.backward_s, m * (2.0 - 0.25 - 0.5));
  }
  // A wait longer than the op is the whole op.
  const RunBreakdown all = breakdown(t, 0, 5.0);
  EXPECT_DOUBLE_EQ(all.per_worker[0].forward_s + all.per_worker[0].backward_s, 0.0);
  EXPECT_DOUBLE_EQ(all.per_worker[0].cp_comm_s, m * 3.0);
}

// The timeline legend's line: each part's share of the total, the parts under 0.1% left out.
TEST(TimeBreakdown, LegendLineGivesEachVisiblePartsShare) {
  TimeBreakdown b;
  b.forward_s = 1, b.backward_s = 2, b.bubble_s = 0.9995, b.dp_comm_s = 0.0005;
  EXPECT_EQ(breakdown_line(b),
            "time (mean over workers): forward compute 25.0%, backward compute (less recomputation) 50.0%, pipeline "
            "bubble (waiting on another stage) 25.0%");
  EXPECT_EQ(breakdown_line(TimeBreakdown{}), "time (mean over workers):");
}

TEST(TimeBreakdown, TimingsMustCoverTheDag) {
  const Timed t = timed(ConstantCosts{}, 2, 2, 1, 1, 0, 0);
  EXPECT_THROW(time_breakdown(t.dag, t.ls, {}, {}, t.makespan, OpShares{}), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope
