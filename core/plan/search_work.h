#pragma once
// The work estimate of a whole `pipescope search` before it starts (core/plan/work_estimate.h has the rates and the
// limits it is checked against).

#include "core/model/config.h"
#include "core/plan/search.h"
#include "core/plan/work_estimate.h"

namespace pipescope {

// `pipescope search`: every point of the space as core/plan/search.h enumerates it (layouts, schedules, v, micro-batch
// sizes, recomputation), each estimated alone; stage 1 (schedule and memory model of every point), stage 2 (one
// replica's DAG of the survivors) and stage 3 (the best `keep` simulated, `jobs` at a time).
GridEstimate estimate_search(const Scenario& base, const SearchSpace& space, int keep, int jobs);
}  // namespace pipescope
