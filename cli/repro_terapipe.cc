// `pipescope repro terapipe [--dir D] [--settings 1,5,...] [--max-batch] [--json F]`: TeraPipe's Table 2 in
// simulation (sim/repro_terapipe.h).
#include "sim/repro_terapipe.h"

#include <cstdio>
#include <memory>

#include "cli/repro.h"
#include "core/util/data_path.h"

namespace pipescope::cli {

Command add_repro_terapipe(CLI::App& repro) {
  auto o = std::make_shared<sim::ReproTerapipeOptions>();
  auto* sub = repro.add_subcommand("terapipe", "TeraPipe Table 2: paper vs simulated latency and speedup, DP slicing");
  sub->add_option("--dir", o->dir, "Directory with setting-N.yaml / setting-N-gpipe.yaml (default scenarios/terapipe)");
  sub->add_option("--settings", o->settings, "Only these settings, e.g. 1,5,10")
      ->delimiter(',')
      ->check(CLI::Range(1, 10));
  sub->add_option("--json", o->json, "Also write Table 2's rows and the MAPE as JSON to this file");
  sub->add_flag("--max-batch", o->max_batch_only,
                "Only Table 1's batch vs the largest batch that fits (no simulation)");
  return {sub, [o] {
            o->dir = data_path(o->dir);  // the shipped scenarios from any directory (core/util/data_path.h)
            return failure_code(sim::repro_terapipe(*o, stdout));
          }};
}

}  // namespace pipescope::cli
