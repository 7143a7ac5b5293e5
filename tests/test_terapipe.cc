// TeraPipe planner (core/plan/terapipe_planner.h) against a brute force over all slicings, the latency formula,
// token-slice dependency rules in the static checker, and the uniform-slicing sweep of the paper's ablation.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/terapipe_planner.h"

namespace pipescope {
namespace {

// Brute force: every composition of U units, T = sum + (K - 1) * max (docs/papers.md#terapipe).
double brute_force_tokens(const SliceTimeTable& t, int K, std::vector<int>* best_slices) {
  const int U = t.units();
  double best = std::numeric_limits<double>::infinity();
  for (unsigned mask = 0; mask < (1u << (U - 1)); mask++) {  // bit i set: a cut after unit i + 1
    std::vector<int> s;
    int start = 0;
    for (int i = 1; i <= U; i++)
      if (i == U || (mask >> (i - 1) & 1u)) s.push_back(i - start), start = i;
    double sum = 0, mx = 0;
    int c = 0;
    for (int l : s) sum += t.at(l, c), mx = std::max(mx, t.at(l, c)), c += l;
    const double T = sum + (K - 1) * mx;
    if (T < best) best = T, *best_slices = s;
  }
  return best;
}

// Brute force of the joint problem: micro-batch size multiset x per-size token slicing (all of a size share
// one slicing), T = sum + (K - 1) * max over used sizes.
double brute_force_joint(const std::vector<SliceTimeTable>& tables, int batch, int K) {
  const int bmax = static_cast<int>(tables.size()), U = tables[0].units();
  // Per size: every (sum, max) pair of its slicings.
  std::vector<std::vector<std::pair<double, double>>> opts(bmax);
  for (int b = 0; b < bmax; b++)
    for (unsigned mask = 0; mask < (1u << (U - 1)); mask++) {
      double sum = 0, mx = 0;
      int start = 0;
      for (int i = 1; i <= U; i++)
        if (i == U || (mask >> (i - 1) & 1u)) {
          const double x = tables[b].at(i - start, start);
          sum += x, mx = std::max(mx, x), start = i;
        }
      opts[b].push_back({sum, mx});
    }
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> count(bmax, 0);
  std::function<void(int, int)> sizes = [&](int b, int left) {
    if (b == bmax) {
      if (left != 0) return;
      std::function<void(int, double, double)> pick = [&](int j, double sum, double mx) {
        if (j == bmax) {
          best = std::min(best, sum + (K - 1) * mx);
          return;
        }
        if (count[j] == 0) return pick(j + 1, sum, mx);
        for (auto [s, m] : opts[j]) pick(j + 1, sum + count[j] * s, std::max(mx, m));
      };
      pick(0, 0, 0);
      return;
    }
    for (int c = 0; c * (b + 1) <= left; c++) count[b] = c, sizes(b + 1, left - c * (b + 1));
    count[b] = 0;
  };
  sizes(0, batch);
  return best;
}

// Random slice-time functions in the shape the paper describes: a flat floor for short slices, a linear part
// and a context term (plus noise so that ties are rare).
SliceTimeTable random_table(std::mt19937& rng, int U, double scale = 1.0) {
  std::uniform_real_distribution<double> u(0, 1);
  const double floor = 1 + 3 * u(rng), a = u(rng), ctx = 0.2 * u(rng), quad = 0.05 * u(rng);
  std::vector<double> noise(U * U + 1);
  for (auto& x : noise) x = 0.1 * u(rng);
  return SliceTimeTable(U, [&](int l, int c) {
    return scale * (std::max(floor, a * l) + ctx * l * c + quad * l * l + noise[l * U + c]);
  });
}

TEST(TerapipePlanner, TokenDpMatchesBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; trial++) {
    const int U = 1 + trial % 12, K = 1 + trial % 9;
    const SliceTimeTable t = random_table(rng, U);
    std::vector<int> bf_slices;
    const double bf = brute_force_tokens(t, K, &bf_slices);
    for (bool linear : {false, true}) {
      PlannerOptions o;
      o.grain = 1;
      o.linear_scan = linear;
      const SlicingPlan p = plan_tokens(t, K, o);
      EXPECT_NEAR(p.total_s, bf, 1e-9 * bf) << "U " << U << " K " << K << " linear " << linear;
      int sum = 0;
      for (int l : p.groups.at(0).slice_tokens) sum += l;
      EXPECT_EQ(sum, U);
    }
  }
}

TEST(TerapipePlanner, JointDpMatchesBruteForceAndSingleSequenceEqualsTokenDp) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; trial++) {
    const int U = 3 + trial % 5, K = 2 + trial % 6, batch = 1 + trial % 4, bmax = 1 + trial % 3;
    std::vector<SliceTimeTable> tables;
    for (int b = 1; b <= bmax; b++) tables.push_back(random_table(rng, U, 0.7 + 0.5 * b));
    PlannerOptions o;
    o.grain = 1;
    const SlicingPlan p = plan_joint(tables, batch, K, o);
    EXPECT_NEAR(p.total_s, brute_force_joint(tables, batch, K), 1e-9 * p.total_s) << "trial " << trial;
    int seqs = 0;
    for (const auto& g : p.groups) seqs += g.b * g.count;
    EXPECT_EQ(seqs, batch);
    const SlicingPlan single = plan_joint(tables, 1, K, o);
    EXPECT_NEAR(single.total_s, plan_tokens(tables[0], K, o).total_s, 1e-12);
  }
}

