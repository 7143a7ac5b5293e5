// GPU speed variation (core/cost/gpu_variation.h): seeded per-GPU draws with the documented spread, each pipeline
// rank at its slowest GPU over every replica, a job that never gets faster as it widens, the cost model that
// scales compute only, and the scenario keys with their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/gpu_variation.h"
#include "core/cost/scenario_cost.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

Scenario gpt3(int dp, double sigma) {
  Scenario s = parse_scenario("model: {preset: gpt3-1b}\ncluster: {preset: dgx-h100, nodes: " + std::to_string(dp * 2) +
                                  "}\nparallel: {dp: " + std::to_string(dp) +
                                  ", pp: 4, tp: 4, global_batch: " + std::to_string(dp * 8) + "}\n",
                              "t.yaml");
  s.cluster.gpu_speed_sigma = sigma;
  return s;
}

TEST(GpuVariation, DrawsHaveTheDocumentedSpreadAndRepeat) {
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int g = 0; g < n; g++) {
    const double x = gpu_speed(0.01, 1, g);
    sum += x;
    sq += x * x;
    ASSERT_GE(x, 0.96);
    ASSERT_LE(x, 1.04);
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 1.0, 1e-4);
  EXPECT_NEAR(sd, 0.01, 2e-4);
  EXPECT_EQ(gpu_speed(0.01, 1, 77), gpu_speed(0.01, 1, 77));
  EXPECT_NE(gpu_speed(0.01, 1, 77), gpu_speed(0.01, 2, 77));
  EXPECT_EQ(gpu_speed(0.0, 1, 77), 1.0);
}

// Each pipeline rank waits for the slowest of its GPUs over every replica (tp 4 x dp lanes), and a wider job holds
// the narrower one's GPUs (the same draws per GPU index), so no rank gets faster as dp grows (weak scaling).
TEST(GpuVariation, EachRankAtItsSlowestGpuAndNeverFasterWhenWider) {
  std::vector<double> before(4, 1.0);
  for (int dp : {1, 2, 4, 8, 16, 32}) {
    SCOPED_TRACE(dp);
    const Scenario s = gpt3(dp, 0.01);
    const std::vector<double> f = rank_slowdowns(s);
    ASSERT_EQ(f.size(), 4u);
    double worst = 0;
    for (int r = 0; r < 4; r++) {
      EXPECT_GE(f[r], 1.0);
      worst = std::max(worst, f[r]);
    }
    EXPECT_GE(worst, *std::max_element(before.begin(), before.end()));
    before = f;
  }
  EXPECT_EQ(rank_slowdowns(gpt3(4, 0.0)), std::vector<double>(4, 1.0));
}

TEST(GpuVariation, CostModelScalesComputeOnly) {
  const Scenario s = gpt3(4, 0.01);
  const auto varied = make_cost_model(s);
  const AnalyticCostModel plain(s);
  const std::vector<double> f = rank_slowdowns(s);
  for (int r = 0; r < 4; r++) {
    Op op;
    op.kind = OpKind::Backward;
    op.rank = r;
    op.stage = r;
    op.tok_end = s.model.seq_len;
    EXPECT_DOUBLE_EQ(varied->compute_seconds(op, 1), plain.compute_seconds(op, 1) * f[r]);
    EXPECT_DOUBLE_EQ(varied->optimizer_seconds(r), plain.optimizer_seconds(r) * f[r]);
    EXPECT_DOUBLE_EQ(varied->p2p_bytes(op, 1), plain.p2p_bytes(op, 1));
    EXPECT_DOUBLE_EQ(varied->tp_allreduce_bytes(op, 1), plain.tp_allreduce_bytes(op, 1));
    EXPECT_DOUBLE_EQ(varied->grad_bytes(r), plain.grad_bytes(r));
  }
  EXPECT_EQ(describe_variation(gpt3(4, 0.0)), "");
  EXPECT_NE(describe_variation(s).find("sigma 1% (seed 1)"), std::string::npos);
}

TEST(GpuVariation, PresetsAndScenarioKeys) {
  EXPECT_DOUBLE_EQ(cluster_preset("dgx-h100")->gpu_speed_sigma, 0.01);
  EXPECT_DOUBLE_EQ(cluster_preset("dgx-h100-superpod")->gpu_speed_sigma, 0.01);
  EXPECT_DOUBLE_EQ(cluster_preset("dgx-a100")->gpu_speed_sigma, 0.0);
  const std::string rest = "parallel: {dp: 1, pp: 2, tp: 4, global_batch: 4}\n";
  const Scenario s = parse_scenario(
      "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, gpu_speed_sigma_pct: 2.5, variation_seed: 7}\n" + rest,
      "t.yaml");
  EXPECT_DOUBLE_EQ(s.cluster.gpu_speed_sigma, 0.025);
  EXPECT_EQ(s.cluster.variation_seed, 7u);
  auto error_of = [&](const std::string& cluster) {
    try {
      parse_scenario("model: {preset: gpt3-1b}\ncluster: " + cluster + "\n" + rest, "t.yaml");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("{preset: dgx-a100, gpu_speed_sigma_pct: 30}").find("t.yaml:2:"), std::string::npos);
  EXPECT_NE(error_of("{preset: dgx-a100, gpu_speed_sigma_pct: 30}").find("cluster.gpu_speed_sigma_pct"),
            std::string::npos);
  EXPECT_NE(error_of("{preset: dgx-a100, gpu_speed_sigma_pct: -1}").find("cluster.gpu_speed_sigma_pct"),
            std::string::npos);
  EXPECT_NE(error_of("{preset: dgx-a100, variation_seed: -3}").find("cluster.variation_seed"), std::string::npos);
}

}  // namespace
}  // namespace pipescope
