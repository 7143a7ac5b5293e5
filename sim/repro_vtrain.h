#pragma once
// `pipescope repro vtrain`: the cost model's fidelity report on measured Megatron-DeepSpeed runs (the vTrain A100
// development set, docs/cost-model.md "Fidelity"). Every row becomes a scenario on the one cluster description
// (core/plan/measured_runs.h vtrain_scenario), simulated in its own process; prints predicted vs measured per row,
// the MAPE, the worst rows and the pair-ranking accuracy (pairs of layouts of the same model, GPU count and batch
// ordered as measured), next to a layout-only model fitted to the measured times themselves.

#include <cstdio>
#include <exception>
#include <string>

namespace pipescope::sim {

struct ReproVtrainOptions {
  std::string csv = "tests/data/vtrain_a100_dev.csv";  // found from any directory (core/util/data_path.h)
  std::string cluster = "vtrain-a100";                 // the cluster preset every row runs on
  std::string json;  // --json: rows and figures (docs/schemas/repro-vtrain.schema.json)
  int worst = 8;     // worst rows to list
};

// The report on `out`; returns the first row that failed to simulate (null when every one ran). An unknown cluster
// preset is std::invalid_argument.
std::exception_ptr repro_vtrain(const ReproVtrainOptions& o, std::FILE* out);

}  // namespace pipescope::sim
