#pragma once
// A lower bound of stage 2's estimate (core/plan/search_estimate.h) that needs no lowering and no DAG, and the ranking
// that uses it: only the candidates whose bound can reach the best K are estimated (docs/search.md, "Bounds").
//
// The bound of a keyed candidate (core/plan/search_retime.h ShapeKey) is the longest of one path per pipeline rank r
// through its DAG, every node on it timed with the candidate's own cost model and stage 2's collective timing:
//   head_r: the forwards of the stages below r's lowest virtual stage (r's first op is a forward of one of its
//           stages, which waits for that micro-batch slice's forward through every stage below it);
//   r's own compute ops, one after another (a rank's program is sequential): every forward and backward (I + W
//           when split) of each of its stages, micro-batch and slice;
//   then either its optimizer step, or, after r's last input-gradient op (every forward and input gradient of r
//           come before it), tail_r: the input gradients of the stages below r's lowest stage, down to stage 0.
// Each compute op comes with the tensor-parallel all-reduces the lowering puts right after it (before any send of
// its output). head and tail take the slice whose sum is smallest. Transfers, other collectives and joins on the
// path take >= 0, so the critical path is at least each such sum (floating-point addition is monotone);
// kBoundMargin covers the other order of the same additions.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/plan/search.h"

namespace pipescope {

// The bound is used as bound * (1 - kBoundMargin): the estimate adds the same durations in another order and with
// more terms, so its rounding differs by far less than this share.
inline constexpr double kBoundMargin = 1e-9;

// A lower bound (seconds) of Stage2Estimator::estimate(s); false when s has no bound (no ShapeKey: a schedule file,
// TeraPipe's joint plan, context parallelism). Throws as the cost model does for an op it cannot cost.
bool stage2_lower_bound(const Scenario& s, double& bound_s);

// One candidate's stage-2 outcome.
struct Stage2Value {
  enum class How : std::uint8_t { Estimated, Bounded, Failed, NotRun };
  How how = How::NotRun;
  double s = 0;       // Estimated: the estimate; Bounded: the lower bound, above the K-th estimate
  std::string error;  // Failed: why its DAG does not build
};

// Stage 2 over `c` (in structure order, core/plan/search_estimate.h order_by_structure) for the best `keep` (K). Every
// candidate's bound first; then rounds: the next K candidates by bound that the threshold T admits (bound <= T;
// T = the K-th best estimate so far, infinite before K), with every other admitted candidate of their structures
// (so no structure's DAG is built in two rounds: T only falls), are estimated; until no admitted candidate is left.
// The rest are Bounded: each one's estimate is above T, and T is at least the K-th best estimate of all candidates,
// so the best K by estimate (and their order, ties by label) are those of estimating every candidate. Which
// candidates are estimated depends on the candidates alone, not on how `estimate` spreads the work. Candidates
// without a bound are estimated in the first round. `estimate(indices)` returns the outcomes of those candidates
// (indices ascending), Estimated, Failed or NotRun.
using Stage2Estimate = std::function<std::vector<Stage2Value>(const std::vector<std::size_t>& indices)>;
std::vector<Stage2Value> rank_stage2(const std::vector<Candidate>& c, int keep, const Stage2Estimate& estimate);

}  // namespace pipescope
