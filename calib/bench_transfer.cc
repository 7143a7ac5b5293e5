// The kernel model's transfer check: one layer, forward and backward, timed at a shape that none of the kernel
// fits saw (half the calibrated width and heads, the same head dimension; double when that is too small), against
// the model's prediction. Inputs come from filled_tensor (calib/inputs.cc): the slice's size, filled once.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "calib/benches.h"
#include "core/model/backends.h"

namespace pipescope::calib {
namespace {
// The model the kernel decomposition (layer_forward_calls) needs for a layer of this shape.
ModelSpec layer_model(int hidden, int heads, int ffn, int vocab, int seq_len) {
  ModelSpec m;
  m.hidden = hidden;
  m.heads = heads;
  m.ffn_hidden = ffn;
  m.vocab = vocab;
  m.seq_len = seq_len;
  return m;
}
}  // namespace

std::vector<TransferPoint> bench_transfer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg,
                                          const KernelModel& model) {
  if (!cfg.policy.reference) throw std::logic_error("bench_transfer: the timing policy has no reference call");
  const kernels::ModelShape s = held_out_shape(cfg.shape);
  const int L = cfg.longest(), h = s.layer.hidden, b = 1;
  const int e = static_cast<int>(kernels::dtype_bytes(be.dtype()));
  auto params = be.params(kernels::ModuleKind::kLayer, s);
  params->set(kernels::init_params(kernels::ModuleKind::kLayer, s, 23));
  auto kv = be.kv_cache(s.layer, b, L);
  auto prefix_rec = be.record(), rec = be.record();
  auto y = be.tensor(1, h), dx = be.tensor(1, h);
  const ModelSpec m = layer_model(h, s.layer.heads, s.layer.ffn, s.vocab, L);
  // The reference (calibrate's kReferenceGemm, a GEMM of the spread the GEMM fit was measured on) at its fitted time.
  const std::function<void()>& ref = cfg.policy.reference;
  KernelCall ref_call;
  ref_call.kind = KernelCall::Kind::Gemm;
  ref_call.m = kReferenceGemm[0];
  ref_call.k = kReferenceGemm[1];
  ref_call.n = kReferenceGemm[2];
  const double ref_fit_s = model.seconds(ref_call);
  std::vector<TransferPoint> out;
  const std::vector<std::pair<int, int>> points = transfer_points(L);
  Progress prog("kernel model transfer check (hidden " + std::to_string(h) + ")", 2 * static_cast<int>(points.size()),
                cfg.progress, transfer_est_s(cfg));
  for (const auto& point : points) {
    const int l = point.first, c = point.second;  // not a structured binding: lambdas capture it (clang 14)
    const auto x = filled_tensor(be, b * l, h, 5), dy = filled_tensor(be, b * l, h, 6);
    kv->reset();
    if (c > 0) {
      const auto xc = filled_tensor(be, b * c, h, 7);
      be.layer_forward(*params, *xc, kernels::Slice{b, 0, c}, *kv, *prefix_rec, *y);
    }
    const kernels::Slice sl{b, c, l};
    const PairedStats f = time_paired(
        [&] {
          kv->rewind(c);
          be.layer_forward(*params, *x, sl, *kv, *rec, *y);
        },
        ref, timer, cfg.policy);
    prog.step("forward l = " + std::to_string(l) + ", c = " + std::to_string(c));
    const PairedStats bw = time_paired(
        [&] {
          kv->rewind(c + l);
          be.layer_backward(*params, *rec, *kv, *dy, *dx);
        },
        ref, timer, cfg.policy);
    prog.step("backward l = " + std::to_string(l) + ", c = " + std::to_string(c));
    for (bool fwd : {true, false}) {
      const PairedStats& st = fwd ? f : bw;
      TransferPoint t;
      t.op = fwd ? "layer forward" : "layer backward";
      t.hidden = h;
      t.heads = m.heads;
      t.ffn = m.ffn_hidden;
      t.micro_batch = b;
      t.l = l;
      t.c = c;
      t.measured_s = st.op.median_s;
      // The layer at the fits' speed is median(layer / reference) x the reference's fitted time.
      t.slowdown = t.measured_s / (st.ratio.median_s * ref_fit_s);
      t.predicted_s = model.layer_seconds(
          fwd ? layer_forward_calls(m, 1, e, b, l, c) : layer_backward_calls(m, 1, e, b, l, c), !fwd);
      out.push_back(t);
    }
  }
  return out;
}

