#include "core/plan/search_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/ir/schedule.h"
#include "core/lower/cost_model.h"
#include "core/lower/op_price.h"
#include "core/model/placement.h"
#include "core/model/schedule_registry.h"
#include "core/plan/pipeline.h"
#include "core/plan/search_retime.h"
#include "core/plan/search_timing.h"

namespace pipescope {
namespace {

// Per virtual stage g and slice k, the durations the bound adds: a compute op of the candidate's cost model with its
// slice's tokens (as make_op gives them), and with tp > 1 the tensor-parallel all-reduces the lowering puts right
// after it on its rank's program (before any send of its output: core/lower/lowering.cc TpRule), timed as stage 2 times
// them (core/plan/search_timing.h, each rank's TP group on its own GPUs).
struct StageCosts {
  std::vector<double> fwd, bwd, grad;  // [g * slices + k]: forward; whole backward (B, or I + W); input gradient
};

class StageCoster {
 public:
  StageCoster(const Scenario& s, const CostModel& cost)
      : s_(s), cost_(cost), placement_(scenario_placement(s)), timing_(s, placement_, tp_groups(s)) {}
  // An op's compute seconds and its TP all-reduces (worker: the op's rank); compute alone where overlapped pairs may
  // hide the all-reduces (core/lower/overlap.h: a pair's compute is only stretched, so this stays a lower bound).
  double operator()(const Op& op) {
    const bool tp = s_.parallel.tp > 1 && !pairs_;
    const OpAnswers a = ask_op(cost_, op, s_.parallel.micro_batch_size, tp ? kAskCompute | kAskTp : kAskCompute);
    if (a.tp_calls <= 0) return a.compute_s;
    DagNode n;
    n.kind = DagKind::Collective;
    n.group = op.rank;
    return a.compute_s + timing_.duration_s(costed_op(tp_allreduce_op(op, a, op.rank), n));
  }

