#include "core/cost/scenario_cost.h"

#include "core/cost/analytic_cost.h"
#include "core/cost/profile_cost.h"

namespace pipescope {

std::unique_ptr<CostModel> make_cost_model(const Scenario& s) {
  // The scenario carries the profile's device already (apply_profile at load time); the tables come from the file.
  if (!s.sim.profile.empty()) return std::make_unique<ProfileCostModel>(s, load_profile(s.sim.profile));
  return std::make_unique<AnalyticCostModel>(s);
}

}  // namespace pipescope
