#pragma once
// TeraPipe's optimal slicing (docs/papers.md#terapipe): the token DP of Algorithm 1 under a cap t_max, the
// enumeration of t_max, and the joint batch/token split (1-D knapsack over micro-batch sizes, pipeline fill
// term counted once). Pure arithmetic on a slice-time function t(b, l, c); no SimGrid.
//
// Exact by default: instead of scanning every candidate t_max, the candidates (sorted distinct table values)
// are searched by interval bisection with the bound T >= max(K * m_lo, S*(m_hi) + (K - 1) * m_lo) for every
// slicing whose slowest slice lies in [m_lo, m_hi] (S* is non-increasing in t_max). Intervals that cannot
// beat the incumbent are dropped, so the result equals full enumeration. The paper's straightforward scan
// (ascending candidates, epsilon-skipping, early stop K * t_max > best) is kept as `linear_scan` for
// comparison (bench/bench_planner.cc).

#include <functional>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

// t(l, c) for one micro-batch size on the grain grid: l >= 1 and c >= 0 in grain units with l + c <= units.
// Stored row by slice end e = c + l (row e holds l = 1..e), the order Algorithm 1 reads it in.
class SliceTimeTable {
 public:
  SliceTimeTable() = default;
  // t_units(l, c) in grain units; throws std::invalid_argument on a negative or non-finite value.
  SliceTimeTable(int units, const std::function<double(int l, int c)>& t_units);
  int units() const { return units_; }
  double at(int l, int c) const { return v_[offset(l + c) + l - 1]; }
  const double* row(int end) const { return v_.data() + offset(end); }  // row(e)[k - 1] = t(k, e - k)
  const std::vector<double>& values() const { return v_; }

 private:
  static std::size_t offset(int e) { return static_cast<std::size_t>(e - 1) * e / 2; }
  int units_ = 0;
  std::vector<double> v_;
};

struct PlannerOptions {
  int grain = 8;             // tokens per DP unit (the authors' STEP_GAP)
  double epsilon_s = 0.0;    // linear scan only: skip candidates closer than this to the last evaluated one
  bool linear_scan = false;  // the paper's straightforward candidate scan instead of the exact bisection
};

// Token DP (Algorithm 1) under one cap: the minimum sum of slice times with every slice <= t_max. Slices in
// grain units, first slice first; empty when infeasible.
struct CappedSlicing {
  double sum_s = 0, max_s = 0;
  std::vector<int> slices;
  bool feasible() const { return !slices.empty(); }
};
CappedSlicing token_dp(const SliceTimeTable& t, double t_max);

// A plan: groups of identical micro-batches (b sequences, token slices), in pipeline order.
struct MicroBatchGroup {
  int b = 1;                      // sequences per micro-batch
  int count = 1;                  // micro-batches of this kind
  std::vector<int> slice_tokens;  // token slices of each of them, first slice first
};
struct SlicingPlan {
  std::vector<MicroBatchGroup> groups;
  double sum_s = 0;                 // busy time of one stage: sum of all slice times
  double max_s = 0;                 // slowest slice
  double fixed_s = 0;               // per-iteration constant (optimizer step)
  double total_s = 0;               // sum + (K - 1) * max + fixed: the latency formula
  int evaluated = 0;                // t_max candidates evaluated (DP runs)
  int candidates = 0;               // distinct candidate values
  int slices_per_sequence() const;  // slices of the first group
};

// Token-only plan for one sequence (B_r = 1): `t` in grain units; slice lengths in the result are in tokens
// (units * grain).
SlicingPlan plan_tokens(const SliceTimeTable& t, int K, const PlannerOptions& o, double fixed_s = 0);
// Joint plan: tables[b - 1] is t for micro-batches of b sequences (b = 1..Bmax), `batch` = B_r sequences.
SlicingPlan plan_joint(const std::vector<SliceTimeTable>& tables, int batch, int K, const PlannerOptions& o,
                       double fixed_s = 0);

// Paper notation: "[(1, [776, 640, 632])] * 16", runs compressed as "[64] * 26 + [56] * 6 + [48]".
std::string slices_text(const std::vector<int>& slice_tokens);
std::string scheme_text(const SlicingPlan& p);
// Latency formula for a given scheme: B groups, slice times from `t(b, l, c)` in tokens.
using SliceTimeFn = std::function<double(int b, int l, int c)>;
double scheme_seconds(const SliceTimeFn& t, const std::vector<MicroBatchGroup>& groups, int K, double fixed_s,
                      double* sum_s = nullptr, double* max_s = nullptr);

// ---------------------------------------------------------------- scenario glue
// What the planner needs from a scenario: per-stage slice time (fwd + bwd of one stage's layers on a middle
// stage, its tensor-parallel all-reduces, and one activation plus one gradient send to the neighbour stage),
// the per-iteration optimizer time, K and B_r. Communication uses the inter-node link when any stage boundary
// crosses nodes (as the authors' profiler did) and NVLink otherwise.
struct ScenarioSliceModel {
  SliceTimeFn t;
  double fixed_s = 0;
  int K = 1, batch = 1, seq_len = 0;
};
ScenarioSliceModel scenario_slice_model(const Scenario& s);
// Tables for b = 1..max_b on the grain grid; throws std::invalid_argument when seq_len % grain != 0.
std::vector<SliceTimeTable> slice_tables(const ScenarioSliceModel& m, int grain, int max_b);
// The scenario's plan: joint DP over micro-batch sizes 1..max_b (clamped to B_r).
SlicingPlan plan_scenario(const Scenario& s, const PlannerOptions& o, int max_b);

}  // namespace pipescope