 private:
  // The one-replica lowering's TP groups: one per pipeline rank, group r of worker r.
  static std::vector<CollGroup> tp_groups(const Scenario& s) {
    std::vector<CollGroup> g;
    if (s.parallel.tp > 1)
      for (int r = 0; r < s.parallel.pp; r++) g.push_back(CollGroup{CollTag::TensorParallel, {r}, NodeDedup{}});
    return g;
  }
  const Scenario& s_;
  const CostModel& cost_;
  const bool pairs_ = schedule_entry(s_.schedule.kind).traits.overlapped || s_.schedule.overlap_moe_a2a;
  const Placement placement_;
  ReplicaTiming timing_;
};

StageCosts stage_costs(const Scenario& s, const ShapeKey& key, const CostModel& cost, bool split) {
  const int stages = s.parallel.pp * s.parallel.v, slices = static_cast<int>(key.slice_begin.size());
  const StageStyle style = scenario_stage_style(s);
  StageCoster time(s, cost);
  StageCosts c;
  const auto n = static_cast<std::size_t>(stages) * static_cast<std::size_t>(slices);
  c.fwd.resize(n), c.bwd.resize(n), c.grad.resize(n);
  for (int g = 0; g < stages; g++)
    for (int k = 0; k < slices; k++) {
      Op op;
      op.stage = g;
      op.rank = stage_rank(style, s.parallel.pp, g);
      op.chunk = 0;  // the cost model reads kind, stage and tokens only
      op.slice = k;
      op = with_tokens(op, key.slice_begin, s.model.seq_len);
      const auto at = static_cast<std::size_t>(g) * static_cast<std::size_t>(slices) + static_cast<std::size_t>(k);
      op.kind = OpKind::Forward;
      c.fwd[at] = time(op);
      if (split) {
        op.kind = OpKind::BackwardInput;
        c.grad[at] = time(op);
        op.kind = OpKind::BackwardWeight;
        c.bwd[at] = c.grad[at] + time(op);
      } else {
        op.kind = OpKind::Backward;
        c.bwd[at] = c.grad[at] = time(op);
      }
    }
  return c;
}

// The smallest over slices of the sum of `d` over the stages below `below`.
double chain_below(const std::vector<double>& d, int below, int slices) {
  double best = std::numeric_limits<double>::infinity();
  for (int k = 0; k < slices; k++) {
    double sum = 0;
    for (int g = 0; g < below; g++) sum += d[static_cast<std::size_t>(g) * slices + k];
    best = std::min(best, sum);
  }
  return below > 0 ? best : 0.0;
}

// The bound of a keyed scenario (stage2_lower_bound).
double lower_bound_s(const Scenario& s, const ShapeKey& key) {
  const auto cost = make_cost_model(s);
  const bool split = schedule_entry(s.schedule.kind).traits.split_backward;
  const StageCosts c = stage_costs(s, key, *cost, split);
  const int p = s.parallel.pp, stages = p * s.parallel.v, slices = static_cast<int>(key.slice_begin.size());
  const double m = s.parallel.micro_batches();
  const StageStyle style = scenario_stage_style(s);
  // Per rank: its lowest stage, the sum over its stages of one micro-batch's ops (all, and forward + input gradient).
  std::vector<int> lowest(static_cast<std::size_t>(p), stages);
  std::vector<double> all(static_cast<std::size_t>(p), 0.0), to_grad(static_cast<std::size_t>(p), 0.0);
  for (int g = 0; g < stages; g++) {
    const auto r = static_cast<std::size_t>(stage_rank(style, p, g));
    lowest[r] = std::min(lowest[r], g);
    for (int k = 0; k < slices; k++) {
      const auto at = static_cast<std::size_t>(g) * slices + k;
      all[r] += c.fwd[at] + c.bwd[at];
      to_grad[r] += c.fwd[at] + c.grad[at];
    }
  }
  double bound_s = 0;
  for (int r = 0; r < p; r++) {
    const auto i = static_cast<std::size_t>(r);
    const double head = chain_below(c.fwd, lowest[i], slices);
    const double tail = chain_below(c.grad, lowest[i], slices);
    bound_s = std::max({bound_s, head + m * all[i] + cost->optimizer_seconds(r), head + m * to_grad[i] + tail});
  }
  return bound_s;
}

// DualPipe's micro-batches visit half the virtual stages each, which the bound's per-rank sums do not follow: its
// candidates get no bound and are all estimated.
bool boundable(const Scenario& s) { return scenario_stage_style(s) != StageStyle::Dual; }

}  // namespace

bool stage2_lower_bound(const Scenario& s, double& bound_s) {
  ShapeKey key;
  if (!boundable(s) || !shape_key(s, key)) return false;
  bound_s = lower_bound_s(s, key);
  return true;
}

std::vector<Stage2Value> rank_stage2(const std::vector<Candidate>& c, int keep, const Stage2Estimate& estimate) {
  const std::size_t n = c.size();
  const auto k = static_cast<std::size_t>(std::max(keep, 1));
  // Per candidate its bound (< 0: none, estimated whatever the threshold) and its structure (the shape its estimate
  // builds or re-times, core/plan/search_retime.h; -1: none).
  std::vector<double> bound(n, -1.0);
  std::vector<std::int64_t> structure(n, -1);
  std::map<std::vector<std::int64_t>, std::int64_t> ids;
  for (std::size_t i = 0; i < n; i++) {
    try {
      ShapeKey key;
      if (!shape_key(c[i].scenario, key)) continue;
      // A tp = 1 candidate is timed by its tp > 1 structure where one is built (ShapeKey::tp_words).
      structure[i] = ids.emplace(key.tp_words.empty() ? key.words : key.tp_words, ids.size()).first->second;
      if (!boundable(c[i].scenario)) continue;
      const double b = lower_bound_s(c[i].scenario, key);
      if (std::isfinite(b)) bound[i] = b * (1 - kBoundMargin);  // else none: a cost the estimate will report
    } catch (const std::exception&) {
      bound[i] = -1.0;  // no bound: the estimate reports why the candidate cannot be costed
    }
  }
  std::vector<Stage2Value> out(n);
  std::vector<bool> done(n, false);
  std::vector<double> best;  // every estimate so far
  double threshold = std::numeric_limits<double>::infinity();
  std::vector<std::size_t> order;  // the bounded candidates, lowest bound first (ties: the earlier one)
  for (std::size_t i = 0; i < n; i++)
    if (bound[i] >= 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bound[a] < bound[b]; });
  auto eligible = [&](std::size_t i) { return !done[i] && (bound[i] < 0 || bound[i] <= threshold); };
  for (bool first = true;; first = false) {
    // A round: the next `keep` candidates by bound that the threshold admits (in the first round also every
    // candidate without a bound), with every other admitted candidate of their structures, so that no structure's
    // DAG is built in two rounds (the threshold only falls: a structure has nothing admitted left after its round).
    std::set<std::int64_t> picked;
    std::size_t taken = 0;
    for (std::size_t i : order) {
      if (taken == k) break;
      if (!eligible(i)) continue;
      picked.insert(structure[i]);
      taken++;
    }
    std::vector<std::size_t> round;
    for (std::size_t i = 0; i < n; i++)
      if (eligible(i) && ((first && bound[i] < 0) || (bound[i] >= 0 && picked.count(structure[i])))) round.push_back(i);
    if (round.empty()) break;
    const std::vector<Stage2Value> got = estimate(round);
    for (std::size_t j = 0; j < round.size(); j++) {
      out[round[j]] = got.at(j);
      done[round[j]] = true;
      if (got[j].how == Stage2Value::How::Estimated) best.push_back(got[j].s);
    }
    if (best.size() >= k) {
      std::nth_element(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(k - 1), best.end());
      threshold = best[k - 1];
    }
  }
  for (std::size_t i = 0; i < n; i++)
    if (!done[i]) out[i] = Stage2Value{Stage2Value::How::Bounded, bound[i], {}};
  return out;
}

}  // namespace pipescope
