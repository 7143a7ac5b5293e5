#include "calib/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "calib/drift.h"
#include "calib/fit.h"
#include "calib/links.h"
#include "calib/provenance.h"
#include "core/model/backends.h"
#include "core/model/presets.h"

namespace pipescope::calib {

std::unique_ptr<kernels::Backend> measuring_backend(const std::string& name) {
  switch (backend_named(name).kind) {
    case BackendKind::CpuF64:
      return kernels::make_cpu_backend(kernels::DType::kF64);
    case BackendKind::CpuF32:
      return kernels::make_cpu_backend(kernels::DType::kF32);
    case BackendKind::CudaBF16:
      return kernels::make_cuda_backend(kernels::DType::kBF16);
    case BackendKind::CudaF16:
      return kernels::make_cuda_backend(kernels::DType::kF16);
    case BackendKind::Null:
      break;  // nothing to measure
  }
  throw std::invalid_argument("--backend " + name + ": calibrate measures kernels (valid: " +
                              backend_names([](const BackendInfo& b) { return b.device != BackendDevice::None; }) +
                              ")");
}

namespace {

// The public peak specs of a GPU, from --device-preset or its name.
DeviceSpec gpu_device(const std::string& preset, const std::string& gpu_name) {
  std::string p = preset;
  if (p.empty()) {
    for (const auto& [key, name] : {std::pair<const char*, const char*>{"H100", "H100-SXM"},
                                    {"A100", "A100-SXM4-80GB"},
                                    {"V100", "V100-SXM2-16GB"}})
      if (gpu_name.find(key) != std::string::npos) p = name;
  }
  if (p.empty())
    throw std::invalid_argument("no peak specification known for '" + gpu_name +
                                "': give --device-preset (one of the cluster.device presets)");
  auto d = device_preset(p);
  if (!d) throw std::invalid_argument("--device-preset: unknown device preset '" + p + "'");
  return *d;
}

std::string pct2(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", 100 * x);
  return b;
}

// What the work estimates assume of this machine (calib/estimate.cc): the layer's FLOP rate from one forward at a
// short length after a warm-up call (short slices run below the large-GEMM rate, so estimates err long); the cost per
// value of making the probe's layer (normal draws, the gradient, first-touch page faults); the host bandwidth (CPU
// backends: the device section's figure, measured here once).
WorkRates probe_rates(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, bool cpu) {
  const auto& s = cfg.shape;
  const int l = std::min(cfg.longest(), 4 * cfg.grain);
  WorkRates r;
  const auto t0 = std::chrono::steady_clock::now();
  auto params = be.params(kernels::ModuleKind::kLayer, s);
  params->set(kernels::init_params(kernels::ModuleKind::kLayer, s, 11));
  r.create_s_per_value = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                         static_cast<double>(std::max<std::size_t>(1, params->size()));
  auto kv = be.kv_cache(s.layer, 1, s.max_seq);
  auto rec = be.record();
  auto y = be.tensor(1, s.layer.hidden);
  const auto x = filled_tensor(be, l, s.layer.hidden, 99);
  double t = 0;
  for (int i = 0; i < 2; i++) {
    kv->reset();
    timer.start();
    be.layer_forward(*params, *x, kernels::Slice{1, 0, l}, *kv, *rec, *y);
    t = timer.stop();
  }
  r.flop_s = layer_flops(cfg, 1, l, 0) / std::max(t, 1e-9);
  if (cpu) r.bw_Bps = bench_host_bandwidth(cfg.policy);
  return r;
}

void check_config(const ComputeConfig& cfg) {
  cfg.shape.validate();
  if (cfg.grain < 1 || cfg.shape.max_seq % cfg.grain != 0)
    throw std::invalid_argument("--grain " + std::to_string(cfg.grain) + " must divide the sequence length " +
                                std::to_string(cfg.shape.max_seq));
  if (cfg.context_steps < 0)
    throw std::invalid_argument("--context-steps must be >= 0 (0: no context grid), got " +
                                std::to_string(cfg.context_steps));
}

// The longest length (a multiple of the grain, halving from the sequence length) whose estimate fits, but at least
// two grains: a table of one length cannot show t(l, 0) growing (a gate), and the fixed costs (making the head,
// the kernel fits) are most of a short table's time anyway.
int budget_length(const CalibrateOptions& o, ComputeConfig cfg) {
  int L = cfg.shape.max_seq;
  for (;;) {
    cfg.max_len = L;
    const int next = L / 2 / cfg.grain * cfg.grain;
    if (estimate_compute_s(o, cfg) <= o.budget_s || next < 2 * cfg.grain) return L;
    L = next;
  }
}

// How far the machine moved while it was measured: the layer point validate re-times (calib/drift.h), re-timed
// once more at the end of the compute benchmarks. A shared machine can move by tens of per cent within a minute;
// the profile records it so that a reader knows how consistent a snapshot it is.
void record_drift(DeviceProfile& p, const std::string& backend) {
  std::string why;
  const auto probe = drift_probe_of(p, backend, why);
  if (!probe) return;
  const double change = drift_change(*probe, retime_probe(*probe, backend));
  char b[200];
  std::snprintf(b, sizeof b, "%+.1f%% (%s, forward + backward re-timed after the compute benchmarks)", 100 * change,
                probe->describe().c_str());
  p.provenance["drift_during_calibration"] = b;
}

}  // namespace

double estimate_compute_s(const CalibrateOptions& o, const ComputeConfig& cfg) {
  const bool cpu = o.backend.rfind("cpu-", 0) == 0;
  double est = 0;
  for (int b : o.micro_batches) {
    est += ends_setup_est_s(cfg);
    for (int l : slice_lengths(cfg)) est += layer_point_est_s(cfg, b, l, 0) + ends_point_est_s(cfg, b, l);
    for (auto [l, c] : context_points(cfg)) est += layer_point_est_s(cfg, b, l, c);
    if (cpu)
      for (auto [l, c] : context_attention_grid(cfg)) est += context_attention_point_est_s(cfg, b, l, c);
  }
  est += kernel_fits_est_s(cfg, o.backend) + optimizer_est_s(cfg);
  if (cpu && o.gemm)
    for (const auto& [m, k, n] : gemm_shapes(cfg, o.micro_batches)) est += gemm_point_est_s(cfg, m, k, n);
  return est + estimated_point_s(1e-3, cfg.policy);  // launch
}

DeviceProfile calibrate(const CalibrateOptions& o) {
  const bool cpu = o.backend.rfind("cpu-", 0) == 0;
  check_config(o.compute);
  for (int b : o.micro_batches)
    if (b < 1) throw std::invalid_argument("--micro-batch: sizes must be >= 1");
  auto be = measuring_backend(o.backend);
  ComputeConfig cfg = o.compute;
  cfg.refit_above = o.gates.fit_holdout;
  if (cpu) {
    // Every CPU table is timed against one reference (calib/driver.h TablePoints): a GEMM of the kernel fits'
    // spread, long enough (~0.1-1 ms) to be timed like the points, short enough to pair with each sample.
    cfg.policy.reference = gemm_call(o.backend, kReferenceGemm[0], kReferenceGemm[1], kReferenceGemm[2]);
    cfg.policy.reference_name = "Eigen GEMM " + std::to_string(kReferenceGemm[0]) + " x " +
                                std::to_string(kReferenceGemm[1]) + " by " + std::to_string(kReferenceGemm[1]) + " x " +
                                std::to_string(kReferenceGemm[2]);
    cfg.policy.reference_pool = std::make_shared<TimingPolicy::ReferencePool>();
  }
  DeviceProfile p;
  p.kind = "measured";
  p.provenance = base_provenance(o.command);
  p.provenance["backend"] = be->name();
  p.provenance["statistics"] = cfg.policy.describe();
  if (o.clock != "cpu" && o.clock != "wall") throw std::invalid_argument("--clock: cpu or wall, got '" + o.clock + "'");
  const bool cpu_clock = cpu && o.clock == "cpu";
  std::unique_ptr<Timer> timer = cpu_clock ? thread_cpu_timer() : steady_timer([&] { be->synchronize(); });
  p.provenance["timer"] =
      cpu_clock ? "thread CPU time (the CPU kernels are single-threaded; time spent descheduled by other processes "
                  "excluded)"
                : "steady clock";
#ifdef PIPESCOPE_HAVE_CUDA
  if (!cpu) {
    timer = cuda_event_timer(be->stream());
    p.provenance["timer"] = "CUDA events on the backend's stream";
  }
#endif
  if (o.timer_noise > 0) {
    timer = noisy_timer(std::move(timer), o.timer_noise);
    p.provenance["timer"] += " WITH INJECTED NOISE (test hook, sigma " + std::to_string(o.timer_noise) + ")";
  }

  reset_work_plan();
  cfg.rates = probe_rates(*be, *timer, cfg, cpu);
  if (o.budget_s > 0) {
    cfg.max_len = budget_length(o, cfg);
    if (cfg.max_len < cfg.shape.max_seq) {
      p.provenance["budget"] = "quick budget " + std::to_string(static_cast<int>(o.budget_s)) + " s: lengths up to " +
                               std::to_string(cfg.max_len) + " of " + std::to_string(cfg.shape.max_seq) + " measured";
      if (const double e = estimate_compute_s(o, cfg); e > o.budget_s)
        p.provenance["budget"] +=
            " (the shortest table of two lengths, estimated at " + std::to_string(static_cast<int>(e)) + " s)";
      if (cfg.progress) std::fprintf(stderr, "calibrate: %s\n", p.provenance["budget"].c_str());
    }
  }
  const double est = estimate_compute_s(o, cfg);
  plan_work(est);
  if (cfg.progress)
    std::fprintf(stderr,
                 "calibrate: probe %.3g GFLOP/s, %.3g ns per parameter made, host %.3g GB/s; compute benchmarks "
                 "estimated at ~%.0f s\n",
                 cfg.rates.flop_s / 1e9, cfg.rates.create_s_per_value * 1e9, cfg.rates.bw_Bps / 1e9, est);

  for (int b : o.micro_batches) {
    LayerTable t = bench_layer(*be, *timer, cfg, b);
    bench_ends(*be, *timer, cfg, b, t);
    bench_attention(o.backend, cfg, b, t);
    p.layers.push_back(std::move(t));
  }
  // Kernel-level fits for shapes without a layer table, with their held-out transfer check (CPU backends).
  p.kernels = calibrate_kernels(*be, *timer, o.backend, cfg, p.layers.empty() ? nullptr : &p.layers.front());
  p.optimizer_s_per_param = bench_optimizer(*be, *timer, cfg);
  const double launch_s = bench_launch(*be, *timer, cfg.policy);
  double gemm_holdout = -1;

  if (cpu) {
    DeviceSpec& d = p.device;
    d.name = cpu_model() + " (" + o.backend + ")";
    double rate = 0, half = 0;
    if (o.gemm) {
      p.gemms = bench_gemm(o.backend, cfg, o.micro_batches);
      const GemmFit g = fit_gemm(p.gemms);
      gemm_holdout = g.holdout_rel_err;
      rate = g.rate_flops;
      half = g.half_sat_flops;
      char buf[160];
      std::snprintf(buf, sizeof buf, "t = (F + %.4g FLOP) / %.4g GFLOP/s, held-out error %s", half, rate / 1e9,
                    pct2(g.holdout_rel_err).c_str());
      p.provenance["gemm_fit"] = buf;
    } else {
      throw std::invalid_argument("--no-gemm: a CPU profile needs the GEMM fit for its device section");
    }
    // The CPU has one GEMM rate per precision; the measured one stands for every dtype key (the scenario's
    // training.dtype picks which is used), and the fitted asymptotic rate is the "peak" (efficiency 1).
    d.peak_flops_fp16 = d.peak_flops_bf16 = d.peak_flops_fp32 = d.peak_flops_fp64 = rate;
    p.provenance["peaks"] = "every peak_tflops_* is the fitted " + o.backend + " GEMM rate";
    d.gemm_efficiency = 1.0;
    d.gemm_half_sat_flops = half;
    d.memory_bytes = physical_memory_bytes();
    d.hbm_bw_Bps = cfg.rates.bw_Bps;
    d.memory_efficiency = 1.0;
    d.kernel_launch_s = launch_s;
  } else {
    p.device = gpu_device(o.device_preset, be->name());
    p.device.kernel_launch_s = launch_s;
    // The first wording (the presets are in core/model/presets.cc now): it is part of the profile's bytes.
    p.provenance["peaks"] = "public peak specs of " + p.device.name + " (core/presets.cc)";
#ifdef PIPESCOPE_HAVE_CUDA
    if (o.gemm) {
      // Efficiency against the public peak, saturation size from the fit (the analytic model's form).
      p.gemms = bench_gemm_cuda(o.backend, cfg, o.micro_batches);
      const GemmFit g = fit_gemm(p.gemms);
      gemm_holdout = g.holdout_rel_err;
      const double peak =
          backend_named(o.backend).kind == BackendKind::CudaBF16 ? p.device.peak_flops_bf16 : p.device.peak_flops_fp16;
      p.device.gemm_efficiency = std::min(1.0, g.rate_flops / peak);
      p.device.gemm_half_sat_flops = g.half_sat_flops;
      char buf[160];
      std::snprintf(buf, sizeof buf, "t = (F + %.4g FLOP) / %.4g TFLOP/s (%.0f%% of peak), held-out error %s",
                    g.half_sat_flops, g.rate_flops / 1e12, 100 * g.rate_flops / peak, pct2(g.holdout_rel_err).c_str());
      p.provenance["gemm_fit"] = buf;
    }
#endif
  }
  p.name = o.backend + " " + p.provenance["host"];
  if (cpu) record_drift(p, o.backend);

  if (!o.link_results.empty()) {
    const LinkRun run = read_link_results(o.link_results);
    fit_links(run, o.link_class, p);
    p.provenance["link_library"] = run.library;
  }
  p.source = "<calibration>";
  check_profile(p);
  const std::vector<GateFailure> failed = check_gates(p, gemm_holdout, o.gates);
  if (!failed.empty()) {
    if (!o.accept_poor_fit) throw CalibrationRefused(failed);
    std::string all;
    for (const auto& f : failed) all += (all.empty() ? "" : " | ") + f.text();
    p.provenance["gate_failures"] = all;
  }
  return p;
}

DeviceProfile analytic_profile(const std::string& preset, const std::string& command) {
  const auto c = cluster_preset(preset);
  if (!c) throw std::invalid_argument("--analytic: unknown cluster preset '" + preset + "'");
  DeviceProfile p;
  p.kind = "analytic";
  p.name = c->device.name + " (analytic, " + preset + ")";
  p.device = c->device;
  // Provenance of an analytic profile: where its numbers come from, not a measurement. The presets now live in
  // core/model/presets.cc; the text keeps its first wording because it is part of the shipped profiles' bytes, whose
  // fnv1a64 the golden outputs print.
  p.provenance["source"] =
      "public peak specifications (docs/calibration.md) and the analytic model's "
      "efficiency parameters of the '" +
      preset + "' preset (core/presets.cc); nothing measured";
  p.provenance["command"] = command;
  p.links["intra"] = LinkFit{c->nvlink_latency_s, c->nvlink_bw_Bps, 0, {}, "alpha-beta", {}};
  p.links["inter"] = LinkFit{c->nic_latency_s, c->nic_bw_Bps, 0, {}, "alpha-beta", {}};
  p.source = "<analytic>";
  check_profile(p);
  return p;
}

std::string fit_report(const DeviceProfile& p) {
  std::ostringstream os;
  os << "profile: " << p.name << " (" << p.device.name << ")\n";
  if (auto it = p.provenance.find("gemm_fit"); it != p.provenance.end()) os << "  GEMM fit: " << it->second << "\n";
  for (const auto& t : p.layers) {
    os << "  layer h=" << t.hidden << " heads=" << t.heads << " ffn=" << t.ffn << " b=" << t.micro_batch << " "
       << t.dtype << ": t(l, 0) for " << t.slices.size() << " lengths " << t.slices.front().l << ".."
       << t.slices.back().l;
    char buf[200];
    std::snprintf(buf, sizeof buf, "; forward %.3f..%.3f ms, backward %.3f..%.3f ms\n",
                  t.slices.front().fwd.median_s * 1e3, t.slices.back().fwd.median_s * 1e3,
                  t.slices.front().bwd.median_s * 1e3, t.slices.back().bwd.median_s * 1e3);
    os << buf;
    if (!t.context_grid.empty()) {
      for (const auto* f : {&t.ctx_fwd, &t.ctx_bwd}) {
        std::snprintf(buf, sizeof buf,
                      "    context fit %s: a2 = %.4g us/token, a3 = %.4g us/token^2, held-out error %s (%d train, %d "
                      "test points)\n",
                      f == &t.ctx_fwd ? "forward " : "backward", f->a2 * 1e6, f->a3 * 1e6,
                      pct2(f->holdout_rel_err).c_str(), f->train_points, f->test_points);
        os << buf;
      }
    }
  }
  os << kernel_fit_report(p.kernels);
  if (p.optimizer_s_per_param > 0) os << "  Adam: " << p.optimizer_s_per_param * 1e9 << " ns per parameter\n";
  for (const auto& [cls, l] : p.links) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "  link %s: %s model of %zu sizes (large messages: latency %.2f us, %.3f GB/s), held-out error %s\n",
                  cls.c_str(), l.model.c_str(), l.points.size(), l.latency_s * 1e6, l.bw_Bps / 1e9,
                  pct2(l.holdout_rel_err).c_str());
    os << buf;
  }
  for (const auto& c : p.collectives) {
    char buf[220];
    std::snprintf(buf, sizeof buf,
                  "  %-13s n=%d %s: %s model of %zu sizes (alpha %.2f us, busbw %.3f GB/s), held-out error %s\n",
                  c.op.c_str(), c.ranks, c.link_class.c_str(), c.model.c_str(), c.points.size(), c.alpha_s * 1e6,
                  c.busbw_Bps / 1e9, pct2(c.holdout_rel_err).c_str());
    os << buf;
  }
  if (auto it = p.provenance.find("drift_during_calibration"); it != p.provenance.end())
    os << "  machine drift during the calibration: " << it->second << "\n";
  if (auto it = p.provenance.find("gate_failures"); it != p.provenance.end())
    os << "  ACCEPTED WITH FAILED QUALITY GATES (--accept-poor-fit): " << it->second << "\n";
  return os.str();
}

}  // namespace pipescope::calib
