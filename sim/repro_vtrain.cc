// `pipescope repro vtrain`: the cost model's fidelity on measured runs (sim/repro_vtrain.h).
#include "sim/repro_vtrain.h"

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/presets.h"
#include "core/plan/layout_fit.h"
#include "core/plan/measured_runs.h"
#include "core/util/data_path.h"
#include "sim/repro.h"

namespace pipescope::sim {
namespace {

// Every measured row simulated: the predictions (0 where the simulation failed) and the --json rows.
struct VtrainRows {
  std::vector<double> pred;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::exception_ptr failed;  // the first row that failed
};

VtrainRows simulate_rows(const std::vector<MeasuredRun>& runs, const ReproVtrainOptions& o, std::FILE* out) {
  VtrainRows v;
  v.pred.assign(runs.size(), 0.0);
  for (std::size_t i = 0; i < runs.size(); i++) {
    const MeasuredRun& r = runs[i];
    const std::string model = r.model.substr(0, r.model.find(" ("));
    nlohmann::ordered_json row{
        {"line", r.line}, {"model", r.model}, {"gpus", r.gpus}, {"layout", r.layout()}, {"measured_s", r.measured_s}};
    try {
      v.pred[i] = simulate_figures(vtrain_scenario(r, o.cluster)).iteration_s;
    } catch (const std::exception& e) {
      std::fprintf(out, "%4d %-14s %5d %-22s | error: %s\n", r.line, model.c_str(), r.gpus, r.layout().c_str(),
                   e.what());
      row["error"] = e.what();
      v.rows.push_back(std::move(row));
      if (!v.failed) v.failed = std::current_exception();
      continue;
    }
    row["simulated_s"] = v.pred[i];
    row["rel_error"] = (v.pred[i] - r.measured_s) / r.measured_s;
    v.rows.push_back(std::move(row));
    std::fprintf(out, "%4d %-14s %5d %-22s | %10.3f %10.3f %+6.1f%%\n", r.line, model.c_str(), r.gpus,
                 r.layout().c_str(), r.measured_s, v.pred[i], 100 * (v.pred[i] - r.measured_s) / r.measured_s);
  }
  return v;
}

// Where the ranking misses: by what differs between the two layouts, and the rows in the most wrong pairs.
void print_misses(const std::vector<MeasuredRun>& runs, const Fidelity& f, std::FILE* out) {
  std::fprintf(out, "mis-ordered pairs by what differs:");
  const char* sep = " ";
  for (const auto& [what, g] : f.pairs_by_difference) {
    std::fprintf(out, "%s%s %d of %d", sep, what.c_str(), g.wrong, g.pairs);
    sep = ", ";
  }
  std::fprintf(out, "\n");
  std::fprintf(out, "rows in the most mis-ordered pairs:");
  sep = " ";
  for (std::size_t k = 0; k < f.most_wrong.size() && k < 6; k++) {
    const auto i = static_cast<std::size_t>(f.most_wrong[k]);
    std::fprintf(out, "%sline %d %s (%d)", sep, runs[i].line, runs[i].layout().c_str(), f.wrong_pairs_of_row[i]);
    sep = ", ";
  }
  std::fprintf(out, "\n");
}

void print_worst(const std::vector<MeasuredRun>& runs, const std::vector<double>& pred, const Fidelity& f, int worst,
                 std::FILE* out) {
  std::fprintf(out, "worst rows:\n");
  for (std::size_t k = 0; k < f.worst.size() && static_cast<int>(k) < worst; k++) {
    const MeasuredRun& r = runs[static_cast<std::size_t>(f.worst[k])];
    const double p = pred[static_cast<std::size_t>(f.worst[k])];
    std::fprintf(out, "  line %d %s %s: measured %.3f s, sim %.3f s, %+.1f%%\n", r.line, r.group().c_str(),
                 r.layout().c_str(), r.measured_s, p, 100 * (p - r.measured_s) / r.measured_s);
  }
}

nlohmann::ordered_json layout_reference_json(const LayoutFit& lf, const Fidelity& fl) {
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  for (const LayoutFitCell& c : lf.cells)
    cells.push_back({{"group", c.group},
                     {"tp", c.tp},
                     {"rows", c.rows},
                     {"per_sequence_s", c.per_sequence_s},
                     {"per_micro_batch_s", c.per_micro_batch_s}});
  return {
      {"pairs_ordered_right", fl.pairs_right}, {"ranking_accuracy", fl.ranking()}, {"mape", fl.mape}, {"cells", cells}};
}

void write_vtrain_json(const ReproVtrainOptions& o, const std::vector<MeasuredRun>& runs, const VtrainRows& v,
                       const Fidelity& f, const LayoutFit& lf, const Fidelity& fl) {
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.repro.vtrain/1";
  j["csv"] = o.csv;
  j["cluster"] = o.cluster;
  j["rows"] = v.rows;
  j["mape"] = f.mape;
  j["mean_signed_error"] = f.mean_err;
  j["pairs"] = f.pairs;
  j["pairs_ordered_right"] = f.pairs_right;
  j["ranking_accuracy"] = f.ranking();
  nlohmann::ordered_json diff = nlohmann::ordered_json::object();
  for (const auto& [what, g] : f.pairs_by_difference) diff[what] = {{"pairs", g.pairs}, {"wrong", g.wrong}};
  j["misordered_by_difference"] = diff;
  j["layout_only_reference"] = layout_reference_json(lf, fl);
  nlohmann::ordered_json worst = nlohmann::ordered_json::array();
  for (int w : f.worst) worst.push_back(runs[static_cast<std::size_t>(w)].line);
  j["worst_lines"] = worst;
  nlohmann::ordered_json most = nlohmann::ordered_json::array();
  for (int w : f.most_wrong)
    most.push_back({{"line", runs[static_cast<std::size_t>(w)].line},
                    {"wrong_pairs", f.wrong_pairs_of_row[static_cast<std::size_t>(w)]}});
  j["most_misordered_lines"] = most;
  write_repro_json(o.json, j.dump(2));
}

}  // namespace

std::exception_ptr repro_vtrain(const ReproVtrainOptions& o, std::FILE* out) {
  if (!cluster_preset(o.cluster)) throw std::invalid_argument("--cluster: unknown cluster preset '" + o.cluster + "'");
  if (!o.json.empty()) check_repro_json(o.json);
  // The shipped data from any directory; the report names the path as given.
  const std::vector<MeasuredRun> runs = read_measured_runs(data_path(o.csv));
  std::fprintf(out, "vTrain measured runs (%s) on cluster preset %s, one description for every row\n", o.csv.c_str(),
               o.cluster.c_str());
  std::fprintf(out, "%4s %-14s %5s %-22s | %10s %10s %7s\n", "line", "model", "GPUs", "layout", "measured_s", "sim_s",
               "err");
  const VtrainRows v = simulate_rows(runs, o, out);
  const Fidelity f = fidelity(runs, v.pred);
  std::fprintf(out, "MAPE over %d rows: %.1f%% (mean signed error %+.1f%%; target <= 8%%)\n", f.rows, 100 * f.mape,
               100 * f.mean_err);
  std::fprintf(out, "pair ranking: %d of %d pairs ordered right = %.1f%% (target >= 92%%)\n", f.pairs_right, f.pairs,
               100 * f.ranking());
  // The reference: the same rows ranked by a model of the layout fitted to their own measured times
  // (core/plan/layout_fit.h), on the rows the simulation completed.
  LayoutFit lf = fit_layout_only(runs);
  for (std::size_t i = 0; i < runs.size(); i++)
    if (!(v.pred[i] > 0)) lf.predicted_s[i] = 0;
  const Fidelity fl = fidelity(runs, lf.predicted_s);
  std::fprintf(out,
               "layout-only reference (fitted to the measured times themselves; per model and TP degree, iteration = "
               "(m + p - 1) x layers / p x (x b + y), %zu cells of 2 values): %d of %d pairs = %.1f%%, MAPE %.1f%%\n",
               lf.cells.size(), fl.pairs_right, fl.pairs, 100 * fl.ranking(), 100 * fl.mape);
  print_misses(runs, f, out);
  print_worst(runs, v.pred, f, o.worst, out);
  if (!o.json.empty()) write_vtrain_json(o, runs, v, f, lf, fl);
  return v.failed;
}

}  // namespace pipescope::sim
