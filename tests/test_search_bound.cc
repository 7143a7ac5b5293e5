// Stage 2's lower bound and the ranking built on it (core/plan/search_bound.h): the bound never exceeds the estimate on
// every candidate of whole searches (every registered schedule kind, slices, split backwards, V-shaped stages,
// blocking sends, overlapped collectives), and the ranking with bounds keeps exactly the best K of the ranking
// that estimates every candidate, while estimating far fewer of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpt3_search.h"
#include "core/model/scenario.h"
#include "core/plan/search.h"
#include "core/plan/search_bound.h"
#include "core/plan/search_estimate.h"

namespace pipescope {
namespace {

const char* kSmall =
    "name: two-nodes\n"
    "model: {preset: gpt3-1b, seq_len: 1024}\n"
    "cluster: {preset: dgx-a100, nodes: 2}\n"
    "parallel: {dp: 2, pp: 4, tp: 2, micro_batch_size: 1, global_batch: 32}\n"
    "schedule: {kind: gpipe}\n";

// Every candidate of each search with its estimate, in structure order.
struct Searched {
  std::string name;
  std::vector<Candidate> c;
  std::vector<double> estimate;
};

// The five searches (the three small ones under the sanitizers): the default scenario's, GPT-3 175B's on 1,024 GPUs
// (the benchmark's) and a small one with the gradient-sync and p2p variants. `estimated`: with every candidate's
// estimate.
std::vector<Scenario> bases() {
  std::vector<Scenario> b = {load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml"),
                             parse_scenario(kGpt3SearchYaml, "<test>")};
  const std::string variants[] = {
      "",
      "training: {distributed_optimizer: true, overlap_grad_reduce: true, overlap_param_gather: true}\n",
      "training: {async_tp_allreduce: true}\nsim: {p2p: blocking}\n",
  };
  for (const std::string& extra : variants) b.push_back(parse_scenario(kSmall + extra, "<test>"));
#ifdef PIPESCOPE_SANITIZED
  // The default search's 1,278 estimates and the 175B one's large DAGs take minutes under the sanitizers; release
  // runs them.
  b.erase(b.begin(), b.begin() + 2);
#endif
  return b;
}

Searched searched(const Scenario& base, bool estimated) {
  Searched s{base.name, enumerate_candidates(base, SearchSpace{}).survivors, {}};
  order_by_structure(s.c);
  Stage2Estimator e;
  if (estimated)
    for (const Candidate& c : s.c) s.estimate.push_back(e.estimate(c.scenario));
  return s;
}

const std::vector<Searched>& all_searches() {
  static const std::vector<Searched> s = [] {
    std::vector<Searched> out;
    for (const Scenario& b : bases()) out.push_back(searched(b, true));
    return out;
  }();
  return s;
}

TEST(SearchBound, NeverAboveTheEstimate) {
  for (const Searched& s : all_searches()) {
    SCOPED_TRACE(s.name);
    ASSERT_GE(s.c.size(), 20u);
    std::size_t bounded = 0;
    double tightest = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < s.c.size(); i++) {
      double b = 0;
      if (!stage2_lower_bound(s.c[i].scenario, b)) continue;
      bounded++;
      EXPECT_GT(b, 0) << s.c[i].label;
      EXPECT_LE(b * (1 - kBoundMargin), s.estimate[i]) << s.c[i].label;
      tightest = std::min(tightest, s.estimate[i] / b);
    }
    // Every candidate of these spaces is keyed (no schedule file, no TeraPipe joint plan, no context parallelism)
    // and bounded, but DualPipe's (its micro-batches take half the stages each: estimated, never bounded).
    std::size_t dual = 0;
    for (const Candidate& c : s.c) dual += c.scenario.schedule.kind == ScheduleKind::DualPipe;
    EXPECT_EQ(bounded + dual, s.c.size());
    EXPECT_LT(tightest, 1.1);  // the bound is close to the estimate somewhere, not a trivial 0
  }
}

// The best K by (estimate, label), as the search ranks them.
std::vector<std::pair<double, std::string>> best(const std::vector<Candidate>& c, const std::vector<double>& s,
                                                 std::size_t k) {
  std::vector<std::pair<double, std::string>> v;
  for (std::size_t i = 0; i < c.size(); i++) v.emplace_back(s[i], c[i].label);
  std::sort(v.begin(), v.end());
  v.resize(std::min(k, v.size()));
  return v;
}

TEST(SearchBound, RankingKeepsTheBestKOfEstimatingAll) {
  for (const Searched& s : all_searches())
    for (int keep : {1, 5, 20}) {
      SCOPED_TRACE(s.name + " K " + std::to_string(keep));
      std::size_t asked = 0;
      Stage2Estimator e;
      const std::vector<Stage2Value> v = rank_stage2(s.c, keep, [&](const std::vector<std::size_t>& idx) {
        EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
        std::vector<Stage2Value> out;
        for (std::size_t i : idx) out.push_back({Stage2Value::How::Estimated, e.estimate(s.c[i].scenario), {}});
        asked += idx.size();
        return out;
      });
      ASSERT_EQ(v.size(), s.c.size());
      std::vector<double> ranked;
      std::size_t estimated = 0;
      for (std::size_t i = 0; i < v.size(); i++) {
        ASSERT_TRUE(v[i].how == Stage2Value::How::Estimated || v[i].how == Stage2Value::How::Bounded);
        if (v[i].how == Stage2Value::How::Estimated) {
          estimated++;
          EXPECT_EQ(v[i].s, s.estimate[i]) << s.c[i].label;
        }
        ranked.push_back(v[i].s);
      }
      EXPECT_EQ(asked, estimated);  // nothing estimated twice
      const auto want = best(s.c, s.estimate, static_cast<std::size_t>(keep));
      EXPECT_EQ(best(s.c, ranked, static_cast<std::size_t>(keep)), want);
      for (std::size_t i = 0; i < v.size(); i++) {
        if (v[i].how == Stage2Value::How::Bounded) {
          EXPECT_GT(v[i].s, want.back().first) << s.c[i].label;
        }
      }
      if (s.name == "gpt3-175b-search") {
        EXPECT_LT(estimated, s.c.size() / 3);  // the bounds rule most out
      }
    }
}

// A failed estimate is reported, never bounded away; without K estimates nothing is bounded out.
TEST(SearchBound, FailuresAreKeptAndTooFewEstimatesBoundNothing) {
#ifdef PIPESCOPE_SANITIZED
  const Searched s = searched(parse_scenario(kSmall, "<test>"), false);
#else
  const Searched s = searched(parse_scenario(kGpt3SearchYaml, "<test>"), false);
#endif
  ASSERT_GE(s.c.size(), 20u);
  const std::vector<Stage2Value> v = rank_stage2(s.c, 20, [&](const std::vector<std::size_t>& idx) {
    std::vector<Stage2Value> out;
    for (std::size_t i : idx) out.push_back({Stage2Value::How::Failed, 0, "no DAG " + std::to_string(i)});
    return out;
  });
  for (std::size_t i = 0; i < v.size(); i++) {
    EXPECT_EQ(v[i].how, Stage2Value::How::Failed) << s.c[i].label;
    EXPECT_EQ(v[i].error, "no DAG " + std::to_string(i));
  }
}

}  // namespace
}  // namespace pipescope
