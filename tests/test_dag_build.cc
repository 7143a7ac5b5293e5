// build_dag's shared steps (core/lower/dag_build.h): DagBuilder gives build_dag's DAG; the errors keep their order now
// that messages and collective calls are collected in one pass; stage 2's shape builder (the same steps with a classing
// sink) still rejects a lowering whose nodes of one duration class differ.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/dag_builder.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/search_estimate.h"
#include "core/plan/search_retime.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

using test::flat_placement;

LoweredSchedule lowered(int p, int m, int dp, int tp) {
  ConstantCosts cc;
  cc.p2p_bytes = 1000;
  cc.grad_bytes = 1e6;
  cc.tp_bytes = 100;
  cc.tp_calls_fwd = 2;
  return lower(make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1), dp, tp, ConstantCostModel(cc), tp > 1);
}

// The message of the logic_error the shape builder throws, or "(built)".
std::string shape_error(ShapeBuilder& b, const LoweredSchedule& ls, const Placement& replica, const Scenario& s,
                        const CostModel& cost, const ShapeKey& key) {
  try {
    b.build(ls, replica, s, cost, key);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "(built)";
}

std::string build_error(const LoweredSchedule& ls, const Placement& pl) {
  try {
    build_dag(ls, pl);
  } catch (const CheckError& e) {
    return e.what();
  }
  return "(built)";
}

TEST(DagBuild, BuilderGivesBuildDagsDag) {
  DagBuilder b;
  for (int tp : {1, 2})
    for (int dp : {1, 2}) {
      const LoweredSchedule ls = lowered(4, 6, dp, tp);
      const Placement pl = flat_placement(dp, 4, tp);
      const Dag want = build_dag(ls, pl);
      const Dag& got = b.build(ls, pl);
      ASSERT_EQ(got.size(), want.size()) << "dp " << dp << " tp " << tp;
      for (std::size_t u = 0; u < want.size(); u++) {
        const DagNode &x = got.nodes[u], &y = want.nodes[u];
        EXPECT_TRUE(x.kind == y.kind && x.worker == y.worker && x.index == y.index && x.gpu == y.gpu &&
                    x.gpu2 == y.gpu2 && x.group == y.group && x.count == y.count && x.amount == y.amount &&
                    x.lead_s == y.lead_s)
            << "node " << u;
      }
      EXPECT_EQ(got.succ_begin, want.succ_begin);
      EXPECT_EQ(got.succ, want.succ);
      EXPECT_EQ(got.preds, want.preds);
      EXPECT_EQ(got.node_of, want.node_of);
      EXPECT_EQ(got.rings, want.rings);
    }
}

TEST(DagBuild, MessageErrorsBeforeCollectiveErrors) {
  // A collective call on worker 0 that names no group, and a send on worker 1 that no one receives: the message's
  // error, as build_dag reported it before the two collections shared a pass.
  LoweredSchedule ls = lowered(2, 2, 2, 1);
  auto& w0 = ls.per_worker[0];
  for (LoweredOp& l : w0)
    if (l.kind == LOpKind::AllReduce) l.group = 99;
  auto& w1 = ls.per_worker[1];
  for (std::size_t i = 0; i < w1.size(); i++)
    if (w1[i].kind == LOpKind::Recv) {
      w1.erase(w1.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  const std::string both = build_error(ls, flat_placement(2, 2, 1));
  EXPECT_NE(both.find("has no matching recv on worker 1"), std::string::npos) << both;
  // The collective problem alone: its own error.
  LoweredSchedule only = lowered(2, 2, 2, 1);
  for (LoweredOp& l : only.per_worker[0])
    if (l.kind == LOpKind::AllReduce) l.group = 99;
  const std::string coll = build_error(only, flat_placement(2, 2, 1));
  EXPECT_NE(coll.find("uses collective group 99"), std::string::npos) << coll;
  // A tag mismatch found after the messages are matched, with a later worker's call still collected.
  LoweredSchedule tag = lowered(2, 2, 2, 1);
  for (LoweredOp& l : tag.per_worker[3])
    if (l.kind == LOpKind::AllReduce && l.tag == CollTag::DataParallel) l.tag = CollTag::Embedding;
  const std::string t = build_error(tag, flat_placement(2, 2, 1));
  EXPECT_NE(t.find("has a different tag than its group"), std::string::npos) << t;
}

TEST(DagBuild, ShapeBuilderRejectsNodesOfOneClassThatDiffer) {
  const Scenario s = parse_scenario(
      "name: t\nmodel: {preset: gpt3-1b, seq_len: 512}\ncluster: {preset: dgx-a100, nodes: 1}\n"
      "parallel: {dp: 2, pp: 2, tp: 2, micro_batch_size: 1, global_batch: 16}\nschedule: {kind: 1f1b}\n",
      "<t>");
  ShapeKey key;
  ASSERT_TRUE(shape_key(s, key));
  const auto cost = make_cost_model(s);
  LoweredSchedule ls = lower_one_replica(s, make_schedule(s), *cost);
  Placement replica = scenario_placement(s);
  replica.dp = 1;
  replica.gpu.resize(static_cast<std::size_t>(s.parallel.pp) * s.parallel.tp);
  ShapeBuilder b;
  EXPECT_GT(shape_nodes(*b.build(ls, replica, s, *cost, key)), 0u);
  // The last forward of rank 0 takes longer than the other forwards of its class.
  auto& prog = ls.per_worker[0];
  for (auto it = prog.rbegin(); it != prog.rend(); ++it)
    if (it->kind == LOpKind::Compute && it->op.kind == OpKind::Forward) {
      it->seconds *= 2;
      break;
    }
  const std::string compute = shape_error(b, ls, replica, s, *cost, key);
  EXPECT_NE(compute.find("share a duration class but differ in their lowering"), std::string::npos) << compute;
  EXPECT_NE(compute.find("0F7"), std::string::npos) << compute;
  // A transfer of one class with other bytes.
  ls = lower_one_replica(s, make_schedule(s), *cost);
  auto& fresh = ls.per_worker[0];
  for (auto it = fresh.rbegin(); it != fresh.rend(); ++it)
    if (it->kind == LOpKind::Send) {
      it->bytes *= 2;
      for (LoweredOp& r : ls.per_worker[static_cast<std::size_t>(it->peer)])
        if (r.kind == LOpKind::Recv && r.op == it->op) r.bytes = it->bytes;
      break;
    }
  const std::string transfer = shape_error(b, ls, replica, s, *cost, key);
  EXPECT_NE(transfer.find("share a duration class but differ in their lowering"), std::string::npos) << transfer;
  EXPECT_NE(transfer.find("send(0F7->1)"), std::string::npos) << transfer;
}

// emit() makes its shape while the lowering writes its ops (no programs, no matching): build()'s nodes less the joins
// it folds and, re-timed, the same critical path as build()'s from the kept programs.
TEST(DagBuild, EmittedShapeIsTheBuiltShape) {
  const char* layouts[] = {"{dp: 2, pp: 2, tp: 2, micro_batch_size: 1, global_batch: 16}",
                           "{dp: 1, pp: 4, tp: 2, micro_batch_size: 1, global_batch: 8}",
                           "{dp: 4, pp: 2, tp: 1, v: 2, micro_batch_size: 1, global_batch: 16}"};
  const char* extras[] = {"", "schedule: {kind: interleaved, scatter_gather: true}\n",
                          "training: {distributed_optimizer: true}\n", "schedule: {kind: zb-v}\n"};
  int compared = 0;
  for (const char* layout : layouts)
    for (const char* extra : extras) {
      std::string text = std::string("name: t\nmodel: {preset: gpt3-1b, seq_len: 512}\ncluster: {preset: dgx-a100, ") +
                         "nodes: 1}\nparallel: " + layout + "\n" + extra;
      if (text.find("schedule:") == std::string::npos) text += "schedule: {kind: 1f1b}\n";
      Scenario s;
      try {
        s = parse_scenario(text, "<t>");
        validate_scenario(s);
      } catch (const std::exception&) {
        continue;  // a layout the schedule does not take
      }
      SCOPED_TRACE(text);
      ShapeKey key;
      ASSERT_TRUE(shape_key(s, key));
      ASSERT_TRUE(ShapeBuilder::emits(s));
      const auto cost = make_cost_model(s);
      const LoweredSchedule ls = lower_one_replica(s, make_schedule(s), *cost);
      Placement replica = scenario_placement(s);
      replica.dp = 1;
      replica.gpu.resize(static_cast<std::size_t>(s.parallel.pp) * s.parallel.tp);
      ShapeBuilder b;
      const DagShapePtr built = b.build(ls, replica, s, *cost, key);
      ShapeBuilder e;
      const DagShapePtr emitted = e.emit(s, *cost, key, [&](LoweredSchedule& header, LoweringSink& sink) {
        lower_one_replica_to(s, make_schedule(s), *cost, header, sink);
      });
      EXPECT_LT(shape_nodes(*emitted), shape_nodes(*built));
      Retimer r;
      ASSERT_TRUE(r.load(*built, s, key, *cost));
      const double want = r.critical_path_s(*built, s);
      ASSERT_TRUE(r.load(*emitted, s, key, *cost));
      EXPECT_EQ(r.critical_path_s(*emitted, s), want);
      EXPECT_EQ(want, estimate_iteration_s(s));
      compared++;
    }
  EXPECT_GE(compared, 6);
  // What emit() does not take: blocking sends, overlapped gradient or parameter collectives.
  const std::string base =
      "name: t\nmodel: {preset: gpt3-1b, seq_len: 512}\ncluster: {preset: dgx-a100, nodes: 1}\n"
      "parallel: {dp: 2, pp: 2, tp: 2, micro_batch_size: 1, global_batch: 16}\nschedule: {kind: 1f1b}\n";
  EXPECT_FALSE(ShapeBuilder::emits(parse_scenario(base + "sim: {p2p: blocking}\n", "<t>")));
  EXPECT_FALSE(ShapeBuilder::emits(parse_scenario(base + "training: {overlap_grad_reduce: true}\n", "<t>")));
}

}  // namespace
}  // namespace pipescope
