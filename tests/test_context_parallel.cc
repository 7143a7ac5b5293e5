// Context parallelism (parallel.cp, core/cost/context_parallel.h): the causal load balancing, the rank grid in
// Megatron's order, the collective rings (TP per context-parallel rank, the K/V ring, DP over dp * cp), the
// ring-attention kernels and their exposed transfers, memory per rank, the K/V traffic in the lowering, located errors,
// the Megatron import, and cp 1 / 2 / 4 on a Llama-3-70B job at 32k tokens (scenarios/llama3-70b-32k.yaml).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/context_parallel.h"
#include "core/lower/checks.h"
#include "core/lower/dag.h"
#include "core/memory/memory_model.h"
#include "core/model/megatron_import.h"
#include "core/model/placement.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/search.h"
#include "sim/child_process.h"
#include "sim/engine.h"
#include "sim/run_scenario.h"

namespace pipescope {
namespace {

// llama3-8b-like on DGX H100 nodes: tp, pp, dp, cp given; whole sequences of `seq` tokens, flash attention.
std::string yaml(int dp, int cp, int pp, int tp, int nodes, int seq = 8192, const std::string& extra = "") {
  return "model: {preset: llama3-8b, seq_len: " + std::to_string(seq) +
         "}\n"
         "cluster: {preset: dgx-h100, nodes: " +
         std::to_string(nodes) + "}\nparallel: {dp: " + std::to_string(dp) + ", cp: " + std::to_string(cp) +
         ", pp: " + std::to_string(pp) + ", tp: " + std::to_string(tp) +
         ", global_batch: 8}\n"
         "training: {dtype: bf16, flash_attention: true, distributed_optimizer: true}\n" +
         extra;
}

Scenario load(const std::string& text) { return parse_scenario(text, "cp.yaml"); }

TEST(ContextParallel, LoadBalancedStepsCoverTheCausalPairsEvenly) {
  for (int cp : {1, 2, 4, 8}) {
    SCOPED_TRACE(cp);
    const int s = 64;
    double per_rank = 0;
    for (int i = 0; i < cp; i++) per_rank += cp_step_pairs(s, cp, i);
    EXPECT_DOUBLE_EQ(per_rank * cp, s * (s + 1) / 2.0);  // every causal pair once, the same share on every rank
    for (int i = 1; i < cp; i++) EXPECT_DOUBLE_EQ(cp_step_pairs(s, cp, i), 2.0 * (s / (2.0 * cp)) * (s / (2.0 * cp)));
  }
  EXPECT_THROW(cp_step_pairs(100, 8, 0), std::invalid_argument);  // 16 does not divide 100
  EXPECT_THROW(cp_step_pairs(64, 2, 2), std::invalid_argument);
}

// Megatron's order tp, cp, dp, pp: lane c * tp + t of worker (d, r) is GPU r * (n / pp) + d * tp * cp + c * tp + t.
TEST(ContextParallel, RankGridInMegatronOrder) {
  const Scenario s = load(yaml(2, 2, 2, 2, 2));
  const Placement pl = make_placement("megatron", 2, 2, 2, s.cluster, 2);
  EXPECT_EQ(pl.width(), 4);
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 2; c++)
        for (int t = 0; t < 2; t++) EXPECT_EQ(pl.gpu_of(d * 2 + r, c * 2 + t), r * 8 + d * 4 + c * 2 + t);
  EXPECT_THROW(make_placement("terapipe", 2, 2, 2, s.cluster, 2), std::invalid_argument);
  EXPECT_THROW(make_placement("megatron", 4, 2, 2, s.cluster, 2), std::invalid_argument);  // 32 GPUs > 16
}

// Rings: TP per context-parallel rank, the K/V ring per TP rank (tp GPUs apart), gradients over dp * cp.
TEST(ContextParallel, CollectiveRings) {
  const Scenario s = load(yaml(2, 2, 2, 2, 2));
  auto p = prepare(s);
  EXPECT_EQ(p->lowered.cp, 2);
  const Dag dag = build_dag(p->lowered, p->placement);
  int cp_groups = 0, dp_groups = 0;
  for (std::size_t g = 0; g < p->lowered.groups.size(); g++) {
    const auto& rings = dag.rings[g];
    const int w = p->lowered.groups[g].workers[0];
    switch (p->lowered.groups[g].tag) {
      case CollTag::ContextParallel:
        cp_groups++;
        ASSERT_EQ(rings.size(), 2u);  // one per TP rank
        for (int t = 0; t < 2; t++)
          EXPECT_EQ(rings[t], (std::vector<std::int32_t>{p->placement.gpu_of(w, t), p->placement.gpu_of(w, 2 + t)}));
        break;
      case CollTag::DataParallel:
        dp_groups++;
        ASSERT_EQ(rings.size(), 2u);  // one per TP rank, over dp * cp = 4 GPUs
        for (const auto& ring : rings) EXPECT_EQ(std::set<std::int32_t>(ring.begin(), ring.end()).size(), 4u);
        break;
      case CollTag::TensorParallel:
        ASSERT_EQ(rings.size(), 2u);  // one per context-parallel rank, of tp GPUs
        EXPECT_EQ(rings[1], (std::vector<std::int32_t>{p->placement.gpu_of(w, 2), p->placement.gpu_of(w, 3)}));
        break;
      case CollTag::None:
      case CollTag::Embedding:
      case CollTag::ExpertParallel:
      case CollTag::ExpertData:
      case CollTag::ScatterGather:
      case CollTag::ParamGather:
        break;  // rings not checked here
    }
  }
  EXPECT_EQ(cp_groups, 4);  // one per worker
  EXPECT_EQ(dp_groups, 2);  // one per pipeline rank
  EXPECT_NO_THROW(check(p->lowered, p->placement));
}

// dp = 1 with context parallelism: the gradients are still reduced, over the worker's cp ranks (Megatron's
// data-parallel group with context parallelism), one ring per TP rank of the cp GPUs holding it.
TEST(ContextParallel, DpOneReducesGradientsOverTheCpRanks) {
  auto p = prepare(load(yaml(1, 2, 2, 2, 1)));
  const Dag dag = build_dag(p->lowered, p->placement);
  int dp_groups = 0;
  for (std::size_t g = 0; g < p->lowered.groups.size(); g++) {
    if (p->lowered.groups[g].tag != CollTag::DataParallel) continue;
    dp_groups++;
    const int w = p->lowered.groups[g].workers.at(0);
    ASSERT_EQ(dag.rings[g].size(), 2u);  // one per TP rank
    for (int t = 0; t < 2; t++)
      EXPECT_EQ(dag.rings[g][t], (std::vector<std::int32_t>{p->placement.gpu_of(w, t), p->placement.gpu_of(w, 2 + t)}));
  }
  EXPECT_EQ(dp_groups, 2);  // one per pipeline rank
  int reductions = 0;
  for (const auto& prog : p->lowered.per_worker)
    for (const auto& l : prog) reductions += l.tag == CollTag::DataParallel && l.bytes > 0;
  EXPECT_EQ(reductions, 2);  // the distributed optimizer's reduce-scatter, one per worker
  // Without context parallelism dp = 1 has nothing to reduce.
  const auto q = prepare(load(yaml(1, 1, 2, 4, 1)));
  for (const auto& prog : q->lowered.per_worker)
    for (const auto& l : prog) EXPECT_NE(l.tag, CollTag::DataParallel);
}

// The K/V traffic: one async all-gather before every F and B, K/V of the rank's tokens per step, per layer (x2 in
// backward: the dK/dV ring).
TEST(ContextParallel, LoweringPostsTheKvRing) {
  const Scenario s = load(yaml(1, 4, 2, 2, 2));
  auto p = prepare(s);
  const double kv = 2.0 * 1 * (8192 / 4) * (4096 * 8 / 32) / 2 * 2;  // 2 b (s/cp) (kv/t) e; llama3-8b kv = 1024
  EXPECT_DOUBLE_EQ(cp_kv_step_bytes(s, 1), kv);
  int f = 0, b = 0;
  for (const auto& prog : p->lowered.per_worker)
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].kind != LOpKind::Compute) continue;
      ASSERT_GT(i, 0u);
      const LoweredOp& x = prog[i - 1];
      ASSERT_EQ(x.tag, CollTag::ContextParallel) << lowered_text(prog[i]);
      EXPECT_TRUE(x.async);
      EXPECT_EQ(x.kind, LOpKind::AllGather);
      EXPECT_DOUBLE_EQ(x.bytes, 4 * kv);
      EXPECT_EQ(x.count, (prog[i].op.kind == OpKind::Forward ? 1 : 2) * 16);  // 32 layers over pp 2
      (prog[i].op.kind == OpKind::Forward ? f : b)++;
    }
  EXPECT_EQ(f, 2 * 8);
  EXPECT_EQ(b, 2 * 8);
  // cp = 1: nothing added.
  const auto p1 = prepare(load(yaml(4, 1, 2, 2, 2)));
  for (const auto& prog : p1->lowered.per_worker)
    for (const auto& l : prog) EXPECT_NE(l.tag, CollTag::ContextParallel);
}

