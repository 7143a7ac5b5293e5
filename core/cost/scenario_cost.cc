#include "core/cost/scenario_cost.h"

#include "core/cost/analytic_cost.h"
#include "core/cost/gpu_variation.h"
#include "core/cost/profile_cost.h"

namespace pipescope {

namespace {

std::unique_ptr<CostModel> device_cost_model(const Scenario& s) {
  // The scenario carries the profile's device already (apply_profile at load time); the tables come from the file.
  if (!s.sim.profile.empty()) return std::make_unique<ProfileCostModel>(s, load_profile(s.sim.profile));
  return std::make_unique<AnalyticCostModel>(s);
}

}  // namespace

std::unique_ptr<CostModel> make_cost_model(const Scenario& s) {
  if (s.cluster.gpu_speed_sigma <= 0) return device_cost_model(s);
  return std::make_unique<VariedCostModel>(device_cost_model(s), rank_slowdowns(s));
}

}  // namespace pipescope
