// Training-job shapes: grouped-query attention, SwiGLU, RMSNorm, rotary positions and biases in the
// parameter and FLOP counts; the Korthikanti activation formulas (no / selective recomputation, tp and sp forms) as
// exact bytes; K/V bytes per group; dtype-derived parameter bytes and the sharded optimizer state; the distributed
// optimizer's and the overlapped reductions' lowered programs; the new keys' located errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/grad_sync.h"
#include "core/lower/lowering.h"
#include "core/memory/memory_model.h"
#include "core/model/model_shape.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

Scenario scenario(const std::string& model, int pp, int tp, int dp = 1) {
  Scenario s;
  s.name = "test";
  s.source = "<test>";
  s.model = *model_preset(model);
  s.cluster = *cluster_preset("dgx-h100");
  s.parallel.pp = pp;
  s.parallel.tp = tp;
  s.parallel.dp = dp;
  return s;
}

TEST(ModelShape, LlamaParameterCounts) {
  // Meta's published sizes: 8.03B and 70.6B (embeddings and output layer untied, no position table; Eq. 2 leaves
  // the final norm out).
  EXPECT_DOUBLE_EQ(parameter_count(*model_preset("llama3-8b")), 8030257152.0);
  EXPECT_DOUBLE_EQ(parameter_count(*model_preset("llama3-70b")), 70553698304.0);
  EXPECT_NEAR(parameter_count(*model_preset("llama3-405b")) / 1e9, 405.8, 0.1);
  EXPECT_NEAR(parameter_count(*model_preset("nemotron4-340b")) / 1e9, 341.0, 0.5);
  // One Llama-3-8B layer: QKV h(h + 2 h/4), projection h^2, SwiGLU 3hf, two RMSNorms of h, no biases.
  const double h = 4096, f = 14336;
  EXPECT_DOUBLE_EQ(layer_parameter_count(*model_preset("llama3-8b")), h * (h + h / 2) + h * h + 3 * h * f + 2 * h);
  // The GPT formula is unchanged: 4h^2 + 2hf + f + 9h.
  const ModelSpec g = *model_preset("gpt3-1b");
  EXPECT_DOUBLE_EQ(layer_parameter_count(g), 4.0 * 2048 * 2048 + 2.0 * 2048 * 8192 + 8192 + 9 * 2048);
}

TEST(ModelShape, GqaSavesEighteenPercentOfGemmFlopsAtNemotronShape) {
  ModelSpec gqa = *model_preset("nemotron4-340b");
  ModelSpec mha = gqa;
  mha.query_groups = 0;
  const LayerFlops a = layer_forward_flops(mha, 8, 1, 4096, 0), b = layer_forward_flops(gqa, 8, 1, 4096, 0);
  // MHA 12h^2 per token vs GQA (10 + 2/12)h^2: +18.0%.
  EXPECT_NEAR(a.gemm() / b.gemm(), 12.0 / (10.0 + 2.0 / 12.0), 1e-12);
  EXPECT_DOUBLE_EQ(a.attn, b.attn);  // every query head still scores its keys
  // SwiGLU: three h x f matrices.
  const ModelSpec l8 = *model_preset("llama3-8b");
  EXPECT_DOUBLE_EQ(layer_forward_flops(l8, 1, 1, 1, 0).mlp, 2.0 * 4096 * 3 * 14336);
}

TEST(ModelShape, MegatronFlopsWithSelectiveRecompute) {
  const ModelSpec m = *model_preset("llama3-70b");
  const double B = 16, s = 8192, h = 8192;
  const double none = megatron_flops_per_iteration(m, 16, Recompute::None);
  const double sel = megatron_flops_per_iteration(m, 16, Recompute::Selective);
  const double full = megatron_flops_per_iteration(m, 16, Recompute::Full);
  EXPECT_DOUBLE_EQ(sel - none, 80 * 4.0 * B * s * s * h);  // one more attention-core forward per layer
  EXPECT_GT(full, sel);
  // Model FLOPs: 6 * tokens * (non-embedding params) + attention + logits, within 1e-12 of the closed form.
  const double gemm_params = 80 * (8192.0 * 10240 + 8192.0 * 8192 + 3 * 8192.0 * 28672);
  EXPECT_NEAR(none, 6 * B * s * gemm_params + 3 * 80 * 4 * B * s * s * h + 6 * B * s * h * 128256, none * 1e-12);
}

