// FP8 training (core/cost/fp8.h): linear GEMMs at the FP8 peak, the rest unchanged, the cast and amax kernels, the FP8
// weight copies in memory, refusal on devices without FP8 tensor cores, and `import megatron --fp8-format`.
#include <gtest/gtest.h>

#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/fp8.h"
#include "core/ir/schedule.h"
#include "core/memory/memory_model.h"
#include "core/model/megatron_import.h"
#include "core/model/model_shape.h"
#include "core/model/placement.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

Scenario llama70b(const std::string& dtype, const std::string& cluster = "dgx-h100") {
  Scenario s;
  s.name = "fp8";
  s.source = "<test>";
  s.model = *model_preset("llama3-70b");
  s.cluster = *cluster_preset(cluster);
  s.cluster.nodes = 8;
  s.parallel.tp = 8;
  s.parallel.pp = 4;
  s.parallel.dp = 2;
  s.parallel.global_batch = 16;
  s.training.dtype = dtype;
  s.training.grad_fp32 = true;
  return s;
}

TEST(Fp8, DevicePeaks) {
  EXPECT_DOUBLE_EQ(device_preset("H100-SXM")->peak_flops_fp8, 1979e12);
  EXPECT_DOUBLE_EQ(device_preset("H200-SXM")->peak_flops_fp8, 1979e12);
  EXPECT_EQ(device_preset("A100-SXM4-80GB")->peak_flops_fp8, 0);
  EXPECT_EQ(device_preset("V100-SXM2-32GB")->peak_flops_fp8, 0);
}

// A large linear GEMM (llama3-70b's QKV at 8192 tokens) is compute-bound: FP8 takes the bf16 time times the
// peak ratio (same tiles and waves; H100 has no fixed per-GEMM cost). Non-GEMM kernels and attention keep theirs.
TEST(Fp8, LargeGemmFasterByThePeakRatio) {
  const AnalyticCostModel bf16(llama70b("bf16")), fp8(llama70b("fp8"));
  const auto kb = bf16.layer_forward_kernels(1, 8192, 0), k8 = fp8.layer_forward_kernels(1, 8192, 0);
  ASSERT_TRUE(kb[1].gemm && k8[1].gemm && k8[1].fp8 && !kb[1].fp8);  // QKV
  EXPECT_LT(k8[1].bytes, kb[1].bytes);                               // 1-byte operands
  const double ratio = 1979.0 / 989.4;
  EXPECT_NEAR(bf16.kernel_seconds(kb[1]) / fp8.kernel_seconds(k8[1]), ratio, 1e-9);
  EXPECT_DOUBLE_EQ(bf16.kernel_seconds(kb[0]), fp8.kernel_seconds(k8[0]));  // LayerNorm
  EXPECT_FALSE(k8[2].fp8);                                                  // Q.K^T stays bf16
  EXPECT_DOUBLE_EQ(bf16.kernel_seconds(kb[2]), fp8.kernel_seconds(k8[2]));
  // 4 linear GEMMs per layer in FP8 forward, 8 (dgrad + wgrad) backward; one cast kernel per layer each way.
  auto count = [](const std::vector<KernelCost>& ks) {
    int n = 0;
    for (const auto& k : ks) n += k.fp8;
    return n;
  };
  EXPECT_EQ(count(k8), 4);
  EXPECT_EQ(count(fp8.layer_backward_kernels(1, 8192, 0)), 8);
  EXPECT_EQ(k8.size(), kb.size() + 1);
  EXPECT_EQ(fp8.layer_backward_kernels(1, 8192, 0).size(), bf16.layer_backward_kernels(1, 8192, 0).size() + 1);
}

