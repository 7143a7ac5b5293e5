#pragma once
// `pipescope repro <paper>`: one sub-subcommand per reproduced paper. Each paper's file defines one
// `Command add_repro_<paper>(CLI::App& repro)` that adds its subcommand under `repro` and calls its table
// (sim/repro_<paper>.h); cli/repro_cmd.cc lists them.

#include <exception>

#include "cli/commands.h"

namespace pipescope::cli {

// A table keeps going past a row that failed and exits with the first failure's code (0 for none).
int failure_code(const std::exception_ptr& first_failure);  // cli/repro_cmd.cc

Command add_repro_terapipe(CLI::App& repro);  // cli/repro_terapipe.cc
Command add_repro_megatron(CLI::App& repro);  // cli/repro_megatron.cc
Command add_repro_seq1f1b(CLI::App& repro);   // cli/repro_seq1f1b.cc
Command add_repro_vtrain(CLI::App& repro);    // cli/repro_vtrain.cc

}  // namespace pipescope::cli
