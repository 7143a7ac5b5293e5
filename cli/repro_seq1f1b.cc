// `pipescope repro seq1f1b [--dir D] [--models 2.7b,7b,...] [--memory-only] [--json F]`: the Seq1F1B paper's grid
// in simulation (sim/repro_seq1f1b.h).
#include "sim/repro_seq1f1b.h"

#include <cstdio>
#include <memory>

#include "cli/repro.h"
#include "core/util/data_path.h"

namespace pipescope::cli {

Command add_repro_seq1f1b(CLI::App& repro) {
  auto o = std::make_shared<sim::ReproSeq1f1bOptions>();
  auto* sub = repro.add_subcommand(
      "seq1f1b", "Seq1F1B grid: TFLOP/s, speedups and peak memory of 1F1B, 1F1B-I, Seq1F1B and Seq1F1B-I");
  sub->add_option("--dir", o->dir, "Directory with the grid scenarios (default scenarios/seq1f1b)");
  sub->add_option("--models", o->models, "Only these models, e.g. 2.7b,7b")
      ->delimiter(',')
      ->check(CLI::IsMember({"2.7b", "7b", "13b", "30b"}));
  sub->add_flag("--memory-only", o->memory_only, "Only the memory table (no simulation)");
  sub->add_option("--json", o->json, "Also write every cell's four methods as JSON to this file");
  return {sub, [o] {
            o->dir = data_path(o->dir);  // the shipped scenarios from any directory (core/util/data_path.h)
            return failure_code(sim::repro_seq1f1b(*o, stdout));
          }};
}

}  // namespace pipescope::cli
