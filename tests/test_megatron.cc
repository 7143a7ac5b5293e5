// Megatron PTD-P lowering (docs/papers.md#megatron): scatter/gather of pipeline messages (each TP rank sends b*s*h/t,
// the receiver all-gathers over its TP group), the TP all-reduce counts with and without recomputation, the
// dgx-a100 preset at Table 1 scale, and the scenarios/megatron files.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/cost/analytic_cost.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/lowering.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

Scenario megatron(int pp, int tp, int v, bool sg, bool recompute) {
  Scenario s;
  s.name = "test";
  s.source = "<test>";
  s.model = *model_preset("megatron-39.1b");
  s.cluster = *cluster_preset("dgx-a100");
  s.cluster.nodes = pp * tp / 8;
  s.parallel.pp = pp;
  s.parallel.tp = tp;
  s.parallel.v = v;
  s.parallel.global_batch = 2 * pp;
  s.schedule.kind = v > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  s.schedule.scatter_gather = sg;
  s.schedule.recompute = recompute ? Recompute::Full : Recompute::None;
  return s;
}

TEST(ScatterGather, RecvFollowedByAllGatherOverTpGroup) {
  for (int v : {1, 2}) {
    const Scenario s = megatron(4, 8, v, true, false);
    auto on = prepare(s);
    Scenario off_s = s;
    off_s.schedule.scatter_gather = false;
    auto off = prepare(off_s);
    std::size_t recvs = 0;
    for (std::size_t w = 0; w < on->lowered.per_worker.size(); w++) {
      const auto& prog = on->lowered.per_worker[w];
      for (std::size_t i = 0; i < prog.size(); i++) {
        const LoweredOp& l = prog[i];
        if (l.kind == LOpKind::Send || l.kind == LOpKind::Recv) {
          const double full = on->cost->p2p_bytes(l.op, 1);
          EXPECT_NEAR(l.bytes, full / 8, 1e-6);  // b*s*h/t per TP rank
        }
        if (l.kind != LOpKind::Recv) continue;
        recvs++;
        ASSERT_LT(i + 1, prog.size());
        const LoweredOp& ag = prog[i + 1];
        EXPECT_EQ(ag.kind, LOpKind::AllGather);
        EXPECT_EQ(ag.tag, CollTag::ScatterGather);
        EXPECT_EQ(ag.op, l.op);
        EXPECT_NEAR(ag.bytes, l.bytes * 8, 1e-6);  // the whole tensor is gathered
        const CollGroup& g = on->lowered.groups.at(ag.group);
        EXPECT_EQ(g.tag, CollTag::ScatterGather);
        EXPECT_EQ(g.workers, std::vector<std::int32_t>{static_cast<std::int32_t>(w)});
      }
    }
    EXPECT_GT(recvs, 0u);
    // Without scatter/gather: no all-gathers, full messages.
    for (const auto& prog : off->lowered.per_worker)
      for (const LoweredOp& l : prog) {
        EXPECT_NE(l.kind, LOpKind::AllGather);
        if (l.kind == LOpKind::Send) {
          EXPECT_NEAR(l.bytes, off->cost->p2p_bytes(l.op, 1), 1e-6);
        }
      }
    // Both lowerings pass the static checker; the scatter/gather groups become rings of the worker's 8 GPUs.
    const CheckedSchedule cs = check(on->lowered, on->placement);
    EXPECT_NO_THROW(check(off->lowered, off->placement));
    for (std::size_t g = 0; g < on->lowered.groups.size(); g++)
      if (on->lowered.groups[g].tag == CollTag::ScatterGather) {
        ASSERT_EQ(cs.dag().rings[g].size(), 1u);
        EXPECT_EQ(cs.dag().rings[g][0].size(), 8u);
      }
  }
}

TEST(ScatterGather, NoOpWithoutTensorParallelism) {
  Scenario s = megatron(4, 1, 1, true, false);
  s.cluster.nodes = 1;
  auto p = prepare(s);
  for (const auto& prog : p->lowered.per_worker)
    for (const LoweredOp& l : prog) EXPECT_NE(l.kind, LOpKind::AllGather);
}

TEST(Megatron, TpAllReduceCountsWithRecompute) {  // 2 forward, 2 backward (+2 with the recomputed forward) per layer
  for (bool rc : {false, true}) {
    const Scenario s = megatron(2, 8, 1, true, rc);
    auto p = prepare(s);
    const int layers = s.model.layers / 2;
    for (const auto& prog : p->lowered.per_worker)
      for (std::size_t i = 0; i + 1 < prog.size(); i++) {
        if (prog[i].kind != LOpKind::Compute) continue;
        const LoweredOp& ar = prog[i + 1];
        ASSERT_EQ(ar.kind, LOpKind::AllReduce);
        const Op& op = prog[i].op;
        int want = (op.kind == OpKind::Forward ? 2 : (rc ? 4 : 2)) * layers;
        if (op.kind == OpKind::Forward && op.stage == 0) want += 1;
        if (op.kind == OpKind::Backward && op.stage == 1) want += 1;
        EXPECT_EQ(ar.count, want) << op_text(op);
      }
  }
}

TEST(Megatron, DgxA100FatTreePresetAndTableScenarios) {
  const ClusterSpec c = *cluster_preset("dgx-a100");
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.nics_per_node, 8);
  EXPECT_EQ(c.topology, InterNodeTopology::FatTree);
  EXPECT_NEAR(c.nic_bw_Bps, 25e9, 1);  // 200 Gb/s HDR
  // The ten Table 1 scenarios load, use the paper's GPU counts and schedule without error (the 1T row at
  // 384 nodes included); the simulation itself runs in `pipescope repro megatron`.
  const char* rows[] = {"1.7b", "3.6b", "7.5b", "18.4b", "39.1b", "76.1b", "145.6b", "310.1b", "529.6b", "1t"};
  const int gpus[] = {32, 64, 128, 256, 512, 1024, 1536, 1920, 2520, 3072};
  for (int i = 0; i < 10; i++) {
    const Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/megatron/" + rows[i] + ".yaml");
    EXPECT_EQ(s.cluster.total_gpus(), gpus[i]) << rows[i];
    EXPECT_EQ(s.parallel.dp * s.parallel.pp * s.parallel.tp, gpus[i]) << rows[i];
    EXPECT_TRUE(s.schedule.scatter_gather && s.schedule.recompute == Recompute::Full) << rows[i];
    if (s.parallel.pp > 1) {
      EXPECT_EQ(s.schedule.kind, ScheduleKind::Interleaved) << rows[i];
      EXPECT_EQ(s.parallel.micro_batches() % s.parallel.pp, 0) << rows[i];
      EXPECT_EQ(s.model.layers % (s.parallel.pp * s.parallel.v), 0) << rows[i];
    }
  }
}

}  // namespace
}  // namespace pipescope
