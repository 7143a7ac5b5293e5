#pragma once
// A driver run in a forked child (sim/child_process.h): the engine's folded trial run, whose times decide
// whether the fold stands, must not use up this process's one SimGrid run.

#include <functional>
#include <optional>

#include "sim/engine_internal.h"

namespace pipescope::sim {

// Runs `fn` in a forked child and returns its DriverOutcome, or nothing when the child failed.
std::optional<DriverOutcome> outcome_in_child(const std::function<DriverOutcome()>& fn);

}  // namespace pipescope::sim