TEST(ModelShape, SelectiveRecomputeCostsTheAttentionCoreOnly) {
  Scenario s = scenario("llama3-8b", 1, 1);
  s.parallel.global_batch = 1;
  auto backward = [&](Recompute r, bool flash) {
    Scenario x = s;
    x.schedule.recompute = r;
    x.training.flash_attention = flash;
    return AnalyticCostModel(x).layer_backward_seconds(1, 8192, 0);
  };
  const double none = backward(Recompute::None, false), sel = backward(Recompute::Selective, false),
               full = backward(Recompute::Full, false);
  EXPECT_GT(sel, none);
  EXPECT_LT(sel, full);
  // With flash attention the scores are recomputed anyway: selective adds nothing.
  EXPECT_DOUBLE_EQ(backward(Recompute::Selective, true), backward(Recompute::None, true));
  // FLOPs of a whole-stage backward: 2x forward + the attention core's forward per layer.
  Scenario x = s;
  x.schedule.recompute = Recompute::Selective;
  const AnalyticCostModel cm(x);
  Op f;
  f.kind = OpKind::Forward;
  f.tok_end = 8192;
  Op b = f;
  b.kind = OpKind::Backward;
  const LayerFlops lf = layer_forward_flops(x.model, 1, 1, 8192, 0);
  const double logits = 2.0 * 8192 * 4096 * 128256;
  EXPECT_DOUBLE_EQ(cm.op_flops(b, 1), 2 * (cm.op_flops(f, 1) - logits) + 32 * lf.attn + 2 * logits);
}

// Korthikanti et al. 2022, Table 2, at 2-byte activations: s b h (34 + 5 a s / h) per layer without recomputation,
// s b h 34 with selective recomputation; tensor parallel s b h (10 + 24/t + 5 a s/(h t)), with sequence parallelism
// s b h (34/t + 5 a s/(h t)); selective + sp: s b h 34 / t.
TEST(ModelShape, KorthikantiActivationBytesExact) {
  Scenario s = scenario("gpt3-13b", 1, 1);  // h 5120, a 40
  const double h = 5120, a = 40, S = 2048, b = 2;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * b * h * (34 + 5 * a * S / h));
  s.schedule.recompute = Recompute::Selective;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * b * h * 34);
  s.parallel.tp = 8;
  s.schedule.recompute = Recompute::None;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * b * h * (10 + 24.0 / 8 + 5 * a * S / (h * 8)));
  s.schedule.recompute = Recompute::Selective;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * b * h * (10 + 24.0 / 8));
  s.parallel.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * b * h * 34 / 8);
  s.schedule.recompute = Recompute::None;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * b * h * (34.0 / 8 + 5 * a * S / (h * 8)));
}

TEST(ModelShape, GqaAndSwigluActivationAndKvBytes) {
  Scenario s = scenario("llama3-70b", 1, 8);  // h 8192, a 64, 8 groups: kv = 1024; f 28672
  s.parallel.sequence_parallel = true;
  s.schedule.recompute = Recompute::Selective;
  const double h = 8192, kv = 1024, f = 28672, S = 8192;
  // Replicated 10h (split by sp), split 4h + 4kv + 6f (Q, projection input, K, V; SwiGLU's fc1 output 2f and fc2
  // input f at 2 B).
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 1, 8192), S * (10 * h + 4 * h + 4 * kv + 6 * f) / 8);
  // K and V of one layer for 8192 tokens on one of 8 TP GPUs: one group each.
  EXPECT_DOUBLE_EQ(layer_kv_bytes(s, 1, 8192), 2.0 * S * (kv / 8) * 2);
  ModelSpec mha = s.model;
  mha.query_groups = 0;
  Scenario sm = s;
  sm.model = mha;
  EXPECT_DOUBLE_EQ(layer_kv_bytes(sm, 1, 8192) / layer_kv_bytes(s, 1, 8192), 8.0);
}

TEST(ModelShape, ParamBytesFollowTheDtypes) {
  TrainingSpec t;
  t.dtype = "fp16";
  EXPECT_DOUBLE_EQ(t.param_bytes().total(), 16);  // 2 + 2 + 4 + 8
  t.dtype = "bf16";
  t.grad_fp32 = true;
  EXPECT_DOUBLE_EQ(t.param_bytes().total(), 18);  // Megatron mixed precision: fp32 main grads
  EXPECT_DOUBLE_EQ(t.param_bytes().state, 12);
  t.dtype = "fp32";
  t.grad_fp32 = false;
  EXPECT_DOUBLE_EQ(t.param_bytes().total(), 16);  // 4 + 4 + Adam 8, no master copy
  t.dtype = "fp64";
  EXPECT_DOUBLE_EQ(t.param_bytes().total(), 32);
  t.dtype = "fp16";
  t.optimizer_bytes_per_param = 12;  // an explicit total wins
  EXPECT_DOUBLE_EQ(t.param_bytes().state, 8);
}

