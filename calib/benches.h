#pragma once
// The compute benchmarks of `pipescope calibrate`, one file each (bench_*.cc), all on a kernels/ Backend
// (so the CPU reference and CUDA run the same code path the validation runtime runs) and the shared driver.

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "calib/driver.h"
#include "core/model/kernel_model.h"
#include "core/model/profile.h"
#include "kernels/backend.h"

namespace pipescope::calib {

// What the work estimates (progress, the quick budget; calib/estimate.cc) assume of this machine; calibrate measures
// each before the benchmarks.
struct WorkRates {
  double flop_s = 1e10;              // a layer forward's FLOP rate (the probe)
  double bw_Bps = 1e10;              // host memory bandwidth, bytes read + written per second
  double create_s_per_value = 1e-8;  // making one parameter (value, gradient) or input value: draw, fill, first touch
};

struct ComputeConfig {
  kernels::ModelShape shape;    // hidden, heads, ffn, vocab, max_seq = longest slice + context
  int grain = 8;                // t(l, 0) for l = grain, 2 grain, ..., max_len
  int context_steps = 8;        // (l, c) grid in steps of max_len / context_steps (TeraPipe: 16); 0 = none
  int tp = 1;                   // tensor-parallel degree of the GEMM shapes (QKV 3h/t, projection h/t, ...)
  int max_len = 0;              // longest l + c measured (0 = shape.max_seq); a quick budget may lower it
  bool sparse_lengths = false;  // l on grain x {1, 2, 3, 4, 6, 8, 12, ...} instead of every multiple (quick)
  TimingPolicy policy;
  WorkRates rates;
  bool progress = true;
  double refit_above = 0.15;  // the fit gate's bound (GateBounds::fit_holdout): a context fit above it is timed again
  int longest() const { return max_len > 0 ? max_len : shape.max_seq; }
};

// The grids every benchmark uses: slice lengths l at context 0, and the (l, c > 0) context grid.
std::vector<int> slice_lengths(const ComputeConfig& cfg);
int context_step(const ComputeConfig& cfg);
std::vector<std::pair<int, int>> context_points(const ComputeConfig& cfg);
// The (l, c) points of attention alone (bench_attention): the context grid and c = 0.
std::vector<std::pair<int, int>> context_attention_grid(const ComputeConfig& cfg);

// The kernel-fit grids: rows of the memory-bound kernels' tensors of `cols` elements of `elem_bytes` each; the GEMM
// spread's (m, k, n); the attention kernel's (l, c) up to `max_seq` and that length for a config; the shape and the
// (l, c) points of the kernel model's transfer check.
std::vector<int> memory_kernel_rows(int cols, int elem_bytes);
int memory_kernel_cols(MemoryKernel k, int hidden, int vocab);  // softmax: the vocabulary; the rest: hidden
std::vector<std::array<int, 3>> gemm_spread_shapes();
std::vector<std::pair<int, int>> attention_kernel_grid(int max_seq);
int attention_kernel_length(const ComputeConfig& cfg);
std::vector<int> attention_kernel_head_dims(const ComputeConfig& cfg);
kernels::ModelShape held_out_shape(const kernels::ModelShape& s);
std::vector<std::pair<int, int>> transfer_points(int longest);
// Estimated FLOPs of one call (forward; a backward is about twice), for progress and the quick budget.
double layer_flops(const ComputeConfig& cfg, int b, int l, int c);
double head_flops(const ComputeConfig& cfg, int b, int l);
double attention_flops(const ComputeConfig& cfg, int b, int l, int c);

// Inputs right by construction (inputs.cc): created at their final size and filled in one call with N(0, 1)
// values; debug builds assert that the backend holds finite values.
std::vector<double> normal_values(std::size_t n, unsigned seed);
std::unique_ptr<kernels::Tensor> filled_tensor(kernels::Backend& be, int rows, int cols, unsigned seed);
bool all_finite(const kernels::Tensor& t);

// t(l, 0) for every l on the grain grid and t(l, c) on the context grid, forward and backward, for micro-batch
// size b, with the context fits; the shape keys (hidden ... dtype) filled in.
LayerTable bench_layer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b);
// Forward and backward of one (l, c) point of the layer table, timed as bench_layer times it.
std::pair<TimeStats, TimeStats> time_layer_point(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b,
                                                 int l, int c);
