// `pipescope sweep [SCENARIO] --vary key=v1,v2,... [--vary ...] [--out FILE.csv] [-j N]`
// Simulates the cartesian product of the varied scenario keys (YAML paths such as schedule.seq_slices,
// parallel.micro_batch_size, schedule.kind; the first --vary is the outermost loop) and writes one CSV row per
// combination. Every variant is built first: a bad key or value (unknown key, wrong type) stops the sweep with the
// scenario loader's file:line:column: key message before anything runs (exit 1); a combination the cross-field
// checks reject (dp * pp * tp vs GPUs, divisibility) becomes a row with the reason in the `error` column. The
// others run through sim::run_scenarios (sim/run_scenario.h: a forked child each, up to -j at once, rows in
// order); a run that fails (checker, deadlock) also gets its message in `error`. Exit 0 unless every row failed
// (then 1 when all were impossible combinations, else 2). Progress goes to stderr, one line per run.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"
#include "core/util/input_file.h"
#include "sim/run_scenario.h"

namespace pipescope::cli {
namespace {

struct SweepOptions {
  std::string scenario;
  std::vector<std::string> vary;
  std::string out, json, collectives;
  int jobs = 1;
};

std::string read_file(const std::string& path) {
  try {
    return read_input_file(path, "scenario file");  // regular, <= 16 MiB, UTF-8 (core/util/input_file.h)
  } catch (const InputFileError& e) {
    throw ScenarioError(e.what());
  }
}

int run_sweep(const SweepOptions& o) {
  const std::vector<VaryAxis> axes = parse_vary_axes(o.vary);
  if (o.json == "-" && o.out.empty())
    throw InputError("--json -: standard output carries the CSV; write it to a file with --out");

  const std::string source = o.scenario.empty() ? "<builtin>" : o.scenario;
  const std::string base_text = o.scenario.empty() ? default_scenario_yaml() : read_file(o.scenario);
  if (o.scenario.empty())
    default_scenario();
  else
    load_scenario(o.scenario);                                 // errors in the file itself, with its own positions
  check_output_paths({{"--out", o.out}, {"--json", o.json}});  // after the inputs: none may be overwritten
  // The grid's size before building it (core/plan/work_estimate.h): 10^6 points would run for hours.
  double points = 1;
  for (const auto& ax : axes) points *= static_cast<double>(ax.values.size());
  const Scenario base = o.scenario.empty() ? default_scenario() : load_scenario(o.scenario);
  check_grid(estimate_sweep(points, estimate_work(base).seconds, o.jobs));

  // Every variant first (cheap, no simulation): a bad key or value stops the sweep before anything runs.
  std::vector<ScenarioVariant> variants;
  std::vector<std::size_t> pick(axes.size(), 0);
  for (;;) {
    variants.push_back(make_scenario_variant(source, base_text, axes, pick));
    // A point over the work limits is refused before anything runs (an invalid combination is a row instead).
    if (variants.back().invalid.empty()) check_work(variants.back().scenario);
    std::size_t a = axes.size();
    while (a > 0 && ++pick[a - 1] == axes[a - 1].values.size()) pick[--a] = 0;
    if (a == 0) break;
  }

  // The valid combinations run (in children, up to -j at once); the invalid ones are rows with their reason.
  std::vector<Scenario> runs;
  std::vector<std::size_t> run_of(variants.size(), 0);
  for (std::size_t i = 0; i < variants.size(); i++)
    if (variants[i].invalid.empty()) run_of[i] = runs.size(), runs.push_back(variants[i].scenario);
  check_grid(estimate_sweep(runs, o.jobs));  // the grid again, from the runs themselves

  std::ostringstream file;  // --out: written atomically at the end (core/util/atomic_file.h)
  std::ostream& os = o.out.empty() ? std::cout : file;
  for (const auto& ax : axes) os << sim::csv_field(ax.key) << ',';
  const std::string header = sim::result_csv_header();
  os << header << ",error\n";
  os.flush();

  std::vector<std::size_t> variant_of;
  for (std::size_t i = 0; i < variants.size(); i++)
    if (variants[i].invalid.empty()) variant_of.push_back(i);
  int invalid = 0;
  for (std::size_t i = 0; i < variants.size(); i++)
    if (!variants[i].invalid.empty()) {
      invalid++;
      std::fprintf(stderr, "sweep [%zu/%zu] %s ... INVALID: %s\n", i + 1, variants.size(), variants[i].text.c_str(),
                   variants[i].invalid.c_str());
    }
  sim::RunOptions run_opts;
  run_opts.collectives = o.collectives;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outcomes = sim::run_scenarios(runs, run_opts, o.jobs, [&](std::size_t k, const sim::RunOutcome& r) {
    const std::size_t i = variant_of[k];
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "sweep [%zu/%zu] %s ...", i + 1, variants.size(), variants[i].text.c_str());
    if (r.ok())
      std::fprintf(stderr, " iteration %s s (%.1f s elapsed)\n",
                   sim::result_csv_value(sim::result_field("iteration_s"), r.result).c_str(), wall);
    else
      std::fprintf(stderr, " FAILED (%.1f s elapsed): %s\n", wall, r.error.c_str());
  });
  int failed = invalid;
  nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < variants.size(); i++) {
    const ScenarioVariant& v = variants[i];
    std::string row, error = v.invalid;
    nlohmann::ordered_json jrow;
    for (std::size_t a = 0; a < axes.size(); a++) jrow["values"][axes[a].key] = v.values[a];
    if (error.empty()) {
      const sim::RunOutcome& r = outcomes[run_of[i]];
      if (r.ok())
        row = sim::result_csv_row(r.result), jrow["result"] = sim::result_json(r.result);
      else
        error = r.error, failed++;
    }
    jrow["error"] = error;
    json_rows.push_back(jrow);
    if (!error.empty()) row = std::string(std::count(header.begin(), header.end(), ','), ',');  // empty cells
    for (const auto& val : v.values) os << sim::csv_field(val) << ',';
    os << row << ',' << sim::csv_field(error) << '\n';
  }
  os.flush();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "sweep: %zu rows, %d failed (%d invalid combinations), %.1f s%s%s\n", variants.size(), failed,
               invalid, total, o.out.empty() ? "" : ", wrote ", o.out.c_str());
  if (!o.out.empty()) write_file_atomic(o.out, file.str(), "--out");
  if (!o.json.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "pipescope.sweep/2";  // docs/schemas/sweep.schema.json
    j["scenario"] = o.scenario.empty() ? "<builtin>" : o.scenario;
    j["vary"] = nlohmann::ordered_json::array();
    for (const auto& ax : axes) j["vary"].push_back(ax.key);
    j["rows"] = json_rows;
    j["failed"] = failed;
    j["invalid"] = invalid;
    write_file_atomic(o.json, j.dump(2) + "\n", "--json");
  }
  if (failed < static_cast<int>(variants.size())) return 0;
  return invalid == failed ? kExitInput : kExitSchedule;
}

}  // namespace

Command add_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  auto* sub = app.add_subcommand("sweep", "Simulate every combination of varied scenario keys; one CSV row per run");
  sub->add_option("scenario", o->scenario, "Scenario YAML file (default: the built-in default scenario)");
  sub->add_option("--vary", o->vary,
                  "key=v1,v2,... with key a scenario path (schedule.seq_slices, parallel.micro_batch_size, "
                  "schedule.kind, ...); repeat for more keys (cartesian product)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--out", o->out, "Write the CSV to this file (default: standard output)");
  sub->add_option("--json", o->json, "Also write the rows as JSON to this file (- for standard output)");
  sub->add_option("--collectives", o->collectives, "Collective model: ring | aggregate | analytic | auto")
      ->check(CLI::IsMember({"ring", "aggregate", "analytic", "auto"}));
  sub->add_option("-j,--jobs", o->jobs, "Simulations run at once, each in its own process (default 1)")
      ->check(CLI::Range(1, 1024));
  return {sub, [o] { return run_sweep(*o); }};
}

}  // namespace pipescope::cli