double forward_s(const Scenario& s) {
  const AnalyticCostModel cm(s);
  Op op;
  op.kind = OpKind::Forward;
  op.stage = 1;
  op.tok_end = s.model.seq_len;
  return cm.compute_seconds(op, 1);
}

// Time per GPU falls with cp (1/cp of the work) but by less than cp: launches, the correction kernels and, when the
// ring's transfers outlast a step's attention, the exposed part. The ring across nodes (tp * cp > 8) exposes more
// than inside one.
TEST(ContextParallel, TimeAndFlopsPerGpu) {
  const double t1 = forward_s(load(yaml(4, 1, 2, 2, 2, 32768)));
  const double t2 = forward_s(load(yaml(2, 2, 2, 2, 2, 32768)));
  const double t4 = forward_s(load(yaml(1, 4, 2, 2, 2, 32768)));
  EXPECT_LT(t2, t1);
  EXPECT_GT(t2, t1 / 2);
  EXPECT_LT(t4, t2);
  EXPECT_GT(t4, t1 / 4);
  const Scenario s4 = load(yaml(1, 4, 2, 2, 2, 32768)), s1 = load(yaml(4, 1, 2, 2, 2, 32768));
  const AnalyticCostModel c4(s4), c1(s1);
  Op op;
  op.kind = OpKind::Backward;
  op.stage = 1;
  op.tok_end = 32768;
  EXPECT_DOUBLE_EQ(c4.op_flops(op, 1), c1.op_flops(op, 1) / 4);
  EXPECT_DOUBLE_EQ(c4.p2p_bytes(op, 1), c1.p2p_bytes(op, 1) / 4);
  EXPECT_DOUBLE_EQ(c4.tp_allreduce_bytes(op, 1), c1.tp_allreduce_bytes(op, 1) / 4);
  // Exposed transfers: a short sequence (little attention per step) over the NIC (tp 8 x cp 2 > 8 GPUs per node).
  auto exposed = [](const Scenario& s) {
    const AnalyticCostModel cm(s);
    double w = 0;
    for (const KernelCost& k : cm.attention_core_kernels(1, s.model.seq_len / s.parallel.cp, 0)) w += k.wait_s;
    return w;
  };
  const Scenario nic = load(yaml(1, 2, 1, 8, 2, 2048)), nvlink = load(yaml(1, 2, 1, 4, 1, 2048));
  EXPECT_GT(exposed(nic), 0);
  EXPECT_GT(exposed(nic), exposed(nvlink));
  EXPECT_DOUBLE_EQ(exposed(load(yaml(1, 2, 1, 8, 2, 131072))), 0);  // long sequences hide the ring
  EXPECT_DOUBLE_EQ(cp_step_comm_seconds(nic.cluster, nic.parallel, 50e9),
                   nic.cluster.nic_latency_s + 50e9 / nic.cluster.nic_data_Bps());
  EXPECT_DOUBLE_EQ(cp_step_comm_seconds(nvlink.cluster, nvlink.parallel, 450e9),
                   nvlink.cluster.nvlink_latency_s + 450e9 / nvlink.cluster.nvlink_bw_Bps);
}

