// Scaling benchmark: one training iteration simulated end to end (scenario, schedule, lowering,
// checks, platform, simulation, report), as `pipescope simulate` does, on clusters of 2,048 to 131,072 GPUs.
//
//  - dense405b/<GPUs>: a dense 405B-class model (hidden 16384, 128 heads, FFN 53248, vocab 128256, seq 8192;
//    128 layers: Llama 3 405B's 126 do not split into pp * v = 32 equal chunks) with tp 8, pp 16, interleaved
//    v = 2, sequence parallelism, recomputation, bf16, on a DGX H100 SuperPOD (rail-optimised, 8 x 400 Gb/s
//    NICs per node); dp = GPUs / 128 and 16 micro-batches per replica (weak scaling: global batch 16 * dp).
//  - megatron1t/dp<d>: scenarios/megatron/1t.yaml with only parallel.dp, cluster.nodes and global_batch scaled
//    (1T at dp 6 to 96, 3,072 to 49,152 GPUs).
//  - deepseekv3/<GPUs>: scenarios/moe/deepseek-v3.yaml (pp 16, ep 64, ZeRO-1 data parallelism, DeepEP) with dp and
//    cluster.nodes scaled: 2,048 GPUs as written (15,360 sequences, 120 per replica) and 16,384 GPUs with about the
//    same global batch (16,384 sequences, 16 per replica: DeepSeek-V3's batch on 8x the GPUs). MoE runs are not
//    folded to one replica, so the whole cluster is simulated.
//
// Each iteration runs in a forked child whose address space is capped (RLIMIT_AS, kCapGB) so that a case that
// would not fit fails instead of exhausting the shared machine. Counters: wall_s (child, end to end),
// peak_rss_MB (child ru_maxrss), activities and activities_per_s (SimGrid activities per second of simulation
// wall time), dag_nodes, gpus, simulated_iteration_s, within_target (the targets: 16,384 GPUs under
// 10 s and 2 GB, 131,072 under 60 s and 8 GB, the 1T row under 3 s; MoE: 2,048 GPUs under 10 s and 2 GB, 16,384
// under 60 s and 8 GB).
//
//   bench_scale                                   all cases (several minutes on a 2-core machine)
//   bench_scale --benchmark_filter=dense405b
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/sim_child.h"
#include "core/model/scenario.h"
#include "core/plan/work_estimate.h"

using namespace pipescope;
using bench::Figures;

