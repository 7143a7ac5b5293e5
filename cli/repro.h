#pragma once
// `pipescope repro <paper>`: one sub-subcommand per reproduced paper. Each paper's file defines one
// `Command add_repro_<paper>(CLI::App& repro)` that adds its subcommand under `repro`; cli/repro_cmd.cc lists
// them.

#include "cli/commands.h"
#include "core/config.h"

namespace pipescope::cli {

Command add_repro_terapipe(CLI::App& repro);  // cli/repro_terapipe.cc
Command add_repro_megatron(CLI::App& repro);  // cli/repro_megatron.cc
Command add_repro_seq1f1b(CLI::App& repro);   // cli/repro_seq1f1b.cc
// `pipescope plan` for kind seq1f1b / seq1f1b-i: split points, segment costs and the four methods' peak memory.
int print_seq1f1b_plan(const Scenario& s);  // cli/repro_seq1f1b.cc

}  // namespace pipescope::cli
