// The command line (cli/main.cc): any argument vector must either parse or be refused with CLI11's ParseError,
// which main() turns into exit code 1 (0 for --help / --version). Exercises every subcommand's options and their
// validators (cli/validators.h; CLI::Range lets NaN through, finite_range must not). Nothing runs after a
// successful parse: simulations and MPI jobs are the business of the other fuzzers and of tests/reliability.
// Input: the arguments separated by NUL bytes (at most 32, each at most 256 bytes).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"

using namespace pipescope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"pipescope"};
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 33; i++) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else if (cur.size() < 256) {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty() && args.size() < 33) args.push_back(cur);
  // As main() builds it.
  CLI::App app{"pipescope"};
  app.set_version_flag("--version", "pipescope fuzz");
  app.require_subcommand(1);
  bool allow_large = false;
  const std::vector<cli::Command> commands = cli::add_commands(app, &allow_large);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;  // exit code 0 or 1 in main()
  }
  // A parsed command line names exactly one subcommand.
  int parsed = 0;
  for (const auto& c : commands) parsed += c.app->parsed() ? 1 : 0;
  if (parsed != 1) {
    std::fprintf(stderr, "fuzz_cli: %d subcommands parsed\n", parsed);
    std::abort();
  }
  return 0;
}
