#pragma once
// Scenario loading (yaml-cpp). Presets (core/model/presets.h) give defaults that the file overrides field by
// field. Every error names file:line:column and the key path, e.g.
//   scenarios/x.yaml:14:7: parallel.pp: expected a positive integer, got "-2"
// Unknown keys, wrong types, missing fields and impossible combinations are errors (ScenarioError).

#include <optional>
#include <stdexcept>
#include <string>

#include "core/model/config.h"
#include "core/util/yaml_boolean.h"

namespace pipescope {

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The cross-field checks (validate_scenario) rejected a scenario whose fields are each well-formed: an
// impossible combination (dp * pp * tp vs GPUs, divisibility), which `sweep` and `search` report as a row.
class ScenarioCombinationError : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

// Load a scenario file. Throws ScenarioError. A non-empty `profile` (a path as the user gave it, e.g. from
// `--profile`) takes the place of the file's sim.profile before validation, so that settings only a profile can
// serve (training.dtype fp64 on a CPU profile) load.
Scenario load_scenario(const std::string& path, const std::string& profile = "");
// A scenario file's fields without the cross-field checks (the ScenarioCombinationError ones: layout against the
// GPUs, divisibility, a schedule's constraints): `search` takes the model and cluster of a file whose own layout
// may not fit. Every field is still checked on its own.
Scenario load_scenario_fields(const std::string& path);
// Parse YAML text; `source` is the name used in messages. Relative paths in it (schedule.file, sim.profile) are
// relative to the directory of `path_base` (default: `source`).
Scenario parse_scenario(const std::string& yaml_text, const std::string& source, const std::string& path_base = "");
// The built-in default scenario (`pipescope simulate` with no argument).
Scenario default_scenario();
// YAML text of the built-in default scenario.
const char* default_scenario_yaml();

// Cross-field validation (dp*pp*tp vs GPUs, divisibility, schedule constraints). Called by the loaders;
// exposed for scenarios built in code. Throws ScenarioError naming `source` and the key.
void validate_scenario(const Scenario& s);

// load_profile + apply_profile + validate_scenario: what `--profile FILE` does to a loaded scenario.
Scenario use_profile(const Scenario& s, const std::string& path);

}  // namespace pipescope
