// TeraPipe planner speed: exact bisection vs the paper's straightforward Algorithm 1 scan at
// epsilon = 0.1 ms, on setting (9)'s slice-time model (GPT3-175B, K = 96). The t(l, c) tables are built once
// outside the timed region; the DP search is timed.
#include <benchmark/benchmark.h>

#include <map>
#include <string>

#include "core/model/scenario.h"
#include "core/plan/terapipe_planner.h"

namespace {

using namespace pipescope;

const SliceTimeTable& table(int seq_len, int grain) {
  static std::map<std::pair<int, int>, SliceTimeTable> cache;
  auto it = cache.find({seq_len, grain});
  if (it != cache.end()) return it->second;
  Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/terapipe/setting-9.yaml");
  s.model.seq_len = seq_len;
  const ScenarioSliceModel m = scenario_slice_model(s);
  return cache.emplace(std::make_pair(seq_len, grain), slice_tables(m, grain, 1).front()).first->second;
}

void BM_Plan(benchmark::State& st) {
  const int L = static_cast<int>(st.range(0)), grain = static_cast<int>(st.range(1));
  const bool linear = st.range(2) != 0;
  const SliceTimeTable& t = table(L, grain);
  PlannerOptions o;
  o.grain = grain;
  o.linear_scan = linear;
  o.epsilon_s = linear ? 1e-4 : 0.0;
  SlicingPlan p;
  for (auto _ : st) {
    p = plan_tokens(t, 96, o);
    benchmark::DoNotOptimize(p.total_s);
  }
  st.counters["slices"] = p.slices_per_sequence();
  st.counters["dp_runs"] = p.evaluated;
  st.counters["candidates"] = p.candidates;
  st.SetLabel(linear ? "algorithm1-eps0.1ms" : "exact");
}

// Args: L, grain, linear scan.
BENCHMARK(BM_Plan)->Args({2048, 8, 0})->Args({2048, 8, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Plan)->Args({2048, 1, 0})->Args({2048, 1, 1})->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Plan)->Args({8192, 8, 0})->Args({8192, 8, 1})->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