// Embedding (first stage) and final LayerNorm + LM head + loss (last stage) on l tokens, forward and backward,
// on the same l grid as the layer table (added to `t`).
void bench_ends(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b, LayerTable& t);
// Attention alone (scores, causal softmax, weighted sum and their backward) of all heads of b sequences on the
// (l, c) context grid (added to `t.attention`); CPU backends only.
void bench_attention(const std::string& backend, const ComputeConfig& cfg, int b, LayerTable& t);
// Adam step time per parameter (on one layer's parameters).
double bench_optimizer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg);
// Time of the smallest operation the backend runs (an Adam step of a 16-wide layer): the per-kernel fixed cost.
double bench_launch(kernels::Backend& be, Timer& timer, const TimingPolicy& p);
// GEMMs at the model's layer shapes (QKV, output projection, MLP up and down, logits) for token counts
// b * l, l = 16, 32, ... up to the longest measured length (at least 32); CPU backends only (Eigen, the kernels' own
// GEMM), empty otherwise.
std::vector<GemmPoint> bench_gemm(const std::string& backend, const ComputeConfig& cfg, const std::vector<int>& bs);
// The (M, K, N) shapes both GEMM benchmarks time: QKV, projection, MLP up and down, logits at tp for b * l tokens.
std::vector<std::array<int, 3>> gemm_shapes(const ComputeConfig& cfg, const std::vector<int>& bs);
// The same on the GPU with cuBLAS (cuda-bf16 / cuda-f16), CUDA-event timed; only in CUDA builds.
std::vector<GemmPoint> bench_gemm_cuda(const std::string& backend, const ComputeConfig& cfg,
                                       const std::vector<int>& bs);
// CUDA events on the backend's stream (Backend::stream()); only in CUDA builds.
std::unique_ptr<Timer> cuda_event_timer(void* stream);
// Kernel-level benchmarks (core/model/kernel_model.h), CPU backends: GEMMs over a spread of shapes; attention of one
// (sequence, head) of head dimension d on an (l, c) grid, fitted; each memory-bound kernel class over a range of
// sizes (rows of `cols` elements), fitted; layers at a shape none of them saw, against the model's prediction.
// `est_s`: the phase's share of the work plan (calib/estimate.cc), for progress.
std::vector<GemmSample> bench_gemm_spread(const std::string& backend, const TimingPolicy& p, bool progress,
                                          double est_s = 0);
// The reference every CPU table is timed against (m, k, n), a shape of the spread; the transfer check uses it too.
constexpr int kReferenceGemm[3] = {64, 64, 128};
// One m x k by k x n GEMM of the spread's kind (Eigen, the backend's precision) on its own operands, as a call.
std::function<void()> gemm_call(const std::string& backend, int m, int k, int n);
AttentionModel bench_attention_kernel(const std::string& backend, int head_dim, int max_seq, const TimingPolicy& p,
                                      bool progress, double est_s = 0);
std::vector<MemoryModel> bench_memory_kernels(const std::string& backend, int cols, int vocab, const TimingPolicy& p,
                                              bool progress, double est_s = 0);
// Needs cfg.policy.reference (calibrate sets it on CPU backends: kReferenceGemm).
std::vector<TransferPoint> bench_transfer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg,
                                          const KernelModel& model);
// The in-situ factors of KernelFits (forward, backward): the layer table's times at context 0 over the kernel
// model's sum for the same layer (its shape, tp and micro-batch), the median over the table's lengths; (1, 1) for a
// table without lengths.
std::pair<double, double> layer_in_situ(const KernelModel& model, const LayerTable& table, int elem_bytes);
// All of the above and the fits: the profile's `kernels` section (empty for a GPU backend). With `table` (the
// profile's first layer table) the in-situ factors are measured against it before the transfer check, which then
// tests them at its held-out shape.
KernelFits calibrate_kernels(kernels::Backend& be, Timer& timer, const std::string& backend, const ComputeConfig& cfg,
                             const LayerTable* table);
// The kernel fits' lines of `pipescope calibrate`'s report (empty without kernel fits).
std::string kernel_fit_report(const KernelFits& f);
// The work estimates (seconds) of the benchmarks above, from the grids they measure and cfg.rates
// (calib/estimate.cc): for progress and the quick budget, so both count every phase.
double layer_point_est_s(const ComputeConfig& cfg, int b, int l, int c);  // forward + backward
double ends_setup_est_s(const ComputeConfig& cfg);                        // making the embedding and the head
double ends_point_est_s(const ComputeConfig& cfg, int b, int l);
double context_attention_point_est_s(const ComputeConfig& cfg, int b, int l, int c);
double gemm_point_est_s(const ComputeConfig& cfg, int m, int k, int n);
double gemm_spread_est_s(const ComputeConfig& cfg);
double attention_kernel_est_s(const ComputeConfig& cfg, int head_dim, int max_seq);
double memory_kernels_est_s(const ComputeConfig& cfg, int elem_bytes);
double transfer_est_s(const ComputeConfig& cfg);
double kernel_fits_est_s(const ComputeConfig& cfg, const std::string& backend);
double optimizer_est_s(const ComputeConfig& cfg);
// Host memory bandwidth (bytes read + written per second) of a large copy.
double bench_host_bandwidth(const TimingPolicy& p);

}  // namespace pipescope::calib
