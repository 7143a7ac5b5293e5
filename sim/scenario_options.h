// The engine options a scenario asks for, built in one place so that every command that simulates a scenario
// (simulate, validate, sweep, repro, plan --simulate) runs the same engine: the scenario's collectives (or an
// override) and the profile's piecewise link tables.
#pragma once
#include <string>

#include "core/model/config.h"
#include "sim/engine_options.h"

namespace pipescope::sim {

// `collectives` overrides s.sim.collectives when non-empty. Throws ProfileError for an unreadable profile.
EngineOptions engine_options_for(const Scenario& s, const std::string& collectives = "");

}  // namespace pipescope::sim
