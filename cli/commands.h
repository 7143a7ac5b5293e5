#pragma once
// Subcommands of the one `pipescope` binary. Each registers its options on the CLI11 app and returns
// the function that runs it; exit codes are decided only in main.cc.

#include <CLI/CLI.hpp>
#include <functional>

namespace pipescope::cli {

// Exit codes: 0 ok, 1 bad input (scenario, flags, files), 2 schedule rejected or deadlocked, 3 internal,
// 4 calibration refused by a quality gate (calib/gates.h; no profile written).
inline constexpr int kExitInput = 1;
inline constexpr int kExitSchedule = 2;
inline constexpr int kExitInternal = 3;
inline constexpr int kExitPoorFit = 4;

// Thrown for user errors detected in cli/ (bad flag values, unwritable files).
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Command {
  CLI::App* app = nullptr;   // the subcommand
  std::function<int()> run;  // runs it after parsing; returns the exit code
};
Command add_simulate(CLI::App& app);
Command add_show(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_plan(CLI::App& app);       // TeraPipe planner (plan_cmd.cc)
Command add_repro(CLI::App& app);      // paper reproductions (repro_cmd.cc)
Command add_sweep(CLI::App& app);      // parameter sweeps to CSV (sweep_cmd.cc)
Command add_calibrate(CLI::App& app);  // device profiles (calibrate_cmd.cc, calib/)
Command add_import(CLI::App& app);     // other tools' configurations as scenarios (import_cmd.cc)

}  // namespace pipescope::cli
