// `pipescope fidelity`: every development set simulated, one table, the gate (sim/fidelity.h).
#include "sim/fidelity.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "core/plan/dev_sets.h"
#include "core/plan/measured_runs.h"
#include "core/util/input_file.h"
#include "sim/repro.h"
#include "sim/run_scenario.h"

namespace pipescope::sim {
namespace {

// One set as it runs: its rows, each row's prediction (0: not run or failed) and the figures over them.
struct SetRun {
  const DevSet* set = nullptr;
  std::vector<DevRow> rows;
  std::vector<double> pred;
  std::vector<std::string> error;  // per row: why its simulation failed
  std::vector<bool> sim_oom;       // per row: the memory model says it does not fit (simulated anyway)
  Fidelity fid;
  int skipped = 0, excluded = 0, failed = 0;
  bool modelled() const { return set->kind != DevSetKind::NotModelled; }
};

std::vector<SetRun> load_sets(const FidelityOptions& o) {
  for (const std::string& name : o.sets) dev_set(name);  // an unknown name fails before any set is read
  std::vector<SetRun> out;
  for (const DevSet& s : dev_sets()) {
    if (!o.sets.empty() && std::find(o.sets.begin(), o.sets.end(), s.name) == o.sets.end()) continue;
    SetRun r;
    r.set = &s;
    r.rows = dev_set_rows(s);
    r.pred.assign(r.rows.size(), 0.0);
    r.error.assign(r.rows.size(), "");
    r.sim_oom.assign(r.rows.size(), false);
    for (const DevRow& d : r.rows) r.skipped += !d.skipped.empty(), r.excluded += !d.excluded.empty();
    out.push_back(std::move(r));
  }
  return out;
}

int default_jobs() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// Every row that runs, in one pool of children (row order kept, so the output does not depend on `jobs`).
std::exception_ptr simulate_all(std::vector<SetRun>& sets, int jobs) {
  std::vector<Scenario> scenarios;
  std::vector<std::pair<std::size_t, std::size_t>> where;  // (set, row) of each scenario
  for (std::size_t s = 0; s < sets.size(); s++)
    for (std::size_t i = 0; i < sets[s].rows.size(); i++)
      if (sets[s].rows[i].scenario) scenarios.push_back(*sets[s].rows[i].scenario), where.emplace_back(s, i);
  const int j = jobs > 0 ? jobs : default_jobs();
  std::fprintf(stderr, "fidelity: simulating %zu rows of %zu sets, %d at a time\n", scenarios.size(), sets.size(), j);
  std::size_t done = 0;
  const std::vector<RunOutcome> outs = run_scenarios(scenarios, RunOptions{}, j, [&](std::size_t k, const RunOutcome&) {
    const auto [s, i] = where[k];
    std::fprintf(stderr, "  [%zu/%zu] %s %s %d\n", ++done, scenarios.size(), sets[s].set->name, sets[s].set->row_word,
                 sets[s].rows[i].run.line);
  });
  std::exception_ptr failed;
  for (std::size_t k = 0; k < outs.size(); k++) {
    SetRun& sr = sets[where[k].first];
    const std::size_t i = where[k].second;
    if (outs[k].ok() && outs[k].result.iteration_s > 0) {
      sr.pred[i] = outs[k].result.iteration_s;
      sr.sim_oom[i] = outs[k].result.oom;
      continue;
    }
    sr.error[i] = outs[k].ok() ? "the simulation gave no iteration time" : outs[k].error;
    sr.failed++;
    if (!failed) failed = std::make_exception_ptr(std::runtime_error(sr.error[i]));
  }
  return failed;
}

void compute_figures(SetRun& s) {
  std::vector<MeasuredRun> runs;
  std::vector<std::string> groups;
  for (const DevRow& d : s.rows) runs.push_back(d.run), groups.push_back(d.group);
  s.fid = fidelity(runs, s.pred, groups);
}

double row_error(const SetRun& s, std::size_t i) {
  return (s.pred[i] - s.rows[i].run.measured_s) / s.rows[i].run.measured_s;
}

void print_table(const std::vector<SetRun>& sets, std::FILE* out) {
  std::fprintf(out, "%-16s %-5s %4s %4s %4s | %7s %8s | %-20s | %s\n", "set", "hw", "run", "skip", "oom", "MAPE",
               "signed", "worst row", "pair ranking");
  for (const SetRun& s : sets) {
    std::fprintf(out, "%-16s %-5s %4d %4d %4d | ", s.set->name, s.set->hardware, s.fid.rows, s.skipped, s.excluded);
    if (!s.modelled()) {
      std::fprintf(out, "%s\n", s.set->not_modelled);
      continue;
    }
    if (s.fid.rows == 0) {
      std::fprintf(out, "%7s %8s | %-20s | %s\n", "-", "-", "-", "-");
      continue;
    }
    const auto w = static_cast<std::size_t>(s.fid.worst.front());
    char worst[64], ranking[64] = "-";
    std::snprintf(worst, sizeof worst, "%s %d %+.1f%%", s.set->row_word, s.rows[w].run.line, 100 * row_error(s, w));
    if (s.fid.pairs > 0)
      std::snprintf(ranking, sizeof ranking, "%d/%d = %.1f%%", s.fid.pairs_right, s.fid.pairs, 100 * s.fid.ranking());
    std::fprintf(out, "%6.1f%% %+7.1f%% | %-20s | %s\n", 100 * s.fid.mape, 100 * s.fid.mean_err, worst, ranking);
  }
}

// Rows not run, by reason, with their lines: nothing is dropped without a word.
void print_not_run(const std::vector<SetRun>& sets, std::FILE* out) {
  for (const SetRun& s : sets) {
    std::map<std::string, std::string> lines;  // "skipped: reason" -> "3, 5, 7"
    std::vector<std::string> order;
    for (std::size_t i = 0; i < s.rows.size(); i++) {
      const DevRow& d = s.rows[i];
      const std::string key = !d.skipped.empty()    ? "skipped: " + d.skipped
                              : !d.excluded.empty() ? "excluded from the timing error: " + d.excluded
                              : !s.error[i].empty() ? "failed: " + s.error[i]
                                                    : "";
      if (key.empty()) continue;
      if (!lines.count(key)) order.push_back(key);
      std::string& l = lines[key];
      l += (l.empty() ? "" : ", ") + std::to_string(d.run.line);
    }
    for (const std::string& key : order)
      std::fprintf(out, "%s: %s (%ss %s)\n", s.set->name, key.c_str(), s.set->row_word, lines[key].c_str());
  }
}

void print_rows(const std::vector<SetRun>& sets, std::FILE* out) {
  std::fprintf(out, "\n%-16s %5s %-44s | %10s %10s %7s\n", "set", "line", "row", "measured_s", "sim_s", "err");
  for (const SetRun& s : sets)
    for (std::size_t i = 0; i < s.rows.size(); i++) {
      const DevRow& d = s.rows[i];
      std::fprintf(out, "%-16s %5d %-44s | ", s.set->name, d.run.line, d.label.c_str());
      if (!d.skipped.empty() || !d.excluded.empty() || !s.error[i].empty())
        std::fprintf(out, "%s\n", !d.skipped.empty() ? "skipped" : !d.excluded.empty() ? "excluded" : "failed");
      else
        std::fprintf(out, "%10.3f %10.3f %+6.1f%%%s\n", d.run.measured_s, s.pred[i], 100 * row_error(s, i),
                     s.sim_oom[i] ? " (sim: OOM)" : "");
    }
}

nlohmann::ordered_json rows_json(const SetRun& s) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < s.rows.size(); i++) {
    const DevRow& d = s.rows[i];
    nlohmann::ordered_json r{{"line", d.run.line}, {"row", d.label}, {"group", d.group}};
    if (!d.skipped.empty()) {
      r["skipped"] = d.skipped;
    } else if (!d.excluded.empty()) {
      r["excluded"] = d.excluded;
    } else {
      r["measured_s"] = d.run.measured_s;
      if (!s.error[i].empty()) {
        r["error"] = s.error[i];
      } else {
        r["simulated_s"] = s.pred[i], r["rel_error"] = row_error(s, i), r["simulated_oom"] = s.sim_oom[i];
      }
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

nlohmann::ordered_json set_json(const SetRun& s) {
  nlohmann::ordered_json j{{"name", s.set->name},       {"file", s.set->file},     {"hardware", s.set->hardware},
                           {"cluster", s.set->cluster}, {"metric", s.set->metric}, {"pairs_within", s.set->pairs},
                           {"modelled", s.modelled()}};
  if (!s.modelled()) j["not_modelled"] = s.set->not_modelled;
  j["rows_run"] = s.fid.rows, j["rows_skipped"] = s.skipped, j["rows_excluded"] = s.excluded;
  j["rows_failed"] = s.failed;
  j["mape"] = s.fid.mape, j["mean_signed_error"] = s.fid.mean_err;
  j["pairs"] = s.fid.pairs, j["pairs_ordered_right"] = s.fid.pairs_right, j["ranking_accuracy"] = s.fid.ranking();
  if (!s.fid.worst.empty()) {
    const auto w = static_cast<std::size_t>(s.fid.worst.front());
    j["worst"] = {{"line", s.rows[w].run.line}, {"rel_error", row_error(s, w)}};
  }
  j["rows"] = rows_json(s);
  return j;
}

void write_json(const FidelityOptions& o, const std::vector<SetRun>& sets) {
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.fidelity/1";
  j["sets"] = nlohmann::ordered_json::array();
  for (const SetRun& s : sets) j["sets"].push_back(set_json(s));
  write_repro_json(o.json, j.dump(2));
}

std::vector<SetFigures> figures_of(const std::vector<SetRun>& sets) {
  std::vector<SetFigures> out;
  for (const SetRun& s : sets) out.push_back({s.set->name, s.fid.rows, s.fid.mape, s.fid.pairs, s.fid.pairs_right});
  return out;
}

template <class T>
T json_field(const nlohmann::json& set, const char* key, const std::string& where) {
  if (!set.contains(key)) throw std::invalid_argument(where + "." + key + ": missing");
  try {
    return set.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(where + "." + key + ": wrong type");
  }
}

}  // namespace

std::vector<std::string> gate_regressions(const std::vector<SetFigures>& now, const std::vector<SetFigures>& baseline,
                                          const std::vector<std::string>& selected, double mape_tolerance) {
  std::vector<std::string> out;
  char line[256];
  for (const SetFigures& b : baseline) {
    if (!selected.empty() && std::find(selected.begin(), selected.end(), b.name) == selected.end()) continue;
    const auto it = std::find_if(now.begin(), now.end(), [&](const SetFigures& n) { return n.name == b.name; });
    if (it == now.end()) {
      out.push_back(b.name + ": in the baseline but not run");
      continue;
    }
    if (it->rows_run < b.rows_run) {
      std::snprintf(line, sizeof line, "%s: %d rows run, %d in the baseline", b.name.c_str(), it->rows_run, b.rows_run);
      out.push_back(line);
    }
    if (it->mape > b.mape + mape_tolerance) {
      std::snprintf(line, sizeof line, "%s: MAPE %.2f%% -> %.2f%% (+%.2f points, tolerance %.2f)", b.name.c_str(),
                    100 * b.mape, 100 * it->mape, 100 * (it->mape - b.mape), 100 * mape_tolerance);
      out.push_back(line);
    }
    // Exactly the baseline's accuracy is no drop; a relative slack keeps round-off of the ratio out.
    if (it->ranking() < b.ranking() - 1e-12) {
      std::snprintf(line, sizeof line, "%s: pair ranking %d/%d = %.2f%% -> %d/%d = %.2f%% (%.2f points)",
                    b.name.c_str(), b.pairs_right, b.pairs, 100 * b.ranking(), it->pairs_right, it->pairs,
                    100 * it->ranking(), 100 * (it->ranking() - b.ranking()));
      out.push_back(line);
    }
  }
  return out;
}

std::vector<SetFigures> parse_fidelity_baseline(const std::string& json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(source + ": not JSON: " + e.what());
  }
  if (!j.is_object() || j.value("schema", std::string()) != "pipescope.fidelity/1")
    throw std::invalid_argument(source + ": schema: expected \"pipescope.fidelity/1\" (a pipescope fidelity --json)");
  if (!j.contains("sets") || !j["sets"].is_array()) throw std::invalid_argument(source + ": sets: missing");
  std::vector<SetFigures> out;
  for (std::size_t i = 0; i < j["sets"].size(); i++) {
    const nlohmann::json& s = j["sets"][i];
    const std::string where = source + ": sets[" + std::to_string(i) + "]";
    if (!s.is_object()) throw std::invalid_argument(where + ": expected an object");
    out.push_back({json_field<std::string>(s, "name", where), json_field<int>(s, "rows_run", where),
                   json_field<double>(s, "mape", where), json_field<int>(s, "pairs", where),
                   json_field<int>(s, "pairs_ordered_right", where)});
  }
  return out;
}

std::vector<SetFigures> read_fidelity_baseline(const std::string& path) {
  return parse_fidelity_baseline(read_input_file(path, "--baseline"), path);
}

FidelityOutcome run_fidelity(const FidelityOptions& o, std::FILE* out) {
  std::vector<SetFigures> baseline;
  if (!o.baseline.empty()) baseline = read_fidelity_baseline(o.baseline);
  if (!o.json.empty()) check_repro_json(o.json);
  std::vector<SetRun> sets = load_sets(o);
  FidelityOutcome result;
  result.failed = simulate_all(sets, o.jobs);
  for (SetRun& s : sets) compute_figures(s);
  std::fprintf(
      out, "Cost-model fidelity on the development sets (docs/fidelity.md): simulated vs measured iteration time\n");
  print_table(sets, out);
  print_not_run(sets, out);
  if (o.rows) print_rows(sets, out);
  if (!o.json.empty()) write_json(o, sets);
  if (o.baseline.empty()) return result;
  result.regressions = gate_regressions(figures_of(sets), baseline, o.sets, o.mape_tolerance);
  for (const std::string& r : result.regressions) std::fprintf(out, "gate: REGRESSION %s\n", r.c_str());
  if (result.regressions.empty())
    std::fprintf(out, "gate: no regression against %s (MAPE tolerance %.1f points, pair ranking may not drop)\n",
                 o.baseline.c_str(), 100 * o.mape_tolerance);
  return result;
}

}  // namespace pipescope::sim
