#pragma once
// From a validated Scenario to a checked, lowered schedule: the one path that `simulate`, `plan`,
// `validate` and the benchmarks share, so no command builds a schedule its own way.

#include <memory>

#include "core/cost/scenario_cost.h"
#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/lowering.h"
#include "core/model/config.h"
#include "core/model/placement.h"

namespace pipescope {

// The compute schedule the scenario asks for (generator chosen by schedule.kind, micro-batches and
// token slices from parallel/schedule). Throws std::invalid_argument naming the scenario on impossible
// requests.
Schedule make_schedule(const Scenario& s);
// The m micro-batches make_schedule cuts when no planner decides them (every case but TeraPipe's joint "dp" plan):
// Seq1F1B's segments, the scenario's slice_tokens, or seq_slices uniform slices. Throws std::invalid_argument.
std::vector<MicroBatch> sliced_scenario_microbatches(const Scenario& s, int m);

struct Prepared {
  Scenario scenario;
  std::unique_ptr<CostModel> cost;
  Schedule schedule;
  LoweredSchedule lowered;
  Placement placement;
};

// The scenario's lowering: lower() with its scatter/gather and gradient-sync options, then the context-parallel
// K/V exchange and the p2p mode (Megatron's order under blocking p2p). The one composition of the passes, for
// prepare() and for anything that lowers a scenario with another cost model (the runtime's tests).
LoweredSchedule lower_scenario(const Scenario& s, const Schedule& sch, const CostModel& cost);
// The scenario's placement (sim.placement, dp x pp x tp x cp over the cluster).
Placement scenario_placement(const Scenario& s);
// Schedule, lowering and placement; the caller runs check() on the result (it keeps references into it,
// so keep the Prepared object alive and unmoved while the CheckedSchedule is used).
std::unique_ptr<Prepared> prepare(const Scenario& s);

}  // namespace pipescope