// Memory per GPU: activations of seq / cp tokens, weights and gradients unchanged, the distributed optimizer's
// state over dp * cp.
TEST(ContextParallel, MemoryPerRank) {
  const Scenario s1 = load(yaml(4, 1, 2, 2, 2)), s2 = load(yaml(2, 2, 2, 2, 2)), s4 = load(yaml(1, 4, 2, 2, 2));
  const Schedule sched = make_schedule(s1);
  const MemoryReport m1 = memory_report(s1, sched);
  for (const Scenario* s : {&s2, &s4}) {
    const int cp = s->parallel.cp;
    SCOPED_TRACE(cp);
    const MemoryReport m = memory_report(*s, make_schedule(*s));
    for (int r = 0; r < 2; r++) {
      // m = B / dp micro-batches: the 1F1B peak holds the same pp - r of them in flight at each cp.
      EXPECT_DOUBLE_EQ(m.ranks[r].activation_peak_bytes, m1.ranks[r].activation_peak_bytes / cp);
      EXPECT_DOUBLE_EQ(m.ranks[r].weights_bytes, m1.ranks[r].weights_bytes);
      EXPECT_DOUBLE_EQ(m.ranks[r].grads_bytes, m1.ranks[r].grads_bytes);
      EXPECT_DOUBLE_EQ(m.ranks[r].optimizer_bytes, m1.ranks[r].optimizer_bytes);  // dp * cp = 4 shards at every cp
    }
  }
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s2, 1, 4096), layer_activation_bytes(s1, 1, 8192) / 2);
}

