// AnalyticCostModel and the Megatron accounting: FLOP formulas against docs/papers.md#megatron and
// docs/calibration.md, the short-slice behaviour of docs/papers.md#terapipe (V100), the A100 efficiency
// range of the Megatron weak-scaling shapes, and the sizes the lowering passes consume.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cost/analytic_cost.h"
#include "core/cost/nccl_model.h"
#include "core/cost/tp_overlap.h"
#include "core/model/presets.h"
#include "core/model/profile.h"
#include "core/plan/pipeline.h"
#include "core/util/memo_table.h"

namespace pipescope {
namespace {

Scenario scenario(const std::string& model, const std::string& cluster, int pp, int tp, int v = 1,
                  bool recompute = false) {
  Scenario s;
  s.name = "test";
  s.source = "<test>";
  s.model = *model_preset(model);
  s.cluster = *cluster_preset(cluster);
  s.parallel.pp = pp;
  s.parallel.tp = tp;
  s.parallel.v = v;
  s.schedule.recompute = recompute ? Recompute::Full : Recompute::None;
  return s;
}

Op op(OpKind kind, int stage, int tok_begin, int tok_end, int p = 1) {
  Op o;
  o.kind = kind;
  o.rank = stage % p;
  o.chunk = stage / p;
  o.stage = stage;
  o.tok_begin = tok_begin;
  o.tok_end = tok_end;
  return o;
}

// ---------------------------------------------------------------- accounting (docs/papers.md#megatron)

struct TableRow {
  const char* preset;
  double params_B;  // printed to one decimal
  int global_batch;
  double flops;      // "F per iteration" column
  double flops_ulp;  // its last printed digit
};

const TableRow kTable1[] = {
    {"megatron-1.7b", 1.7, 512, 1.5467e16, 1e12},     {"megatron-3.6b", 3.6, 512, 3.266e16, 1e13},
    {"megatron-7.5b", 7.5, 512, 6.718e16, 1e13},      {"megatron-18.4b", 18.4, 1024, 3.248e17, 1e14},
    {"megatron-39.1b", 39.1, 1536, 1.021e18, 1e15},   {"megatron-76.1b", 76.1, 1792, 2.302e18, 1e15},
    {"megatron-145.6b", 145.6, 2304, 5.642e18, 1e15}, {"megatron-310.1b", 310.1, 2160, 1.119e19, 1e16},
    {"megatron-529.6b", 529.6, 2520, 2.222e19, 1e16}, {"megatron-1t", 1008.0, 3072, 5.139e19, 1e16},
};

TEST(CostModel, ParameterCountMatchesMegatronTable1) {
  for (const auto& row : kTable1) {
    SCOPED_TRACE(row.preset);
    const ModelSpec m = *model_preset(row.preset);
    EXPECT_NEAR(std::round(parameter_count(m) / 1e8) / 10, row.params_B, 1e-9);
    // Eq. 2 written out.
    const double l = m.layers, h = m.hidden, V = m.vocab, s = m.seq_len;
    EXPECT_NEAR(parameter_count(m), 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)), 1.0);
  }
  // Untied embeddings add the output layer.
  ModelSpec m = *model_preset("megatron-1.7b");
  const double tied = parameter_count(m);
  m.tied_embeddings = false;
  EXPECT_DOUBLE_EQ(parameter_count(m) - tied, 51200.0 * 2304);
}

TEST(CostModel, FlopsPerIterationMatchesMegatronTable1) {
  for (const auto& row : kTable1) {
    SCOPED_TRACE(row.preset);
    const ModelSpec m = *model_preset(row.preset);
    const double f = megatron_flops_per_iteration(m, row.global_batch, Recompute::Full);
    EXPECT_LE(std::abs(f - row.flops), 0.5 * row.flops_ulp * (1 + 1e-9));
    // Without recomputation: the "model FLOPs" form 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)).
    const double B = row.global_batch, s = m.seq_len, l = m.layers, h = m.hidden, V = m.vocab;
    EXPECT_NEAR(megatron_flops_per_iteration(m, row.global_batch, Recompute::None) /
                    (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))),
                1.0, 1e-12);
  }
}

