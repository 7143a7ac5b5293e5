// pipescope: simulate, plan, calibrate and validate pipeline-parallel training schedules.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/lower/checks.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"
#include "core/util/input_file.h"

namespace {

// Levenshtein distance, for "did you mean" on a mistyped subcommand.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first positional word when it names no subcommand: "unknown subcommand 'simulat' (did you mean 'simulate'?)".
std::string subcommand_hint(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  std::string best;
  std::size_t best_d = word.size();
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == word) return "";
    const std::size_t d = edit_distance(word, sub->get_name());
    if (d < best_d) best_d = d, best = sub->get_name();
  }
  std::string hint = "unknown subcommand '" + word + "'";
  if (!best.empty() && best_d <= 3) hint += " (did you mean '" + best + "'?)";
  return hint + "; `pipescope --help` lists them";
}

// A command's result once its standard output is out: a table or CSV that could not be written (a full disk,
// /dev/full, a closed pipe's EIO) is an environment error (exit 3), not a success.
int stdout_written(int code) {
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout)
    throw pipescope::OutputWriteError("standard output: write failed");
  return code;
}

// An option given an empty value (`--json ''`, `calibrate --analytic ''`) is bad input: left alone, an empty
// string reads as "not given" and the command went on without the output or with its default. Positional
// arguments are exempt (import passes Megatron's own flags through, where '' can be a value).
void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional() || opt->get_type_size() == 0) continue;  // positionals and flags
    for (const std::string& r : opt->results())
      if (r.empty()) throw std::invalid_argument(opt->get_name() + ": an empty value ('')");
  }
  for (const CLI::App* sub : app.get_subcommands()) refuse_empty_values(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pipescope;
  CLI::App app{"pipescope: pipeline-parallel LLM training schedules, simulated (SimGrid) and validated"};
  app.set_version_flag("--version", std::string("pipescope ") + PIPESCOPE_VERSION);
  app.require_subcommand(1);
  bool allow_large = false;
  std::vector<cli::Command> commands = cli::add_commands(app, &allow_large);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is bad input (1), not CLI11's own codes (105, 106, ...).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    const std::string hint = subcommand_hint(app, argc, argv);
    if (!hint.empty()) {
      std::fprintf(stderr, "error: %s\n", hint.c_str());
      return cli::kExitInput;
    }
    app.exit(e);
    return cli::kExitInput;
  }
  set_allow_large(allow_large);
  try {
    refuse_empty_values(app);
    for (auto& c : commands)
      if (c.app->parsed()) return stdout_written(c.run());
    return cli::kExitInput;
  } catch (const cli::Interrupted& e) {
    std::fprintf(stderr, "error: %s; the job was stopped and its temporary files removed\n", e.what());
    return 128 + e.signal;
  } catch (const std::bad_alloc&) {
    // The work estimate (core/plan/work_estimate.h) refuses runs that would not fit; reaching this is a bug.
    std::fprintf(stderr, "error: out of memory (internal error: the work estimate should have refused this run)\n");
    return cli::kExitInternal;
  } catch (const CheckError& e) {
    std::fprintf(stderr, "error: schedule rejected by the static checker: %s\n", e.what());
    for (const auto& op : e.ops()) std::fprintf(stderr, "  %s\n", op.c_str());
    return cli::kExitSchedule;
  } catch (const std::exception& e) {
    const int code = cli::exit_code_of(e);
    std::fprintf(stderr, "%s: %s\n", code == cli::kExitInternal ? "internal error" : "error", e.what());
    return code;
  }
}
