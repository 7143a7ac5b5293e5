#pragma once
// FP8 training as Megatron-LM runs it with Transformer Engine (training.dtype: fp8; Megatron --fp8-format
// hybrid): the GEMMs of the linear layers (QKV, output projection, MLP up and down; forward, dgrad and wgrad)
// take FP8 operands (E4M3 in forward, E5M2 for gradients) on the FP8 tensor cores and accumulate in higher
// precision, writing 16-bit outputs. Everything else stays bf16: attention, norms, element-wise kernels, the
// output layer (logits), the activations between layers, the bf16 weights, the gradients and the optimizer
// (fp32 master weights and Adam moments). The FP8 bookkeeping costs kernels and a little memory:
// - per layer and pass the cast + transpose to FP8 of the four linear GEMMs' inputs (forward) or output gradients
//   (backward): reads each 16-bit tensor and writes it twice at 1 B (as is, and transposed for the other GEMM of
//   the pair). Transformer Engine fuses most of them into the neighbouring norm / activation kernels, so they are
//   one kernel launch per layer here;
// - per op (forward or backward of a model chunk) one amax-history roll and scale update of all its layers
//   (delayed scaling, Transformer Engine's reduce_and_update at the end of the FP8 region);
// - the FP8 copy of every linear weight and its transpose (2 B per parameter), cast once per iteration after
//   the optimizer step (Megatron passes is_first_microbatch: later micro-batches reuse the cached copy);
// - per linear layer kFp8MetaSlots amax histories and scale / scale-inverse pairs (fp32).
// The backward GEMMs (dgrad and wgrad) run slower than the forward ones: Transformer Engine asks cuBLAS for the
// split accumulator there (use_split_accumulator, its _2X_ACC_DGRAD / _2X_ACC_WGRAD defaults; forward uses the fast
// one), which promotes the tensor cores' limited-precision partial sums to fp32 registers every few K steps. Fast
// accumulation measures 1.1x to 1.2x faster on H100 (pytorch/ao's question "use_fast_accum in FP8 training",
// June 2025: the same cuBLAS flag through torch._scaled_mm); the midpoint is kFp8SplitAccumulatorSlowdown.
// docs/cost-model.md "FP8" has the formulas.

#include <vector>

#include "core/cost/kernel_cost.h"
#include "core/model/config.h"

namespace pipescope {

constexpr int kFp8LinearsPerLayer = 4;     // QKV, output projection, MLP up (fused gate + up), MLP down
constexpr int kFp8MetaSlots = 5;           // forward: input, weight, output; backward: output gradient, input gradient
constexpr int kFp8AmaxHistory = 1024;      // Transformer Engine's DelayedScaling default (NeMo's recipes use it)
constexpr double kFp8WeightCopyBytes = 2;  // FP8 weight + its transpose, per linear-layer parameter
constexpr double kFp8SplitAccumulatorSlowdown = 1.15;  // fast / split accumulation GEMM rate on Hopper (above)

// Which pass a linear-layer GEMM belongs to: forward (fast accumulation) or backward (split accumulator).
enum class Fp8Pass { Forward, Backward };

// The amax histories and scales of one transformer layer: 4 linears x 5 slots x (history + scale + scale_inv) x 4 B.
double fp8_meta_bytes_per_layer();
// Parameters of one layer's linear weights (what FP8 caches), whole layer before the tensor-parallel split.
double fp8_linear_weight_params(const ModelSpec& m);

// A linear-layer GEMM with FP8 operands: operands at 1 B, out_bytes_per_elem per output element (the 16-bit
// output of forward / dgrad, or the wgrad's gradient accumulation), flagged to run at the FP8 peak, with the split
// accumulator in backward.
KernelCost fp8_gemm(KernelCost k, double out_bytes_per_elem, Fp8Pass pass);
// Cast + transpose to FP8 (with the amax) of rows x sum(cols) elements of e bytes: the tensors of one layer.
KernelCost fp8_cast_transpose(double rows, double cols, double e);
// The delayed-scaling update of `layers` layers' forward (3 of the 5 slots) or backward (2) amax histories.
KernelCost fp8_amax_update(bool forward, double layers);

}  // namespace pipescope