TEST(ModelShape, DistributedOptimizerShardsTheState) {
  Scenario s = scenario("llama3-8b", 2, 1, 4);
  s.training.dtype = "bf16";
  s.training.grad_fp32 = true;
  const Schedule sched = make_1f1b(2, uniform_microbatches(4, 1, 8192, 1), 8192);
  const MemoryReport plain = memory_report(s, sched);
  s.training.distributed_optimizer = true;
  const MemoryReport zero = memory_report(s, sched);
  for (int r = 0; r < 2; r++) {
    const double p = rank_parameter_count(s, r);
    EXPECT_DOUBLE_EQ(plain.ranks[r].optimizer_bytes, 12 * p);
    EXPECT_DOUBLE_EQ(zero.ranks[r].optimizer_bytes, 12 * p / 4);
    EXPECT_DOUBLE_EQ(zero.ranks[r].weights_bytes + zero.ranks[r].grads_bytes, 6 * p);
  }
}

// A 2-rank, dp-2 pipeline lowered with constant costs (1 s forward, 2 s backward; 80 MB of gradients per rank).
LoweredSchedule lowered(const GradSyncOptions& o) {
  ConstantCosts cc;
  cc.grad_bytes = 80e6;
  cc.optimizer_s = 0.5;
  cc.seq_len = 16;
  ConstantCostModel cost(cc);
  return lower(make_1f1b(2, uniform_microbatches(3, 1, 16, 1), 16), 2, 1, cost, false, o);
}

int count(const LoweredSchedule& ls, int w, LOpKind kind, bool async = false) {
  return static_cast<int>(std::count_if(ls.per_worker[w].begin(), ls.per_worker[w].end(),
                                        [&](const LoweredOp& l) { return l.kind == kind && l.async == async; }));
}

TEST(GradSync, DistributedOptimizerReduceScattersThenGathers) {
  GradSyncOptions o;
  o.distributed_optimizer = true;
  const LoweredSchedule ls = lowered(o);
  for (int w = 0; w < 4; w++) {
    const auto& prog = ls.per_worker[w];
    ASSERT_GE(prog.size(), 3u);
    EXPECT_EQ(prog[prog.size() - 3].kind, LOpKind::ReduceScatter);
    EXPECT_EQ(prog[prog.size() - 2].kind, LOpKind::Optimizer);
    EXPECT_EQ(prog.back().kind, LOpKind::AllGather);
    EXPECT_EQ(prog.back().tag, CollTag::ParamGather);
    EXPECT_EQ(count(ls, w, LOpKind::AllReduce), 0);
  }
  EXPECT_NO_THROW(check(ls, make_placement("megatron", 2, 2, 1, *cluster_preset("dgx-h100"))));
}

TEST(GradSync, OverlappedBucketsRideTheLastBackward) {
  GradSyncOptions o;
  o.overlap_grad_reduce = true;
  o.bucket_bytes = 25e6;  // 80 MB per rank -> 4 buckets of 20 MB
  const LoweredSchedule ls = lowered(o);
  for (int w = 0; w < 4; w++) {
    EXPECT_EQ(count(ls, w, LOpKind::AllReduce, true), 4);
    EXPECT_EQ(count(ls, w, LOpKind::AllReduce, false), 0);
    const auto& prog = ls.per_worker[w];
    // Posted right before the last backward, ready at 1/4 .. 4/4 of its 2 s.
    std::size_t last_b = 0;
    for (std::size_t i = 0; i < prog.size(); i++)
      if (prog[i].kind == LOpKind::Compute && prog[i].op.kind == OpKind::Backward) last_b = i;
    for (int j = 0; j < 4; j++) {
      const LoweredOp& c = prog[last_b - 4 + j];
      EXPECT_TRUE(c.async);
      EXPECT_DOUBLE_EQ(c.bytes, 20e6);
      EXPECT_DOUBLE_EQ(c.lead_s, 0.5 * (j + 1));
    }
  }
  // The DAG: the optimizer waits for every bucket; the backward does not.
  const Placement pl = make_placement("megatron", 2, 2, 1, *cluster_preset("dgx-h100"));
  const CheckedSchedule cs = check(ls, pl);
  const Dag& dag = cs.dag();
  const auto& prog = ls.per_worker[0];
  const std::size_t opt = prog.size() - 1;
  ASSERT_EQ(prog[opt].kind, LOpKind::Optimizer);
  const auto opt_node = static_cast<std::uint32_t>(dag.node_of[0][opt]);
  int bucket_preds = 0;
  for (std::uint32_t n = 0; n < dag.size(); n++)
    for (std::uint32_t e = dag.succ_begin[n]; e < dag.succ_begin[n + 1]; e++)
      if (dag.succ[e] == opt_node && dag.nodes[n].kind == DagKind::Collective) bucket_preds++;
  EXPECT_EQ(bucket_preds, 4);
}

