// `pipescope plot` (sim/plot.h): a file pipescope wrote, read back, as charts. The field names come from where the
// writers take them: the result columns (sim/run_result.h) and the time breakdown's parts (time_parts()).
#include "sim/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/lower/time_breakdown.h"
#include "sim/run_result.h"

namespace pipescope::sim {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::invalid_argument(path + ": " + what);
}

const ResultField* column_field(const std::string& column) {
  for (const ResultField& f : result_fields())
    if (f.column != nullptr && column == f.column) return &f;
  return nullptr;
}

std::string axis_title(const std::string& column) {
  const ResultField* f = column_field(column);
  if (f == nullptr) return column;
  return std::string(f->title) + (f->unit[0] != '\0' ? std::string(" (") + f->unit + ")" : "");
}

bool number_of(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == '\0' && std::isfinite(out);
}

double num(const json& obj, const char* key, const std::string& path) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_number())
    bad(path, std::string("no number '") + key + "' where one was expected");
  return obj[key].get<double>();
}

// ---------------------------------------------------------------- the time breakdown as stacked bars
// One part per time_parts() entry that is non-zero somewhere; `objs[i]` holds the parts' keys (seconds).
Chart breakdown_bars(const std::string& title, const std::vector<std::string>& names, const std::vector<json>& objs,
                     const std::string& path) {
  Chart c;
  c.kind = ChartKind::StackedBars;
  c.title = title;
  c.x_label = "seconds per iteration (mean over workers)";
  c.categories = names;
  for (const TimePart& p : time_parts()) {
    ChartSeries s{p.title, {}, {}};
    bool any = false;
    for (const json& o : objs) {
      s.y.push_back(num(o, p.key, path));
      any = any || s.y.back() > 0;
    }
    if (any) c.series.push_back(std::move(s));
  }
  if (c.series.empty()) bad(path, "every part of the time breakdown is zero");
  return c;
}

// ---------------------------------------------------------------- sweep
struct SweepRow {
  std::vector<std::string> values;  // per swept key
  json result;                      // null: the row failed
};
struct SweepTable {
  std::vector<std::string> keys;
  std::vector<SweepRow> rows;
};

SweepTable sweep_from_json(const json& j, const std::string& path) {
  SweepTable t;
  if (!j.contains("vary") || !j["vary"].is_array() || !j.contains("rows") || !j["rows"].is_array())
    bad(path, "a sweep file needs 'vary' and 'rows'");
  for (const json& k : j["vary"]) t.keys.push_back(k.get<std::string>());
  for (const json& r : j["rows"]) {
    SweepRow row;
    for (const std::string& k : t.keys) row.values.push_back(r.at("values").at(k).get<std::string>());
    if (r.contains("result") && r.value("error", std::string()).empty()) row.result = r["result"];
    t.rows.push_back(std::move(row));
  }
  return t;
}

// RFC 4180 cells of one line (quoted cells may hold commas and doubled quotes).
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); i++) {
    const char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"')
      cells.back() += '"', i++;
    else if (ch == '"')
      quoted = !quoted;
    else if (ch == ',' && !quoted)
      cells.emplace_back();
    else if (ch != '\r')
      cells.back() += ch;
  }
  return cells;
}

