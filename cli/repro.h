#pragma once
// `pipescope repro <paper>`: one sub-subcommand per reproduced paper. Each paper's file defines one
// `Command add_repro_<paper>(CLI::App& repro)` that adds its subcommand under `repro`; cli/repro_cmd.cc lists
// them.

#include "cli/commands.h"

namespace pipescope::cli {

Command add_repro_terapipe(CLI::App& repro);  // cli/repro_terapipe.cc
Command add_repro_megatron(CLI::App& repro);  // cli/repro_megatron.cc

}  // namespace pipescope::cli