std::pair<double, double> layer_in_situ(const KernelModel& model, const LayerTable& table, int elem_bytes) {
  const ModelSpec m = layer_model(table.hidden, table.heads, table.ffn, table.vocab, table.seq_len);
  std::vector<double> fwd, bwd;
  for (const SlicePoint& p : table.slices) {
    const int t = table.tp, b = table.micro_batch;
    fwd.push_back(p.fwd.median_s / model.seconds(layer_forward_calls(m, t, elem_bytes, b, p.l, 0)));
    bwd.push_back(p.bwd.median_s / model.seconds(layer_backward_calls(m, t, elem_bytes, b, p.l, 0)));
  }
  if (fwd.empty()) return {1.0, 1.0};
  return {stats_of(fwd).median_s, stats_of(bwd).median_s};
}

KernelFits calibrate_kernels(kernels::Backend& be, Timer& timer, const std::string& backend, const ComputeConfig& cfg,
                             const LayerTable* table) {
  if (!backend_on(backend, BackendDevice::Cpu)) return {};
  KernelFits f;
  f.dtype = dtype_of_backend(backend);
  f.gemm = fit_gemm_model(bench_gemm_spread(backend, cfg.policy, cfg.progress, gemm_spread_est_s(cfg)));
  const int L = attention_kernel_length(cfg);
  for (int hd : attention_kernel_head_dims(cfg))
    f.attention.push_back(
        bench_attention_kernel(backend, hd, L, cfg.policy, cfg.progress, attention_kernel_est_s(cfg, hd, L)));
  f.memory = bench_memory_kernels(backend, cfg.shape.layer.hidden, cfg.shape.vocab, cfg.policy, cfg.progress,
                                  memory_kernels_est_s(cfg, static_cast<int>(kernels::dtype_bytes(be.dtype()))));
  const int e = static_cast<int>(kernels::dtype_bytes(be.dtype()));
  if (table) std::tie(f.layer_in_situ_fwd, f.layer_in_situ_bwd) = layer_in_situ(KernelModel(f), *table, e);
  const KernelModel model(f);
  f.transfer = bench_transfer(be, timer, cfg, model);
  return f;
}

}  // namespace pipescope::calib

namespace pipescope::calib {

std::string kernel_fit_report(const KernelFits& f) {
  if (f.empty()) return "";
  std::string o;
  char buf[240];
  const GemmModel& g = f.gemm;
  std::snprintf(buf, sizeof buf,
                "  kernel model (%s): GEMM t = %.3g us + 2 mnk (1 + %.3g/m + %.3g/n + %.3g/k) / %.4g GFLOP/s, held-out "
                "error %.1f%% (%d shapes held out)\n",
                f.dtype.c_str(), g.fixed_s * 1e6, g.m0, g.n0, g.k0, g.rate_flops / 1e9, 100 * g.holdout_rel_err,
                g.test_points);
  o += buf;
  for (const auto& a : f.attention) {
    std::snprintf(buf, sizeof buf, "    attention head_dim %d: held-out error %.1f%%\n", a.head_dim,
                  100 * a.holdout_rel_err);
    o += buf;
  }
  for (const auto& m : f.memory) {
    std::snprintf(buf, sizeof buf, "    %-18s %.3g us + bytes / %.3g GB/s, held-out error %.1f%%\n", to_string(m.kind),
                  m.fixed_s * 1e6, m.bw_Bps / 1e9, 100 * m.holdout_rel_err);
    o += buf;
  }
  std::snprintf(buf, sizeof buf,
                "    in situ: a layer's kernels back to back take x%.3f forward, x%.3f backward their sum timed one by "
                "one (the layer table at its own shape); the kernel model's layers are scaled by it\n",
                f.layer_in_situ_fwd, f.layer_in_situ_bwd);
  o += buf;
  double worst = 0;
  for (const auto& t : f.transfer) worst = std::max(worst, std::abs(t.rel_err()));
  if (!f.transfer.empty()) {
    std::snprintf(buf, sizeof buf, "    transfer to a shape outside the fits: worst |error| %.1f%% (target 15%%)%s\n",
                  100 * worst, worst > 0.15 ? " -- above target" : "");
    o += buf;
  }
  for (const auto& t : f.transfer) {
    std::snprintf(buf, sizeof buf,
                  "    transfer %-14s hidden %d heads %d ffn %d, l = %d, c = %d: measured %.1f us, predicted %.1f "
                  "us, slowdown x%.2f, error %+.1f%%\n",
                  t.op.c_str(), t.hidden, t.heads, t.ffn, t.l, t.c, t.measured_s * 1e6, t.predicted_s * 1e6, t.slowdown,
                  100 * t.rel_err());
    o += buf;
  }
  return o;
}

}  // namespace pipescope::calib
