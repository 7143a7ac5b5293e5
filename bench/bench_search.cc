// `pipescope search` benchmarks: stage-2 estimates per second on a 1,024-GPU cluster, and the full
// search (prune, estimate, simulate the best K = 20) of GPT-3 175B on 128 DGX A100 nodes, global batch 1,536,
// sequence 2,048, at -j 1 and -j 2 (`mpirun -n 2 pipescope search` is timed from the command line: bench/README.md).
// Stage 2 both ways: every survivor estimated (BM_Stage2Estimates), and ranked as the search ranks them, with lower
// bounds (BM_Stage2Ranking). Targets (a benchmark, not a timed test): >= 2,000 configurations/s on one core;
// the full search under 60 s on 2 cores. Timing is noisy on a shared machine: quote medians with `uptime`.
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench/gpt3_search.h"
#include "core/model/scenario.h"
#include "core/plan/search.h"
#include "core/plan/search_bound.h"
#include "core/plan/search_estimate.h"
#include "sim/search_run.h"

namespace pipescope {
namespace {

Scenario gpt3() { return parse_scenario(kGpt3SearchYaml, "<bench_search>"); }

// Stage 1 alone: configurations checked and fitted to memory per second.
void BM_Stage1(benchmark::State& state) {
  const Scenario base = gpt3();
  std::size_t n = 0, fit = 0;
  for (auto _ : state) {
    const Stage1 s = enumerate_candidates(base, SearchSpace{});
    n += s.enumerated;
    fit = s.survivors.size();
  }
  state.counters["configs_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
  state.counters["fit"] = static_cast<double>(fit);
}

// Stage 2 on one core: the critical-path estimate of every configuration that passes stage 1. Arg 0: without the
// distributed-optimizer dimension (the space before it was added, to compare with older builds); 1: the whole space.
void BM_Stage2Estimates(benchmark::State& state) {
  const Scenario base = gpt3();
  SearchSpace space;
  if (state.range(0) == 0) space.distributed_optimizer = {false};
  Stage1 s = enumerate_candidates(base, space);
  order_by_structure(s.survivors);  // as the search does
  std::size_t n = 0, built = 0;
  double sum = 0;
  for (auto _ : state) {
    Stage2Estimator e;  // as one search's worker: a fresh structure cache per pass over the candidates
    for (const Candidate& c : s.survivors) sum += e.estimate(c.scenario);
    n += s.survivors.size();
    built = e.structures_built();
  }
  state.counters["dags_built"] = static_cast<double>(built);
  benchmark::DoNotOptimize(sum);
  state.counters["configs_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
  state.counters["configs"] = static_cast<double>(s.survivors.size());
}

// Stage 2 as the search runs it on one core (core/plan/search_bound.h): every survivor's lower bound, the K = 20 of
// lowest bound estimated, then only the candidates whose bound can reach the best 20; the rest are bounded out. The
// same best 20 as BM_Stage2Estimates' (tests/test_search_bound.cc). Arg as BM_Stage2Estimates.
void BM_Stage2Ranking(benchmark::State& state) {
  const Scenario base = gpt3();
  SearchSpace space;
  if (state.range(0) == 0) space.distributed_optimizer = {false};
  Stage1 s = enumerate_candidates(base, space);
  order_by_structure(s.survivors);
  std::size_t n = 0, estimated = 0, built = 0;
  for (auto _ : state) {
    Stage2Estimator e;
    estimated = 0;
    const auto v = rank_stage2(s.survivors, 20, [&](const std::vector<std::size_t>& idx) {
      std::vector<Stage2Value> out;
      for (std::size_t i : idx) out.push_back({Stage2Value::How::Estimated, e.estimate(s.survivors[i].scenario), {}});
      estimated += idx.size();
      return out;
    });
    benchmark::DoNotOptimize(v.data());
    n += s.survivors.size();
    built = e.structures_built();
  }
  state.counters["configs_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
  state.counters["configs"] = static_cast<double>(s.survivors.size());
  state.counters["estimated"] = static_cast<double>(estimated);
  state.counters["dags_built"] = static_cast<double>(built);
}

// The whole search, K = 20, with `jobs` worker processes; the wall time is the iteration time.
void BM_FullSearch(benchmark::State& state) {
  const Scenario base = gpt3();
  sim::SearchOptions o;
  o.keep = 20;
  o.jobs = static_cast<int>(state.range(0));
  double best = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const sim::SearchResult r = sim::run_search(base, o);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best = r.rows.empty() ? 0 : r.rows.front().result.tokens_per_s;
    state.counters["simulated"] = static_cast<double>(r.rows.size());
    state.counters["estimated"] = static_cast<double>(r.estimated);
  }
  state.counters["best_tokens_per_s"] = best;
}

BENCHMARK(BM_Stage1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stage2Estimates)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stage2Ranking)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FullSearch)->Arg(1)->Arg(2)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace pipescope

BENCHMARK_MAIN();
