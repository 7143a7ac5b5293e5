// The work estimates of the compute benchmarks: each from the grid its benchmark measures (calib/grids.cc) and the
// machine's rates (WorkRates, which calibrate measures first), for the progress lines' time left and the quick
// budget. Every phase is counted, making its inputs included: a budget that counted only the layer and head points
// let `calibrate --quick` on the built-in scenario spend 201 s of compute under a 100 s budget (2026-11-28). They
// are estimates: a noisy point takes up to three times its samples (TimingPolicy::retries), which they leave out.
#include <algorithm>

#include "calib/benches.h"
#include "core/model/backends.h"

namespace pipescope::calib {
namespace {

double pair_s(const ComputeConfig& cfg, double forward_flops) {
  const double call = forward_flops / cfg.rates.flop_s;
  return estimated_point_s(call, cfg.policy) + estimated_point_s(2 * call, cfg.policy);
}

double create_s(const ComputeConfig& cfg, double values) { return values * cfg.rates.create_s_per_value; }

double params(kernels::ModuleKind k, const kernels::ModelShape& s) {
  return static_cast<double>(kernels::param_count(k, s));
}

}  // namespace

double layer_point_est_s(const ComputeConfig& cfg, int b, int l, int c) {
  return pair_s(cfg, layer_flops(cfg, b, l, c));
}

double ends_setup_est_s(const ComputeConfig& cfg) {
  return create_s(cfg,
                  params(kernels::ModuleKind::kEmbedding, cfg.shape) + params(kernels::ModuleKind::kHead, cfg.shape));
}

double ends_point_est_s(const ComputeConfig& cfg, int b, int l) {
  return pair_s(cfg, head_flops(cfg, b, l)) + 2 * estimated_point_s(0, cfg.policy);  // head; embedding
}

double context_attention_point_est_s(const ComputeConfig& cfg, int b, int l, int c) {
  return pair_s(cfg, attention_flops(cfg, b, l, c));
}

double gemm_point_est_s(const ComputeConfig& cfg, int m, int k, int n) {
  const double dm = m, dk = k, dn = n;  // the call's own operands are made with it
  return estimated_point_s(2 * dm * dn * dk / cfg.rates.flop_s, cfg.policy) +
         create_s(cfg, dm * dk + dk * dn + dm * dn);
}

double gemm_spread_est_s(const ComputeConfig& cfg) {
  double est = 0;
  for (const auto& [m, k, n] : gemm_spread_shapes()) est += gemm_point_est_s(cfg, m, k, n);
  return est;
}

double attention_kernel_est_s(const ComputeConfig& cfg, int head_dim, int max_seq) {
  double est = 0;
  for (const auto& [l, c] : attention_kernel_grid(max_seq)) est += pair_s(cfg, 4.0 * l * (c + l) * head_dim);
  return est;
}

double memory_kernels_est_s(const ComputeConfig& cfg, int elem_bytes) {
  double est = 0;
  for (int i = 0; i < kMemoryKernels; i++) {
    const auto k = static_cast<MemoryKernel>(i);
    const int c = memory_kernel_cols(k, cfg.shape.layer.hidden, cfg.shape.vocab);
    for (int r : memory_kernel_rows(c, elem_bytes))  // four tensors of r x c made per point
      est += estimated_point_s(memory_bytes(k, r, c, elem_bytes) / cfg.rates.bw_Bps, cfg.policy) +
             create_s(cfg, 4.0 * r * c);
  }
  return est;
}

double transfer_est_s(const ComputeConfig& cfg) {
  ComputeConfig t = cfg;
  t.shape = held_out_shape(cfg.shape);
  double est = create_s(cfg, params(kernels::ModuleKind::kLayer, t.shape));
  for (const auto& [l, c] : transfer_points(cfg.longest())) est += layer_point_est_s(t, 1, l, c);
  return est;
}

double kernel_fits_est_s(const ComputeConfig& cfg, const std::string& backend) {
  if (!backend_on(backend, BackendDevice::Cpu)) return 0;
  const int e = backend_named(backend).kind == BackendKind::CpuF64 ? 8 : 4;
  double est = gemm_spread_est_s(cfg) + memory_kernels_est_s(cfg, e) + transfer_est_s(cfg);
  for (int hd : attention_kernel_head_dims(cfg)) est += attention_kernel_est_s(cfg, hd, attention_kernel_length(cfg));
  return est;
}

double optimizer_est_s(const ComputeConfig& cfg) {
  // One layer made, Adam's two moments made at its first step, then steps that read 4 arrays and write 3 (8-byte
  // values: the larger of the CPU dtypes).
  const double n = params(kernels::ModuleKind::kLayer, cfg.shape);
  return create_s(cfg, 2 * n) + estimated_point_s(7 * n * 8 / cfg.rates.bw_Bps, cfg.policy);
}

}  // namespace pipescope::calib
