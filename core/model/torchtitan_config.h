#pragma once
// TorchTitan's job configuration both ways: `pipescope import torchtitan` reads the `[section] key = value` TOML of a
// TorchTitan job (its train_configs/*.toml) or the same keys as `--section.key value` flags (the command line
// TorchTitan keeps beside its Python configurations), and `--emit torchtitan` writes a scenario as such a TOML. The
// keys that change an iteration's time or memory map to scenario keys (parallelism, pipeline schedule or CSV,
// micro-batches, activation checkpointing, precision, float8); what pipescope cannot model is listed with the reason
// (TorchTitan's FSDP, which shards parameters ZeRO-3 style, is taken as data parallelism with the distributed
// optimizer), the keys with no effect on the time as ignored, the rest as unknown: nothing is dropped silently. The
// model comes from [model] name and flavor (a table of TorchTitan's flavors and pipescope's presets) or from an option.

#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

struct TorchTitanImportOptions {
  std::string name = "torchtitan-import";
  std::string cluster = "dgx-h100";  // cluster preset
  int nodes = 0;                     // 0: as many as one replica (replicate x shard x tp x cp x pp) needs
  std::string model;                 // a model preset, in place of [model] name / flavor
};

struct TorchTitanImport {
  std::string yaml;                      // the scenario, with the mapping as comments
  std::vector<std::string> unknown;      // "section.key = value" not known to the importer
  std::vector<std::string> ignored;      // known, no effect on an iteration's time
  std::vector<std::string> unsupported;  // known, affects the time, not modelled as TorchTitan runs it: "key: why"
};

// `text`: a TOML document (`source` names it in errors). Throws std::invalid_argument naming the file, line and key
// for a malformed document or value, ScenarioError when the loader refuses the result.
TorchTitanImport import_torchtitan_toml(const std::string& text, const std::string& source,
                                        const TorchTitanImportOptions& opt = {});
// The same keys as `--section.key value` (or `--section.key=value`) flags.
TorchTitanImport import_torchtitan_flags(const std::vector<std::string>& args, const TorchTitanImportOptions& opt = {});

// The scenario as a TorchTitan job TOML. Throws std::invalid_argument naming what TorchTitan cannot run (a schedule
// its pipelining has not, a model with no TorchTitan flavor, a split its stage options cannot say).
std::string torchtitan_toml(const Scenario& s);

}  // namespace pipescope