namespace {

constexpr double kCapGB = 8.0;

std::string dense405b(int gpus) {
  const int dp = gpus / 128;
  std::ostringstream y;
  y << "name: dense-405b-" << gpus << "\n"
    << "model: {layers: 128, hidden: 16384, heads: 128, ffn_hidden: 53248, vocab: 128256, seq_len: 8192, "
       "tied_embeddings: false}\n"
    << "cluster: {preset: dgx-h100-superpod, nodes: " << gpus / 8 << "}\n"
    << "parallel: {dp: " << dp << ", pp: 16, tp: 8, v: 2, micro_batch_size: 1, global_batch: " << 16 * dp
    << ", sequence_parallel: true}\n"
    << "schedule: {kind: interleaved, scatter_gather: true, recompute: true}\n"
    << "training: {dtype: bf16, flash_attention: true}\n";
  return y.str();
}

// A shipped scenario's text with each (from, to) replaced once (a missing `from` is an error: the file changed).
std::string rescaled(const std::string& file, const std::vector<std::pair<std::string, std::string>>& subs) {
  std::ifstream f(std::string(PIPESCOPE_SOURCE_DIR) + "/" + file);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string t = ss.str();
  for (const auto& [from, to] : subs) {
    const auto at = t.find(from);
    if (at == std::string::npos) throw std::runtime_error(file + ": '" + from + "' not found");
    t.replace(at, from.size(), to);
  }
  return t;
}

// scenarios/megatron/1t.yaml with dp, nodes and the global batch scaled by dp / 6.
std::string megatron1t(int dp) {
  return rescaled("scenarios/megatron/1t.yaml", {{"nodes: 384", "nodes: " + std::to_string(64 * dp)},
                                                 {"dp: 6,", "dp: " + std::to_string(dp) + ","},
                                                 {"global_batch: 3072", "global_batch: " + std::to_string(512 * dp)}});
}

// scenarios/moe/deepseek-v3.yaml at `gpus` GPUs: dp = gpus / 16, `per_replica` sequences per replica.
std::string deepseek_v3(int gpus, int per_replica) {
  return rescaled("scenarios/moe/deepseek-v3.yaml",
                  {{"nodes: 256", "nodes: " + std::to_string(gpus / 8)},
                   {"dp: 128", "dp: " + std::to_string(gpus / 16)},
                   {"global_batch: 15360", "global_batch: " + std::to_string(per_replica * (gpus / 16))}});
}

Figures in_child(const std::string& text) {
  return bench::in_child(
      [&] {
        const auto t0 = std::chrono::steady_clock::now();
        return bench::simulate_scenario(parse_scenario(text, "<bench>"), t0);
      },
      kCapGB);
}

void run_case(benchmark::State& state, const std::string& text, double gpus, double target_s, double target_MB) {
  Figures worst;
  double sim = 0, acts = 0;
  int runs = 0;
  for (auto _ : state) {
    const Figures f = in_child(text);
    if (!f.error.empty()) {
      state.SkipWithError(f.error.c_str());
      return;
    }
    state.SetIterationTime(f.wall_s);
    worst.wall_s = std::max(worst.wall_s, f.wall_s);
    worst.peak_rss_kb = std::max(worst.peak_rss_kb, f.peak_rss_kb);
    worst.iteration_s = f.iteration_s;
    worst.dag_nodes = f.dag_nodes;
    sim += f.sim_wall_s;
    acts += f.activities;
    worst.activities = f.activities;
    runs++;
  }
  if (runs == 0) return;
  const double rss_MB = worst.peak_rss_kb / 1024.0;
  state.counters["gpus"] = gpus;
  state.counters["wall_s"] = worst.wall_s;
  state.counters["peak_rss_MB"] = rss_MB;
  state.counters["activities"] = worst.activities;
  state.counters["activities_per_s"] = sim > 0 ? acts / sim : 0;
  state.counters["dag_nodes"] = worst.dag_nodes;
  state.counters["simulated_iteration_s"] = worst.iteration_s;
  if (target_s > 0) state.counters["within_target"] = worst.wall_s < target_s && rss_MB < target_MB ? 1 : 0;
}

// These cases are over the CLI's default work limits on purpose (core/plan/work_estimate.h); each child is capped here.
[[maybe_unused]] const bool kAllowLarge = (set_allow_large(true), true);

void BM_Dense405B(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const double target_s = gpus == 16384 ? 10 : gpus == 131072 ? 60 : 0;
  const double target_MB = gpus == 16384 ? 2048 : 8192;
  run_case(state, dense405b(gpus), gpus, target_s, target_MB);
}

void BM_Megatron1T(benchmark::State& state) {
  const int dp = static_cast<int>(state.range(0));
  run_case(state, megatron1t(dp), 512.0 * dp, dp == 6 ? 3.0 : 0, 1e9);
}

void BM_DeepSeekV3(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  run_case(state, deepseek_v3(gpus, gpus == 2048 ? 120 : 16), gpus, gpus == 2048 ? 10 : 60, gpus == 2048 ? 2048 : 8192);
}

}  // namespace

BENCHMARK(BM_Dense405B)
    ->Name("dense405b")
    ->ArgName("gpus")
    ->Arg(2048)
    ->Arg(8192)
    ->Arg(16384)
    ->Arg(65536)
    ->Arg(131072)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Megatron1T)
    ->Name("megatron1t")
    ->ArgName("dp")
    ->Arg(6)
    ->Arg(8)
    ->Arg(12)
    ->Arg(24)
    ->Arg(48)
    ->Arg(96)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_DeepSeekV3)
    ->Name("deepseekv3")
    ->ArgName("gpus")
    ->Arg(2048)
    ->Arg(16384)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