TEST(TerapipePlanner, AffineCostGivesNearUniformSplit) {
  // t = alpha + beta * l, no context: the optimum is a near-uniform split (docs/papers.md#terapipe).
  const int U = 24, K = 8;
  const SliceTimeTable t(U, [](int l, int) { return 3.0 + 1.0 * l; });
  PlannerOptions o;
  o.grain = 1;
  const SlicingPlan p = plan_tokens(t, K, o);
  double best_uniform = std::numeric_limits<double>::infinity();
  for (int k = 1; k <= U; k++) {
    const int hi = (U + k - 1) / k;  // slices of hi or hi - 1 units
    best_uniform = std::min(best_uniform, k * 3.0 + U + (K - 1) * (3.0 + hi));
  }
  EXPECT_NEAR(p.total_s, best_uniform, 1e-9);
  const auto& s = p.groups.at(0).slice_tokens;
  EXPECT_LE(*std::max_element(s.begin(), s.end()) - *std::min_element(s.begin(), s.end()), 1);
}

TEST(TerapipePlanner, ContextCostPutsLongSlicesFirstAndEpsilonBound) {
  const int U = 32, K = 16;
  const SliceTimeTable t(U, [](int l, int c) { return 2.0 + l + 0.05 * l * c; });
  PlannerOptions o;
  o.grain = 8;
  const SlicingPlan p = plan_tokens(t, K, o);
  const auto& s = p.groups.at(0).slice_tokens;
  ASSERT_GE(s.size(), 2u);
  EXPECT_GT(s.front(), s.back());
  for (int l : s) EXPECT_EQ(l % 8, 0);
  PlannerOptions eps = o;
  eps.linear_scan = true;
  eps.epsilon_s = 0.5;
  const SlicingPlan pe = plan_tokens(t, K, eps);
  EXPECT_GE(pe.total_s, p.total_s - 1e-9);
  EXPECT_LE(pe.total_s, p.total_s + K * eps.epsilon_s);
  EXPECT_LT(p.evaluated, p.candidates);
}

TEST(TerapipePlanner, SchemeTextUsesPaperNotation) {
  EXPECT_EQ(slices_text({776, 640, 632}), "[776, 640, 632]");
  std::vector<int> s(26, 64);
  s.insert(s.end(), 6, 56);
  s.push_back(48);
  EXPECT_EQ(slices_text(s), "[64] * 26 + [56] * 6 + [48]");
  SlicingPlan p;
  p.groups = {{1, 16, {776, 640, 632}}};
  EXPECT_EQ(scheme_text(p), "[(1, [776, 640, 632])] * 16");
}

