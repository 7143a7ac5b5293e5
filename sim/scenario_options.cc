#include "sim/scenario_options.h"

#include "core/model/profile.h"

namespace pipescope::sim {

EngineOptions engine_options_for(const Scenario& s, const std::string& collectives) {
  EngineOptions eo;
  eo.collectives = collectives.empty() ? s.sim.collectives : collectives;
  eo.link_tables = piecewise_link_tables(s.sim.profile);
  return eo;
}

}  // namespace pipescope::sim