// `pipescope sweep --out` CSV: the swept keys, then the result columns (result_csv_header), then error.
SweepTable sweep_from_csv(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> head = csv_cells(line), result_cols = csv_cells(result_csv_header());
  const auto first = std::find(head.begin(), head.end(), result_cols.front());
  if (first == head.end() || head.end() - first != static_cast<std::ptrdiff_t>(result_cols.size()) + 1 ||
      !std::equal(result_cols.begin(), result_cols.end(), first))
    bad(path, "neither JSON written by pipescope nor the CSV of pipescope sweep (its header differs)");
  SweepTable t;
  t.keys.assign(head.begin(), first);
  for (int n = 2; std::getline(in, line); n++) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = csv_cells(line);
    if (cells.size() != head.size())
      bad(path + ":" + std::to_string(n),
          std::to_string(cells.size()) + " cells where the header has " + std::to_string(head.size()));
    SweepRow row;
    row.values.assign(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(t.keys.size()));
    if (cells.back().empty()) {
      row.result = json::object();
      for (std::size_t c = 0; c < result_cols.size(); c++) {
        double v = 0;
        const std::string& cell = cells[t.keys.size() + c];
        row.result[result_cols[c]] = number_of(cell, v) ? json(v) : json(cell);
      }
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::vector<Chart> sweep_charts(const SweepTable& t, const PlotRequest& q, const std::string& path) {
  if (t.keys.empty()) bad(path, "the sweep varies no key");
  const auto xk = q.x.empty() ? t.keys.begin() : std::find(t.keys.begin(), t.keys.end(), q.x);
  if (xk == t.keys.end()) bad(path, "--x " + q.x + ": not a swept key (" + t.keys.front() + ", ...)");
  const std::size_t xi = static_cast<std::size_t>(xk - t.keys.begin());
  std::vector<const SweepRow*> ok;
  for (const SweepRow& r : t.rows)
    if (!r.result.is_null()) ok.push_back(&r);
  if (ok.empty()) bad(path, "no row of the sweep ran");
  // x: numbers when every value is one, else categories in the order they first appear.
  bool numeric = true;
  std::vector<std::string> cats;
  for (const SweepRow* r : ok) {
    double v = 0;
    numeric = numeric && number_of(r->values[xi], v);
    if (std::find(cats.begin(), cats.end(), r->values[xi]) == cats.end()) cats.push_back(r->values[xi]);
  }
  auto x_of = [&](const SweepRow& r) {
    double v = 0;
    if (numeric && number_of(r.values[xi], v)) return v;
    return static_cast<double>(std::find(cats.begin(), cats.end(), r.values[xi]) - cats.begin());
  };
  // "key=value" of a row's swept keys but `skip`, joined by `sep`: a series (the keys but x) or a bar (all).
  auto values_text = [&](const SweepRow& r, std::size_t skip, const char* sep) {
    std::string n;
    for (std::size_t k = 0; k < t.keys.size(); k++)
      if (k != skip) n += (n.empty() ? "" : sep) + t.keys[k] + "=" + r.values[k];
    return n;
  };
  auto metric_chart = [&](const std::string& column, const std::string& title) {
    Chart c;
    c.kind = ChartKind::Lines;
    c.title = title;
    c.x_label = t.keys[xi];
    c.y_label = axis_title(column);
    if (!numeric) c.categories = cats;
    std::map<std::string, std::size_t> index;
    for (const SweepRow* r : ok) {
      const std::string n = values_text(*r, xi, ", ");  // one series per combination of the other keys
      if (index.emplace(n, c.series.size()).second) c.series.push_back({n.empty() ? column : n, {}, {}});
      ChartSeries& s = c.series[index[n]];
      s.x.push_back(x_of(*r));
      s.y.push_back(num(r->result, column.c_str(), path));
    }
    return c;
  };
  if (column_field(q.y) == nullptr || !ok.front()->result.contains(q.y) || !ok.front()->result[q.y].is_number())
    bad(path, "--y " + q.y + ": not a numeric result column (tokens_per_s, iteration_s, mfu, peak_memory_GB, ...)");
  std::vector<Chart> out{metric_chart(q.y, axis_title(q.y) + " against " + t.keys[xi])};
  if (q.y != "peak_memory_GB") out.push_back(metric_chart("peak_memory_GB", "peak memory against " + t.keys[xi]));
  std::vector<std::string> names;
  std::vector<json> parts;
  for (const SweepRow* r : ok) {
    names.push_back(values_text(*r, t.keys.size(), " "));
    parts.push_back(r->result);
  }
  out.push_back(breakdown_bars("where the time goes", names, parts, path));
  return out;
}

// ---------------------------------------------------------------- search
std::vector<Chart> search_charts(const json& j, const PlotRequest& q, const std::string& path) {
  if (!j.contains("results") || !j["results"].is_array()) bad(path, "a search file needs 'results'");
  Chart sc;
  sc.kind = ChartKind::Scatter;
  sc.title = "throughput against peak memory";
  sc.x_label = "peak memory per GPU (GB)";
  sc.y_label = "tokens/s";
  // Drawn in this order, the front last (on top).
  sc.series = {
      {"other", {}, {}}, {"tie with the best", {}, {}}, {"as written", {}, {}}, {"Pareto front", {}, {}, true}};
  std::vector<std::string> names;
  std::vector<json> parts;
  for (const json& r : j["results"]) {
    if (!r.contains("tokens_per_s")) continue;  // a failed row
    const std::size_t s = r.value("as_written", false) ? 2
                          : r.value("pareto", false)   ? 3
                          : r.value("tie", false)      ? 1
                                                       : 0;
    sc.series[s].x.push_back(num(r, "peak_memory_GB", path));
    sc.series[s].y.push_back(num(r, "tokens_per_s", path));
    if (static_cast<int>(names.size()) < q.top) {
      names.push_back(r.value("configuration", std::string("?")) +
                      (r.value("as_written", false) ? " (as written)" : ""));
      parts.push_back(r);
    }
  }
  if (names.empty()) bad(path, "no row of the search ran");
  sc.series.erase(std::remove_if(sc.series.begin(), sc.series.end(), [](const ChartSeries& s) { return s.x.empty(); }),
                  sc.series.end());
  return {sc, breakdown_bars("where the time goes: the best " + std::to_string(names.size()) + " rows", names, parts,
                             path)};
}

// ---------------------------------------------------------------- simulate and simulate --compare
std::string variant_name(const json& v) {
  std::string n = v.value("schedule", std::string("?"));
  if (v.value("v", 1) > 1) n += " v" + std::to_string(v.value("v", 1));
  return n;
}

Chart rank_memory(const std::vector<json>& reports, const std::string& path) {
  Chart c;
  c.kind = ChartKind::Lines;
  c.title = "peak memory per pipeline rank";
  c.x_label = "pipeline rank";
  c.y_label = "GB";
  for (const json& r : reports) {
    ChartSeries s{variant_name(r), {}, {}};
    if (!r.contains("memory") || !r["memory"].contains("ranks")) bad(path, "a report with no memory.ranks");
    for (const json& m : r["memory"]["ranks"])
      s.x.push_back(num(m, "rank", path)), s.y.push_back(num(m, "peak_bytes", path) / 1e9);
    c.series.push_back(std::move(s));
  }
  return c;
}

std::vector<Chart> compare_charts(const json& j, const std::string& path) {
  if (!j.contains("variants") || !j["variants"].is_array() || j["variants"].empty())
    bad(path, "a compare file with no variant that ran");
  std::vector<std::string> names;
  std::vector<json> parts, reports;
  for (const json& v : j["variants"]) {
    names.push_back(variant_name(v));
    parts.push_back(v.at("time_breakdown"));
    reports.push_back(v);
  }
  return {breakdown_bars("where the time goes, by schedule", names, parts, path), rank_memory(reports, path)};
}

std::vector<Chart> simulate_charts(const json& j, const std::string& path) {
  std::vector<std::string> names;
  std::vector<json> parts;
  for (const json& w : j.value("workers", json::array()))
    if (w.value("replica", 0) == 0) {
      names.push_back("stage " + std::to_string(w.value("rank", 0)));
      parts.push_back(w.at("time_breakdown"));
    }
  if (names.empty()) names.push_back("mean"), parts.push_back(j.at("time_breakdown"));
  Chart bars = breakdown_bars("where the time goes, per pipeline stage (replica 0)", names, parts, path);
  bars.x_label = "seconds per iteration";
  // Memory by kind per rank, in GB.
  Chart mem;
  mem.kind = ChartKind::StackedBars;
  mem.title = "memory per pipeline rank at its peak";
  mem.x_label = "GB";
  const std::pair<const char*, const char*> kinds[] = {{"weights_bytes", "weights"},
                                                       {"grads_bytes", "gradients"},
                                                       {"optimizer_bytes", "optimizer state"},
                                                       {"activation_peak_bytes", "activations (peak)"}};
  for (const auto& [key, title] : kinds) mem.series.push_back({title, {}, {}});
  if (!j.contains("memory") || !j["memory"].contains("ranks")) bad(path, "a report with no memory.ranks");
  for (const json& m : j["memory"]["ranks"]) {
    mem.categories.push_back("rank " + std::to_string(m.value("rank", 0)));
    for (std::size_t k = 0; k < std::size(kinds); k++) mem.series[k].y.push_back(num(m, kinds[k].first, path) / 1e9);
  }
  return {bars, mem};
}

// ---------------------------------------------------------------- fidelity
std::vector<Chart> fidelity_charts(const json& j, const std::string& path) {
  Chart c;
  c.kind = ChartKind::Scatter;
  c.title = "simulated against measured, every development set (dashed: simulated = measured)";
  c.x_label = "measured (s)";
  c.y_label = "simulated (s)";
  c.diagonal = true;
  double lo = INFINITY, hi = 0;
  for (const json& set : j.value("sets", json::array())) {
    char mape[32];
    std::snprintf(mape, sizeof mape, " (MAPE %.1f%%)", 100 * set.value("mape", 0.0));
    ChartSeries s{set.value("name", std::string("?")) + mape, {}, {}};
    for (const json& r : set.value("rows", json::array()))
      if (r.contains("measured_s") && r.contains("simulated_s")) {
        s.x.push_back(num(r, "measured_s", path)), s.y.push_back(num(r, "simulated_s", path));
        lo = std::min({lo, s.x.back(), s.y.back()}), hi = std::max({hi, s.x.back(), s.y.back()});
      }
    if (!s.x.empty()) c.series.push_back(std::move(s));
  }
  if (c.series.empty()) bad(path, "no fidelity row has both a measured and a simulated time");
  c.log_axes = hi / lo >= 30;  // sets from sub-second to minutes: decades
  return {c};
}

}  // namespace

Plot plot_output(const std::string& text, const std::string& path, const PlotRequest& q) {
  if (q.top < 1) bad(path, "--top must be at least 1");
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) bad(path, "empty file");
  if (text[first] != '{') return {"sweep", sweep_charts(sweep_from_csv(text, path), q, path)};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("not valid JSON: ") + e.what());
  }
  const std::string schema = j.is_object() ? j.value("schema", std::string()) : std::string();
  const std::string kind = schema.rfind("pipescope.", 0) == 0 ? schema.substr(10, schema.find('/') - 10) : "";
  try {
    if (kind == "sweep") return {kind, sweep_charts(sweep_from_json(j, path), q, path)};
    if (kind == "search") return {kind, search_charts(j, q, path)};
    if (kind == "compare") return {kind, compare_charts(j, path)};
    if (kind == "simulate") return {kind, simulate_charts(j, path)};
    if (kind == "fidelity") return {kind, fidelity_charts(j, path)};
  } catch (const json::exception& e) {
    bad(path, std::string("unexpected ") + kind + " file: " + e.what());
  }
  bad(path, "schema '" + schema +
                "' is not one pipescope plot draws (sweep, search, simulate --compare, simulate, fidelity JSON; sweep "
                "CSV)");
}

}  // namespace pipescope::sim