TEST(TerapipePlanner, RejectsBadInput) {
  const SliceTimeTable t(4, [](int l, int) { return 1.0 * l; });
  PlannerOptions o;
  EXPECT_THROW(plan_tokens(t, 0, o), std::invalid_argument);
  EXPECT_THROW(plan_joint({}, 1, 2, o), std::invalid_argument);
  EXPECT_THROW(SliceTimeTable(3, [](int, int) { return -1.0; }), std::invalid_argument);
  EXPECT_THROW(SliceTimeTable(3, [](int, int) { return std::nan(""); }), std::invalid_argument);
}

Scenario setting(int n) {
  return load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/terapipe/setting-" + std::to_string(n) +
                       ".yaml");
}

TEST(TerapipeScenario, UniformSweepExtremesBehaveAsThePaperSays) {
  // Setting (9), GPT3-175B, K = 96: one slice leaves the pipeline mostly idle (bubbles); 2048 one-token slices
  // leave the GPU under-used (per-slice fixed cost). Both are far worse than the DP plan, which has many slices.
  const Scenario s = setting(9);
  const ScenarioSliceModel m = scenario_slice_model(s);
  const SlicingPlan p = plan_scenario(s, PlannerOptions{}, 1);
  auto uniform = [&](int k) {
    MicroBatchGroup g{1, m.batch, std::vector<int>(k, m.seq_len / k)};
    double sum = 0, mx = 0;
    const double T = scheme_seconds(m.t, {g}, m.K, m.fixed_s, &sum, &mx);
    return std::array<double, 3>{T, sum, mx};
  };
  const auto one = uniform(1), many = uniform(m.seq_len);
  EXPECT_GT(one[0], 2.0 * p.total_s);
  EXPECT_GT((m.K - 1) * one[2], one[1]);  // bubbles dominate
  EXPECT_GT(many[0], 2.0 * p.total_s);
  EXPECT_GT(many[1], 5.0 * p.sum_s);  // per-slice fixed cost dominates
  EXPECT_GT(p.slices_per_sequence(), 4);
  // The DP plan is at least as good as every uniform split under the same model.
  for (int k = 1; k <= 256; k *= 2) EXPECT_GE(uniform(k)[0], p.total_s - 1e-12) << k;
}

TEST(TerapipeScenario, SlicedScheduleHasTheDependencyRulesAndPassesTheChecker) {
  Scenario s = setting(1);
  const Schedule sched = make_schedule(s);
  ASSERT_GT(sched.slices(0), 1);
  // F(mb, i, stage) needs F(mb, i, stage - 1) and F(mb, i - 1, stage); B needs F, B(stage + 1), B(i + 1).
  const OpKey f{OpKind::Forward, 3, 2, 1};
  auto deps = op_dependencies(sched, f);
  EXPECT_NE(std::find(deps.begin(), deps.end(), OpKey{OpKind::Forward, 2, 2, 1}), deps.end());
  EXPECT_NE(std::find(deps.begin(), deps.end(), OpKey{OpKind::Forward, 3, 2, 0}), deps.end());
  const OpKey b{OpKind::Backward, 3, 2, 0};
  deps = op_dependencies(sched, b);
  EXPECT_NE(std::find(deps.begin(), deps.end(), OpKey{OpKind::Backward, 4, 2, 0}), deps.end());
  EXPECT_NE(std::find(deps.begin(), deps.end(), OpKey{OpKind::Backward, 3, 2, 1}), deps.end());
  EXPECT_NE(std::find(deps.begin(), deps.end(), OpKey{OpKind::Forward, 3, 2, 0}), deps.end());
  // The planned schedule is accepted; the same schedule with two backward slices swapped on a rank is not.
  auto prep = prepare(s);
  EXPECT_NO_THROW(check(prep->lowered, prep->placement));
  auto& r0 = prep->lowered.schedule.per_rank[0];
  auto first_b = std::find_if(r0.begin(), r0.end(), [](const Op& o) { return o.kind == OpKind::Backward; });
  ASSERT_NE(first_b, r0.end());
  std::iter_swap(first_b, first_b + 1);  // slice i - 1's backward before slice i's
  EXPECT_THROW(check(prep->lowered, prep->placement), CheckError);
}

}  // namespace
}  // namespace pipescope
