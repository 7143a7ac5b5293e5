#pragma once
// `pipescope import megatron -- <pretrain_gpt.py arguments>`: a Megatron-LM launch's command line as a scenario.
// The model, batch, parallel layout, schedule and precision flags map to scenario keys; the cluster is not in
// those arguments and comes from the import options (a cluster preset and a node count). Arguments that do not
// change an iteration's time (learning rate, data paths, logging) are listed as ignored; arguments this
// importer does not know are listed as unknown, and features pipescope does not model (mixture of experts,
// partial recomputation, ...) as unsupported: nothing is dropped silently. The YAML goes through the scenario
// loader before it is returned, so an impossible layout fails here with the loader's message.

#include <string>
#include <vector>

namespace pipescope {

struct MegatronImportOptions {
  std::string name = "megatron-import";
  std::string cluster = "dgx-a100";  // cluster preset
  int nodes = 0;                     // 0: as many as dp = 1 needs (tp * pp GPUs)
};

struct MegatronImport {
  std::string yaml;                      // the scenario, with the mapping as comments
  std::vector<std::string> unknown;      // "--flag [value]" not known to the importer
  std::vector<std::string> ignored;      // known, no effect on an iteration's time
  std::vector<std::string> unsupported;  // known, affects the time, not modelled: "<flag>: why"
};

// Throws std::invalid_argument naming the flag for a missing or malformed value, a missing required flag
// (--num-layers, --hidden-size, --num-attention-heads, --seq-length, --micro-batch-size, --global-batch-size) or
// a layout that does not divide; ScenarioError when the loader refuses the result.
MegatronImport import_megatron(const std::vector<std::string>& args, const MegatronImportOptions& opt = {});

}  // namespace pipescope
