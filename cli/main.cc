// pipescope: simulate, plan, calibrate and validate pipeline-parallel training schedules.
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"
#include "core/checks.h"
#include "core/profile.h"
#include "core/scenario.h"

int main(int argc, char** argv) {
  using namespace pipescope;
  CLI::App app{"pipescope: pipeline-parallel LLM training schedules, simulated (SimGrid) and validated"};
  app.require_subcommand(1);
  std::vector<cli::Command> commands{cli::add_simulate(app), cli::add_show(app),     cli::add_plan(app),
                                     cli::add_repro(app),    cli::add_validate(app), cli::add_sweep(app),
                                     cli::add_calibrate(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
    return cli::kExitInput;
  } catch (const ProfileError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cli::kExitInput;
  } catch (const ScenarioError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cli::kExitInput;
  } catch (const cli::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cli::kExitInput;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cli::kExitInput;
  } catch (const CheckError& e) {
    std::fprintf(stderr, "error: schedule rejected by the static checker: %s\n", e.what());
    for (const auto& op : e.ops()) std::fprintf(stderr, "  %s\n", op.c_str());
    return cli::kExitSchedule;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cli::kExitInternal;
  }
}