TEST(CostModel, LayerFlopsPerGemmAndCausalAttention) {
  ModelSpec m = *model_preset("gpt3-1b");  // h = 2048
  const double h = 2048, b = 2, s = 2048;
  LayerFlops f = layer_forward_flops(m, 1, 2, 2048, 0);
  EXPECT_DOUBLE_EQ(f.qkv, 6 * b * s * h * h);
  EXPECT_DOUBLE_EQ(f.proj, 2 * b * s * h * h);
  EXPECT_DOUBLE_EQ(f.mlp, 16 * b * s * h * h);
  EXPECT_DOUBLE_EQ(f.gemm(), 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(f.attn, 4 * b * h * (s * s + s) / 2);  // causal pair count (docs/calibration.md)
  // A slice of l tokens after c: 24*b*l*h^2 + 4*b*h*(l*c + l*(l+1)/2), split t ways.
  f = layer_forward_flops(m, 4, 1, 100, 300);
  EXPECT_DOUBLE_EQ(f.gemm(), 24.0 * 100 * h * h / 4);
  EXPECT_DOUBLE_EQ(f.attn, 4.0 * h * (100.0 * 300 + 100.0 * 101 / 2) / 4);
  // ffn_hidden replaces 4h in the MLP.
  m.ffn_hidden = 3 * 2048;
  f = layer_forward_flops(m, 1, 1, 10, 0);
  EXPECT_DOUBLE_EQ(f.mlp, 4.0 * 10 * h * 3 * h);
  EXPECT_DOUBLE_EQ(f.qkv + f.proj, 8.0 * 10 * h * h);
}

TEST(CostModel, SliceFlopsSumToFullSequence) {
  const ModelSpec m = *model_preset("gpt3-13b");
  const std::vector<std::vector<int>> slicings = {
      {2048}, {512, 512, 512, 512}, {776, 640, 632}, {1, 2047}, {64, 64, 64, 64, 256, 512, 1024}};
  const double full = layer_forward_flops(m, 8, 3, 2048, 0).total();
  for (const auto& sl : slicings) {
    ASSERT_EQ(std::accumulate(sl.begin(), sl.end(), 0), 2048);
    double sum = 0;
    int c = 0;
    for (int l : sl) {
      sum += layer_forward_flops(m, 8, 3, l, c).total();
      c += l;
    }
    EXPECT_NEAR(sum / full, 1.0, 1e-13) << sl.size() << " slices";
  }
}

// ---------------------------------------------------------------- time model

// docs/papers.md#terapipe / docs/calibration.md: on a V100 a GPT3-1B layer's forward takes about as long for
// 1 token as for 256, and grows towards linear beyond ~512 (the V100 description's 15 GFLOP fixed cost per GEMM,
// fit to TeraPipe's Table 2, still shows at 512-1024 tokens).
TEST(CostModel, V100ShortSlicesUnderUseTheGpu) {
  const AnalyticCostModel cm(scenario("gpt3-1b", "aws-p3.16xlarge", 1, 1));
  const double t1 = cm.layer_forward_seconds(1, 1, 0);
  const double t256 = cm.layer_forward_seconds(1, 256, 0);
  EXPECT_LE(t256 / t1, 1.25);
  EXPECT_GE(t256 / t1, 1.0);
  EXPECT_LT(cm.layer_forward_seconds(1, 64, 0) / t1, 1.05);
  const double t512 = cm.layer_forward_seconds(1, 512, 0), t1024 = cm.layer_forward_seconds(1, 1024, 0),
               t2048 = cm.layer_forward_seconds(1, 2048, 0);
  EXPECT_GT(t1024 / t512, 1.4);
  EXPECT_LT(t1024 / t512, 2.3);
  EXPECT_GT(t2048 / t1024, 1.7);
  EXPECT_LT(t2048 / t1024, 2.5);  // attention adds a little super-linearity
  // Per-token cost at 2048 is far below that at 1 token: slicing short costs throughput.
  EXPECT_LT(t2048 / 2048, t1 / 50);
}

// Megatron weak-scaling shapes (docs/papers.md#megatron), b = 1, full 2048-token layer, forward: about 50-62% of
// the A100's 312 TFLOP/s for h >= 12288 at t = 8 (Megatron's own FLOP count; large GEMMs evenly tiled reach
// gemm_efficiency 0.66 less the memory-bound kernels), lower for small h.
TEST(CostModel, A100LayerEfficiencyFollowsMegatronShapes) {
  auto efficiency = [](const char* preset, int tp) {
    const Scenario s = scenario(preset, "dgx-a100", 1, tp);
    const AnalyticCostModel cm(s);
    const double h = s.model.hidden, T = 2048;
    const double flops = layer_forward_flops(s.model, tp, 1, 2048, 0).gemm() + 4 * T * T * h / tp;
    return flops / cm.layer_forward_seconds(1, 2048, 0) / 312e12;
  };
  double prev = 0;
  for (const char* preset : {"megatron-145.6b", "megatron-310.1b", "megatron-529.6b", "megatron-1t"}) {
    SCOPED_TRACE(preset);
    const double e = efficiency(preset, 8);
    EXPECT_GT(e, 0.5);
    EXPECT_LT(e, 0.62);
    EXPECT_GE(e, prev);  // bigger GEMMs are more efficient
    prev = e;
  }
  EXPECT_LT(efficiency("megatron-1.7b", 1), efficiency("megatron-145.6b", 8) - 0.05);
  EXPECT_GT(efficiency("megatron-1.7b", 1), 0.3);
}

TEST(CostModel, TimeIsMonotoneInTokensAndContext) {
  for (const char* cluster : {"aws-p3.16xlarge", "dgx-a100"}) {
    for (int tp : {1, 8}) {
      SCOPED_TRACE(std::string(cluster) + " tp " + std::to_string(tp));
      const AnalyticCostModel cm(scenario("gpt3-13b", cluster, 1, tp));
      for (int c : {0, 128, 1024}) {
        double pf = 0, pb = 0;
        for (int l = 1; l <= 1024; l = l < 16 ? l + 1 : l * 5 / 4) {
          const double f = cm.layer_forward_seconds(1, l, c), b = cm.layer_backward_seconds(1, l, c);
          EXPECT_GE(f, pf) << "l " << l << " c " << c;
          EXPECT_GE(b, pb) << "l " << l << " c " << c;
          pf = f;
          pb = b;
        }
      }
      for (int l : {1, 64, 512}) {
        double pf = 0, pb = 0;
        for (int c = 0; c <= 1536; c += 128) {
          const double f = cm.layer_forward_seconds(1, l, c), b = cm.layer_backward_seconds(1, l, c);
          EXPECT_GE(f, pf) << "l " << l << " c " << c;
          EXPECT_GE(b, pb) << "l " << l << " c " << c;
          pf = f;
          pb = b;
        }
      }
      // Context costs something once the slice is GPU-bound.
      EXPECT_GT(cm.layer_forward_seconds(4, 1024, 1024), cm.layer_forward_seconds(4, 1024, 0));
      // More sequences, more time.
      EXPECT_GT(cm.layer_forward_seconds(4, 1024, 0), cm.layer_forward_seconds(1, 1024, 0));
    }
  }
}

TEST(CostModel, BackwardIsAboutTwiceForward) {
  const Scenario s = scenario("megatron-145.6b", "dgx-a100", 8, 8);
  const AnalyticCostModel cm(s);
  const Op f = op(OpKind::Forward, 3, 0, 2048, 8), b = op(OpKind::Backward, 3, 0, 2048, 8);
  EXPECT_DOUBLE_EQ(cm.op_flops(b, 1), 2 * cm.op_flops(f, 1));
  EXPECT_DOUBLE_EQ(cm.op_flops(f, 1), 10 * layer_forward_flops(s.model, 8, 1, 2048, 0).total());
  const double ratio = cm.compute_seconds(b, 1) / cm.compute_seconds(f, 1);
  EXPECT_GT(ratio, 1.7);
  EXPECT_LT(ratio, 2.3);

  // Recompute: one more forward in the backward op, in FLOPs and (GPU-bound) in time.
  const AnalyticCostModel rc(scenario("megatron-145.6b", "dgx-a100", 8, 8, 1, true));
  EXPECT_DOUBLE_EQ(rc.op_flops(b, 1), 3 * rc.op_flops(f, 1));
  EXPECT_DOUBLE_EQ(rc.compute_seconds(f, 1), cm.compute_seconds(f, 1));
  EXPECT_NEAR(rc.compute_seconds(b, 1), cm.compute_seconds(b, 1) + cm.compute_seconds(f, 1),
              2e-3 * cm.compute_seconds(b, 1));
  // One stream instead of two: at most a couple of launch slots apart.
  EXPECT_NEAR(rc.layer_backward_seconds(1, 2048, 0),
              cm.layer_backward_seconds(1, 2048, 0) + cm.layer_forward_seconds(1, 2048, 0),
              2 * s.cluster.device.kernel_launch_s);
}

TEST(CostModel, ChunkTimeAndEmbeddingStages) {
  // 96 layers, pp 8, v 2: 6 layers per chunk; stage 0 has the embedding, stage 15 the LM head.
  const int p = 8;
  const Scenario s = scenario("gpt3-175b", "dgx-a100", p, 8, 2);
  const AnalyticCostModel cm(s);
  ASSERT_EQ(cm.layers_of_stage(5), 6);
  const double mid = cm.compute_seconds(op(OpKind::Forward, 5, 0, 2048, p), 1);
  // GPU-bound chunk: launch overhead hides, the chunk costs its layers.
  EXPECT_NEAR(mid, 6 * cm.layer_forward_seconds(1, 2048, 0), 0.02 * mid);
  EXPECT_DOUBLE_EQ(cm.compute_seconds(op(OpKind::Forward, 13, 0, 2048, p), 1), mid);  // chunk 1, same size
  const double first = cm.compute_seconds(op(OpKind::Forward, 0, 0, 2048, p), 1);
  const double last = cm.compute_seconds(op(OpKind::Forward, 15, 0, 2048, p), 1);
  EXPECT_GT(first, mid);
  EXPECT_LT(first, 1.05 * mid);
  // Logits: 2*T*h*V/t = 1.6 TFLOP per GPU, several ms on an A100.
  EXPECT_GT(last - mid, 2.0 * 2048 * 12288 * 51200 / 8 / 312e12);
  EXPECT_GT(cm.compute_seconds(op(OpKind::Backward, 15, 0, 2048, p), 1),
            cm.compute_seconds(op(OpKind::Backward, 5, 0, 2048, p), 1) + (last - mid));
  // A short slice is launch-bound: at least one issue slot per kernel.
  const double tiny = cm.compute_seconds(op(OpKind::Forward, 5, 0, 1, p), 1);
  EXPECT_GE(tiny, 6 * 14 * s.cluster.device.kernel_launch_s);
  EXPECT_LT(tiny, mid / 4);
}

TEST(CostModel, SizesForTheLoweringPasses) {
  const int p = 4;
  const Scenario s = scenario("megatron-39.1b", "dgx-a100", p, 8, 2);  // 48 layers: 6 per chunk, h 8192
  const AnalyticCostModel cm(s);
  const Op f = op(OpKind::Forward, 2, 512, 1024, p), b = op(OpKind::Backward, 2, 512, 1024, p);
  EXPECT_DOUBLE_EQ(cm.p2p_bytes(f, 3), 3.0 * 512 * 8192 * 2);
  EXPECT_DOUBLE_EQ(cm.p2p_bytes(b, 3), 3.0 * 512 * 8192 * 2);
  EXPECT_DOUBLE_EQ(cm.tp_allreduce_bytes(f, 3), 3.0 * 512 * 8192 * 2);
  EXPECT_EQ(cm.tp_allreduce_calls(f), 12);
  EXPECT_EQ(cm.tp_allreduce_calls(b), 12);
  EXPECT_EQ(cm.tp_allreduce_calls(op(OpKind::Forward, 0, 0, 2048, p)), 13);  // + vocab-parallel embedding
  EXPECT_EQ(cm.tp_allreduce_calls(op(OpKind::Backward, 0, 0, 2048, p)), 12);
  EXPECT_EQ(cm.tp_allreduce_calls(op(OpKind::Backward, 7, 0, 2048, p)), 13);  // + LM-head input gradient
  const AnalyticCostModel rc(scenario("megatron-39.1b", "dgx-a100", p, 8, 2, true));
  EXPECT_EQ(rc.tp_allreduce_calls(f), 12);
  EXPECT_EQ(rc.tp_allreduce_calls(b), 24);
  const AnalyticCostModel no_tp(scenario("megatron-39.1b", "dgx-a100", p, 1, 2));
  EXPECT_EQ(no_tp.tp_allreduce_calls(f), 0);

  // Gradients: the rank's parameters / t at 2 B; all ranks together = the model + the tied-embedding copy
  // and final LayerNorm on the last stage.
  const double h = 8192, V = 51200;
  double total = 0;
  for (int r = 0; r < p; r++) total += cm.grad_bytes(r);
  EXPECT_NEAR(total, (parameter_count(s.model) + V * h + 2 * h) / 8 * 2, 1.0);
  EXPECT_NEAR(cm.grad_bytes(1), 12.0 * layer_parameter_count(s.model) / 8 * 2, 1.0);
  EXPECT_DOUBLE_EQ(cm.embedding_grad_bytes(), V * h / 8 * 2);
  Scenario s32 = s;
  s32.training.grad_fp32 = true;
  EXPECT_DOUBLE_EQ(AnalyticCostModel(s32).grad_bytes(1), 2 * cm.grad_bytes(1));
  EXPECT_DOUBLE_EQ(AnalyticCostModel(s32).embedding_grad_bytes(), 2 * cm.embedding_grad_bytes());
  // No embedding all-reduce without a pipeline or without tying.
  EXPECT_EQ(AnalyticCostModel(scenario("megatron-39.1b", "dgx-a100", 1, 8, 1)).embedding_grad_bytes(), 0.0);
  EXPECT_EQ(AnalyticCostModel(scenario("seq1f1b-7b", "dgx-a100", 4, 8)).embedding_grad_bytes(), 0.0);

  // Optimizer: memory-bound Adam, 2*12 + 2*2 + 2 = 30 B per parameter at 0.8 * 2039 GB/s.
  const double params1 = rank_parameter_count(s, 1);
  EXPECT_NEAR(cm.optimizer_seconds(1), params1 * 30 / (2039e9 * 0.8), 3 * 4 * s.cluster.device.kernel_launch_s);
  EXPECT_GT(cm.optimizer_seconds(0), cm.optimizer_seconds(1));  // embeddings
}

TEST(CostModel, RejectsBadInput) {
  Scenario s = scenario("gpt3-1b", "aws-p3.16xlarge", 4, 1);
  s.training.dtype = "bf16";  // V100 has no bf16
  EXPECT_THROW(AnalyticCostModel{s}, std::invalid_argument);
  s.training.dtype = "fp8";
  EXPECT_THROW(AnalyticCostModel{s}, std::invalid_argument);
  s.training.dtype = "fp16";
  s.parallel.pp = 5;  // 24 layers
  EXPECT_THROW(AnalyticCostModel{s}, std::invalid_argument);
  s.parallel.pp = 4;
  const AnalyticCostModel cm(s);
  EXPECT_THROW(cm.compute_seconds(op(OpKind::Forward, 4, 0, 2048, 4), 1), std::invalid_argument);
  EXPECT_THROW(cm.compute_seconds(op(OpKind::Forward, 1, 0, 2049, 4), 1), std::invalid_argument);
  EXPECT_THROW(cm.compute_seconds(op(OpKind::Forward, 1, 100, 100, 4), 1), std::invalid_argument);
  EXPECT_THROW(cm.compute_seconds(op(OpKind::Forward, 1, 0, 2048, 4), 0), std::invalid_argument);
  EXPECT_THROW(cm.grad_bytes(4), std::invalid_argument);
  try {
    cm.compute_seconds(op(OpKind::Forward, 9, 0, 2048, 4), 1);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("virtual stage 9"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- flash attention, sequence parallelism

namespace {
struct Sums {
  double gemm_flops = 0, bytes = 0;
};
Sums sums(const std::vector<KernelCost>& ks) {
  Sums x;
  for (const auto& k : ks) x.gemm_flops += k.gemm ? k.flops : 0, x.bytes += k.bytes;
  return x;
}
}  // namespace

// With flash attention the attention runs over the causal pairs only and moves no score matrix: a layer's HBM
// bytes are linear in the tokens, its GEMM-class FLOPs are the useful FLOPs (forward) and 2 x GEMMs + 2.5 x
// attention (backward: the fused kernel recomputes the scores).
TEST(CostModel, FlashAttentionKernels) {
  Scenario s = scenario("seq1f1b-2.7b", "dgx-a100", 8, 1);
  s.training.dtype = "bf16";
  const AnalyticCostModel plain(s);
  s.training.flash_attention = true;
  const AnalyticCostModel flash(s);
  for (const int t : {1, 4}) {
    Scenario st = s;
    st.parallel.tp = t;
    const AnalyticCostModel cm(st);
    for (const auto& [l, c] : {std::pair{32768, 0}, std::pair{6703, 20271}, std::pair{1, 0}}) {
      SCOPED_TRACE("t " + std::to_string(t) + " l " + std::to_string(l) + " c " + std::to_string(c));
      const LayerFlops f = layer_forward_flops(st.model, t, 1, l, c);
      EXPECT_NEAR(sums(cm.layer_forward_kernels(1, l, c)).gemm_flops, f.total(), 1e-12 * f.total());
      const double bwd = 2 * f.gemm() + 2.5 * f.attn;
      EXPECT_NEAR(sums(cm.layer_backward_kernels(1, l, c)).gemm_flops, bwd, 1e-12 * bwd);
    }
    // Bytes affine in the tokens without context (weights + per-token traffic, no l x l term).
    for (const bool fwd : {true, false}) {
      auto bytes = [&](int l) {
        return sums(fwd ? cm.layer_forward_kernels(1, l, 0) : cm.layer_backward_kernels(1, l, 0)).bytes;
      };
      for (const int l : {512, 4096})  // 4l < s: not the last slice, so every size has the dK/dV add in backward
        EXPECT_NEAR(bytes(4 * l) - bytes(2 * l), 2 * (bytes(2 * l) - bytes(l)), 1e-9 * bytes(4 * l));
    }
  }
  // The materialised score matrix grows faster than that.
  auto plain_bytes = [&](int l) { return sums(plain.layer_forward_kernels(1, l, 0)).bytes; };
  EXPECT_GT(plain_bytes(16384) - plain_bytes(8192), 3 * (plain_bytes(8192) - plain_bytes(4096)));
  // At 32k tokens the score-matrix traffic dominates the plain layer; flash attention removes it.
  const double f_plain = plain.layer_forward_seconds(1, 32768, 0), f_flash = flash.layer_forward_seconds(1, 32768, 0);
  EXPECT_LT(f_flash, 0.5 * f_plain);
  EXPECT_LT(flash.layer_backward_seconds(1, 32768, 0), 0.5 * plain.layer_backward_seconds(1, 32768, 0));
  // Flash time is still context-aware (causal pairs) and the sliced layer costs at least the unsliced share.
  EXPECT_GT(flash.layer_forward_seconds(1, 4096, 28672), flash.layer_forward_seconds(1, 4096, 0));
  const std::vector<int> cwp = {12019, 8252, 6703, 5794};
  double sum = 0;
  int c = 0;
  for (int l : cwp) sum += flash.layer_forward_seconds(1, l, c), c += l;
  EXPECT_GT(sum, f_flash);
}

// Sequence parallelism splits the residual-stream element-wise kernels (LayerNorm, bias + dropout + add) along
// the sequence; GEMMs and attention are untouched.
TEST(CostModel, SequenceParallelSplitsResidualKernels) {
  Scenario s = scenario("seq1f1b-7b", "dgx-a100", 4, 8);  // h 4096
  s.training.dtype = "bf16";
  s.training.flash_attention = true;
  const AnalyticCostModel off(s);
  s.parallel.sequence_parallel = true;
  const AnalyticCostModel on(s);
  const double T = 2 * 4096, h = 4096, e = 2, t = 8;
  const Sums f0 = sums(off.layer_forward_kernels(2, 4096, 0)), f1 = sums(on.layer_forward_kernels(2, 4096, 0));
  EXPECT_DOUBLE_EQ(f0.gemm_flops, f1.gemm_flops);
  // 2 LayerNorms (2e per element) and 2 bias + dropout + add (3e + 1).
  EXPECT_NEAR(f0.bytes - f1.bytes, (1 - 1 / t) * T * h * (2 * 2 * e + 2 * (3 * e + 1)), 1e-6 * f0.bytes);
  const Sums b0 = sums(off.layer_backward_kernels(2, 4096, 0)), b1 = sums(on.layer_backward_kernels(2, 4096, 0));
  EXPECT_DOUBLE_EQ(b0.gemm_flops, b1.gemm_flops);
  // 2 dropout + add backwards (2e + 1), 2 bias gradients of h columns (e), 2 LayerNorm backwards (4e).
  EXPECT_NEAR(b0.bytes - b1.bytes, (1 - 1 / t) * T * h * (2 * (2 * e + 1) + 2 * e + 2 * 4 * e), 1e-6 * b0.bytes);
  EXPECT_LT(on.layer_forward_seconds(2, 4096, 0), off.layer_forward_seconds(2, 4096, 0));
}

// Weight gradients accumulate over the slices of an iteration: every backward reads and writes the layer's whole
// weight gradient (12 h^2 / t elements, 2 B each; 4 with grad_fp32), so a short slice's backward cannot take
// less than that traffic at the memory roofline, and grad_fp32 doubles it.
TEST(CostModel, WeightGradientAccumulationBoundsShortSliceBackward) {
  Scenario s = scenario("gpt3-175b", "aws-p3.16xlarge", 96, 4);
  const AnalyticCostModel fp16(s);
  const double h = 12288, t = 4, w = 12 * h * h / t;
  const double bw = s.cluster.device.hbm_bw_Bps * s.cluster.device.memory_efficiency;
  const Sums b16 = sums(fp16.layer_backward_kernels(1, 8, 0));
  EXPECT_GE(b16.bytes, 2 * 2 * w);
  EXPECT_GE(fp16.layer_backward_seconds(1, 8, 0), 2 * 2 * w / bw);
  s.training.grad_fp32 = true;
  const AnalyticCostModel fp32(s);
  const Sums b32 = sums(fp32.layer_backward_kernels(1, 8, 0));
  EXPECT_NEAR(b32.bytes - b16.bytes, 2 * 2 * w, 1e-9 * b32.bytes);
  EXPECT_DOUBLE_EQ(b32.gemm_flops, b16.gemm_flops);
  // PyTorch's AccumulateGrad (TeraPipe's code): the wgrad writes a new 2-byte tensor, then grad += new reads it again.
  s.training.grad_fp32 = false;
  s.training.wgrad_accumulation = "autograd";
  const AnalyticCostModel autograd(s);
  EXPECT_NEAR(sums(autograd.layer_backward_kernels(1, 8, 0)).bytes - b16.bytes, 2 * 2 * w, 1e-9 * b16.bytes);
  EXPECT_GT(autograd.layer_backward_seconds(1, 8, 0), fp16.layer_backward_seconds(1, 8, 0));
  EXPECT_DOUBLE_EQ(autograd.layer_backward_seconds(1, 2048, 0) / fp16.layer_backward_seconds(1, 2048, 0), 1.0);
}

// TeraPipe's layer (training.dropout false, softmax_fp32 true): no attention dropout, no residual masks, and the
// softmax unfused in fp32. Per score element (S = b a/t l K), forward: mask add 2e, softmax e + 4, cast back 4 + e
// = 16 B at e = 2 against fused softmax 2e + dropout 2e + 1 = 9 B; backward: cast e + 4, fp32 softmax backward 12,
// cast back 4 + e = 24 B against dropout 2e + 1 + softmax 3e = 11 B. The residual adds lose their 1 B mask (two
// per layer each way). GEMMs are untouched.
TEST(CostModel, TeraPipeAttentionFp32SoftmaxWithoutDropout) {
  Scenario s = scenario("gpt3-1b", "aws-p3.16xlarge", 24, 8);
  const AnalyticCostModel megatron(s);
  s.training.dropout = false;
  s.training.softmax_fp32 = true;
  const AnalyticCostModel terapipe(s);
  const double t = 8, h = 2048, a = 16, e = 2;
  const int b = 1, l = 512, c = 1024;
  const double S = b * (a / t) * l * (c + l), T = b * l;
  const Sums f0 = sums(megatron.layer_forward_kernels(b, l, c)), f1 = sums(terapipe.layer_forward_kernels(b, l, c));
  EXPECT_NEAR(f1.bytes - f0.bytes, (16 - 9) * S - 2 * T * h, 1e-9 * f1.bytes);
  EXPECT_DOUBLE_EQ(f1.gemm_flops, f0.gemm_flops);
  EXPECT_EQ(terapipe.layer_forward_kernels(b, l, c).size(), megatron.layer_forward_kernels(b, l, c).size() + 1);
  const Sums b0 = sums(megatron.layer_backward_kernels(b, l, c)), b1 = sums(terapipe.layer_backward_kernels(b, l, c));
  EXPECT_NEAR(b1.bytes - b0.bytes, (24 - 11) * S - 2 * T * h, 1e-9 * b1.bytes);
  EXPECT_DOUBLE_EQ(b1.gemm_flops, b0.gemm_flops);
  // Dropout alone: 5 B per score and the residual masks, each way.
  s.training.softmax_fp32 = false;
  const AnalyticCostModel no_dropout(s);
  EXPECT_NEAR(f0.bytes - sums(no_dropout.layer_forward_kernels(b, l, c)).bytes, (2 * e + 1) * S + 2 * T * h,
              1e-9 * f0.bytes);
  EXPECT_NEAR(b0.bytes - sums(no_dropout.layer_backward_kernels(b, l, c)).bytes, (2 * e + 1) * S + 2 * T * h,
              1e-9 * b0.bytes);
  // Flash attention has no score matrix: the softmax setting changes nothing there.
  s.training.flash_attention = true;
  s.training.softmax_fp32 = true;
  const AnalyticCostModel flash_fp32(s);
  s.training.softmax_fp32 = false;
  const AnalyticCostModel flash(s);
  EXPECT_DOUBLE_EQ(flash_fp32.layer_forward_seconds(b, l, c), flash.layer_forward_seconds(b, l, c));
}

// ---------------------------------------------------------------- split backward (I / W)

TEST(CostModel, SplitBackwardAddsUpToTheFusedBackward) {
  for (bool recompute : {false, true})
    for (int tp : {1, 8}) {
      const Scenario s = scenario("megatron-145.6b", "dgx-a100", 8, tp, 1, recompute);
      const AnalyticCostModel cm(s);
      for (int stage : {0, 3, 7})
        for (int b : {1, 4}) {
          const Op fused = op(OpKind::Backward, stage, 0, 2048, 8);
          const Op i = op(OpKind::BackwardInput, stage, 0, 2048, 8), w = op(OpKind::BackwardWeight, stage, 0, 2048, 8);
          const double tb = cm.compute_seconds(fused, b), ti = cm.compute_seconds(i, b), tw = cm.compute_seconds(w, b);
          EXPECT_NEAR(ti + tw, tb, 1e-12 * tb) << stage << " " << b;
          // W is the weight-gradient GEMMs: about a third of a plain backward (half of the GEMM work, which
          // dominates at this size), less with the recomputed forward charged to I.
          EXPECT_GT(tw, 0.25 * tb);
          EXPECT_LT(tw, 0.5 * tb);
          EXPECT_GT(ti, tw);
          // FLOPs: W = the forward's GEMM FLOPs; I + W = B.
          EXPECT_NEAR(cm.op_flops(i, b) + cm.op_flops(w, b), cm.op_flops(fused, b), 1e-6 * cm.op_flops(fused, b));
          // The TP all-reduces are the input gradients': all on I, none on W.
          EXPECT_EQ(cm.tp_allreduce_calls(i), cm.tp_allreduce_calls(fused));
          EXPECT_EQ(cm.tp_allreduce_calls(w), 0);
        }
    }
}

// training.async_tp_allreduce (core/cost/tp_overlap.h): the backward's column-parallel input-gradient all-reduces (2
// per layer, the LM head's) leave the exposed list and run beside their wgrad GEMMs; the recomputed forward's stay.
TEST(CostModel, AsyncTpAllReduceRunsBesideTheWgrad) {
  const int p = 4;
  Scenario off = scenario("megatron-39.1b", "dgx-a100", p, 8, 1, true);  // 12 layers per stage, h 8192
  Scenario on = off;
  on.training.async_tp_allreduce = true;
  const AnalyticCostModel cm_off(off), cm_on(on);
  const Op f = op(OpKind::Forward, 1, 0, 2048, p), b = op(OpKind::Backward, 1, 0, 2048, p);
  const Op last = op(OpKind::Backward, 3, 0, 2048, p), bi = op(OpKind::BackwardInput, 1, 0, 2048, p);
  EXPECT_EQ(cm_on.tp_allreduce_calls(f), cm_off.tp_allreduce_calls(f));  // forward: row-parallel, exposed
  EXPECT_EQ(cm_off.tp_allreduce_calls(b), 48);
  EXPECT_EQ(cm_on.tp_allreduce_calls(b), 24);  // the recomputed forward's only
  EXPECT_EQ(cm_off.tp_allreduce_calls(last), 49);
  EXPECT_EQ(cm_on.tp_allreduce_calls(last), 24);  // the LM head's goes beside the logits wgrad
  EXPECT_EQ(cm_on.tp_allreduce_calls(bi), 48);    // a split backward runs its W later: nothing to hide behind

  // One all-reduce as the simulator's collectives time it: NCCL over the node's NVLink (8 consecutive GPUs).
  const double bytes = 1.0 * 2048 * 8192 * 2;
  const double ar = tp_allreduce_seconds(on, bytes);
  EXPECT_DOUBLE_EQ(ar, nccl_collective_seconds(nccl_group(on.cluster, 8, 1, 8, on.cluster.nvlink_bw_Bps), bytes));
  Scenario one = on;
  one.parallel.tp = 1;
  EXPECT_EQ(tp_allreduce_seconds(one, bytes), 0.0);

  // h 8192 over NVLink: each wgrad (QKV 103 GFLOP, MLP up 137 GFLOP at b = 1) outlasts its all-reduce of 34 MB,
  // so the backward's compute is unchanged and the 24 moved calls are hidden entirely.
  for (int mb : {1, 2}) {
    EXPECT_DOUBLE_EQ(cm_on.compute_seconds(b, mb), cm_off.compute_seconds(b, mb)) << mb;
    EXPECT_DOUBLE_EQ(cm_on.compute_seconds(bi, mb), cm_off.compute_seconds(bi, mb)) << mb;
  }

  // Across nodes (tp 16 on 8-GPU nodes, h 3072) the all-reduce outlasts the wgrad: the backward waits for what
  // the GEMM does not cover, at most the moved calls' time and less than leaving them exposed.
  Scenario x_off = scenario("megatron-3.6b", "dgx-a100", 1, 16, 1, true);
  Scenario x_on = x_off;
  x_on.training.async_tp_allreduce = true;
  const AnalyticCostModel cx_off(x_off), cx_on(x_on);
  const Op xb = op(OpKind::Backward, 0, 0, 2048, 1);
  const double xar = tp_allreduce_seconds(x_on, 4.0 * 2048 * 3072 * 2);
  const int moved = cx_off.tp_allreduce_calls(xb) - cx_on.tp_allreduce_calls(xb);
  EXPECT_EQ(moved, 2 * 30 + 1);
  const double extra = cx_on.compute_seconds(xb, 4) - cx_off.compute_seconds(xb, 4);
  EXPECT_GT(extra, 0.5 * moved * xar);
  EXPECT_LT(extra, moved * xar);
}

// With a device profile the overlap follows what times the backward: the analytic kernels (an analytic profile:
// the same costs and calls as the preset) hide the all-reduces; a profile's layer tables carry no wgrad to hide
// them behind, so they stay exposed there (ProfileCostModel::kernels_time_backward).
TEST(CostModel, AsyncTpAllReduceWithAnAnalyticProfile) {
  Scenario s = default_scenario();  // tp 2
  s.training.async_tp_allreduce = true;
  const Scenario p = use_profile(s, std::string(PIPESCOPE_SOURCE_DIR) + "/calib/profiles/dgx-a100.analytic.yaml");
  const AnalyticCostModel a(s);
  const auto b = make_cost_model(p);
  Op op;
  op.kind = OpKind::Backward;
  op.stage = op.rank = 1;
  op.tok_end = s.model.seq_len;
  EXPECT_EQ(b->tp_allreduce_calls(op), a.tp_allreduce_calls(op));
  EXPECT_EQ(a.tp_allreduce_calls(op), 0);  // no recomputation: every backward all-reduce is beside a wgrad
  EXPECT_DOUBLE_EQ(b->compute_seconds(op, 1), a.compute_seconds(op, 1));
}

TEST(CostModel, ConstantSplitBackward) {
  ConstantCosts c;
  c.forward_s = 1;
  c.backward_s = 3;
  c.weight_share = 1.0 / 3;
  c.v = 2;
  c.seq_len = 8;
  c.tp_calls_fwd = 2;
  const ConstantCostModel cm(c);
  Op i = op(OpKind::BackwardInput, 0, 0, 8), w = op(OpKind::BackwardWeight, 0, 0, 4);
  EXPECT_DOUBLE_EQ(cm.compute_seconds(i, 1), 1.0);   // 3 * 2/3 / v
  EXPECT_DOUBLE_EQ(cm.compute_seconds(w, 1), 0.25);  // 3 * 1/3 / v * half the tokens
  EXPECT_EQ(cm.tp_allreduce_calls(i), 2);
  EXPECT_EQ(cm.tp_allreduce_calls(w), 0);
  c.weight_share = 1.5;
  EXPECT_THROW(ConstantCostModel{c}, std::invalid_argument);
}
TEST(CostModel, VShapeHoldsEmbeddingAndHeadOnRankZero) {
  Scenario loop = scenario("megatron-1.7b", "dgx-a100", 4, 2, 2), v = loop;
  loop.schedule.kind = ScheduleKind::Interleaved;
  v.schedule.kind = ScheduleKind::ZeroBubbleV;
  const double h = loop.model.hidden, t = 2;
  ASSERT_TRUE(loop.model.tied_embeddings);
  // Loop style: rank 3 holds the last stage with a copy of the tied embedding; V style: rank 0 holds both ends,
  // one embedding, plus the final LayerNorm.
  EXPECT_NEAR(rank_parameter_count(v, 0) - rank_parameter_count(loop, 0), 2 * h / t, 1e-6);
  EXPECT_NEAR(rank_parameter_count(v, 3), rank_parameter_count(loop, 1), 1e-6);
  EXPECT_GT(rank_parameter_count(loop, 3), rank_parameter_count(loop, 1));
}
}  // namespace
}  // namespace pipescope

namespace pipescope {
namespace {

// The analytic model's memo (core/util/memo_table.h) answers what a fresh model computes, for every stage (the first
// and the last hold the embedding and the head; middle stages of equal layers share answers), kind and token range.
TEST(CostModel, MemoizedAnswersEqualAFreshModels) {
  const Scenario s = scenario("gpt3-1b", "dgx-a100", 4, 2);
  const AnalyticCostModel warm(s);
  for (int pass = 0; pass < 2; pass++)
    for (int stage = 0; stage < 4; stage++)
      for (OpKind k : {OpKind::Forward, OpKind::Backward, OpKind::BackwardInput, OpKind::BackwardWeight})
        for (int b : {1, 3}) {
          const Op o = op(k, stage, 128, 640, 4);
          EXPECT_EQ(warm.compute_seconds(o, b), AnalyticCostModel(s).compute_seconds(o, b)) << stage << " " << b;
        }
  // Stages 1 and 2 hold the same layers and are neither end: the same answer; the ends differ.
  EXPECT_EQ(warm.compute_seconds(op(OpKind::Forward, 1, 0, 512, 4), 1),
            warm.compute_seconds(op(OpKind::Forward, 2, 0, 512, 4), 1));
  EXPECT_NE(warm.compute_seconds(op(OpKind::Forward, 0, 0, 512, 4), 1),
            warm.compute_seconds(op(OpKind::Forward, 1, 0, 512, 4), 1));
  EXPECT_NE(warm.compute_seconds(op(OpKind::Forward, 3, 0, 512, 4), 1),
            warm.compute_seconds(op(OpKind::Forward, 1, 0, 512, 4), 1));
}

TEST(MemoTable, AsksOncePerKeyAndKeepsValuesThroughGrowth) {
  MemoTable t;
  int asked = 0;
  for (int pass = 0; pass < 2; pass++)
    for (std::uint64_t k = 0; k < 1000; k++)
      EXPECT_EQ(t.get(k, k * 7, [&] { return asked++, static_cast<double>(k) + 0.5; }), static_cast<double>(k) + 0.5);
  EXPECT_EQ(asked, 1000);
  // An ask that itself uses the table (and may grow it) still lands its own value.
  const double v = t.get(5000, 1, [&] {
    for (std::uint64_t k = 2000; k < 3000; k++) t.get(k, 0, [] { return 1.0; });
    return 42.0;
  });
  EXPECT_EQ(v, 42.0);
  EXPECT_EQ(t.get(5000, 1, [] { return -1.0; }), 42.0);
  // An ask that answers its own key first: that answer stays, one entry, and the outer call returns it.
  EXPECT_EQ(t.get(6000, 2, [&] { return t.get(6000, 2, [] { return 7.0; }) + 1.0; }), 7.0);
  EXPECT_EQ(t.get(6000, 2, [] { return -1.0; }), 7.0);
}

}  // namespace
}  // namespace pipescope
