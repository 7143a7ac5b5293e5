// Simulator throughput: one 1F1B iteration of a 48-node x 8-GPU cluster, pipeline 16 x data-parallel 24,
// 64 micro-batches, ring all-reduce of the gradients, optimizer step (the large case of docs/simulator.md).
// Scenario cases: `pipescope simulate` of a scenario file end to end (load, schedule, lowering, checks,
// simulation, report), e.g. the 1T row of the Megatron weak-scaling table (3072 GPUs; target: under 10 s wall
// and 1 GB peak RSS, reported as the within_target counter).
//
// SimGrid allows one Engine per process, so every benchmark iteration forks a child that builds the
// schedule (generators, lowering, checks), simulates it and reports back through a pipe. The iteration
// time is the child's simulation wall time (SimResult::wall_s: releasing the DAG through SimGrid, i.e.
// what "activities per second" measures); schedule construction and platform building are reported as
// child_wall_s. peak_rss_MB is the child's ru_maxrss.
//
//   bench_sim                       all cases
//   bench_sim --benchmark_filter=timer
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "bench/sim_child.h"
#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/work_estimate.h"
#include "sim/engine.h"
#include "sim/report.h"

using namespace pipescope;
using bench::Figures;

namespace {

enum class Fabric { P3CubeMesh, NvSwitchStar };

ClusterSpec cluster(Fabric f) {
  ClusterSpec c;
  c.nodes = 48;
  c.gpus_per_node = 8;
  if (f == Fabric::P3CubeMesh) {  // AWS p3.16xlarge (docs/calibration.md): NVLink2 cube mesh, 25 Gbps NIC
    c.preset = "p3.16xlarge-like";
    c.fabric = IntraNodeFabric::CubeMesh;
    c.nvlink_bw_Bps = 25e9;
    c.pcie_bw_Bps = 10e9;
    c.pcie_latency_s = 2e-6;
    c.nic_bw_Bps = 3.125e9;
  } else {  // the prototype's large preset: NVSwitch star, 100 Gb/s NIC
    c.preset = "nvswitch-star";
    c.fabric = IntraNodeFabric::NVSwitch;
    c.nvlink_bw_Bps = 150e9;
    c.nic_bw_Bps = 12.5e9;
  }
  c.nvlink_latency_s = 1e-6;
  c.nic_latency_s = 5e-6;
  return c;
}

Figures simulate_once(Fabric fabric, const char* compute) {
  const auto t0 = std::chrono::steady_clock::now();
  const ClusterSpec c = cluster(fabric);
  const int p = 16, dp = 24, m = 64;
  ConstantCosts cc;
  cc.forward_s = 40e-3;
  cc.backward_s = 80e-3;
  cc.p2p_bytes = 2048.0 * 8192 * 2;  // seq 2048 x hidden 8192 x fp16
  cc.grad_bytes = 2.5e9;
  cc.optimizer_s = 5e-3;
  const ConstantCostModel cost(cc);
  const Schedule s = make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, dp, 1, cost);
  const Placement pl = make_placement("megatron", dp, p, 1, c);
  const CheckedSchedule cs = check(ls, pl);
  sim::EngineOptions o;
  o.collectives = "ring";
  o.compute = compute;
  const sim::SimResult r = sim::simulate(c, cs, o);
  return bench::figures_of(r, r.iteration_s, t0);
}

