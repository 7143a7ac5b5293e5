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

// A run that fills the device: 1,600 layers over 8 ranks in 200 chunks each. Once the cache holds the whole device,
// every cache miss releases the wholly free segments first (core/memory/caching_allocator.h).
void BM_MemoryReportFullDevice(benchmark::State& state) {
  const Scenario s = parse_scenario(
      "model: {preset: gpt3-1b, layers: 1600, seq_len: 512}\n"
      "cluster: {preset: dgx-a100, nodes: 1}\n"
      "parallel: {dp: 1, pp: 8, tp: 1, v: 200, micro_batch_size: 1, global_batch: 16}\n"
      "schedule: {kind: interleaved}\n",
      "bench-full-device.yaml");
  const Schedule sched = make_schedule(s);
  bool failed = false;
  for (auto _ : state) {
    const MemoryReport rep = memory_report(s, sched, AllocatorReplay::On);
    benchmark::DoNotOptimize(rep.ranks.data());
    failed = rep.ranks.at(0).allocator_failed;
  }
  state.counters["rank0_out_of_memory"] = failed ? 1 : 0;
}
BENCHMARK(BM_MemoryReportFullDevice)->Unit(benchmark::kMillisecond);

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
