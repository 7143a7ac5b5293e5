// Scenario variants, the grid of `pipescope sweep`: `--vary key=v1,v2,...` arguments (key a YAML path such as
// schedule.seq_slices; a value any YAML value, flow sequences included: slice_tokens=[8,8],[4,12]) and the scenario
// with one value per axis set in its text.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/model/scenario.h"

namespace pipescope {

struct VaryAxis {
  std::string key;                  // "schedule.seq_slices"
  std::vector<std::string> path;    // {"schedule", "seq_slices"}
  std::vector<std::string> values;  // YAML text of each value
};

// One `key=v1,v2,...`; throws std::invalid_argument naming the argument (malformed key, empty value, brackets).
VaryAxis parse_vary_axis(const std::string& arg);
// Every argument, at least one, no key twice.
std::vector<VaryAxis> parse_vary_axes(const std::vector<std::string>& args);

struct ScenarioVariant {
  Scenario scenario;
  std::vector<std::string> values;  // one per axis
  std::string text;                 // "schedule.seq_slices=4 parallel.micro_batch_size=2"
  std::string invalid;              // why the cross-field checks reject this combination (empty: valid)
};

// `base_text` (the file `source`, or "<builtin>") with axis a set to its value number pick[a] (missing mappings
// are created; the loader rejects unknown keys). Relative paths (schedule.file, sim.profile) stay relative to
// `source`. A key or value the loader refuses throws ScenarioError at the key's position in `source` when it is
// written there; a combination the cross-field checks reject is returned with `invalid` set.
ScenarioVariant make_scenario_variant(const std::string& source, const std::string& base_text,
                                      const std::vector<VaryAxis>& axes, const std::vector<std::size_t>& pick);

// `s` run as TeraPipe with micro-batches of one sequence, each cut into `slice_tokens` (explicit slicing): a plan's
// or a paper's scheme, to simulate (`pipescope plan --simulate`, repro terapipe, the TeraPipe development set).
Scenario with_token_slices(Scenario s, const std::vector<int>& slice_tokens);
// Whole sequences: one slice per micro-batch, no explicit slices, uniform slicing.
void drop_slicing(ScheduleSpec& s);
// The same scenario with another schedule kind (`simulate --compare`, `repro seq1f1b`, `validate --schedule`: the
// one re-slicing of a scenario for a new kind): interleaving gets v = 2
// when the scenario has v = 1 (or the schedule's fixed v), schedules of whole sequences drop the token slicing, and
// a generated kind drops the schedule file a `kind: file` scenario names, and a kind without a combined 1F1B drops
// schedule.overlap_moe_a2a (it keeps its own pairs, or has none); a parallel.stage_layers written for another chunk
// count is re-split over the new one (ends_lighter_split, core/model/placement.h).
// Not validated: the caller's checks name the variant.
Scenario with_schedule(const Scenario& base, ScheduleKind kind);

}  // namespace pipescope