std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "cp.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(ContextParallel, BadValuesAreLocated) {
  EXPECT_NE(error_of(yaml(2, 0, 2, 2, 1)).find("cp.yaml:3:23: parallel.cp: expected a positive integer"),
            std::string::npos)
      << error_of(yaml(2, 0, 2, 2, 1));
  EXPECT_NE(error_of(yaml(2, 3, 2, 2, 2)).find("parallel.dp: dp * pp * tp * cp = 2 * 2 * 2 * 3 = 24 GPUs"),
            std::string::npos)
      << error_of(yaml(2, 3, 2, 2, 2));
  const std::string seq = error_of(yaml(2, 2, 2, 2, 2, 8190));
  EXPECT_NE(seq.find("parallel.cp: context parallelism cuts each sequence into 2 * cp = 4"), std::string::npos) << seq;
  std::string no_flash = yaml(2, 2, 2, 2, 2);
  no_flash.replace(no_flash.find("flash_attention: true"), 21, "flash_attention: false");
  EXPECT_NE(error_of(no_flash).find("cp.yaml:3:23: parallel.cp: cp = 2 runs attention as ring steps"),
            std::string::npos)
      << error_of(no_flash);
  const std::string sliced = error_of(yaml(2, 2, 2, 2, 2, 8192, "schedule: {kind: seq1f1b, seq_slices: 2}\n"));
  EXPECT_NE(sliced.find("parallel.cp: schedule seq1f1b slices sequences"), std::string::npos) << sliced;
  const std::string tera = error_of(yaml(2, 2, 2, 2, 2, 8192, "sim: {placement: terapipe}\n"));
  EXPECT_NE(tera.find("parallel.cp: placement terapipe"), std::string::npos) << tera;
  EXPECT_NE(error_of(yaml(2, 2000, 1, 1, 500)).find("parallel.cp:"), std::string::npos);  // above the range
}

