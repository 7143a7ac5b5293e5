#pragma once
// The one place that decides which cost model prices a scenario.

#include <memory>

#include "core/lower/cost_model.h"
#include "core/model/config.h"

namespace pipescope {

// The cost model the scenario asks for (analytic, or a calibration profile when sim.profile is set).
std::unique_ptr<CostModel> make_cost_model(const Scenario& s);

}  // namespace pipescope
