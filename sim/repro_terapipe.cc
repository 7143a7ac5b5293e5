// `pipescope repro terapipe`: Table 2 of the TeraPipe paper (docs/papers.md#terapipe) in simulation, and Table 1's
// batch against the largest batch the memory model fits (sim/repro_terapipe.h).
#include "sim/repro_terapipe.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/plan/paper_tables.h"
#include "core/plan/pipeline.h"
#include "core/plan/terapipe_planner.h"
#include "sim/repro.h"

namespace pipescope::sim {
namespace {

// Measured reference values of Table 2 (paper, docs/papers.md#terapipe): core/plan/paper_tables.h.
using TerapipeRow = TerapipeTable2Row;

// One row of the second table: where the paper's slice count and the DP's disagree, how much the model thinks
// the paper's scheme loses, both by the planner's latency formula and in simulation.
struct SchemeRow {
  int setting = 0, slices_paper = 0, slices_dp = 0;
  double measured_s = 0;  // the paper's latency with its scheme
  double plan_paper_s = 0, plan_dp_s = 0, sim_paper_s = 0, sim_dp_s = 0;
};

bool selected(const ReproTerapipeOptions& o, int setting) {
  return o.settings.empty() || std::find(o.settings.begin(), o.settings.end(), setting) != o.settings.end();
}

// A slice-count miss costs what the model says the paper's scheme loses against the DP's: a flat optimum
// makes the count fragile while the latency is not.
void print_scheme_table(const std::vector<SchemeRow>& rows, std::FILE* out) {
  if (rows.empty()) return;
  std::fprintf(out,
               "\nThe paper's scheme vs the DP's, in this model (planner's latency formula; simulated iteration)\n");
  std::fprintf(out, "%3s | %5s %5s | %10s %10s %7s | %10s %10s %7s | %8s %7s\n", "set", "sl_p", "sl_s", "plan_paper",
               "plan_dp", "loss", "sim_paper", "sim_dp", "loss", "paper_w", "err");
  double worst_plan = 0, worst_sim = 0, ape = 0;
  for (const SchemeRow& r : rows) {
    const double lp = r.plan_paper_s / r.plan_dp_s - 1, ls = r.sim_paper_s / r.sim_dp_s - 1;
    const double err = (r.sim_paper_s - r.measured_s) / r.measured_s;
    worst_plan = std::max(worst_plan, lp);
    worst_sim = std::max(worst_sim, ls);
    ape += std::fabs(err);
    std::fprintf(out, "%3d | %5d %5d | %10.4f %10.4f %+6.1f%% | %10.4f %10.4f %+6.1f%% | %8.3f %+6.1f%%\n", r.setting,
                 r.slices_paper, r.slices_dp, r.plan_paper_s, r.plan_dp_s, 100 * lp, r.sim_paper_s, r.sim_dp_s,
                 100 * ls, r.measured_s, 100 * err);
  }
  std::fprintf(out,
               "the paper's schemes lose at most %.1f%% by the planner's formula and %.1f%% in simulation; simulated\n"
               "with the paper's own schemes, the %zu TeraPipe latencies have a MAPE of %.1f%%\n",
               100 * worst_plan, 100 * worst_sim, rows.size(), 100 * ape / static_cast<double>(rows.size()));
}

// Table 2 as it is built: one row per setting, the errors' summaries, the schemes, the --json rows.
struct Table2 {
  double ape_sum = 0, worst_speedup = 0, worst_slices = 0;
  int n_ape = 0;
  std::vector<SchemeRow> schemes;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::exception_ptr failed;  // the first row that failed
};

void print_table2_header(const ReproTerapipeOptions& o, std::FILE* out) {
  std::fprintf(out, "TeraPipe Table 2 (docs/papers.md#terapipe) on simulated p3.16xlarge; scenarios from %s/\n",
               o.dir.c_str());
  std::fprintf(out, "%3s %-9s | %8s %8s %7s | %8s %8s %7s | %6s %6s %7s | %5s %5s | %s\n", "set", "model", "paper_wo",
               "sim_wo", "err", "paper_w", "sim_w", "err", "spd_p", "spd_s", "err", "sl_p", "sl_s", "DP scheme");
}

// One setting: without and with TeraPipe (the planner's slicing), and the paper's own scheme, each simulated.
void run_table2_row(const TerapipeRow& row, const std::string& dir, Table2& t, std::FILE* out) {
  const std::string base = dir + "/setting-" + std::to_string(row.setting);
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
    std::fprintf(out, "%3d %-9s | error: %s\n", row.setting, row.model, e.what());
    if (!t.failed) t.failed = std::current_exception();
    return;
  }
  const double e_wo = (wo - row.without_s) / row.without_s, e_w = (w - row.with_s) / row.with_s;
  const double sp_p = row.without_s / row.with_s, sp_s = wo / w, e_sp = (sp_s - sp_p) / sp_p;
  const int slices = plan.slices_per_sequence();
  const double e_sl = static_cast<double>(slices - row.slices()) / row.slices();
  const ScenarioSliceModel model = scenario_slice_model(with);
  const std::vector<MicroBatchGroup> paper_groups = {{1, model.batch, row.slice_tokens}};
  t.schemes.push_back({row.setting, row.slices(), slices, row.with_s,
                       scheme_seconds(model.t, paper_groups, model.K, model.fixed_s), plan.total_s, w_paper, w});
  t.ape_sum += std::fabs(e_wo) + std::fabs(e_w);
  t.n_ape += 2;
  t.worst_speedup = std::max(t.worst_speedup, std::fabs(e_sp));
  t.worst_slices = std::max(t.worst_slices, std::fabs(e_sl));
  t.rows.push_back({{"setting", row.setting},
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
  std::fprintf(out, "%3d %-9s | %8.3f %8.3f %+6.1f%% | %8.3f %8.3f %+6.1f%% | %6.2f %6.2f %+6.1f%% | %5d %5d | %s\n",
               row.setting, row.model, row.without_s, wo, 100 * e_wo, row.with_s, w, 100 * e_w, sp_p, sp_s, 100 * e_sp,
               row.slices(), slices, scheme_text(plan).c_str());
}

void print_table2_summary(const Table2& t, std::FILE* out) {
  if (t.n_ape == 0) return;
  std::fprintf(out, "MAPE over %d latencies: %.1f%% (target <= 9%%)\n", t.n_ape, 100 * t.ape_sum / t.n_ape);
  std::fprintf(out, "worst speedup error: %.1f%% (target <= 15%%); worst slice-count error: %.1f%% (target <= 30%%)\n",
               100 * t.worst_speedup, 100 * t.worst_slices);
}

void write_table2_json(const ReproTerapipeOptions& o, Table2& t) {
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.repro.terapipe/1";
  j["scenarios"] = o.dir;
  j["rows"] = std::move(t.rows);
  j["mape"] = t.n_ape > 0 ? t.ape_sum / t.n_ape : 0.0;
  j["worst_speedup_error"] = t.worst_speedup;
  j["worst_slice_count_error"] = t.worst_slices;
  write_repro_json(o.json, j.dump(2));
}

}  // namespace

// Table 1's batch (global B, per replica B_r = B / #Data) against the largest batch whose GPipe baseline fits
// (docs/papers.md#terapipe: "each configuration uses the largest batch that fits in memory"), at the device's
// 16 GiB and at the authors' 14 GiB memory filter (docs/papers.md#terapipe).
void print_terapipe_max_batch(const ReproTerapipeOptions& o, std::FILE* out) {
  std::fprintf(
      out, "\nTable 1 batch vs the largest batch that fits (GPipe baseline, whole per-replica mini-batch in flight)\n");
  std::fprintf(out, "%3s %-9s %3s %3s %3s | %6s %6s | %6s %6s %6s | %6s %6s | %7s %7s\n", "set", "model", "K", "op",
               "dp", "B", "B_r", "fit", "fit14", "ratio", "act/sq", "static", "B_fit", "B_fit14");
  int exact = 0, n = 0;
  double lo = 1e300, hi = 0;
  for (const TerapipeRow& row : terapipe_table2()) {
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
    std::fprintf(out, "%3d %-9s %3d %3d %3d | %6d %6d | %6d %6d %6.2f | %6.3f %6.2f | %7d %7d\n", row.setting,
                 row.model, s.parallel.pp, s.parallel.tp, s.parallel.dp, s.parallel.global_batch, br, dev.per_replica,
                 f14.per_replica, ratio, dev.per_sequence_bytes / 1e9, dev.static_bytes / 1e9, dev.global, f14.global);
  }
  if (n > 0)
    std::fprintf(out,
                 "B_r fit = paper's in %d of %d settings; fit / paper between %.2f and %.2f\n"
                 "(fit, fit14: B_r at 16 GiB and at 14 GiB; act/sq: GB of activations per sequence, worst stage; "
                 "static: GB of weights, gradients, Adam state)\n",
                 exact, n, lo, hi);
}

void print_max_batch_plan(const Scenario& s, double memory_GB, std::FILE* out) {
  const MaxBatch mb = max_batch_gpipe(s, memory_GB * 1e9);
  const int br = s.parallel.global_batch / s.parallel.dp;
  std::fprintf(out, "scenario %s (%s): %s, K = %d stages of %d layers, tp = %d, dp = %d, L = %d, %s\n", s.name.c_str(),
               s.source.c_str(), s.model.name.c_str(), s.parallel.pp, s.model.layers / s.parallel.pp, s.parallel.tp,
               s.parallel.dp, s.model.seq_len, s.training.flash_attention ? "flash attention" : "plain attention");
  std::fprintf(out, "memory per GPU    %.2f GB limit (%s); static %.2f GB (weights, gradients, optimizer state)\n",
               mb.limit_bytes / 1e9, memory_GB > 0 ? "--memory-GB" : s.cluster.device.name.c_str(),
               mb.static_bytes / 1e9);
  std::fprintf(out, "per sequence      %.3f GB of activations on the worst stage (rank %d), GPipe baseline\n",
               mb.per_sequence_bytes / 1e9, mb.worst_rank);
  if (mb.per_replica == 0) {
    std::fprintf(out, "max batch         none: one sequence per replica already needs %.2f GB\n", mb.peak_bytes / 1e9);
    return;
  }
  std::fprintf(out, "max batch         B_r = %d sequences per replica, B = %d global (x dp %d); peak %.2f GB\n",
               mb.per_replica, mb.global, s.parallel.dp, mb.peak_bytes / 1e9);
  std::fprintf(out, "scenario batch    B_r = %d, B = %d (%s)\n", br, s.parallel.global_batch,
               br <= mb.per_replica ? "fits" : "does not fit");
}

std::exception_ptr repro_terapipe(const ReproTerapipeOptions& o, std::FILE* out) {
  if (!o.json.empty()) check_repro_json(o.json);
  if (o.max_batch_only) {
    print_terapipe_max_batch(o, out);
    return nullptr;
  }
  print_table2_header(o, out);
  Table2 t;
  for (const TerapipeRow& row : terapipe_table2())
    if (selected(o, row.setting)) run_table2_row(row, o.dir, t, out);
  print_table2_summary(t, out);
  print_scheme_table(t.schemes, out);
  print_terapipe_max_batch(o, out);
  if (!o.json.empty()) write_table2_json(o, t);
  return t.failed;
}

}  // namespace pipescope::sim
