// `pipescope repro vtrain [--csv F] [--cluster C] [--worst N]`: the cost model's fidelity report on measured
// Megatron-DeepSpeed runs (the vTrain A100 development set, docs/cost-model.md "Fidelity"). Every row becomes a
// scenario on the one cluster description (core/measured_runs.h vtrain_scenario), simulated in its own process;
// prints predicted vs measured per row, the MAPE, the worst rows and the pair-ranking accuracy (pairs of layouts
// of the same model, GPU count and batch ordered as measured).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/repro.h"
#include "core/atomic_file.h"
#include "core/data_path.h"
#include "core/layout_fit.h"
#include "core/measured_runs.h"
#include "core/presets.h"

namespace pipescope::cli {
namespace {

struct VtrainOptions {
  std::string csv = "tests/data/vtrain_a100_dev.csv";
  std::string cluster = "vtrain-a100";
  std::string json;  // --json: rows and figures (docs/schemas/repro-vtrain.schema.json)
  int worst = 8;
};

int run_vtrain(const VtrainOptions& o) {
  if (!cluster_preset(o.cluster)) throw InputError("--cluster: unknown cluster preset '" + o.cluster + "'");
  if (!o.json.empty()) check_repro_json(o.json);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  // The shipped data from any directory (core/data_path.h); the report names the path as given.
  const std::vector<MeasuredRun> runs = read_measured_runs(data_path(o.csv));
  std::printf("vTrain measured runs (%s) on cluster preset %s, one description for every row\n", o.csv.c_str(),
              o.cluster.c_str());
  std::printf("%4s %-14s %5s %-22s | %10s %10s %7s\n", "line", "model", "GPUs", "layout", "measured_s", "sim_s", "err");
  std::vector<double> pred(runs.size(), 0.0);
  int failed = 0;  // the exit code of the first row that failed (exit_code_of)
  for (std::size_t i = 0; i < runs.size(); i++) {
    const MeasuredRun& r = runs[i];
    const std::string model = r.model.substr(0, r.model.find(" ("));
    try {
      pred[i] = simulate_figures(vtrain_scenario(r, o.cluster)).iteration_s;
    } catch (const std::exception& e) {
      std::printf("%4d %-14s %5d %-22s | error: %s\n", r.line, model.c_str(), r.gpus, r.layout().c_str(), e.what());
      rows.push_back({{"line", r.line},
                      {"model", r.model},
                      {"gpus", r.gpus},
                      {"layout", r.layout()},
                      {"measured_s", r.measured_s},
                      {"error", e.what()}});
      if (!failed) failed = exit_code_of(e);
      continue;
    }
    rows.push_back({{"line", r.line},
                    {"model", r.model},
                    {"gpus", r.gpus},
                    {"layout", r.layout()},
                    {"measured_s", r.measured_s},
                    {"simulated_s", pred[i]},
                    {"rel_error", (pred[i] - r.measured_s) / r.measured_s}});
    std::printf("%4d %-14s %5d %-22s | %10.3f %10.3f %+6.1f%%\n", r.line, model.c_str(), r.gpus, r.layout().c_str(),
                r.measured_s, pred[i], 100 * (pred[i] - r.measured_s) / r.measured_s);
  }
  const Fidelity f = fidelity(runs, pred);
  std::printf("MAPE over %d rows: %.1f%% (mean signed error %+.1f%%; target <= 8%%)\n", f.rows, 100 * f.mape,
              100 * f.mean_err);
  std::printf("pair ranking: %d of %d pairs ordered right = %.1f%% (target >= 92%%)\n", f.pairs_right, f.pairs,
              100 * f.ranking());
  // The reference: the same rows ranked by a model of the layout fitted to their own measured times
  // (core/layout_fit.h), on the rows the simulation completed.
  LayoutFit lf = fit_layout_only(runs);
  for (std::size_t i = 0; i < runs.size(); i++)
    if (!(pred[i] > 0)) lf.predicted_s[i] = 0;
  const Fidelity fl = fidelity(runs, lf.predicted_s);
  std::printf(
      "layout-only reference (fitted to the measured times themselves; per model and TP degree, iteration = "
      "(m + p - 1) x layers / p x (x b + y), %zu cells of 2 values): %d of %d pairs = %.1f%%, MAPE %.1f%%\n",
      lf.cells.size(), fl.pairs_right, fl.pairs, 100 * fl.ranking(), 100 * fl.mape);
  // Where the ranking misses: by what differs between the two layouts, and the rows in the most wrong pairs.
  std::printf("mis-ordered pairs by what differs:");
  const char* sep = " ";
  for (const auto& [what, g] : f.pairs_by_difference) {
    std::printf("%s%s %d of %d", sep, what.c_str(), g.wrong, g.pairs);
    sep = ", ";
  }
  std::printf("\n");
  std::printf("rows in the most mis-ordered pairs:");
  sep = " ";
  for (std::size_t k = 0; k < f.most_wrong.size() && k < 6; k++) {
    const auto i = static_cast<std::size_t>(f.most_wrong[k]);
    std::printf("%sline %d %s (%d)", sep, runs[i].line, runs[i].layout().c_str(), f.wrong_pairs_of_row[i]);
    sep = ", ";
  }
  std::printf("\n");
  std::printf("worst rows:\n");
  for (std::size_t k = 0; k < f.worst.size() && static_cast<int>(k) < o.worst; k++) {
    const MeasuredRun& r = runs[static_cast<std::size_t>(f.worst[k])];
    const double p = pred[static_cast<std::size_t>(f.worst[k])];
    std::printf("  line %d %s %s: measured %.3f s, sim %.3f s, %+.1f%%\n", r.line, r.group().c_str(),
                r.layout().c_str(), r.measured_s, p, 100 * (p - r.measured_s) / r.measured_s);
  }
  if (!o.json.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "pipescope.repro.vtrain/1";
    j["csv"] = o.csv;
    j["cluster"] = o.cluster;
    j["rows"] = rows;
    j["mape"] = f.mape;
    j["mean_signed_error"] = f.mean_err;
    j["pairs"] = f.pairs;
    j["pairs_ordered_right"] = f.pairs_right;
    j["ranking_accuracy"] = f.ranking();
    nlohmann::ordered_json diff = nlohmann::ordered_json::object();
    for (const auto& [what, g] : f.pairs_by_difference) diff[what] = {{"pairs", g.pairs}, {"wrong", g.wrong}};
    j["misordered_by_difference"] = diff;
    nlohmann::ordered_json cells = nlohmann::ordered_json::array();
    for (const LayoutFitCell& c : lf.cells)
      cells.push_back({{"group", c.group},
                       {"tp", c.tp},
                       {"rows", c.rows},
                       {"per_sequence_s", c.per_sequence_s},
                       {"per_micro_batch_s", c.per_micro_batch_s}});
    j["layout_only_reference"] = {{"pairs_ordered_right", fl.pairs_right},
                                  {"ranking_accuracy", fl.ranking()},
                                  {"mape", fl.mape},
                                  {"cells", cells}};
    nlohmann::ordered_json worst = nlohmann::ordered_json::array();
    for (int w : f.worst) worst.push_back(runs[static_cast<std::size_t>(w)].line);
    j["worst_lines"] = worst;
    nlohmann::ordered_json most = nlohmann::ordered_json::array();
    for (int w : f.most_wrong)
      most.push_back({{"line", runs[static_cast<std::size_t>(w)].line},
                      {"wrong_pairs", f.wrong_pairs_of_row[static_cast<std::size_t>(w)]}});
    j["most_misordered_lines"] = most;
    write_file_atomic(o.json, j.dump(2) + "\n", "--json");
  }
  return failed;
}

}  // namespace

Command add_repro_vtrain(CLI::App& repro) {
  auto o = std::make_shared<VtrainOptions>();
  auto* sub = repro.add_subcommand(
      "vtrain", "Cost-model fidelity on measured Megatron-DeepSpeed A100 runs: per row, MAPE, worst rows, ranking");
  sub->add_option("--csv", o->csv, "Measured runs (default tests/data/vtrain_a100_dev.csv)");
  sub->add_option("--cluster", o->cluster, "Cluster preset every row runs on (default vtrain-a100)");
  sub->add_option("--json", o->json, "Also write the rows, MAPE and pair ranking as JSON to this file");
  sub->add_option("--worst", o->worst, "Worst rows to list (default 8)")->check(CLI::Range(0, 1 << 30));
  return {sub, [o] { return run_vtrain(*o); }};
}

}  // namespace pipescope::cli