TEST(ContextParallel, ImportMegatronMapsContextParallelSize) {
  MegatronImportOptions o;
  o.cluster = "dgx-h100";
  o.nodes = 8;
  const MegatronImport im =
      import_megatron({"--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length",
                       "32768", "--micro-batch-size", "1", "--global-batch-size", "16", "--tensor-model-parallel-size",
                       "8", "--pipeline-model-parallel-size", "2", "--context-parallel-size", "2", "--bf16"},
                      o);
  EXPECT_TRUE(im.unsupported.empty());
  const Scenario s = parse_scenario(im.yaml, "import.yaml");
  EXPECT_EQ(s.parallel.cp, 2);
  EXPECT_EQ(s.parallel.dp, 2);  // 64 GPUs / (tp 8 x pp 2 x cp 2)
  EXPECT_TRUE(s.training.flash_attention);
}

// llama3-8b (32 query, 8 K/V heads) at tp 2, cp 4 on one DGX H100 node (the group on NVLink), with
// parallel.cp_comm_type and, for a2a+p2p, cp_a2a.
Scenario comm_type(const std::string& type, int seq = 32768, int a2a = 0) {
  std::string y = yaml(1, 4, 1, 2, 1, seq);
  const std::string extra = ", cp_comm_type: \"" + type + "\"" + (a2a > 0 ? ", cp_a2a: " + std::to_string(a2a) : "");
  y.insert(y.find(", global_batch: 8}"), extra);
  return load(y);
}

double waits(const AnalyticCostModel& cm, const Scenario& s, bool forward) {
  const int l = s.model.seq_len / s.parallel.cp;
  double w = 0;
  for (const KernelCost& k : forward ? cm.attention_core_kernels(1, l, 0) : cm.layer_backward_kernels(1, l, 0))
    w += k.wait_s;
  return w;
}

// The four types do the same useful work; they differ in what waits: nothing for a long sequence's ring, the
// gather before attention (and again, with the dK/dV reduce-scatter, in backward), the all-to-alls of Q, K, V and
// the output, or a2a+p2p's all-to-alls over its groups of cp_a2a ranks.
TEST(ContextParallel, CommTypesSameFlopsDifferentWaits) {
  const Scenario p2p = comm_type("p2p"), ag = comm_type("allgather"), a2a = comm_type("a2a"),
                 hier = comm_type("a2a+p2p", 32768, 2);
  Op op;
  op.kind = OpKind::Backward;
  op.stage = 0;
  op.tok_end = 32768;
  const double flops = AnalyticCostModel(p2p).op_flops(op, 1);
  for (const Scenario* s : {&ag, &a2a, &hier}) EXPECT_DOUBLE_EQ(AnalyticCostModel(*s).op_flops(op, 1), flops);
  const AnalyticCostModel c_p2p(p2p), c_ag(ag), c_a2a(a2a), c_hier(hier);
  EXPECT_DOUBLE_EQ(waits(c_p2p, p2p, true), 0);  // 32k tokens hide every ring step on NVLink
  const ClusterSpec& c = p2p.cluster;
  const double e = 2, l = 32768 / 4, q = 4096 / 2, kv = 1024 / 2;  // per TP rank
  const double gather = c.nvlink_latency_s + 3 * 2 * e * l * kv / c.nvlink_bw_Bps;
  EXPECT_DOUBLE_EQ(waits(c_ag, ag, true), gather);
  EXPECT_DOUBLE_EQ(waits(c_ag, ag, false), 2 * gather);  // gathered again, dK/dV reduce-scattered
  const double qkv = c.nvlink_latency_s + e * l * (q + 2 * kv) * 3 / 4 / c.nvlink_bw_Bps,
               o = c.nvlink_latency_s + e * l * q * 3 / 4 / c.nvlink_bw_Bps;
  EXPECT_DOUBLE_EQ(waits(c_a2a, a2a, true), qkv + o);
  EXPECT_DOUBLE_EQ(waits(c_a2a, a2a, false), o + qkv);  // dO in, dQ, dK, dV out
  const double qkv2 = c.nvlink_latency_s + e * l * (q + 2 * kv) / 2 / c.nvlink_bw_Bps,
               o2 = c.nvlink_latency_s + e * l * q / 2 / c.nvlink_bw_Bps;
  EXPECT_NEAR(waits(c_hier, hier, true), qkv2 + o2, 1e-12);  // its 2-step ring hides behind attention
  // The breakdown's share: the op's waits, at most its time; none for a weight-gradient op.
  op.kind = OpKind::Forward;
  EXPECT_DOUBLE_EQ(c_p2p.cp_wait_seconds(op, 1), 0);
  EXPECT_NEAR(c_ag.cp_wait_seconds(op, 1), 32 * gather, 1e-12);  // 32 layers
  op.kind = OpKind::BackwardWeight;
  EXPECT_DOUBLE_EQ(c_ag.cp_wait_seconds(op, 1), 0);
}

