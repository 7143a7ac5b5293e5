#pragma once
// One GPU kernel as the cost models see it, and the timer that prices it: what the analytic model, FP8 and context
// parallelism exchange (core/cost/analytic_cost.h prices KernelCosts; core/cost/fp8.h and context_parallel.h make
// them).

#include <cstdint>
#include <functional>

namespace pipescope {

// A fused attention kernel (FlashAttention): its pass, which sets the share of peak it reaches.
enum class FusedAttention : std::uint8_t { None, Forward, Backward };

// One GPU kernel as the analytic model sees it: useful FLOPs and HBM bytes moved.
struct KernelCost {
  double flops = 0;
  double bytes = 0;
  bool gemm = false;    // tensor-core GEMM (saturating efficiency) vs bandwidth-bound kernel (plain roofline)
  bool weight = false;  // part of the weight-gradient pass W (wgrad GEMMs, bias and embedding gradients)
  // GEMM shape (core/cost/gemm_model.h): batch x (m x k times k x n); m = 0 = not given (plain roofline).
  double m = 0, n = 0, k = 0, batch = 1;
  bool fp8 = false;  // FP8 operands: runs at the device's FP8 peak (training.dtype fp8, core/cost/fp8.h)
  // FP8 GEMM whose partial sums are promoted to fp32 during the K loop (Transformer Engine's dgrad and wgrad):
  // the FP8 peak / kFp8SplitAccumulatorSlowdown (core/cost/fp8.h).
  bool fp8_split_accumulator = false;
  double wait_s =
      0;  // > 0: a wait of this long, not a kernel's work (exposed ring transfer, core/cost/context_parallel.h)
  // > 0: a collective running beside this kernel that the next kernel waits for: the kernel lasts at least this
  // long (a column-parallel wgrad with training.async_tp_allreduce, core/cost/tp_overlap.h).
  double beside_s = 0;
  FusedAttention attention = FusedAttention::None;  // a fused attention kernel (gemm true): its pass
};

// Seconds of one kernel on the model's device (AnalyticCostModel::kernel_seconds).
using KernelTimer = std::function<double(const KernelCost&)>;

}  // namespace pipescope
