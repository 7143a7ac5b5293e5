// `pipescope plan SCENARIO [--grain N] [--max-micro-batch N] [--epsilon-ms X] [--linear-scan] [--simulate]`:
// TeraPipe's optimal slicing for a scenario (core/plan/terapipe_planner.h), its predicted iteration time, the GPipe
// baseline and the uniform-slicing curve under the same slice-time model; with --simulate, the simulated
// iteration time of the DP's scheme and of each uniform slicing next to them.
// `pipescope plan SCENARIO --max-batch [--memory-GB X]`: the largest batch whose GPipe baseline (micro-batches of
// one sequence, whole mini-batch in flight) fits the device (core/memory/memory_model.h max_batch_gpipe), the way
// TeraPipe chose B (docs/papers.md#terapipe): per replica (what the planner slices) and global (Table 1's B);
// printed by sim/repro_terapipe.h, as Seq1F1B scenarios' split points by sim/repro_seq1f1b.h.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"
#include "core/plan/terapipe_planner.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"
#include "sim/repro.h"
#include "sim/repro_seq1f1b.h"
#include "sim/repro_terapipe.h"

namespace pipescope::cli {
namespace {

struct PlanOptions {
  std::string scenario;
  int grain = 8;
  int max_micro_batch = 1;
  double epsilon_ms = 0;
  bool linear_scan = false;
  bool max_batch = false;
  double memory_GB = 0;  // 0 = the device's memory
  bool simulate = false;
  std::string json;  // --json FILE ("-": stdout, the table then goes to stderr)
};

int run_plan(const PlanOptions& o) {
  const Scenario s = load_scenario(o.scenario);
  if (o.json != "-") check_output_paths({{"--json", o.json}});
  if (o.memory_GB < 0) throw InputError("--memory-GB must be >= 0");
  const bool seq1f1b = schedule_entry(s.schedule.kind).traits.slicing == SlicePlan::Seq1F1B;
  if (o.simulate && (o.max_batch || seq1f1b))
    throw InputError(std::string("--simulate applies to TeraPipe slicing plans, not to ") +
                     (o.max_batch ? "--max-batch" : "Seq1F1B scenarios (simulate them with `pipescope simulate`)"));
  if (!o.json.empty() && (o.max_batch || seq1f1b))
    throw InputError("--json writes TeraPipe slicing plans, not --max-batch or Seq1F1B plans");
  if (o.max_batch) {
    check_grid(estimate_max_batch(s, o.memory_GB * 1e9));  // before the schedules it builds (core/plan/work_estimate.h)
    sim::print_max_batch_plan(s, o.memory_GB, stdout);
    return 0;
  }
  if (seq1f1b) {
    sim::print_seq1f1b_plan(s, stdout);
    return 0;
  }
  // With --json -, stdout carries the document and the table goes to stderr.
  FILE* out = o.json == "-" ? stderr : stdout;
  nlohmann::ordered_json j;
  if (o.grain < 1) throw InputError("--grain must be >= 1");
  if (o.max_micro_batch < 1) throw InputError("--max-micro-batch must be >= 1");
  if (o.epsilon_ms < 0) throw InputError("--epsilon-ms must be >= 0");
  const ScenarioSliceModel m = scenario_slice_model(s);
  PlannerOptions po;
  po.grain = o.grain;
  po.epsilon_s = o.epsilon_ms * 1e-3;
  po.linear_scan = o.linear_scan;
  const int bmax = std::min(o.max_micro_batch, m.batch);
  // The planner's tables (and --simulate's runs) before building them (core/plan/work_estimate.h).
  check_grid(estimate_plan(s, o.grain, bmax, o.simulate));
  const auto t0 = std::chrono::steady_clock::now();
  const auto tables = slice_tables(m, o.grain, bmax);
  const auto t1 = std::chrono::steady_clock::now();
  const SlicingPlan p = plan_joint(tables, m.batch, m.K, po, m.fixed_s);
  const auto t2 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };

  std::fprintf(
      out, "scenario %s (%s): K = %d stages, B_r = %d sequences, L = %d tokens, grain %d, micro-batch sizes 1..%d\n",
      s.name.c_str(), s.source.c_str(), m.K, m.batch, m.seq_len, o.grain, bmax);
  std::fprintf(out, "scheme            %s\n", scheme_text(p).c_str());
  std::fprintf(out, "slices/sequence   %d\n", p.slices_per_sequence());
  std::fprintf(out, "predicted         %.6f s  (stage busy %.6f s + (K-1) x slowest slice %.6f s + optimizer %.6f s)\n",
               p.total_s, p.sum_s, p.max_s, p.fixed_s);
  // --simulate: the same schemes through the simulator, which overlaps transfers with compute and models the
  // network's contention and the data-parallel all-reduce that the latency formula leaves out.
  const bool dp_simulable = p.groups.size() == 1 && p.groups[0].b == 1;
  const double dp_sim = o.simulate && dp_simulable
                            ? sim::simulate_figures(sim::with_token_slices(s, p.groups[0].slice_tokens)).iteration_s
                            : 0;
  if (o.simulate)
    std::fprintf(out, "simulated         %s\n",
                 dp_simulable ? (std::to_string(dp_sim) + " s").c_str() : "n/a (micro-batches of several sequences)");
  j["schema"] = "pipescope.plan/1";
  j["scenario"] = s.name;
  j["source"] = s.source;
  j["stages"] = m.K;
  j["batch_per_replica"] = m.batch;
  j["seq_len"] = m.seq_len;
  j["grain"] = o.grain;
  j["max_micro_batch"] = bmax;
  j["scheme"] = scheme_text(p);
  auto groups = nlohmann::ordered_json::array();
  for (const MicroBatchGroup& g : p.groups)
    groups.push_back({{"sequences", g.b}, {"micro_batches", g.count}, {"slice_tokens", g.slice_tokens}});
  j["groups"] = std::move(groups);
  j["slices_per_sequence"] = p.slices_per_sequence();
  j["predicted_s"] = p.total_s;
  j["stage_busy_s"] = p.sum_s;
  j["slowest_slice_s"] = p.max_s;
  j["optimizer_s"] = p.fixed_s;
  if (o.simulate && dp_simulable) j["simulated_s"] = dp_sim;
  MicroBatchGroup whole{1, m.batch, {m.seq_len}};
  const double gpipe = scheme_seconds(m.t, {whole}, m.K, m.fixed_s);
  std::fprintf(out, "gpipe baseline    %.6f s  %s  (predicted speedup %.3fx)\n", gpipe,
               ("[(1, [" + std::to_string(m.seq_len) + "])] * " + std::to_string(m.batch)).c_str(), gpipe / p.total_s);
  j["gpipe_baseline_s"] = gpipe;
  j["predicted_speedup"] = gpipe / p.total_s;
  auto uniform = nlohmann::ordered_json::array();
  std::fprintf(out, "planner           %s, %d of %d candidate t_max evaluated\n",
               o.linear_scan ? "linear scan" : "exact bisection", p.evaluated, p.candidates);
  // Wall-clock times on stderr: stdout is deterministic (the golden tests compare it).
  std::fprintf(stderr, "planner time: tables %.1f ms, DP %.1f ms\n", ms(t0, t1), ms(t1, t2));
  std::fprintf(out, "\nuniform slicing (micro-batches of 1 sequence):\n%8s %10s %12s %12s", "slices", "tokens",
               "predicted_s", "vs_dp");
  if (o.simulate) std::fprintf(out, " %12s %12s", "simulated_s", "vs_dp");
  std::fprintf(out, "\n");
  for (int k = 1; k <= m.seq_len; k *= 2) {
    MicroBatchGroup g{1, m.batch, {}};
    for (int i = 0; i < k; i++) g.slice_tokens.push_back(m.seq_len / k + (i < m.seq_len % k ? 1 : 0));
    const double t = scheme_seconds(m.t, {g}, m.K, m.fixed_s);
    nlohmann::ordered_json row{{"slices", k}, {"tokens", m.seq_len / k}, {"predicted_s", t}};
    std::fprintf(out, "%8d %10d %12.6f %12.3f", k, m.seq_len / k, t, t / p.total_s);
    if (o.simulate) {
      const double sim_s = sim::simulate_figures(sim::with_token_slices(s, g.slice_tokens)).iteration_s;
      row["simulated_s"] = sim_s;
      if (dp_simulable)
        std::fprintf(out, " %12.6f %12.3f", sim_s, sim_s / dp_sim);
      else
        std::fprintf(out, " %12.6f %12s", sim_s, "-");
    }
    std::fprintf(out, "\n");
    uniform.push_back(std::move(row));
    if (m.seq_len / k < 8) break;
  }
  j["uniform"] = std::move(uniform);
  if (o.json == "-") {
    std::cout << j.dump(2) << "\n";
  } else if (!o.json.empty()) {
    write_file_atomic(o.json, j.dump(2) + "\n", "--json");
  }
  return 0;
}

}  // namespace

Command add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* sub = app.add_subcommand("plan", "TeraPipe: optimal token/batch slicing of a scenario (the paper's DP)");
  sub->add_option("scenario", o->scenario, "Scenario YAML file")->required();
  sub->add_option("--grain", o->grain, "Tokens per DP unit (default 8, as the authors' planner)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--max-micro-batch", o->max_micro_batch,
                  "Largest micro-batch size the joint DP considers (default 1, as every reported plan)");
  sub->add_option("--epsilon-ms", o->epsilon_ms, "With --linear-scan: skip t_max candidates closer than this")
      ->check(finite_range(0, 1e9));
  sub->add_flag("--linear-scan", o->linear_scan, "The paper's straightforward ascending t_max scan (not bisection)");
  sub->add_flag("--max-batch", o->max_batch,
                "Largest batch whose GPipe baseline fits the device (per replica and global), instead of planning");
  sub->add_option("--memory-GB", o->memory_GB, "With --max-batch: per-GPU capacity in GB (default: the device's)")
      ->check(finite_range(1e-3, 1e5));
  sub->add_flag("--simulate", o->simulate,
                "Also simulate the DP's scheme and every uniform slicing (one simulation each, in child processes)");
  sub->add_option("--json", o->json, "Also write the plan as JSON to this file (- for stdout)");
  return {sub, [o] { return run_plan(*o); }};
}

}  // namespace pipescope::cli
