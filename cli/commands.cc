#include "cli/commands.h"

namespace pipescope::cli {

sim::ImageFormat timeline_format(const std::string& path, const std::string& format) {
  return format.empty() ? sim::image_format_from_path(path) : sim::image_format_from_name(format, "--timeline-format");
}

std::vector<Command> add_commands(CLI::App& app, bool* allow_large) {
  std::vector<Command> commands{add_simulate(app), add_show(app),     add_plan(app),  add_repro(app),
                                add_fidelity(app), add_validate(app), add_sweep(app), add_calibrate(app),
                                add_search(app),   add_import(app),   add_plot(app)};
  // Every subcommand takes --allow-large: the work estimate's limits (core/plan/work_estimate.h, docs/limits.md).
  if (allow_large)
    for (const Command& c : commands)
      c.app->add_flag("--allow-large", *allow_large,
                      "Run even when the work estimate is over the limits of docs/limits.md (not above free memory)");
  return commands;
}

}  // namespace pipescope::cli
