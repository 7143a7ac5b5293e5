// The kernel-level model (core/kernel_model.h), its profile section (core/profile_kernels.h) and its use by the
// profile cost model: decomposition consistent with the analytic FLOP count, fits that recover known parameters
// from synthetic timings (with held-out errors), YAML round trip and errors, and the source report.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/analytic_cost.h"
#include "core/kernel_model.h"
#include "core/profile.h"
#include "core/profile_cost.h"
#include "core/scenario.h"

namespace pipescope {
namespace {

ModelSpec spec(int h, int heads, int f) {
  ModelSpec m;
  m.layers = 4;
  m.hidden = h;
  m.heads = heads;
  m.ffn_hidden = f;
  m.vocab = 512;
  m.seq_len = 256;
  return m;
}

double gemm_flops(const std::vector<KernelCall>& ks) {
  double s = 0;
  for (const auto& k : ks) s += k.gemm_flops();
  return s;
}

TEST(KernelModel, GemmFlopsMatchTheAnalyticCount) {
  for (int t : {1, 2})
    for (auto [l, c] : {std::pair{64, 0}, {32, 96}}) {
      const ModelSpec m = spec(128, 4, 512);
      const double want = layer_forward_flops(m, t, 2, l, c).gemm();
      EXPECT_NEAR(gemm_flops(layer_forward_calls(m, t, 8, 2, l, c)), want, 1e-6 * want);
      EXPECT_NEAR(gemm_flops(layer_backward_calls(m, t, 8, 2, l, c)), 2 * want, 2e-6 * want);  // dgrad + wgrad
    }
}

// Synthetic fits: GEMM 1 us + 2 (mnk + 4 mn + 16 mk + 8 nk) / 10 GFLOP/s, attention a0 + a1 l + a2 l K, memory.
KernelFits synthetic_fits() {
  KernelFits f;
  f.dtype = "fp64";
  f.gemm = GemmModel{10e9, 8, 16, 4, 1e-6, 0.02, 30, 10};
  f.attention.push_back(AttentionModel{32, {1e-6, 2e-8, 1e-9}, {2e-6, 4e-8, 3e-9}, 0.03});
  f.attention.push_back(AttentionModel{64, {1e-6, 3e-8, 2e-9}, {2e-6, 6e-8, 6e-9}, 0.03});
  for (int i = 0; i < kMemoryKernels; i++)
    f.memory.push_back(MemoryModel{static_cast<MemoryKernel>(i), 0.2e-6, (5.0 + i) * 1e9, 0.04});
  f.transfer.push_back(TransferPoint{"layer forward", 64, 2, 256, 1, 128, 0, 1e-3, 1.05e-3});
  return f;
}

TEST(KernelModel, FitsRecoverSyntheticParameters) {
  const GemmModel g = synthetic_fits().gemm;
  std::vector<GemmSample> gs;
  for (int m : {8, 32, 128, 512})
    for (int n : {16, 64, 256})
      for (int k : {16, 64, 256, 1024}) gs.push_back(GemmSample{m, n, k, g.seconds(m, n, k)});
  const GemmModel fg = fit_gemm_model(gs);
  EXPECT_NEAR(fg.rate_flops, g.rate_flops, 1e-3 * g.rate_flops);
  EXPECT_NEAR(fg.m0, 8, 1e-6);
  EXPECT_NEAR(fg.n0, 16, 1e-6);
  EXPECT_NEAR(fg.k0, 4, 1e-6);
  EXPECT_NEAR(fg.fixed_s, 1e-6, 1e-12);
  EXPECT_LT(fg.holdout_rel_err, 1e-6);
  EXPECT_GT(fg.test_points, 0);

  const AttentionModel a = synthetic_fits().attention[0];
  std::vector<AttentionSample> as;
  for (int l : {8, 16, 32, 64, 128})
    for (int c : {0, 64, 128}) {
      const double K = c + l;
      as.push_back(AttentionSample{l, c + l, a.fwd[0] + a.fwd[1] * l + a.fwd[2] * l * K,
                                   a.bwd[0] + a.bwd[1] * l + a.bwd[2] * l * K});
    }
  const AttentionModel fa = fit_attention_model(32, as);
  for (int i = 0; i < 3; i++) {
    EXPECT_NEAR(fa.fwd[i], a.fwd[i], 1e-6 * a.fwd[i]);
    EXPECT_NEAR(fa.bwd[i], a.bwd[i], 1e-6 * a.bwd[i]);
  }
  std::vector<std::pair<double, double>> ms;
  for (double bytes = 1e3; bytes < 1e8; bytes *= 3) ms.emplace_back(bytes, 0.5e-6 + bytes / 7e9);
  const MemoryModel fm = fit_memory_model(MemoryKernel::Copy, ms);
  EXPECT_NEAR(fm.bw_Bps, 7e9, 7e3);
  EXPECT_NEAR(fm.fixed_s, 0.5e-6, 1e-12);
  // Noise makes the held-out error non-zero: it is measured, not assumed.
  for (std::size_t i = 0; i < ms.size(); i++) ms[i].second *= 1 + (i % 2 ? 0.1 : -0.1);
  EXPECT_GT(fit_memory_model(MemoryKernel::Copy, ms).holdout_rel_err, 0.01);
  EXPECT_THROW(fit_memory_model(MemoryKernel::Copy, {{1e3, 1e-6}}), std::invalid_argument);
}

TEST(KernelModel, LayerTimeIsTheSumOfItsKernels) {
  const KernelModel km(synthetic_fits());
  const ModelSpec m = spec(128, 4, 512);
  const auto ks = layer_forward_calls(m, 1, 8, 1, 64, 64);
  double sum = 0;
  for (const auto& k : ks) sum += km.seconds(k);
  EXPECT_NEAR(km.seconds(ks), sum, 1e-15);
  // Attention: reps x (a0 + a1 l + a2 l K) at a measured head dim; linear in d between two fits.
  KernelCall a;
  a.kind = KernelCall::Kind::Attention;
  a.reps = 4;
  a.l = 64;
  a.keys = 128;
  a.head_dim = 32;
  EXPECT_NEAR(km.seconds(a), 4 * (1e-6 + 2e-8 * 64 + 1e-9 * 64 * 128), 1e-15);
  a.head_dim = 48;
  EXPECT_NEAR(km.seconds(a), 4 * (1e-6 + 2.5e-8 * 64 + 1.5e-9 * 64 * 128), 1e-15);
  // Wider layers cost more; longer context costs more.
  EXPECT_GT(km.seconds(layer_forward_calls(spec(256, 8, 1024), 1, 8, 1, 64, 0)),
            km.seconds(layer_forward_calls(m, 1, 8, 1, 64, 0)));
  EXPECT_GT(km.seconds(layer_backward_calls(m, 1, 8, 1, 64, 128)), km.seconds(layer_backward_calls(m, 1, 8, 1, 64, 0)));
  KernelFits bad = synthetic_fits();
  bad.memory.pop_back();
  EXPECT_THROW(KernelModel{bad}, std::invalid_argument);
}

DeviceProfile profile_with_kernels() {
  DeviceProfile p;
  p.source = "k.yaml";
  p.name = "synthetic";
  p.device.name = "test device";
  p.device.peak_flops_fp16 = p.device.peak_flops_bf16 = p.device.peak_flops_fp32 = p.device.peak_flops_fp64 = 1e10;
  p.device.memory_bytes = 16e9;
  p.device.hbm_bw_Bps = 10e9;
  p.device.gemm_efficiency = 1;
  p.device.memory_efficiency = 1;
  p.kernels = synthetic_fits();
  return p;
}

std::string text_of(const DeviceProfile& p) {
  std::ostringstream os;
  write_profile(p, os);
  return os.str();
}

std::string error_of(const std::string& text) {
  try {
    parse_profile(text, "k.yaml");
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "";
}

std::string with_first(std::string t, const std::string& from, const std::string& to) {
  const auto at = t.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? t : t.replace(at, from.size(), to);
}

TEST(ProfileKernels, RoundTripAndErrors) {
  const std::string a = text_of(profile_with_kernels());
  const DeviceProfile q = parse_profile(a, "k.yaml");
  EXPECT_EQ(a, text_of(q));
  ASSERT_EQ(q.kernels.attention.size(), 2u);
  EXPECT_NEAR(q.kernels.gemm.rate_flops, 10e9, 1);
  EXPECT_NEAR(q.kernels.attention[1].bwd[2], 6e-9, 1e-18);
  ASSERT_EQ(q.kernels.transfer.size(), 1u);
  EXPECT_NEAR(q.kernels.transfer[0].rel_err(), 0.05, 1e-9);
  // The slowdown (machine speed during the check vs during the fits) scales the prediction before the comparison;
  // a profile written before it has none and reads as 1.
  const DeviceProfile slow = parse_profile(with_first(a, "slowdown: 1}", "slowdown: 1.2}"), "k.yaml");
  EXPECT_NEAR(slow.kernels.transfer[0].rel_err(), 1.05 * 1.2 - 1, 1e-9);
  const DeviceProfile old = parse_profile(with_first(a, ", slowdown: 1}", "}"), "k.yaml");
  EXPECT_DOUBLE_EQ(old.kernels.transfer[0].slowdown, 1.0);
  EXPECT_NE(error_of(with_first(a, "slowdown: 1}", "slowdown: -1}")).find("kernels.transfer[0].slowdown"),
            std::string::npos);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = a;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  std::string e = error_of(with("rate_gflops: 10", "rate_gflops: -1"));
  EXPECT_NE(e.find("k.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("kernels.gemm.rate_gflops: must be >= "), std::string::npos) << e;
  e = error_of(with("rate_gflops: 10", "rate_gflops: 1e300"));
  EXPECT_NE(e.find("kernels.gemm.rate_gflops: implausibly large"), std::string::npos) << e;
  e = error_of(with("{class: copy", "{class: memcpy"));
  EXPECT_NE(e.find("kernels.memory[6].class: unknown memory kernel class 'memcpy'"), std::string::npos) << e;
  e = error_of(with("{class: copy", "{class: add"));
  EXPECT_NE(e.find("duplicate class"), std::string::npos) << e;
  e = error_of(with("head_dim: 64", "head_dim: 16"));
  EXPECT_NE(e.find("head dimensions must increase strictly"), std::string::npos) << e;
  e = error_of(with("  dtype: fp64", "  dtype: int8"));
  EXPECT_NE(e.find("kernels.dtype"), std::string::npos) << e;
  e = error_of(with("  gemm: {", "  gemm: {colour: 1, "));
  EXPECT_NE(e.find("kernels.gemm.colour: unknown key"), std::string::npos) << e;
  e = error_of(with("forward_us: [1,", "forward_us: [.nan,"));
  EXPECT_NE(e.find("must be finite"), std::string::npos) << e;
}

TEST(ProfileKernels, CostModelSaysWhichSourceTimesEachOp) {
  Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/calib/cpu-2rank.yaml");
  s.training.dtype = "fp64";
  const DeviceProfile p = profile_with_kernels();
  const Scenario sp = apply_profile(s, p, "k.yaml");
  const ProfileCostModel m(sp, p);
  EXPECT_EQ(m.source(OpKind::Forward), CostSource::KernelModel);
  EXPECT_EQ(m.source(OpKind::Backward), CostSource::KernelModel);
  EXPECT_NE(m.describe().find("kernel model"), std::string::npos) << m.describe();
  EXPECT_NE(m.describe().find("5.0%"), std::string::npos) << m.describe();
  // An op: layers per chunk x the kernel-model layer, + the head on the last stage.
  Op f;
  f.kind = OpKind::Forward;
  f.stage = f.rank = 1;
  f.tok_end = 128;
  const KernelModel km(p.kernels);
  const double want = 2 * km.seconds(layer_forward_calls(sp.model, 1, 8, 1, 128, 0)) +
                      km.seconds(head_calls(sp.model, 8, 1, 128, true));
  EXPECT_NEAR(m.compute_seconds(f, 1), want, 1e-12);
  EXPECT_NEAR(m.kernel_layer_seconds(true, 1, 128, 0), km.seconds(layer_forward_calls(sp.model, 1, 8, 1, 128, 0)),
              1e-15);
  // Fits of another precision do not serve: analytic, and it says so.
  s.training.dtype = "fp32";
  const ProfileCostModel m32(apply_profile(s, p, "k.yaml"), p);
  EXPECT_EQ(m32.source(OpKind::Forward), CostSource::Analytic);
  EXPECT_STREQ(to_string(CostSource::LayerTable), "layer table");
}

}  // namespace
}  // namespace pipescope
