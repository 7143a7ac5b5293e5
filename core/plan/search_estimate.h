#pragma once
// Stage 2 of `pipescope search` (core/plan/search.h), made fast enough for thousands of candidates: the critical path
// of one replica's lowered DAG with the cost model, no SimGrid. What makes it fast, without changing a result:
// - the DAG is kept per structure (core/plan/search_retime.h: a key of the scenario fields the lowered programs' shape
//   follows, and a fingerprint of the cost answers it depends on); a candidate of a known structure (recompute
//   on/off, the same micro-batch count with another tp, ...) is NOT lowered: its cost model answers each distinct
//   question of the structure once (a compute op's kind, virtual stage and token range; a message; a collective),
//   a duration per class follows, then one pass over the nodes in a stored topological numbering;
// - a new structure is lowered once, the cost model asked once per distinct (op kind, virtual stage, token range,
//   sequences) instead of once per op, and every re-costed node checked against that lowering; its DAG is made as
//   the lowering writes its ops (ShapeBuilder::emit: the one lowering, through a sink; no program kept, no message
//   matched), or, for blocking sends and overlapped collectives, built from the kept programs (ShapeBuilder::build);
// - collective times are computed once per (group, bytes).
// docs/search.md describes the method.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/lower/lowering.h"
#include "core/model/config.h"
#include "core/plan/search.h"
#include "core/plan/search_retime.h"

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

 private:
  std::vector<DagShapePtr> shapes_;  // the latest structures (core/plan/search_retime.h)
  std::unique_ptr<Retimer> retimer_;
  std::unique_ptr<ShapeBuilder> builder_;  // a new structure's shape, built in the storage of the previous one
  std::size_t built_ = 0;
};

// One replica's programs (worker = pipeline rank) with everything lower() gives them for the scenario's dp, the
// data-parallel gradient synchronisation included (core/lower/grad_sync.h: all-reduce, or the distributed optimizer's
// reduce-scatter and parameter all-gather, bucketed and overlapped as the training options say); its data-parallel
// groups have the one worker (the estimate rings them over the real dp peers). Blocking sends as sim.p2p says.
LoweredSchedule lower_one_replica(const Scenario& s, Schedule sch, const CostModel& cost);
// The same lowering written to `sink` (core/lower/lowering.h lower_to; `ls` gets the groups), before the p2p mode
// (with_p2p_mode: eager sends are the lowering's own).
void lower_one_replica_to(const Scenario& s, Schedule sch, const CostModel& cost, LoweredSchedule& ls,
                          LoweringSink& sink);

// The candidates reordered so that those of one structure (schedule kind, pp, v, micro-batches and their slices,
// whether tp and dp exceed 1, the gradient-sync options) come one after another, tp > 1 before tp = 1 (whose
// candidates a tp > 1 structure times too): stage 2 in this order builds each DAG once. Stable: the enumeration
// order within a structure.
void order_by_structure(std::vector<Candidate>& c);

}  // namespace pipescope
