#pragma once
// Subcommands of the one `pipescope` binary. Each registers its options on the CLI11 app and returns
// the function that runs it; exit codes are decided only in main.cc.

#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/util/exit_codes.h"
#include "sim/launch.h"
#include "sim/svg_render.h"

namespace pipescope::cli {

// Exit codes: the one table is core/util/exit_codes.h (README.md and cli/README.md repeat it).
using pipescope::kExitEnvironment;
using pipescope::kExitInput;
using pipescope::kExitInternal;
using pipescope::kExitPoorFit;
using pipescope::kExitRegression;
using pipescope::kExitSchedule;
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT: search stopped by Ctrl-C after printing the best so far

// Thrown for user errors detected in cli/ (bad flag values, unwritable files).
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Thrown when this machine cannot do what was asked (no launcher, no GPU), not because of the input; and after a
// forwarded SIGINT / SIGTERM stopped a child job (main exits with 128 + signal). Declared beside the launcher
// (sim/launch.h), which throws both.
using EnvironmentError = sim::EnvironmentError;
using Interrupted = sim::Interrupted;

// The exit code of an error, from its type (the table above): every handler that maps errors to codes asks here.
int exit_code_of(const std::exception& e);

struct Command {
  CLI::App* app = nullptr;   // the subcommand
  std::function<int()> run;  // runs it after parsing; returns the exit code
};
Command add_simulate(CLI::App& app);
Command add_show(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_plan(CLI::App& app);       // TeraPipe planner (plan_cmd.cc)
Command add_repro(CLI::App& app);      // paper reproductions (repro_cmd.cc)
Command add_fidelity(CLI::App& app);   // the cost model against every development set (fidelity_cmd.cc)
Command add_sweep(CLI::App& app);      // parameter sweeps to CSV (sweep_cmd.cc)
Command add_search(CLI::App& app);     // layout / schedule search (search_cmd.cc)
Command add_calibrate(CLI::App& app);  // device profiles (calibrate_cmd.cc, calib/)
Command add_import(CLI::App& app);
Command add_plot(CLI::App& app);  // charts of pipescope's outputs (plot_cmd.cc)
// The format of a --timeline output: `format` when given (svg | pdf | png), else from the file name's extension.
sim::ImageFormat timeline_format(const std::string& path, const std::string& format);

// Every subcommand above, registered on `app` in the order `pipescope --help` lists them (the one list: main.cc and
// fuzz/fuzz_cli.cc), each with --allow-large bound to *allow_large when given (core/plan/work_estimate.h).
std::vector<Command> add_commands(
    CLI::App& app, bool* allow_large = nullptr);  // other tools' configurations as scenarios (import_cmd.cc)

}  // namespace pipescope::cli
