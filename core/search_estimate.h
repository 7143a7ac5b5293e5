#pragma once
// Stage 2 of `pipescope search` (core/search.h), made fast enough for thousands of candidates: the critical path of
// one replica's lowered DAG with the cost model, no SimGrid. What makes it fast, without changing a result:
// - the cost model is asked once per distinct (op kind, virtual stage, token range, sequences) of a candidate (the
//   lowering asks once per op, and a schedule repeats the same op for every micro-batch);
// - the DAG is built once per structure (the lowered programs' op kinds, peers, groups and producer ops: a
//   signature compared in full, so a hit can never be a different DAG) and its topological order kept; a candidate
//   of a known structure (recompute on/off, the same micro-batch count with another tp, ...) is only re-timed: a
//   duration per node from its own lowered ops and placement, then one pass in that order;
// - collective times are computed once per (group, bytes).
// docs/search.md describes the method.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/config.h"
#include "core/lowering.h"
#include "core/search.h"

namespace pipescope {

class Stage2Estimator {
 public:
  Stage2Estimator();
  ~Stage2Estimator();
  Stage2Estimator(const Stage2Estimator&) = delete;
  Stage2Estimator& operator=(const Stage2Estimator&) = delete;

  // The estimated iteration time of a candidate scenario (seconds); the same value for the same scenario whatever
  // was estimated before. Throws (std::runtime_error, CheckError) when its DAG does not build.
  double estimate(const Scenario& s);

  std::size_t structures_built() const { return built_; }  // DAGs built so far (the rest were re-timed)

  struct Shape;  // a cached DAG structure (core/search_estimate.cc)

 private:
  // A few structures kept (candidates of one structure come close together in the search's enumeration order),
  // the oldest dropped first.
  std::vector<std::unique_ptr<Shape>> shapes_;
  std::size_t built_ = 0;
  std::vector<double> dur_, start_;  // per node, reused
};

// One replica's programs (worker = pipeline rank) with everything lower() gives them for the scenario's dp, the
// data-parallel gradient synchronisation included (core/grad_sync.h: all-reduce, or the distributed optimizer's
// reduce-scatter and parameter all-gather, bucketed and overlapped as the training options say); its data-parallel
// groups have the one worker (the estimate rings them over the real dp peers). Blocking sends as sim.p2p says.
LoweredSchedule lower_one_replica(const Scenario& s, const Schedule& sch, const CostModel& cost);

// The candidates reordered so that those of one structure (schedule kind, pp, v, micro-batches and their slices,
// whether tp and dp exceed 1, the gradient-sync options) come one after another: stage 2 in this order builds each
// DAG once. Stable: the enumeration order within a structure.
void order_by_structure(std::vector<Candidate>& c);

}  // namespace pipescope
