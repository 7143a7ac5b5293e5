// The memory model on shipped scenarios: the live-bytes walk alone (what searches run) against the walk with the
// caching-allocator replay (what `simulate` and `repro seq1f1b` run, core/memory/caching_allocator.h), per scenario.
//
//   bench_memory                     all cases
//   bench_memory --benchmark_filter=seq1f1b
#include <benchmark/benchmark.h>

#include <string>

#include "core/ir/schedule.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

void BM_MemoryReport(benchmark::State& state, const char* file) {
  const Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/" + file);
  const Schedule sched = make_schedule(s);
  const AllocatorReplay replay = state.range(0) ? AllocatorReplay::On : AllocatorReplay::Off;
  double reserved = 0, peak = 0;
  for (auto _ : state) {
    const MemoryReport rep = memory_report(s, sched, replay);
    benchmark::DoNotOptimize(rep.ranks.data());
    reserved = rep.ranks.at(0).reserved_peak_bytes;
    peak = rep.ranks.at(0).peak_bytes;
  }
  std::size_t ops = 0;
  for (const auto& ops_of_rank : sched.per_rank) ops += ops_of_rank.size();
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["rank0_peak_GB"] = peak / 1e9;
  state.counters["rank0_reserved_GB"] = reserved / 1e9;
}

BENCHMARK_CAPTURE(BM_MemoryReport, megatron_1t, "scenarios/megatron/1t.yaml")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MemoryReport, seq1f1b_30b_s65536_m16, "scenarios/seq1f1b/30b-s65536-m16-seq1f1b.yaml")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MemoryReport, default_scenario, "scenarios/default.yaml")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pipescope

BENCHMARK_MAIN();
