// The kernel-level model (core/model/kernel_model.h), its profile section (core/model/profile_kernels.h) and its use by
// the profile cost model: decomposition consistent with the analytic FLOP count, fits that recover known parameters
// from synthetic timings (with held-out errors), YAML round trip and errors, and the source report.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "calib/benches.h"
#include "core/cost/analytic_cost.h"
#include "core/cost/profile_cost.h"
#include "core/model/kernel_model.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"

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

// A layer in situ: its kernels' sum times the direction's in-situ factor; the factors must be positive.
TEST(KernelModel, LayerInSituScalesTheKernelSum) {
  KernelFits f = synthetic_fits();
  f.layer_in_situ_fwd = 1.25;
  f.layer_in_situ_bwd = 1.5;
  const KernelModel km(f);
  const ModelSpec m = spec(128, 4, 512);
  const auto fw = layer_forward_calls(m, 1, 8, 1, 64, 64), bw = layer_backward_calls(m, 1, 8, 1, 64, 64);
  EXPECT_NEAR(km.layer_seconds(fw, false), 1.25 * km.seconds(fw), 1e-15);
  EXPECT_NEAR(km.layer_seconds(bw, true), 1.5 * km.seconds(bw), 1e-15);
  for (double bad : {0.0, -1.0, std::nan("")}) {
    KernelFits b = synthetic_fits();
    b.layer_in_situ_bwd = bad;
    EXPECT_THROW(KernelModel{b}, std::invalid_argument) << bad;
  }
}

// The in-situ factors calibrate measures: a layer table at the model's own shape over the kernel sum, the median
// over its lengths (one length's outlier does not move it).
TEST(KernelModel, InSituFactorsAreTheTablesMedianRatio) {
  const KernelModel km(synthetic_fits());
  LayerTable t;
  t.hidden = 128;
  t.heads = 4;
  t.ffn = 512;
  t.vocab = 512;
  t.seq_len = 256;
  const ModelSpec m = spec(128, 4, 512);
  const double fwd_ratio[] = {1.1, 1.1, 3.0}, bwd_ratio[] = {1.2, 0.5, 1.2};
  for (int i = 0; i < 3; i++) {
    SlicePoint p;
    p.l = 64 * (i + 1);
    p.fwd.median_s = fwd_ratio[i] * km.seconds(layer_forward_calls(m, 1, 8, 1, p.l, 0));
    p.bwd.median_s = bwd_ratio[i] * km.seconds(layer_backward_calls(m, 1, 8, 1, p.l, 0));
    t.slices.push_back(p);
  }
  const auto [fwd, bwd] = calib::layer_in_situ(km, t, 8);
  EXPECT_NEAR(fwd, 1.1, 1e-12);
  EXPECT_NEAR(bwd, 1.2, 1e-12);
  t.slices.clear();
  EXPECT_EQ(calib::layer_in_situ(km, t, 8), std::make_pair(1.0, 1.0));
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
  // The in-situ factors: read back; a profile written before them reads as 1; each must be positive.
  const std::string is = "in_situ: {forward: 1, backward: 1}";
  const DeviceProfile scaled = parse_profile(with_first(a, is, "in_situ: {forward: 1.1, backward: 1.2}"), "k.yaml");
  EXPECT_DOUBLE_EQ(scaled.kernels.layer_in_situ_fwd, 1.1);
  EXPECT_DOUBLE_EQ(scaled.kernels.layer_in_situ_bwd, 1.2);
  EXPECT_EQ(text_of(scaled), with_first(a, is, "in_situ: {forward: 1.1, backward: 1.2}"));
  const DeviceProfile before = parse_profile(with_first(a, "  " + is, "  #"), "k.yaml");
  EXPECT_DOUBLE_EQ(before.kernels.layer_in_situ_fwd, 1.0);
  EXPECT_DOUBLE_EQ(before.kernels.layer_in_situ_bwd, 1.0);
  EXPECT_NE(
      error_of(with_first(a, is, "in_situ: {forward: 0, backward: 1}")).find("kernels.in_situ.forward: must be >"),
      std::string::npos);
  EXPECT_NE(error_of(with_first(a, is, "in_situ: {forward: 1, backward: 1, colour: 2}"))
                .find("kernels.in_situ.colour: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of(with_first(a, is, "in_situ: 1.1")).find("kernels.in_situ: expected {forward, backward}"),
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
  // The profile's in-situ factors scale the kernel model's layers (not the head), each direction its own.
  DeviceProfile in_situ = p;
  in_situ.kernels.layer_in_situ_fwd = 1.5;
  in_situ.kernels.layer_in_situ_bwd = 2;
  const ProfileCostModel mi(apply_profile(s, in_situ, "k.yaml"), in_situ);
  EXPECT_NEAR(mi.kernel_layer_seconds(true, 1, 128, 0), 1.5 * m.kernel_layer_seconds(true, 1, 128, 0), 1e-15);
  EXPECT_NEAR(mi.kernel_layer_seconds(false, 1, 128, 0), 2 * m.kernel_layer_seconds(false, 1, 128, 0), 1e-15);
  EXPECT_NEAR(mi.compute_seconds(f, 1), want + 0.5 * 2 * km.seconds(layer_forward_calls(sp.model, 1, 8, 1, 128, 0)),
              1e-12);
  // Fits of another precision do not serve: analytic, and it says so.
  s.training.dtype = "fp32";
  const ProfileCostModel m32(apply_profile(s, p, "k.yaml"), p);
  EXPECT_EQ(m32.source(OpKind::Forward), CostSource::Analytic);
  EXPECT_STREQ(to_string(CostSource::LayerTable), "layer table");
}

}  // namespace
}  // namespace pipescope
