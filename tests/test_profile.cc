// Device profiles (core/model/profile.h), the profile cost model (core/cost/profile_cost.h) and the calibration fits
// (calib/fit.h): round trip, error messages with file/line/key, interpolation rules, fits on synthetic data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "calib/calibrate.h"
#include "calib/fit.h"
#include "calib/links.h"
#include "core/cost/profile_cost.h"
#include "core/model/presets.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

// A synthetic measured profile: t(l, 0) = 100 us + 2 us * l forward (x2 backward), context slope
// c * (0.5 + 0.01 l) us forward, measured at l = 16, 32, ..., 256 for micro-batch 1 and 2 (2x the time).
DeviceProfile synthetic(int hidden = 128) {
  DeviceProfile p;
  p.source = "synthetic.yaml";
  p.kind = "measured";
  p.name = "synthetic";
  p.provenance = {{"host", "test"}, {"command", "none"}};
  p.device.name = "test device";
  p.device.peak_flops_fp16 = p.device.peak_flops_bf16 = p.device.peak_flops_fp32 = p.device.peak_flops_fp64 = 1e10;
  p.device.memory_bytes = 16e9;
  p.device.hbm_bw_Bps = 10e9;
  p.device.gemm_efficiency = 1;
  p.device.gemm_half_sat_flops = 1e5;
  p.device.kernel_launch_s = 1e-6;
  p.device.memory_efficiency = 1;
  p.links["intra"] = LinkFit{2e-6, 5e9, 0.01, {{8, 2e-6}, {1e6, 2.02e-4}}, "alpha-beta", {}};
  for (int b : {1, 2}) {
    LayerTable t;
    t.hidden = hidden;
    t.heads = 4;
    t.ffn = 4 * hidden;
    t.micro_batch = b;
    t.vocab = 512;
    t.seq_len = 256;
    t.dtype = "fp64";
    for (int l = 16; l <= 256; l += 16) {
      SlicePoint s;
      s.l = l;
      s.fwd.median_s = s.fwd.p10_s = s.fwd.p90_s = b * (100 + 2.0 * l) * 1e-6;
      s.bwd.median_s = s.bwd.p10_s = s.bwd.p90_s = 2 * b * (100 + 2.0 * l) * 1e-6;
      s.fwd.samples_s = {s.fwd.median_s, s.fwd.median_s};
      t.slices.push_back(s);
      t.embedding.push_back(EndPoint{l, 1e-6 * l, 2e-6 * l});
      t.head.push_back(EndPoint{l, 10e-6 * l, 20e-6 * l});
    }
    for (int l = 32; l <= 256; l += 32)
      for (int c = 0; c + l <= 256; c += 32)
        t.context_grid.push_back(ContextPoint{l, c, b * (100 + 2.0 * l + c * (0.5 + 0.01 * l)) * 1e-6,
                                              2 * b * (100 + 2.0 * l + c * (0.5 + 0.01 * l)) * 1e-6});
    t.ctx_fwd = ContextFit{0, 0, b * 0.5e-6, b * 0.01e-6, 0, 20, 6};
    t.ctx_bwd = ContextFit{0, 0, 2 * b * 0.5e-6, 2 * b * 0.01e-6, 0, 20, 6};
    p.layers.push_back(t);
  }
  p.optimizer_s_per_param = 5e-9;
  return p;
}

std::string text_of(const DeviceProfile& p) {
  std::ostringstream os;
  write_profile(p, os);
  return os.str();
}