TEST(GradSync, OverlappedParamGatherAwaitedByTheFirstForward) {
  GradSyncOptions o;
  o.distributed_optimizer = true;
  o.overlap_param_gather = true;
  const LoweredSchedule ls = lowered(o);
  for (int w = 0; w < 4; w++) {
    const auto& prog = ls.per_worker[w];
    EXPECT_EQ(prog.front().kind, LOpKind::AllGather);
    EXPECT_TRUE(prog.front().async);
    EXPECT_EQ(prog.back().kind, LOpKind::Optimizer);
    EXPECT_EQ(count(ls, w, LOpKind::ReduceScatter), 1);
  }
  EXPECT_NO_THROW(check(ls, make_placement("megatron", 2, 2, 1, *cluster_preset("dgx-h100"))));
}

std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "t.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

const std::string kCluster = "cluster: {preset: dgx-h100, nodes: 1}\n";
const std::string kParallel = "parallel: {pp: 2, tp: 4, global_batch: 8}\n";

TEST(ModelShapeErrors, NewKeysHaveLocatedErrors) {
  const std::string llama = "model: {preset: llama3-8b}\n";
  EXPECT_EQ(error_of("model: {preset: llama3-8b, query_groups: 5}\n" + kCluster + kParallel),
            "t.yaml:1:42: model.query_groups: model.heads = 32 is not divisible by model.query_groups = 5");
  EXPECT_EQ(error_of("model: {preset: llama3-8b, query_groups: 2}\n" + kCluster + kParallel),
            "t.yaml:3:23: parallel.tp: model.query_groups = 2 is not divisible by tp = 4 (tensor parallelism splits "
            "whole K/V groups)");
  EXPECT_EQ(error_of("model: {preset: llama3-8b, ffn: relu}\n" + kCluster + kParallel),
            "t.yaml:1:33: model.ffn: unknown value \"relu\" (did you mean \"gelu\"?); valid: gelu, swiglu");
  EXPECT_EQ(error_of("model: {preset: llama3-8b, norm: rms}\n" + kCluster + kParallel),
            "t.yaml:1:34: model.norm: unknown value \"rms\" (did you mean \"rmsnorm\"?); valid: layernorm, rmsnorm");
  EXPECT_EQ(error_of(llama + kCluster + kParallel + "schedule: {recompute: partial}\n"),
            "t.yaml:4:23: schedule.recompute: unknown value \"partial\"; valid: none, selective, full");
  EXPECT_EQ(error_of(llama + kCluster + kParallel + "training: {grad_bucket_MB: 0}\n"),
            "t.yaml:4:28: training.grad_bucket_MB: expected a positive number, got \"0\"");
  EXPECT_EQ(error_of(llama + kCluster + kParallel + "training: {distributed_optimizer: yes}\n"),
            "t.yaml:4:35: training.distributed_optimizer: expected true or false, got \"yes\"");
  EXPECT_EQ(error_of(llama + kCluster + kParallel + "training: {overlap_param_gather: true}\n"),
            "t.yaml:4:34: training.overlap_param_gather: overlap_param_gather overlaps the distributed optimizer's "
            "parameter all-gather: it needs training.distributed_optimizer: true");
  // The boolean spelling of recompute stays readable.
  const Scenario s = parse_scenario(llama + kCluster + kParallel + "schedule: {recompute: true}\n", "t.yaml");
  EXPECT_EQ(s.schedule.recompute, Recompute::Full);
  const Scenario sel = parse_scenario(llama + kCluster + kParallel + "schedule: {recompute: selective}\n", "t.yaml");
  EXPECT_EQ(sel.schedule.recompute, Recompute::Selective);
}

}  // namespace
}  // namespace pipescope
