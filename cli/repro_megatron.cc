// `pipescope repro megatron [--dir D] [--rows 1,5,...] [--no-ablation] [--json F]`: Megatron-LM's Table 1 and the
// interleaving / scatter-gather ablations in simulation (sim/repro_megatron.h).
#include "sim/repro_megatron.h"

#include <cstdint>
#include <cstdio>
#include <memory>

#include "cli/repro.h"
#include "core/util/data_path.h"

namespace pipescope::cli {

Command add_repro_megatron(CLI::App& repro) {
  auto o = std::make_shared<sim::ReproMegatronOptions>();
  auto* sub = repro.add_subcommand(
      "megatron", "Megatron-LM Table 1: paper vs simulated TFLOP/s per GPU, interleaving and scatter/gather gains");
  sub->add_option("--dir", o->dir, "Directory with the ten Table 1 scenarios (default scenarios/megatron)");
  sub->add_option("--rows", o->rows, "Only these rows (1 = 1.7B .. 10 = 1T), e.g. 1,10")
      ->delimiter(',')
      ->check(CLI::Range(1, 10));
  sub->add_option("--json", o->json, "Also write Table 1's rows, the MAPE and the ablation as JSON to this file");
  sub->add_flag(
      "--no-ablation", [o](std::int64_t) { o->ablation = false; },
      "Skip the GPT-3 175B interleaving / scatter-gather comparison");
  return {sub, [o] {
            o->dir = data_path(o->dir);  // the shipped scenarios from any directory (core/util/data_path.h)
            return failure_code(sim::repro_megatron(*o, stdout));
          }};
}

}  // namespace pipescope::cli