// a2a+p2p: cp 4 as two all-to-all groups of 2 adjacent context-parallel ranks and, per place in a group, a ring
// through the groups; a2a posts the all-to-alls of each op (Q, K, V; the output) instead of the K/V ring.
TEST(ContextParallel, HierarchicalRingsAndTraffic) {
  auto p = prepare(comm_type("a2a+p2p", 8192, 2));
  EXPECT_EQ(p->lowered.cp_a2a, 2);
  const Dag dag = build_dag(p->lowered, p->placement);
  int inner = 0, outer = 0;
  for (std::size_t g = 0; g < p->lowered.groups.size(); g++) {
    const CollGroup& grp = p->lowered.groups[g];
    if (grp.tag != CollTag::ContextParallel) continue;
    const int w = grp.workers[0];
    const auto& rings = dag.rings[g];
    ASSERT_EQ(rings.size(), 4u);  // tp 2 lanes x 2
    auto gpu = [&](int c, int t) { return p->placement.gpu_of(w, c * 2 + t); };
    switch (grp.cp_ring) {
      case CpRing::Inner:  // cp ranks {0, 1} and {2, 3} of each lane
        inner++;
        EXPECT_EQ(rings[0], (std::vector<std::int32_t>{gpu(0, 0), gpu(1, 0)}));
        EXPECT_EQ(rings[1], (std::vector<std::int32_t>{gpu(2, 0), gpu(3, 0)}));
        break;
      case CpRing::Outer:  // cp ranks {0, 2} and {1, 3} of each lane
        outer++;
        EXPECT_EQ(rings[0], (std::vector<std::int32_t>{gpu(0, 0), gpu(2, 0)}));
        EXPECT_EQ(rings[1], (std::vector<std::int32_t>{gpu(1, 0), gpu(3, 0)}));
        break;
      case CpRing::Whole:
        ADD_FAILURE() << "a2a+p2p has no whole-group ring";
        break;
    }
  }
  EXPECT_EQ(inner, 1);
  EXPECT_EQ(outer, 1);
  EXPECT_NO_THROW(check(p->lowered, p->placement));
  auto a = prepare(comm_type("a2a", 8192));
  int a2a_calls = 0;
  for (const auto& prog : a->lowered.per_worker)
    for (const LoweredOp& l : prog)
      if (l.tag == CollTag::ContextParallel) {
        EXPECT_EQ(l.kind, LOpKind::AllToAll);
        a2a_calls++;
      }
  EXPECT_EQ(a2a_calls, 2 * 2 * 8);  // two per compute op: 8 micro-batches, forward and backward
}

TEST(ContextParallel, CommTypeErrorsAreLocated) {
  auto err = [](const std::string& type, int a2a, int tp = 2) {
    std::string y = yaml(1, 4, 1, tp, std::max(1, tp * 4 / 8));
    const std::string extra = ", cp_comm_type: \"" + type + "\"" + (a2a > 0 ? ", cp_a2a: " + std::to_string(a2a) : "");
    y.insert(y.find(", global_batch: 8}"), extra);
    return error_of(y);
  };
  EXPECT_NE(err("a2a", 0, 8)
                .find("parallel.cp_comm_type: cp_comm_type a2a spreads the heads of a tensor-parallel "
                      "rank (4 query, 1 K/V heads) over all-to-all groups of 4 ranks"),
            std::string::npos)
      << err("a2a", 0, 8);
  EXPECT_NE(err("p2p", 2).find("parallel.cp_a2a: cp_a2a = 2 sizes the all-to-all level of cp_comm_type a2a+p2p"),
            std::string::npos);
  EXPECT_NE(err("a2a+p2p", 4).find("parallel.cp_a2a: cp_comm_type a2a+p2p needs cp_a2a"), std::string::npos);
  EXPECT_NE(err("a2a+p2p", 0).find("got 1"), std::string::npos);
  EXPECT_NE(err("ring", 0).find("parallel.cp_comm_type"), std::string::npos);
  EXPECT_EQ(err("a2a+p2p", 2), "");
}

