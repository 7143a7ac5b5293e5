// `pipescope fidelity [--set NAME ...] [--json F] [--baseline F] [--rows] [-j N]`: the cost model against every
// development set at once, and the no-regression gate (sim/fidelity.h, docs/fidelity.md).
#include <cstdio>
#include <memory>

#include "cli/repro.h"
#include "sim/fidelity.h"

namespace pipescope::cli {

Command add_fidelity(CLI::App& app) {
  auto o = std::make_shared<sim::FidelityOptions>();
  auto* sub = app.add_subcommand(
      "fidelity", "Cost-model fidelity on every development set: MAPE, signed error, worst row, pair ranking");
  sub->add_option("--set", o->sets, "Only these development sets (docs/fidelity.md), e.g. --set vtrain-a100")
      ->delimiter(',');
  sub->add_option("--json", o->json, "Also write every set's figures and rows as JSON to this file");
  sub->add_option("--baseline", o->baseline,
                  "Gate: exit 6 when a set's MAPE is worse than this earlier --json's by more than 0.5 points, its "
                  "pair ranking drops, it runs fewer rows or is missing");
  sub->add_flag("--rows", o->rows, "Also print every row: measured and simulated time, or why it did not run");
  sub->add_option("-j,--jobs", o->jobs, "Simulations at once (default: the machine's cores)")
      ->check(CLI::Range(1, 1024));
  return {sub, [o] {
            const sim::FidelityOutcome r = sim::run_fidelity(*o, stdout);
            if (r.failed) return failure_code(r.failed);
            return r.regressions.empty() ? 0 : kExitRegression;
          }};
}

}  // namespace pipescope::cli