std::string error_of(const std::string& text) {
  try {
    parse_profile(text, "p.yaml");
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "";
}

Scenario cpu_scenario(int pp = 2, int layers = 4) {
  Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/calib/cpu-2rank.yaml");
  s.training.dtype = "fp64";
  s.model.layers = layers;
  s.parallel.pp = pp;
  return s;
}

TEST(Profile, RoundTripIsExactAndDeterministic) {
  const DeviceProfile p = synthetic();
  const std::string a = text_of(p);
  const DeviceProfile q = parse_profile(a, "p.yaml");
  EXPECT_EQ(a, text_of(q));  // write -> read -> write is byte-identical
  ASSERT_EQ(q.layers.size(), 2u);
  EXPECT_EQ(q.layers[1].micro_batch, 2);
  EXPECT_NEAR(q.layers[0].slices[3].fwd.median_s, 100e-6 + 2 * 64e-6, 1e-12);
  EXPECT_EQ(q.layers[0].slices[0].fwd.samples_s.size(), 2u);
  EXPECT_NEAR(q.layers[0].ctx_fwd.a3, 0.01e-6, 1e-15);
  EXPECT_NEAR(q.links.at("intra").bw_Bps, 5e9, 1);
  EXPECT_NEAR(q.optimizer_s_per_param, 5e-9, 1e-15);
}

// Strings go through yaml-cpp's emitter (no quoting of our own): whatever a host name or a provenance note holds,
// quotes, backslashes, control characters, U+2028 and U+0085 (line breaks to YAML), reads back unchanged.
TEST(Profile, StringsRoundTripThroughTheYamlEmitter) {
  DeviceProfile p = synthetic();
  const std::string odd =
      "a\"b\\c\td\x7f e\xe2\x80\xa8"
      "f\xc2\x85g: #h 'i'";
  p.name = odd;
  p.provenance["host"] = odd;
  p.provenance["note: \"x\""] = "line1\nline2";
  const std::string a = text_of(p);
  const DeviceProfile q = parse_profile(a, "p.yaml");
  EXPECT_EQ(q.name, odd);
  EXPECT_EQ(q.provenance.at("host"), odd);
  EXPECT_EQ(q.provenance.at("note: \"x\""), "line1\nline2");
  EXPECT_EQ(a, text_of(q));
}

TEST(Profile, ErrorsNameLineAndKey) {
  const std::string good = text_of(synthetic());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  EXPECT_NE(error_of(with("pipescope_profile: 1", "pipescope_profile: 7")).find("p.yaml:2:"), std::string::npos);
  EXPECT_NE(error_of(with("kind: measured", "kind: guessed")).find("kind: expected measured or analytic"),
            std::string::npos);
  const std::string e = error_of(with("  hbm_bw_GBps: 10", "  hbm_bw_GBps: -3"));
  EXPECT_NE(e.find("p.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("device.hbm_bw_GBps: must be > 0"), std::string::npos) << e;
  EXPECT_NE(error_of(with("  memory_GB: 16", "  memory_GB: 16\n  colour: blue")).find("device.colour: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of(with("      - l: 32", "      - l: 8")).find("slice lengths must increase strictly"),
            std::string::npos);
  // A context fit whose slope goes negative (attention cannot get cheaper with more context).
  const std::string neg = error_of(with("a2_us_per_token: 0.5,", "a2_us_per_token: -5,"));
  EXPECT_NE(neg.find("decreases with context"), std::string::npos) << neg;
  const std::string flag = error_of(with("  memory_GB: 16", "  memory_GB: 16\n  gemm_epilogue_hidden: maybe"));
  EXPECT_NE(flag.find("p.yaml:"), std::string::npos) << flag;
  EXPECT_NE(flag.find("device.gemm_epilogue_hidden: expected true or false, got 'maybe'"), std::string::npos) << flag;
  EXPECT_NE(error_of("a: [").find("YAML syntax error"), std::string::npos);
  EXPECT_NE(error_of("").find("empty profile"), std::string::npos);
  EXPECT_NE(error_of(with("samples_us: [", "samples_us: [.nan, ")).find("must be finite"), std::string::npos);
  // Complex keys (found by fuzz/fuzz_profile: yaml-cpp threw its own conversion error past the parser).
  const std::string ck = error_of(with("  memory_GB: 16", "  memory_GB: 16\n  ? [a, b]\n  : 1"));
  EXPECT_NE(ck.find("p.yaml:"), std::string::npos) << ck;
  EXPECT_NE(ck.find("device.(key): a key must be a plain scalar"), std::string::npos) << ck;
  EXPECT_NE(error_of(with("provenance:\n", "provenance:\n  ? {x: 1}\n  : y\n"))
                .find("provenance.(key): a key must be a plain scalar"),
            std::string::npos);
  // A key given twice: yaml-cpp keeps both and a lookup reads one.
  const std::string dup = error_of(with("kind: measured", "kind: measured\nkind: analytic"));
  EXPECT_NE(dup.find("p.yaml:4:1: kind: duplicate key"), std::string::npos) << dup;
}

TEST(ProfileCost, TablesInterpolateAndAddContext) {
  const Scenario s = apply_profile(cpu_scenario(), synthetic(), "synthetic.yaml");
  const ProfileCostModel m(s, synthetic());
  ASSERT_TRUE(m.uses_layer_tables());
  // Exact at measured l, linear in between, flat below the first point.
  EXPECT_NEAR(m.table_layer_seconds(true, 1, 64, 0), (100 + 128) * 1e-6, 1e-12);
  EXPECT_NEAR(m.table_layer_seconds(true, 1, 72, 0), (100 + 144) * 1e-6, 1e-12);
  EXPECT_NEAR(m.table_layer_seconds(true, 1, 4, 0), (100 + 32) * 1e-6, 1e-12);
  // Context: c (a2 + a3 l) on top of t(l, 0).
  EXPECT_NEAR(m.table_layer_seconds(true, 1, 64, 128), (228 + 128 * (0.5 + 0.64)) * 1e-6, 1e-12);
  EXPECT_NEAR(m.table_layer_seconds(false, 1, 64, 128), 2 * (228 + 128 * (0.5 + 0.64)) * 1e-6, 1e-12);
  // Micro-batch axis: measured 1 and 2; 4 scales the largest proportionally.
  EXPECT_NEAR(m.table_layer_seconds(true, 2, 64, 0), 2 * 228e-6, 1e-12);
  EXPECT_NEAR(m.table_layer_seconds(true, 4, 64, 0), 4 * 228e-6, 1e-12);
  // An op: layers per stage x layer + end-stage work + nothing else.
  Op f;
  f.kind = OpKind::Forward;
  f.stage = f.rank = 0;
  f.tok_begin = 0;
  f.tok_end = 128;
  EXPECT_NEAR(m.compute_seconds(f, 1), 2 * (100 + 256) * 1e-6 + 128e-6, 1e-12);  // + embedding 1 us/token
  f.stage = f.rank = 1;
  EXPECT_NEAR(m.compute_seconds(f, 1), 2 * (100 + 256) * 1e-6 + 1280e-6, 1e-12);  // + head 10 us/token
  EXPECT_NEAR(m.optimizer_seconds(0), rank_parameter_count(s, 0) * 5e-9, 1e-12);
  EXPECT_NE(m.describe().find("measured layer tables"), std::string::npos);
}

TEST(ProfileCost, OtherShapesFallBackToTheDeviceModel) {
  const Scenario s = apply_profile(cpu_scenario(), synthetic(256), "synthetic.yaml");
  const ProfileCostModel m(s, synthetic(256));
  EXPECT_FALSE(m.uses_layer_tables());
  EXPECT_NE(m.describe().find("analytic model with the profile's device"), std::string::npos);
  Op f;
  f.tok_end = 256;
  EXPECT_NEAR(m.compute_seconds(f, 1), AnalyticCostModel(s).compute_seconds(f, 1), 1e-15);
}

TEST(ProfileCost, ShortTableIsAnError) {
  Scenario s = apply_profile(cpu_scenario(), synthetic(), "synthetic.yaml");
  s.model.seq_len = 512;
  EXPECT_THROW(ProfileCostModel(s, synthetic()), std::invalid_argument);
}

TEST(Profile, ApplyReplacesDeviceAndLinks) {
  const Scenario s = apply_profile(cpu_scenario(), synthetic(), "x.yaml");
  EXPECT_EQ(s.cluster.device.name, "test device");
  EXPECT_DOUBLE_EQ(s.cluster.nvlink_bw_Bps, 5e9);
  EXPECT_DOUBLE_EQ(s.cluster.nvlink_latency_s, 2e-6);
  EXPECT_EQ(s.sim.profile, "x.yaml");
}

TEST(Profile, ScenarioCalibrationKeyLoadsTheProfile) {
  const std::string dir = std::string(PIPESCOPE_BINARY_DIR) + "/test_profile_tmp";
  std::system(("mkdir -p " + dir).c_str());
  std::ofstream(dir + "/p.yaml") << text_of(synthetic());
  std::ifstream base(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/calib/cpu-2rank.yaml");
  std::stringstream yaml;
  yaml << base.rdbuf();
  std::string y = yaml.str();
  y.replace(y.find("  dtype: fp32"), 13, "  dtype: fp64");
  std::ofstream(dir + "/s.yaml") << y << "calibration: p.yaml\n";  // relative to the scenario file
  const Scenario s = load_scenario(dir + "/s.yaml");
  EXPECT_EQ(s.cluster.device.name, "test device");
  EXPECT_EQ(s.sim.profile, dir + "/p.yaml");
  auto cm = make_cost_model(s);
  ASSERT_NE(dynamic_cast<const ProfileCostModel*>(cm.get()), nullptr);
  // Both keys: an error naming the key.
  std::ofstream(dir + "/both.yaml") << y << "calibration: p.yaml\nsim:\n  profile: p.yaml\n";
  try {
    load_scenario(dir + "/both.yaml");
    ADD_FAILURE() << "expected an error";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("calibration: give either"), std::string::npos) << e.what();
  }
  // A broken profile: the profile's file and position first (the error is there), then the scenario's key.
  std::ofstream(dir + "/bad.yaml") << "pipescope_profile: 1\nkind: measured\nname: x\n";
  std::ofstream(dir + "/s2.yaml") << y << "calibration: bad.yaml\n";
  try {
    load_scenario(dir + "/s2.yaml");
    ADD_FAILURE() << "expected an error";
  } catch (const ScenarioError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(dir + "/bad.yaml:", 0), 0u) << m;
    EXPECT_NE(m.find("s2.yaml:"), std::string::npos) << m;
    EXPECT_NE(m.find("complete: missing"), std::string::npos) << m;
  }
  // fp64 without a profile: the device has no fp64 peak.
  std::ofstream(dir + "/s3.yaml") << y;
  EXPECT_THROW(load_scenario(dir + "/s3.yaml"), ScenarioError);
}

TEST(Fits, ContextFitRecoversBilinearTerm) {
  std::vector<ContextPoint> grid;
  auto t0 = [](int l) { return (50 + 3.0 * l) * 1e-6; };
  for (int l = 16; l <= 128; l += 16)
    for (int c = 0; c + l <= 256; c += 32) grid.push_back({l, c, t0(l) + c * (0.2 + 0.004 * l) * 1e-6, 0});
  const ContextFit f = calib::fit_context(grid, true, t0);
  EXPECT_NEAR(f.a2, 0.2e-6, 1e-12);
  EXPECT_NEAR(f.a3, 0.004e-6, 1e-14);
  EXPECT_LT(f.holdout_rel_err, 1e-9);
  EXPECT_GT(f.test_points, 0);
}

TEST(Fits, AlphaBetaRecoversLatencyAndBandwidth) {
  std::vector<std::pair<double, double>> pts;
  for (double s = 8; s <= 64.0 * 1024 * 1024; s *= 2) pts.emplace_back(s, 5e-6 + s / 2e9);
  const calib::AlphaBeta ab = calib::fit_alpha_beta(pts);
  EXPECT_NEAR(ab.bw_Bps, 2e9, 2e9 * 0.01);
  EXPECT_NEAR(ab.alpha_s, 5e-6, 1e-6);  // plateau median includes a little transfer time
  EXPECT_GT(ab.holdout_points, 0);
  EXPECT_LT(ab.holdout_rel_err, 0.05);
}

TEST(Fits, GemmFitRecoversRateAndHalfSaturation) {
  std::vector<GemmPoint> g;
  for (int m : {16, 32, 64, 128, 256, 512, 1024, 2048})
    g.push_back(GemmPoint{m, 256, 128, "fp64", (2.0 * m * 256 * 128 + 2e6) / 10e9});
  const calib::GemmFit f = calib::fit_gemm(g);
  EXPECT_NEAR(f.rate_flops, 10e9, 10e9 * 1e-6);
  EXPECT_NEAR(f.half_sat_flops, 2e6, 2e6 * 1e-4);
  EXPECT_LT(f.holdout_rel_err, 1e-6);
}

TEST(Fits, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(calib::bus_factor("allreduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(calib::bus_factor("allgather", 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(calib::bus_factor("reducescatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(calib::bus_factor("sendrecv", 2), 1.0);
  EXPECT_THROW(calib::bus_factor("alltoall", 2), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope

namespace pipescope {
namespace {

TEST(AnalyticProfiles, CommittedFilesAreWhatTheCommandWrites) {
  for (const char* preset : {"aws-p3.16xlarge", "dgx-a100", "dgx-h100"}) {
    const std::string path = std::string(PIPESCOPE_SOURCE_DIR) + "/calib/profiles/" + preset + ".analytic.yaml";
    std::ifstream f(path);
    ASSERT_TRUE(f) << path;
    std::stringstream committed;
    committed << f.rdbuf();
    EXPECT_EQ(committed.str(),
              text_of(calib::analytic_profile(preset, std::string("pipescope calibrate --analytic ") + preset)))
        << path << ": regenerate with build/pipescope calibrate --analytic " << preset << " --out " << path;
    EXPECT_EQ(load_profile(path).kind, "analytic");
  }
}

// A profile is schema-complete or refused. Every cut at a line boundary and every deleted section is an error
// naming the profile file and what is missing (a profile missing `layers:` is refused).
TEST(ProfileCompleteness, TruncatedOrEditedProfilesAreRefused) {
  const std::string text = text_of(calib::analytic_profile("dgx-a100", "test"));
  ASSERT_NO_THROW(parse_profile(text, "p.yaml"));
  int cuts = 0;
  for (std::size_t at = text.find('\n'); at + 1 < text.size(); at = text.find('\n', at + 1)) {
    const std::string cut = text.substr(0, at + 1);
    try {
      parse_profile(cut, "p.yaml");
      ADD_FAILURE() << "accepted a profile cut after " << cut.size() << " bytes";
    } catch (const ProfileError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("p.yaml", 0), 0u) << e.what();
    }
    cuts++;
  }
  EXPECT_GT(cuts, 10);
  // The links section deleted: named.
  const auto from = text.find("links:\n");
  const auto to = text.find("complete:");
  ASSERT_NE(from, std::string::npos);
  try {
    parse_profile(text.substr(0, from) + text.substr(to), "p.yaml");
    ADD_FAILURE() << "accepted a profile without its links section";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("links: missing: the profile lists section links"), std::string::npos)
        << e.what();
  }
}

// Also the H100's: its profile carries gemm_epilogue_hidden (an A100-style epilogue would make it slower).
TEST(AnalyticProfiles, SameCostsAsThePresetDevice) {
  for (const char* preset : {"dgx-a100", "dgx-h100"}) {
    SCOPED_TRACE(preset);
    Scenario s = default_scenario();
    const int nodes = s.cluster.nodes;
    s.cluster = *cluster_preset(preset);
    s.cluster.nodes = nodes;
    const Scenario p =
        use_profile(s, std::string(PIPESCOPE_SOURCE_DIR) + "/calib/profiles/" + preset + ".analytic.yaml");
    EXPECT_EQ(p.cluster.device.gemm_epilogue_hidden, s.cluster.device.gemm_epilogue_hidden);
    const auto a = make_cost_model(s);  // both with the preset's GPU speed spread (H100)
    const auto b = make_cost_model(p);
    for (OpKind k : {OpKind::Forward, OpKind::Backward})
      for (int stage : {0, 1, 3}) {
        Op op;
        op.kind = k;
        op.stage = op.rank = stage;
        op.tok_end = s.model.seq_len;
        EXPECT_DOUBLE_EQ(a->compute_seconds(op, 1), b->compute_seconds(op, 1));
      }
    EXPECT_DOUBLE_EQ(p.cluster.nic_bw_Bps, s.cluster.nic_bw_Bps);
    EXPECT_DOUBLE_EQ(p.cluster.nvlink_bw_Bps, s.cluster.nvlink_bw_Bps);
  }
  EXPECT_TRUE(load_profile(std::string(PIPESCOPE_SOURCE_DIR) + "/calib/profiles/dgx-h100.analytic.yaml")
                  .device.gemm_epilogue_hidden);
}

}  // namespace
}  // namespace pipescope