// `pipescope simulate FILE` in process: what the command does, timed from loading the file to the report.
Figures simulate_scenario(const char* file) {
  const auto t0 = std::chrono::steady_clock::now();
  return bench::simulate_scenario(load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/" + file), t0);
}

Figures run_child(Fabric fabric, const char* compute) {
  return bench::in_child([&] { return simulate_once(fabric, compute); });
}

void BM_Sim1F1B_48x8(benchmark::State& state, Fabric fabric, const char* compute) {
  Figures sum;
  int runs = 0;
  for (auto _ : state) {
    const Figures f = run_child(fabric, compute);
    if (!f.error.empty()) {
      state.SkipWithError(f.error.c_str());
      return;
    }
    state.SetIterationTime(f.sim_wall_s);
    sum.sim_wall_s += f.sim_wall_s;
    sum.wall_s += f.wall_s;
    sum.peak_rss_kb = std::max(sum.peak_rss_kb, f.peak_rss_kb);
    sum.activities = f.activities;
    sum.dag_nodes = f.dag_nodes;
    sum.iteration_s = f.iteration_s;
    runs++;
  }
  if (runs == 0) return;
  state.counters["activities"] = sum.activities;
  state.counters["dag_nodes"] = sum.dag_nodes;
  state.counters["activities_per_s"] = sum.activities * runs / sum.sim_wall_s;
  state.counters["sim_wall_s"] = sum.sim_wall_s / runs;
  state.counters["child_wall_s"] = sum.wall_s / runs;
  state.counters["peak_rss_MB"] = sum.peak_rss_kb / 1024.0;
  state.counters["simulated_iteration_s"] = sum.iteration_s;
}

// Whole command, end to end: the iteration time is the child's wall time from loading the scenario to the
// report. within_target = 1 when it stays under the given wall time and peak RSS.
void BM_SimScenario(benchmark::State& state, const char* file, double target_s, double target_MB) {
  double wall = 0, sim = 0, rss_kb = 0;
  Figures last;
  int runs = 0;
  for (auto _ : state) {
    const Figures f = bench::in_child([&] { return simulate_scenario(file); });
    if (!f.error.empty()) {
      state.SkipWithError(f.error.c_str());
      return;
    }
    state.SetIterationTime(f.wall_s);
    wall = std::max(wall, f.wall_s);
    sim += f.sim_wall_s;
    rss_kb = std::max(rss_kb, f.peak_rss_kb);
    last = f;
    runs++;
  }
  if (runs == 0) return;
  state.counters["wall_s_max"] = wall;
  state.counters["sim_wall_s"] = sim / runs;
  state.counters["peak_rss_MB"] = rss_kb / 1024.0;
  state.counters["activities"] = last.activities;
  state.counters["dag_nodes"] = last.dag_nodes;
  state.counters["simulated_iteration_s"] = last.iteration_s;
  state.counters["within_target"] = wall < target_s && rss_kb / 1024.0 < target_MB ? 1 : 0;
}

// The work estimate (core/plan/work_estimate.h: what refuses a run before it starts) against the run it estimates:
// the `pipescope simulate FILE --allow-large` process itself (exec'd, output discarded), its wall time and peak RSS
// (wait4) over the estimate's. within_2x = 1 when both ratios lie in [1/2, 2].
struct ProcessFigures {
  double wall_s = 0, peak_rss_bytes = 0;
  int status = 0;
};
ProcessFigures run_cli(const std::string& file) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) _exit(127);
    execl(PIPESCOPE_BINARY, PIPESCOPE_BINARY, "simulate", file.c_str(), "--allow-large", static_cast<char*>(nullptr));
    _exit(127);
  }
  ProcessFigures f;
  rusage ru{};
  if (wait4(pid, &f.status, 0, &ru) != pid) throw std::runtime_error("wait4 failed");
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.peak_rss_bytes = static_cast<double>(ru.ru_maxrss) * 1024.0;
  return f;
}

void BM_WorkEstimate(benchmark::State& state, const char* file) {
  const std::string path = std::string(PIPESCOPE_SOURCE_DIR) + "/" + file;
  const WorkEstimate w = estimate_work(load_scenario(path));
  ProcessFigures f;
  for (auto _ : state) {
    f = run_cli(path);
    if (!WIFEXITED(f.status) || WEXITSTATUS(f.status) != 0) {
      state.SkipWithError("pipescope simulate failed");
      return;
    }
    state.SetIterationTime(f.wall_s);
  }
  const double time_ratio = f.wall_s / w.command_seconds(), memory_ratio = f.peak_rss_bytes / w.bytes;
  state.counters["ops"] = w.ops;
  state.counters["estimate_s"] = w.command_seconds();
  state.counters["wall_s"] = f.wall_s;
  state.counters["time_ratio"] = time_ratio;
  state.counters["estimate_MB"] = w.bytes / 1e6;
  state.counters["peak_rss_MB"] = f.peak_rss_bytes / 1e6;
  state.counters["memory_ratio"] = memory_ratio;
  auto within = [](double r) { return r >= 0.5 && r <= 2.0; };
  state.counters["within_2x"] = within(time_ratio) && within(memory_ratio) ? 1 : 0;
}

#define WORK_ESTIMATE_CASE(name, file) \
  BENCHMARK_CAPTURE(BM_WorkEstimate, name, file)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond)
WORK_ESTIMATE_CASE(default_scenario, "scenarios/default.yaml");
WORK_ESTIMATE_CASE(interleaved_small, "scenarios/interleaved-small.yaml");
WORK_ESTIMATE_CASE(llama3_70b, "scenarios/llama3-70b.yaml");
WORK_ESTIMATE_CASE(seq1f1b_2_7b, "scenarios/seq1f1b-2.7b.yaml");
WORK_ESTIMATE_CASE(terapipe_setting_9, "scenarios/terapipe/setting-9.yaml");
WORK_ESTIMATE_CASE(megatron_39_1b, "scenarios/megatron/39.1b.yaml");
WORK_ESTIMATE_CASE(megatron_529_6b, "scenarios/megatron/529.6b.yaml");
WORK_ESTIMATE_CASE(megatron_1t, "scenarios/megatron/1t.yaml");
WORK_ESTIMATE_CASE(qwen3_235b, "scenarios/moe/qwen3-235b-a22b.yaml");
WORK_ESTIMATE_CASE(qwen3_30b_dualpipe, "scenarios/moe/qwen3-30b-a3b-dualpipe.yaml");
WORK_ESTIMATE_CASE(deepseek_v3, "scenarios/moe/deepseek-v3.yaml");

BENCHMARK_CAPTURE(BM_SimScenario, megatron_1t, "scenarios/megatron/1t.yaml", 10.0, 1024.0)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_Sim1F1B_48x8, p3_cubemesh_timer, Fabric::P3CubeMesh, "timer")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sim1F1B_48x8, p3_cubemesh_exec, Fabric::P3CubeMesh, "exec")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sim1F1B_48x8, nvswitch_star_timer, Fabric::NvSwitchStar, "timer")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sim1F1B_48x8, nvswitch_star_exec, Fabric::NvSwitchStar, "exec")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
