// `pipescope repro terapipe [--dir D] [--settings 1,5,...] [--max-batch]`: Table 2 of the TeraPipe paper
// (docs/papers.md#terapipe) in simulation. For every setting of Table 1 it simulates
// scenarios/terapipe/setting-N-gpipe.yaml (without TeraPipe) and setting-N.yaml (with the planner's slicing), each
// in its own process, and prints paper vs simulated latency, relative error, speedups, the MAPE, and the DP's slice
// count vs the paper's scheme. Then Table 1's batch against the largest batch the memory model fits on a 16 GB
// V100 (core/memory_model.h max_batch_gpipe; --max-batch prints only that table, without simulating).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/fork_run.h"
#include "cli/repro.h"
#include "core/data_path.h"
#include "core/memory_model.h"
#include "core/pipeline.h"
#include "core/scenario.h"
#include "core/terapipe_planner.h"
#include "sim/engine.h"
#include "sim/report.h"

namespace pipescope::cli {
namespace {

// Measured reference values of Table 2 (paper, docs/papers.md#terapipe): latency in s, and the DP scheme the
// authors ran, as one sequence's token slices (every reported scheme uses micro-batches of 1 sequence).
struct TerapipeRow {
  int setting;
  const char* model;
  double without_s, with_s;
  std::vector<int> slice_tokens;
  int slices() const { return static_cast<int>(slice_tokens.size()); }
};
// Python's list arithmetic of the paper's notation: [a] * n + [b] * m + ...
std::vector<int> rep(std::initializer_list<std::pair<int, int>> runs) {
  std::vector<int> out;
  for (auto [tokens, n] : runs) out.insert(out.end(), static_cast<std::size_t>(n), tokens);
  return out;
}
const TerapipeRow kTable2[] = {
    {1, "GPT3-1B", 1.517, 1.254, {776, 640, 632}},
    {2, "GPT3-1B", 1.018, 1.018, {2048}},
    {3, "GPT3-1B", 0.913, 0.913, {2048}},
    {4, "GPT3-13B", 2.637, 1.891, {1024, 1024}},
    {5, "GPT3-13B", 1.863, 1.328, {704, 688, 656}},
    {6, "GPT3-44B", 13.319, 7.103, rep({{64, 26}, {56, 6}, {48, 1}})},
    {7, "GPT3-44B", 4.311, 2.771, {368, 384, 384, 368, 256, 288}},
    {8, "GPT3-44B", 2.662, 1.111, {384, 384, 368, 320, 296, 296}},
    {9, "GPT3-175B", 9.990, 1.481, rep({{120, 4}, {112, 6}, {104, 8}, {64, 1}})},
    {10, "GPT3-175B", 5.822, 1.160, rep({{128, 16}})},
};

// One row of the second table: where the paper's slice count and the DP's disagree, how much the model thinks
// the paper's scheme loses, both by the planner's latency formula and in simulation.
struct SchemeRow {
  int setting = 0, slices_paper = 0, slices_dp = 0;
  double measured_s = 0;  // the paper's latency with its scheme
  double plan_paper_s = 0, plan_dp_s = 0, sim_paper_s = 0, sim_dp_s = 0;
};

struct TerapipeOptions {
  std::string dir = "scenarios/terapipe";
  std::vector<int> settings;
  bool max_batch_only = false;
  std::string json;  // --json FILE: Table 2's rows and the MAPE
};

bool selected(const TerapipeOptions& o, int setting) {
  return o.settings.empty() || std::find(o.settings.begin(), o.settings.end(), setting) != o.settings.end();
}

// Table 1's batch (global B, per replica B_r = B / #Data) against the largest batch whose GPipe baseline fits
// (docs/papers.md#terapipe: "each configuration uses the largest batch that fits in memory"), at the device's
// 16 GiB and at the authors' 14 GiB memory filter (docs/papers.md#terapipe).
void print_max_batch_table(const TerapipeOptions& o) {
  std::printf(
      "\nTable 1 batch vs the largest batch that fits (GPipe baseline, whole per-replica mini-batch in flight)\n");
  std::printf("%3s %-9s %3s %3s %3s | %6s %6s | %6s %6s %6s | %6s %6s | %7s %7s\n", "set", "model", "K", "op", "dp",
              "B", "B_r", "fit", "fit14", "ratio", "act/sq", "static", "B_fit", "B_fit14");
  int exact = 0, n = 0;
  double lo = 1e300, hi = 0;
  for (const TerapipeRow& row : kTable2) {
    if (!selected(o, row.setting)) continue;
    const Scenario s = load_scenario(o.dir + "/setting-" + std::to_string(row.setting) + "-gpipe.yaml");
    const MaxBatch dev = max_batch_gpipe(s);
    const MaxBatch f14 = max_batch_gpipe(s, 14.0 * 1073741824.0);
    const int br = s.parallel.global_batch / s.parallel.dp;
    const double ratio = static_cast<double>(dev.per_replica) / br;
    n++;
    exact += dev.per_replica == br;
    lo = std::min(lo, ratio);
    hi = std::max(hi, ratio);
    std::printf("%3d %-9s %3d %3d %3d | %6d %6d | %6d %6d %6.2f | %6.3f %6.2f | %7d %7d\n", row.setting, row.model,
                s.parallel.pp, s.parallel.tp, s.parallel.dp, s.parallel.global_batch, br, dev.per_replica,
                f14.per_replica, ratio, dev.per_sequence_bytes / 1e9, dev.static_bytes / 1e9, dev.global, f14.global);
  }
  if (n > 0)
    std::printf(
        "B_r fit = paper's in %d of %d settings; fit / paper between %.2f and %.2f\n"
        "(fit, fit14: B_r at 16 GiB and at 14 GiB; act/sq: GB of activations per sequence, worst stage; "
        "static: GB of weights, gradients, Adam state)\n",
        exact, n, lo, hi);
}

// A slice-count miss costs what the model says the paper's scheme loses against the DP's: a flat optimum
// makes the count fragile while the latency is not.
void print_scheme_table(const std::vector<SchemeRow>& rows) {
  if (rows.empty()) return;
  std::printf("\nThe paper's scheme vs the DP's, in this model (planner's latency formula; simulated iteration)\n");
  std::printf("%3s | %5s %5s | %10s %10s %7s | %10s %10s %7s | %8s %7s\n", "set", "sl_p", "sl_s", "plan_paper",
              "plan_dp", "loss", "sim_paper", "sim_dp", "loss", "paper_w", "err");
  double worst_plan = 0, worst_sim = 0, ape = 0;
  for (const SchemeRow& r : rows) {
    const double lp = r.plan_paper_s / r.plan_dp_s - 1, ls = r.sim_paper_s / r.sim_dp_s - 1;
    const double err = (r.sim_paper_s - r.measured_s) / r.measured_s;
    worst_plan = std::max(worst_plan, lp);
    worst_sim = std::max(worst_sim, ls);
    ape += std::fabs(err);
    std::printf("%3d | %5d %5d | %10.4f %10.4f %+6.1f%% | %10.4f %10.4f %+6.1f%% | %8.3f %+6.1f%%\n", r.setting,
                r.slices_paper, r.slices_dp, r.plan_paper_s, r.plan_dp_s, 100 * lp, r.sim_paper_s, r.sim_dp_s, 100 * ls,
                r.measured_s, 100 * err);
  }
  std::printf(
      "the paper's schemes lose at most %.1f%% by the planner's formula and %.1f%% in simulation; simulated\n"
      "with the paper's own schemes, the %zu TeraPipe latencies have a MAPE of %.1f%%\n",
      100 * worst_plan, 100 * worst_sim, rows.size(), 100 * ape / static_cast<double>(rows.size()));
}

int run_terapipe(const TerapipeOptions& o) {
  if (!o.json.empty()) check_repro_json(o.json);
  if (o.max_batch_only) {
    print_max_batch_table(o);
    return 0;
  }
  std::printf("TeraPipe Table 2 (docs/papers.md#terapipe) on simulated p3.16xlarge; scenarios from %s/\n",
              o.dir.c_str());
  std::printf("%3s %-9s | %8s %8s %7s | %8s %8s %7s | %6s %6s %7s | %5s %5s | %s\n", "set", "model", "paper_wo",
              "sim_wo", "err", "paper_w", "sim_w", "err", "spd_p", "spd_s", "err", "sl_p", "sl_s", "DP scheme");
  double ape_sum = 0, worst_speedup = 0, worst_slices = 0;
  int n_ape = 0;
  std::vector<SchemeRow> schemes;
  int failed = 0;  // the exit code of the first row that failed (exit_code_of)
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const TerapipeRow& row : kTable2) {
    if (!selected(o, row.setting)) continue;
    const std::string base = o.dir + "/setting-" + std::to_string(row.setting);
    const Scenario with = load_scenario(base + ".yaml");
    const Scenario without = load_scenario(base + "-gpipe.yaml");
    std::fprintf(stderr, "setting %d: planning and simulating ...\n", row.setting);
    const SlicingPlan plan = plan_scenario(with, PlannerOptions{}, with.parallel.micro_batch_size);
    const Scenario paper = with_token_slices(with, row.slice_tokens);
    const bool same_scheme = plan.groups.size() == 1 && plan.groups[0].slice_tokens == row.slice_tokens;
    double wo = 0, w = 0, w_paper = 0;
    try {
      wo = simulate_figures(without).iteration_s;
      w = simulate_figures(with).iteration_s;
      w_paper = same_scheme ? w : simulate_figures(paper).iteration_s;
    } catch (const std::exception& e) {
      std::printf("%3d %-9s | error: %s\n", row.setting, row.model, e.what());
      if (!failed) failed = exit_code_of(e);
      continue;
    }
    const double e_wo = (wo - row.without_s) / row.without_s, e_w = (w - row.with_s) / row.with_s;
    const double sp_p = row.without_s / row.with_s, sp_s = wo / w, e_sp = (sp_s - sp_p) / sp_p;
    const int slices = plan.slices_per_sequence();
    const double e_sl = static_cast<double>(slices - row.slices()) / row.slices();
    const ScenarioSliceModel model = scenario_slice_model(with);
    const std::vector<MicroBatchGroup> paper_groups = {{1, model.batch, row.slice_tokens}};
    schemes.push_back({row.setting, row.slices(), slices, row.with_s,
                       scheme_seconds(model.t, paper_groups, model.K, model.fixed_s), plan.total_s, w_paper, w});
    ape_sum += std::fabs(e_wo) + std::fabs(e_w);
    n_ape += 2;
    worst_speedup = std::max(worst_speedup, std::fabs(e_sp));
    worst_slices = std::max(worst_slices, std::fabs(e_sl));
    rows.push_back({{"setting", row.setting},
                    {"model", row.model},
                    {"paper_without_s", row.without_s},
                    {"simulated_without_s", wo},
                    {"paper_with_s", row.with_s},
                    {"simulated_with_s", w},
                    {"paper_speedup", sp_p},
                    {"simulated_speedup", sp_s},
                    {"paper_slices", row.slices()},
                    {"planned_slices", slices},
                    {"planned_scheme", scheme_text(plan)},
                    {"simulated_with_paper_scheme_s", w_paper}});
    std::printf("%3d %-9s | %8.3f %8.3f %+6.1f%% | %8.3f %8.3f %+6.1f%% | %6.2f %6.2f %+6.1f%% | %5d %5d | %s\n",
                row.setting, row.model, row.without_s, wo, 100 * e_wo, row.with_s, w, 100 * e_w, sp_p, sp_s, 100 * e_sp,
                row.slices(), slices, scheme_text(plan).c_str());
  }
  if (n_ape > 0) {
    std::printf("MAPE over %d latencies: %.1f%% (target <= 9%%)\n", n_ape, 100 * ape_sum / n_ape);
    std::printf("worst speedup error: %.1f%% (target <= 15%%); worst slice-count error: %.1f%% (target <= 30%%)\n",
                100 * worst_speedup, 100 * worst_slices);
  }
  print_scheme_table(schemes);
  print_max_batch_table(o);
  if (!o.json.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "pipescope.repro.terapipe/1";
    j["scenarios"] = o.dir;
    j["rows"] = std::move(rows);
    j["mape"] = n_ape > 0 ? ape_sum / n_ape : 0.0;
    j["worst_speedup_error"] = worst_speedup;
    j["worst_slice_count_error"] = worst_slices;
    write_repro_json(o.json, j.dump(2));
  }
  return failed;
}

}  // namespace

Command add_repro_terapipe(CLI::App& repro) {
  auto o = std::make_shared<TerapipeOptions>();
  auto* sub = repro.add_subcommand("terapipe", "TeraPipe Table 2: paper vs simulated latency and speedup, DP slicing");
  sub->add_option("--dir", o->dir, "Directory with setting-N.yaml / setting-N-gpipe.yaml (default scenarios/terapipe)");
  sub->add_option("--settings", o->settings, "Only these settings, e.g. 1,5,10")
      ->delimiter(',')
      ->check(CLI::Range(1, 10));
  sub->add_option("--json", o->json, "Also write Table 2's rows and the MAPE as JSON to this file");
  sub->add_flag("--max-batch", o->max_batch_only,
                "Only Table 1's batch vs the largest batch that fits (no simulation)");
  return {sub, [o] {
            o->dir = data_path(o->dir);  // the shipped scenarios from any directory (core/data_path.h)
            return run_terapipe(*o);
          }};
}

}  // namespace pipescope::cli