// Backward: every FP8 GEMM (dgrad and wgrad) takes the split accumulator, at the FP8 peak / 1.15; its bf16 twin's
// time over its own is the peak ratio over that slowdown (compute-bound shapes at 8192 tokens).
TEST(Fp8, BackwardGemmsAtTheSplitAccumulatorRate) {
  const AnalyticCostModel bf16(llama70b("bf16")), fp8(llama70b("fp8"));
  const auto kb = bf16.layer_backward_kernels(1, 8192, 0), k8 = fp8.layer_backward_kernels(1, 8192, 0);
  int split = 0;
  for (std::size_t i = 0; i < kb.size(); i++) {
    if (!k8[i].fp8) continue;
    SCOPED_TRACE(i);
    EXPECT_TRUE(k8[i].fp8_split_accumulator);
    EXPECT_NEAR(bf16.kernel_seconds(kb[i]) / fp8.kernel_seconds(k8[i]), 1979.0 / 989.4 / kFp8SplitAccumulatorSlowdown,
                0.02);
    split++;
  }
  EXPECT_EQ(split, 8);
  for (const KernelCost& k : fp8.layer_forward_kernels(1, 8192, 0)) EXPECT_FALSE(k.fp8_split_accumulator);
}

// The whole layer gains less than the GEMM peak ratio: attention, element-wise kernels and the casts stay. (At
// 2048 tokens over tp 8 the H100 description's layer is bound by kernel launches and FP8 gains nothing.)
TEST(Fp8, LayerFasterButLessThanThePeakRatio) {
  const AnalyticCostModel bf16(llama70b("bf16")), fp8(llama70b("fp8"));
  for (int l : {8192, 16384}) {
    SCOPED_TRACE(l);
    const double f = bf16.layer_forward_seconds(1, l, 0) / fp8.layer_forward_seconds(1, l, 0);
    const double b = bf16.layer_backward_seconds(1, l, 0) / fp8.layer_backward_seconds(1, l, 0);
    EXPECT_GT(f, 1.1);
    EXPECT_LT(f, 1979.0 / 989.4);
    EXPECT_GT(b, 1.1);
    EXPECT_LT(b, 1979.0 / 989.4);
  }
  // Useful FLOPs do not depend on the precision.
  Op op;
  op.kind = OpKind::Forward;
  op.tok_end = 8192;
  EXPECT_DOUBLE_EQ(bf16.op_flops(op, 1), fp8.op_flops(op, 1));
  // The optimizer step also refreshes the FP8 weight copies.
  EXPECT_GT(fp8.optimizer_seconds(1), bf16.optimizer_seconds(1));
}

TEST(Fp8, CastKernelBytes) {
  const KernelCost c = fp8_cast_transpose(100, 10, 2);
  EXPECT_DOUBLE_EQ(c.bytes, 4000);  // read 2 B, write 1 B twice, per element
  EXPECT_FALSE(c.gemm);
  EXPECT_DOUBLE_EQ(fp8_meta_bytes_per_layer(), 4.0 * 5 * 1026 * 4);
  // One amax update per op over its layers: forward 3 slots, backward 2, each history read and written.
  EXPECT_DOUBLE_EQ(fp8_amax_update(true, 10).bytes, 10 * 2.0 * 4 * 3 * 1026 * 4);
  EXPECT_DOUBLE_EQ(fp8_amax_update(false, 1).bytes, 2.0 * 4 * 2 * 1026 * 4);
}

// Memory: weights, gradients and optimizer state as bf16, plus 2 B per linear-layer parameter (FP8 copy and
// transpose) and the amax histories; activations unchanged.
TEST(Fp8, MemoryTerms) {
  const Scenario b = llama70b("bf16"), f = llama70b("fp8");
  const Schedule sched = make_1f1b(4, uniform_microbatches(8, 1, b.model.seq_len, 1), b.model.seq_len);
  const MemoryReport rb = memory_report(b, sched), rf = memory_report(f, sched);
  const LayerDims d = layer_dims(b.model);
  const double linear = d.h * d.qkv_out + d.h * d.h + d.h * 2 * d.f + d.f * d.h;  // SwiGLU up is 2f wide
  EXPECT_DOUBLE_EQ(fp8_linear_weight_params(b.model), linear);
  for (int r = 0; r < 4; r++) {
    SCOPED_TRACE(r);
    const double layers = rank_layer_count(b, r);
    EXPECT_DOUBLE_EQ(rf.ranks[r].weights_bytes - rb.ranks[r].weights_bytes,
                     layers * (linear / 8 * 2 + 4.0 * 5 * 1026 * 4));
    EXPECT_DOUBLE_EQ(rf.ranks[r].grads_bytes, rb.ranks[r].grads_bytes);
    EXPECT_DOUBLE_EQ(rf.ranks[r].optimizer_bytes, rb.ranks[r].optimizer_bytes);
    EXPECT_DOUBLE_EQ(rf.ranks[r].activation_peak_bytes, rb.ranks[r].activation_peak_bytes);
  }
  // 18 bytes per parameter as bf16 with fp32 gradients (Megatron's mixed precision).
  EXPECT_DOUBLE_EQ(f.training.param_bytes().total(), 18);
}

