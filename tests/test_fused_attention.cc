// The fused attention kernel's price (AnalyticCostModel::fused_attention_seconds): its pass's share of peak, the head
// dimension padded to FlashAttention's compiled sizes, thread blocks in waves over the SMs; and sequence parallelism's
// backward collectives (core/cost/tp_overlap.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/tp_overlap.h"
#include "core/model/presets.h"

namespace pipescope {
namespace {

Scenario scenario(const std::string& model, int tp, bool sequence_parallel) {
  Scenario s;
  s.name = "test";
  s.source = "<test>";
  s.model = *model_preset(model);
  s.cluster = *cluster_preset("dgx-a100");
  s.parallel.pp = 1;
  s.parallel.tp = tp;
  s.parallel.sequence_parallel = sequence_parallel;
  s.training.flash_attention = true;
  s.training.dtype = "bf16";
  return s;
}

KernelCost fused(FusedAttention pass, double flops, double rows, double heads) {
  KernelCost k{flops, 0, true};
  k.attention = pass;
  k.m = rows;
  k.batch = heads;
  return k;
}

// A100: FlashAttention-2's causal long-sequence shares, forward above backward (the backward recomputes the scores).
TEST(FusedAttention, EachPassAtItsShareOfPeak) {
  const Scenario s = scenario("seq1f1b-7b", 8, true);  // head dimension 128: no padding
  const AnalyticCostModel cm(s);
  const DeviceSpec& d = s.cluster.device;
  ASSERT_GT(d.flash_fwd_efficiency, d.flash_bwd_efficiency);
  // 108 x 128 rows x 4 heads: 432 blocks, exactly 4 waves over 108 SMs.
  const double flops = 1e12;
  EXPECT_NEAR(cm.kernel_seconds(fused(FusedAttention::Forward, flops, 108 * 128, 4)),
              flops / (d.peak_flops_bf16 * d.flash_fwd_efficiency), 1e-12);
  EXPECT_NEAR(cm.kernel_seconds(fused(FusedAttention::Backward, flops, 108 * 128, 4)),
              flops / (d.peak_flops_bf16 * d.flash_bwd_efficiency), 1e-12);
  // A device without flash shares prices attention at its GEMM share.
  Scenario plain = s;
  plain.cluster.device.flash_fwd_efficiency = plain.cluster.device.flash_bwd_efficiency = 0;
  const AnalyticCostModel cp(plain);
  EXPECT_NEAR(cp.kernel_seconds(fused(FusedAttention::Backward, flops, 108 * 128, 4)),
              flops / (d.peak_flops_bf16 * d.gemm_efficiency), 1e-12);
}

// Head dimension 80 (2.7B: 2560 / 32) runs in the 96-wide kernels: 96 / 80 of the FLOPs' time.
TEST(FusedAttention, HeadDimensionPaddedToTheKernelStep) {
  const Scenario s80 = scenario("seq1f1b-2.7b", 1, false);
  ASSERT_EQ(s80.model.hidden / s80.model.heads, 80);
  const AnalyticCostModel cm(s80);
  const DeviceSpec& d = s80.cluster.device;
  const double t = cm.kernel_seconds(fused(FusedAttention::Forward, 1e12, 108 * 128, 4));
  EXPECT_NEAR(t, 1e12 * 96.0 / 80.0 / (d.peak_flops_bf16 * d.flash_fwd_efficiency), 1e-12);
}

// One block per 128 rows (queries forward, keys backward) per head and sequence: 109 blocks take two waves on 108
// SMs, so the kernel lasts 2 / (109 / 108) of its FLOPs' time; whole waves cost nothing extra.
TEST(FusedAttention, BlocksRunInWavesOverTheSms) {
  const Scenario s = scenario("seq1f1b-7b", 8, true);
  const AnalyticCostModel cm(s);
  const DeviceSpec& d = s.cluster.device;
  ASSERT_EQ(d.sm_count, 108);
  const double rate = 1e12 / (d.peak_flops_bf16 * d.flash_fwd_efficiency);
  EXPECT_NEAR(cm.kernel_seconds(fused(FusedAttention::Forward, 1e12, 109 * 128, 1)), rate * 2 / (109.0 / 108), 1e-12);
  EXPECT_NEAR(cm.kernel_seconds(fused(FusedAttention::Forward, 1e12, 109 * 128 - 127, 1)), rate * 2 / (109.0 / 108),
              1e-12);  // a part-filled tile is a whole block
  EXPECT_NEAR(cm.kernel_seconds(fused(FusedAttention::Forward, 1e12, 216 * 128, 1)), rate, 1e-12);
  // So a short token slice with few heads per GPU computes its attention less efficiently than a whole sequence:
  // 8192 queries x 4 heads are 256 blocks (2.37 waves, run as 3), 32768 are 1024 (9.48 waves, run as 10).
  const double slice_attn = cm.kernel_seconds(fused(FusedAttention::Forward, 1e12, 8192, 4));
  const double whole_attn = cm.kernel_seconds(fused(FusedAttention::Forward, 1e12, 32768, 4));
  EXPECT_NEAR(slice_attn / whole_attn, (3 / (256.0 / 108)) / (10 / (1024.0 / 108)), 1e-9);
}

// Sequence parallelism (Megatron): a column-parallel linear's backward re-gathers its input beside the dgrad and
// reduce-scatters the input gradient beside the wgrad; the row-parallel outputs' gradients are all-gathered before
// their dgrad, one all-reduce's worth per layer, exposed. Without it (async all-reduce) none are exposed.
TEST(FusedAttention, SequenceParallelBackwardCollectives) {
  Scenario sp = scenario("seq1f1b-7b", 8, true);
  Scenario ar = scenario("seq1f1b-7b", 8, false);
  ar.training.async_tp_allreduce = true;
  const AnalyticCostModel cm_sp(sp), cm_ar(ar);
  Op b;
  b.kind = OpKind::Backward;
  b.tok_end = 4096;
  Op f = b;
  f.kind = OpKind::Forward;
  EXPECT_EQ(cm_sp.tp_allreduce_calls(f), 2 * 32 + 1);  // + the vocab-parallel embedding on the first stage
  EXPECT_EQ(cm_sp.tp_allreduce_calls(b), 32);
  EXPECT_EQ(cm_ar.tp_allreduce_calls(b), 0);
  Op bi = b;
  bi.kind = OpKind::BackwardInput;  // the W runs later: nothing to hide the reduce-scatters behind
  EXPECT_EQ(cm_sp.tp_allreduce_calls(bi), 2 * 32 + 1);
  // The collectives beside the GEMMs are all-gathers (reduce-scatters) of the layer's tensor: half an all-reduce.
  const double bytes = 4096.0 * 4096 * 2;
  EXPECT_LT(tp_allgather_seconds(sp, bytes), 0.6 * tp_allreduce_seconds(sp, bytes));
  EXPECT_GT(tp_allgather_seconds(sp, bytes), 0.4 * tp_allreduce_seconds(sp, bytes));
  // Sequence parallelism without the async flag overlaps the same way (Megatron does it whatever the flag).
  Scenario sp_sync = sp;
  sp_sync.training.async_tp_allreduce = false;
  EXPECT_EQ(AnalyticCostModel(sp_sync).tp_allreduce_calls(b), 32);
  EXPECT_DOUBLE_EQ(AnalyticCostModel(sp_sync).compute_seconds(b, 1), cm_sp.compute_seconds(b, 1));
}

}  // namespace
}  // namespace pipescope
