#pragma once
// Kernel-level cost model: a transformer layer (and the embedding and LM head) decomposed into the kernels the
// runtime issues (GEMMs, attention per head, memory-bound element-wise / norm / softmax kernels), each timed by a
// fit measured by `pipescope calibrate`. Unlike a layer table it transfers across model shapes: a scenario whose
// hidden size, heads or ffn differ from the calibrated one is predicted kernel by kernel.
//
//   GEMM (m x k times k x n):       t = fixed + 2 (mnk + k0 mn + n0 mk + m0 nk) / rate
//       i.e. the rate saturates in each dimension, rate / (1 + m0/m + n0/n + k0/k): a dimension below its
//       saturation size wastes most of a tile (the operand packing and output terms of a blocked GEMM);
//   attention of one (sequence, head) with head dimension d, l queries over K = c + l keys:
//                                   t = a0 + a1 l + a2 l K     (fwd and bwd fits per measured d; linear in d
//                                                               between, proportional to the per-pair term outside)
//   memory-bound kernel of class X: t = fixed_X + bytes / bw_X (read + written bytes, X's measured bandwidth).
//
// The decomposition follows the runtime's kernels (kernels/reference.cc, the CPU reference; the CUDA backend
// issues the same kernels) and uses the FLOP counts of core/cost/analytic_cost.h: its GEMM FLOPs add up to
// layer_forward_flops().gemm(). A layer's time is the sum of its kernels (a CPU runs them back to back).

#include <array>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

// The memory-bound kernel classes, each with its own measured bandwidth.
enum class MemoryKernel : std::uint8_t {
  LayerNorm,          // forward: read x, write y (+ mean, rstd)
  LayerNormBackward,  // read x, dy, write dx (+ parameter-gradient rows)
  Gelu,               // read u, write gelu(u) (tanh: compute-heavy per element on a CPU)
  GeluBackward,       // read u, du, write du
  Add,                // bias add / residual add / row broadcast: read one or two, write one
  ColumnSum,          // bias gradient: read rows x n, accumulate n
  Copy,               // copies (K/V cache, records, gathers)
  Softmax,            // row softmax / cross entropy of the LM head over the vocabulary
};
constexpr int kMemoryKernels = 8;
const char* to_string(MemoryKernel k);
// Throws std::invalid_argument for an unknown name.
MemoryKernel memory_kernel_of(const std::string& name);

struct GemmModel {
  double rate_flops = 0, m0 = 0, n0 = 0, k0 = 0, fixed_s = 0;
  double holdout_rel_err = 0;  // mean |relative error| on the held-out shapes
  int train_points = 0, test_points = 0;
  double seconds(double m, double n, double k) const;
};

struct AttentionModel {
  int head_dim = 0;
  std::array<double, 3> fwd{}, bwd{};  // a0 (s), a1 (s per query token), a2 (s per query-key pair)
  double holdout_rel_err = 0;
};

struct MemoryModel {
  MemoryKernel kind = MemoryKernel::Copy;
  double fixed_s = 0, bw_Bps = 0;
  double holdout_rel_err = 0;
  double seconds(double bytes) const { return fixed_s + bytes / bw_Bps; }
};

// A layer measured at a shape none of the fits saw, against the kernel model's prediction. `slowdown`: how much
// slower the machine ran while the layer was timed than while the fits were, from a reference GEMM of the fits'
// spread timed in alternation with the layer (its time then / the GEMM fit's time): a shared machine changes speed
// by tens of per cent between the two, and the check is about the model, not the machine. The error compares the
// prediction at the measurement's speed.
struct TransferPoint {
  std::string op;  // "layer forward" | "layer backward"
  int hidden = 0, heads = 0, ffn = 0, micro_batch = 1, l = 0, c = 0;
  double measured_s = 0, predicted_s = 0;
  double slowdown = 1;
  double rel_err() const { return (predicted_s * slowdown - measured_s) / measured_s; }
};