const std::string kYaml =
    "model: {preset: llama3-8b}\n"
    "cluster: CLUSTER\n"
    "parallel: {dp: 1, pp: 2, tp: 4, global_batch: 8}\n"
    "training:\n"
    "  dtype: fp8\n";

std::string with_cluster(const std::string& c) {
  std::string y = kYaml;
  y.replace(y.find("CLUSTER"), 7, c[0] == '{' ? c : "{preset: " + c + ", nodes: 1}");
  return y;
}

TEST(Fp8, RefusedWithoutFp8TensorCores) {
  EXPECT_TRUE(parse_scenario(with_cluster("dgx-h100"), "ok.yaml").training.fp8());
  for (const char* c : {"dgx-a100", "aws-p3dn.24xlarge"}) {
    SCOPED_TRACE(c);
    try {
      parse_scenario(with_cluster(c), "fp8.yaml");
      FAIL() << "fp8 accepted on " << c;
    } catch (const ScenarioError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("fp8.yaml:5:"), std::string::npos) << msg;  // the training.dtype line
      EXPECT_NE(msg.find("training.dtype"), std::string::npos) << msg;
      EXPECT_NE(msg.find("FP8"), std::string::npos) << msg;
    }
  }
  // A device described with an FP8 peak gets FP8; a negative peak is refused.
  const std::string custom =
      with_cluster("{preset: dgx-a100, device: {preset: A100-SXM4-80GB, peak_tflops_fp8: 1800}}");
  EXPECT_DOUBLE_EQ(parse_scenario(custom, "c.yaml").cluster.device.peak_flops_fp8, 1800e12);
  EXPECT_THROW(parse_scenario(std::string(custom).replace(custom.find("1800"), 4, "-1"), "c.yaml"), ScenarioError);
  AnalyticCostModel ok(parse_scenario(with_cluster("dgx-h100"), "ok.yaml"));
  Scenario a100 = llama70b("fp8", "dgx-a100");
  EXPECT_THROW(AnalyticCostModel{a100}, std::invalid_argument);
}

TEST(Fp8, ImportMegatronMapsFp8Format) {
  const std::vector<std::string> args = {"--num-layers",
                                         "32",
                                         "--hidden-size",
                                         "4096",
                                         "--num-attention-heads",
                                         "32",
                                         "--seq-length",
                                         "8192",
                                         "--micro-batch-size",
                                         "1",
                                         "--global-batch-size",
                                         "64",
                                         "--tensor-model-parallel-size",
                                         "4",
                                         "--bf16",
                                         "--fp8-format",
                                         "hybrid",
                                         "--fp8-amax-history-len",
                                         "1024"};
  MegatronImportOptions o;
  o.cluster = "dgx-h100";
  o.nodes = 1;
  const MegatronImport im = import_megatron(args, o);
  EXPECT_EQ(parse_scenario(im.yaml, "i.yaml").training.dtype, "fp8");
  std::vector<std::string> bad = args;
  bad[bad.size() - 3] = "e5m2";
  EXPECT_THROW(import_megatron(bad, o), std::invalid_argument);
  o.cluster = "dgx-a100";
  EXPECT_THROW(import_megatron(args, o), std::exception);  // the loader refuses FP8 on an A100
}

}  // namespace
}  // namespace pipescope
