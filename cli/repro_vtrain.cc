// `pipescope repro vtrain [--csv F] [--cluster C] [--worst N] [--json F]`: the cost model's fidelity on measured
// runs (sim/repro_vtrain.h).
#include "sim/repro_vtrain.h"

#include <cstdio>
#include <memory>

#include "cli/repro.h"

namespace pipescope::cli {

Command add_repro_vtrain(CLI::App& repro) {
  auto o = std::make_shared<sim::ReproVtrainOptions>();
  auto* sub = repro.add_subcommand(
      "vtrain", "Cost-model fidelity on measured Megatron-DeepSpeed A100 runs: per row, MAPE, worst rows, ranking");
  sub->add_option("--csv", o->csv, "Measured runs (default tests/data/vtrain_a100_dev.csv)");
  sub->add_option("--cluster", o->cluster, "Cluster preset every row runs on (default vtrain-a100)");
  sub->add_option("--json", o->json, "Also write the rows, MAPE and pair ranking as JSON to this file");
  sub->add_option("--worst", o->worst, "Worst rows to list (default 8)")->check(CLI::Range(0, 1 << 30));
  return {sub, [o] { return failure_code(sim::repro_vtrain(*o, stdout)); }};
}

}  // namespace pipescope::cli