// The profile's `kernels` section: fits of one backend precision.
struct KernelFits {
  std::string dtype;  // fp64 | fp32 | fp16 | bf16; empty = no kernel fits
  GemmModel gemm;
  std::vector<AttentionModel> attention;  // strictly increasing head_dim
  std::vector<MemoryModel> memory;        // one per MemoryKernel class
  std::vector<TransferPoint> transfer;
  // A layer's kernels run back to back (the runtime's layer) against the sum of the same kernels timed one by one
  // in a loop: the layer table / the kernel model at the profile's own shape (median over its lengths at context
  // 0), forward and backward. Operands that the previous kernel left in cache or evicted, and the calls between
  // kernels, are in the layer and not in the loop; the kernel model's layers are scaled by it (1: not measured).
  double layer_in_situ_fwd = 1, layer_in_situ_bwd = 1;
  bool empty() const { return dtype.empty(); }
};

// Bytes read + written by a memory-bound kernel of class `k` over a rows x cols tensor of e-byte elements (the
// definition the benchmarks and the decomposition share).
double memory_bytes(MemoryKernel k, double rows, double cols, int e);

// One kernel call of an op.
struct KernelCall {
  enum class Kind : std::uint8_t { Gemm, Attention, Memory };
  Kind kind = Kind::Memory;
  double m = 0, n = 0, k = 0;                   // Gemm
  int reps = 0, l = 0, keys = 0, head_dim = 0;  // Attention: reps = sequences x heads on this device
  bool backward = false;                        // Attention
  MemoryKernel mem = MemoryKernel::Copy;        // Memory
  double bytes = 0;                             // Memory
  double gemm_flops() const { return kind == Kind::Gemm ? 2 * m * n * k : 0.0; }
};

// The kernels of one layer on one device of a t-way tensor-parallel group, b sequences, l tokens after c context
// tokens, e bytes per element.
std::vector<KernelCall> layer_forward_calls(const ModelSpec& m, int t, int e, int b, int l, int c);
std::vector<KernelCall> layer_backward_calls(const ModelSpec& m, int t, int e, int b, int l, int c);
// Embedding gather (first stage) and final LayerNorm + LM head + loss (last stage; the head is not split by t).
std::vector<KernelCall> embedding_calls(const ModelSpec& m, int e, int b, int l, bool forward);
std::vector<KernelCall> head_calls(const ModelSpec& m, int e, int b, int l, bool forward);

class KernelModel {
 public:
  // Throws std::invalid_argument when a fit is missing or unusable (no attention fit, a memory class without one).
  explicit KernelModel(KernelFits f);
  double seconds(const KernelCall& k) const;
  double seconds(const std::vector<KernelCall>& ks) const;
  // One layer's kernels (layer_forward_calls / layer_backward_calls) in situ: their sum times the fits' in-situ
  // factor of that direction.
  double layer_seconds(const std::vector<KernelCall>& ks, bool backward) const;
  const KernelFits& fits() const { return f_; }

 private:
  double attention_seconds(const KernelCall& k) const;
  KernelFits f_;
  std::array<const MemoryModel*, kMemoryKernels> mem_{};
};

// Least-squares fits (relative error weighted) of the kernel models; points are (sizes..., median seconds).
// Every fit holds out every `holdout_every`-th point (the held-out error is reported), then uses all.
struct GemmSample {
  int m = 0, n = 0, k = 0;
  double seconds = 0;
};
GemmModel fit_gemm_model(const std::vector<GemmSample>& pts, int holdout_every = 4);
struct AttentionSample {
  int l = 0, keys = 0;
  double fwd_s = 0, bwd_s = 0;  // per (sequence, head)
};
AttentionModel fit_attention_model(int head_dim, const std::vector<AttentionSample>& pts, int holdout_every = 4);
MemoryModel fit_memory_model(MemoryKernel kind, const std::vector<std::pair<double, double>>& bytes_seconds,
                             int holdout_every = 4);

}  // namespace pipescope