TEST(ContextParallel, ImportAndEmitCommType) {
  MegatronImportOptions o;
  o.cluster = "dgx-h100";
  o.nodes = 8;
  auto import = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--num-layers",
                                  "32",
                                  "--hidden-size",
                                  "4096",
                                  "--num-attention-heads",
                                  "32",
                                  "--seq-length",
                                  "32768",
                                  "--micro-batch-size",
                                  "1",
                                  "--global-batch-size",
                                  "16",
                                  "--tensor-model-parallel-size",
                                  "2",
                                  "--pipeline-model-parallel-size",
                                  "2",
                                  "--context-parallel-size",
                                  "4",
                                  "--bf16"};
    a.insert(a.end(), extra.begin(), extra.end());
    return import_megatron(a, o);
  };
  const Scenario s = parse_scenario(
      import({"--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"}).yaml, "i.yaml");
  EXPECT_EQ(s.parallel.cp_comm_type, CpCommType::A2AP2P);
  EXPECT_EQ(s.parallel.cp_a2a, 2);
  EXPECT_EQ(parse_scenario(import({"--cp-comm-type", "a2a", "a2a", "a2a"}).yaml, "i.yaml").parallel.cp_comm_type,
            CpCommType::A2A);
  auto refused = [&](std::vector<std::string> extra) {
    try {
      import(std::move(extra));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused({"--cp-comm-type", "p2p", "a2a"}).find("one type per layer is not modelled"), std::string::npos);
  EXPECT_NE(refused({"--cp-comm-type", "a2a+p2p"}).find("needs --hierarchical-context-parallel-sizes"),
            std::string::npos);
  EXPECT_NE(refused({"--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "4"})
                .find("whose product is --context-parallel-size 4"),
            std::string::npos);
  EXPECT_NE(refused({"--cp-comm-type", "ring"}).find("not one of p2p, a2a, allgather, a2a+p2p"), std::string::npos);
}

// The search tries the types where cp > 1 (--cp-comm-type): each type once, a2a+p2p once per all-to-all level
// (cp 4: a level of 2), in the label; at cp = 1 the scenario's type alone.
TEST(ContextParallel, SearchTriesTheCommTypes) {
  SearchSpace space;
  space.schedules = {"1f1b"};
  space.micro_batch_sizes = {1};
  space.recompute = {Recompute::None};
  space.distributed_optimizer = {true};
  space.tp = {2};
  space.cp = {1, 4};
  space.cp_comm_types = {CpCommType::P2P, CpCommType::AllGather, CpCommType::A2A, CpCommType::A2AP2P};
  std::set<std::string> at4;
  int at1 = 0;
  for_each_point(load(yaml(2, 4, 1, 2, 2, 32768)), space, [&](const SearchPoint& pt) {
    if (pt.cp == 1) {
      at1++;
      EXPECT_EQ(pt.cp_comm_type, CpCommType::P2P);
      return;
    }
    const std::string label = candidate_label(make_point(load(yaml(2, 4, 1, 2, 2, 32768)), pt, 4));
    const std::size_t from = label.find("cp4");
    at4.insert(label.substr(from, label.find(" rc-") - from));
  });
  EXPECT_GT(at1, 0);
  EXPECT_EQ(at4, (std::set<std::string>{"cp4", "cp4 allgather", "cp4 a2a", "cp4 a2a+p2p2"}));
}

// scenarios/llama3-70b-32k.yaml with cp traded against dp on its 128 GPUs (the README's sweep): memory per GPU
// falls about cp-fold (activations), cp 1 does not fit, and with more micro-batches per replica (m = B / dp) the
// pipeline bubble and the iteration time shrink.
TEST(ContextParallel, Llama70bAt32kTradesDpForCp) {
  const Scenario base = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/llama3-70b-32k.yaml");
  std::vector<sim::RunResult> r;
  for (int cp : {1, 2, 4}) {
    Scenario s = base;
    s.parallel.cp = cp;
    s.parallel.dp = 4 / cp;
    validate_scenario(s);
    r.push_back(sim::run_isolated(s));
  }
  EXPECT_TRUE(r[0].oom);
  EXPECT_FALSE(r[1].oom);
  EXPECT_FALSE(r[2].oom);
  EXPECT_GT(r[0].peak_memory_bytes, 1.5 * r[1].peak_memory_bytes);
  EXPECT_GT(r[1].peak_memory_bytes, 1.3 * r[2].peak_memory_bytes);
  EXPECT_GT(r[0].iteration_s, r[1].iteration_s);
  EXPECT_GT(r[1].iteration_s, r[2].iteration_s);
  for (const auto& x : r) EXPECT_EQ(x.gpus, 128);
}

// Replica folding (sim/README.md) with data-parallel rings over dp * cp GPUs and explicit ring collectives: the
// same times as the full run. The K/V rings run as ring steps on the links (SimGrid comms taking time beside the
// compute); hidden behind the attention here, they leave the iteration time as it is.
TEST(ContextParallel, SimulatedRingsFoldedAndFull) {
  const Scenario s = load(yaml(2, 2, 2, 2, 2, 8192, "sim: {collectives: ring}\n"));
  auto run = [&](bool fold, bool kv) {
    return sim::run_in_child([&] {
      auto p = prepare(s);
      if (!kv)
        for (auto& prog : p->lowered.per_worker)
          for (auto& l : prog)
            if (l.tag == CollTag::ContextParallel) l.bytes = 0;
      const CheckedSchedule cs = check(p->lowered, p->placement);
      sim::EngineOptions o;
      o.collectives = "ring";
      o.fold_replicas = fold;
      const sim::SimResult r = sim::simulate(s.cluster, cs, o);
      double ring_s = 0;  // time the K/V ring collectives were in flight
      for (std::uint32_t i = 0; i < cs.dag().size(); i++) {
        const DagNode& n = cs.dag().nodes[i];
        if (n.kind == DagKind::Collective && p->lowered.groups[n.group].tag == CollTag::ContextParallel)
          ring_s += r.timing[i].end - r.timing[i].start;
      }
      char buf[128];
      std::snprintf(buf, sizeof buf, "%.17g %zu %.17g", r.iteration_s, r.activities, ring_s);
      return std::string(buf);
    });
  };
  const std::string folded = run(true, true), full = run(false, true), none = run(false, false);
  EXPECT_EQ(folded.substr(0, folded.find(' ')), full.substr(0, full.find(' ')));
  double it_full = 0, it_none = 0, ring_full = 0, ring_none = 0;
  std::size_t act_full = 0, act_none = 0;
  std::sscanf(full.c_str(), "%lf %zu %lf", &it_full, &act_full, &ring_full);
  std::sscanf(none.c_str(), "%lf %zu %lf", &it_none, &act_none, &ring_none);
  // Per F and B of a worker: layers (x2 in backward) all-gather calls of one ring step each, as SimGrid comms.
  const std::size_t calls = 8 * 4 * (16 + 2 * 16);  // m = 8, 4 workers; 32 layers over pp 2
  EXPECT_GE(act_full - act_none, calls);
  EXPECT_EQ((act_full - act_none) % calls, 0u);
  EXPECT_GT(ring_full, 0);
  EXPECT_EQ(ring_none, 0);
  EXPECT_DOUBLE_EQ(it_full, it_none);
}

}  // namespace
}  // namespace pipescope
