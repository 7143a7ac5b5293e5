#include "core/plan/search_estimate.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cost/context_parallel.h"
#include "core/cost/expert_parallel.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/grad_sync.h"
#include "core/lower/lowering.h"
#include "core/lower/megatron_p2p.h"
#include "core/model/placement.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/search.h"
#include "core/plan/search_retime.h"
#include "core/plan/search_timing.h"
#include "core/util/memo_table.h"

namespace pipescope {
namespace {

// The cost model asked once per distinct question. Every cost model's answer for an op depends on its kind,
// virtual stage and token range and on the micro-batch's sequence count only (not on which micro-batch or slice
// it is: the same work costs the same), so those are the key.
class MemoCost final : public CostModel {
 public:
  explicit MemoCost(const CostModel& c) : c_(c) {}
  double compute_seconds(const Op& op, int seqs) const override {
    return memo(compute_, op, seqs, [&] { return c_.compute_seconds(op, seqs); });
  }
  double p2p_bytes(const Op& op, int seqs) const override {
    return memo(p2p_, op, seqs, [&] { return c_.p2p_bytes(op, seqs); });
  }
  // Asked for every compute op when tp > 1 (core/lower/lowering.cc, TpRule); an int, exact as a double.
  int tp_allreduce_calls(const Op& op) const override {
    return static_cast<int>(memo(tp_calls_, op, 0, [&] { return static_cast<double>(c_.tp_allreduce_calls(op)); }));
  }
  double tp_allreduce_bytes(const Op& op, int seqs) const override {
    return memo(tp_, op, seqs, [&] { return c_.tp_allreduce_bytes(op, seqs); });
  }
  double grad_bytes(int rank) const override { return c_.grad_bytes(rank); }
  double optimizer_seconds(int rank) const override { return c_.optimizer_seconds(rank); }
  double embedding_grad_bytes() const override { return c_.embedding_grad_bytes(); }
  double param_bytes(int rank) const override { return c_.param_bytes(rank); }
  double expert_grad_bytes(int rank) const override { return c_.expert_grad_bytes(rank); }
  double expert_param_bytes(int rank) const override { return c_.expert_param_bytes(rank); }

 private:
  // A lowering asks each question for many ops in a row (every micro-batch of a class): in front of each table, the
  // last question of each (kind, stage, slice), direct-mapped (no hash, no probe); a slot holding another question
  // falls through to the table.
  struct Front {
    std::uint64_t a = ~std::uint64_t{0}, b = 0;  // no question has this key (kinds are below 2^8)
    double v = 0;
  };
  static constexpr std::size_t kFront = 1024;
  struct Memo {
    MemoTable table;
    std::vector<Front> front = std::vector<Front>(kFront);
  };
  template <class F>
  static double memo(Memo& m, const Op& op, int seqs, const F& ask) {
    auto u32 = [](std::int32_t x) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)); };
    // kind | stage | sequences, token range
    const std::uint64_t a = static_cast<std::uint64_t>(op.kind) | u32(op.stage) << 8 | u32(seqs) << 32;
    const std::uint64_t b = u32(op.tok_begin) | u32(op.tok_end) << 32;
    Front& f = m.front[(u32(op.stage) * 64 + u32(op.slice) * 4 + static_cast<std::uint64_t>(op.kind)) % kFront];
    if (f.a == a && f.b == b) return f.v;
    const double v = m.table.get(a, b, ask);
    f = Front{a, b, v};
    return v;
  }
  const CostModel& c_;
  mutable Memo compute_, p2p_, tp_, tp_calls_;
};

// A few structures kept (candidates of one structure come close together in the search's enumeration order), the
// oldest dropped first.
constexpr std::size_t kShapesKept = 8;

// Replica 0's GPUs of the real placement: the one replica's DAG is built on them, so pipeline hops cross nodes where
// the real run's do.
Placement one_replica(const Scenario& s, const Placement& full) {
  Placement one = full;
  one.dp = 1;
  one.gpu.assign(full.gpu.begin(), full.gpu.begin() + static_cast<std::ptrdiff_t>(s.parallel.pp) * full.width());
  return one;
}

// An MoE candidate's compute ops with their all-to-alls added (a one-replica lowering has no expert-parallel groups):
// the NCCL model's time for each, core/cost/expert_parallel.h moe_alltoall_estimate_s; and the routed experts'
// gradients synchronised with the dense ones (over the data-parallel ring: the expert-data-parallel one is a share
// of it).
class WithAllToAlls final : public CostModel {
 public:
  WithAllToAlls(const Scenario& s, const CostModel& c) : s_(s), c_(c), edp_(s.parallel.expert_data_gpus() > 1) {}
  double compute_seconds(const Op& op, int seqs) const override {
    return c_.compute_seconds(op, seqs) + moe_alltoall_estimate_s(s_, op, seqs);
  }
  double p2p_bytes(const Op& op, int seqs) const override { return c_.p2p_bytes(op, seqs); }
  int tp_allreduce_calls(const Op& op) const override { return c_.tp_allreduce_calls(op); }
  double tp_allreduce_bytes(const Op& op, int seqs) const override { return c_.tp_allreduce_bytes(op, seqs); }
  double grad_bytes(int rank) const override { return c_.grad_bytes(rank) + (edp_ ? c_.expert_grad_bytes(rank) : 0.0); }
  double optimizer_seconds(int rank) const override { return c_.optimizer_seconds(rank); }
  double embedding_grad_bytes() const override { return c_.embedding_grad_bytes(); }
  double param_bytes(int rank) const override {
    return c_.param_bytes(rank) + (edp_ ? c_.expert_param_bytes(rank) : 0.0);
  }
  double expert_grad_bytes(int rank) const override { return c_.expert_grad_bytes(rank); }
  double expert_param_bytes(int rank) const override { return c_.expert_param_bytes(rank); }
  double recompute_seconds(const Op& op, int seqs) const override { return c_.recompute_seconds(op, seqs); }

 private:
  const Scenario& s_;
  const CostModel& c_;
  const bool edp_;  // the experts' gradients are synchronised at all (more than one GPU holds each expert)
};

}  // namespace

Stage2Estimator::Stage2Estimator()
    : retimer_(std::make_unique<Retimer>()), builder_(std::make_unique<ShapeBuilder>()) {}
Stage2Estimator::~Stage2Estimator() = default;

double Stage2Estimator::estimate(const Scenario& s) {
  ShapeKey key;
  // MoE candidates are estimated directly (their all-to-alls in the compute ops), not re-timed from a shared shape; so
  // is DualPipe, whose copies' shared gradient groups pair the buckets of different model stages.
  const bool copies = scenario_stage_style(s) == StageStyle::Dual;
  if (s.model.moe() || copies || !shape_key(s, key)) return estimate_iteration_s(s);
  const auto model = make_cost_model(s);
  // A known structure: re-timed with the candidate's cost answers, nothing lowered.
  for (const auto* words : {&key.words, &key.tp_words})
    for (const auto& sh : shapes_)
      if (!words->empty() && shape_key_of(*sh) == *words && retimer_->load(*sh, s, key, *model))
        return retimer_->critical_path_s(*sh, s);
  // A new structure, lowered once (with the distributed optimizer where the key says so: the shape then serves
  // the candidates with and without it).
  Scenario with_do;
  if (key.lower_with_do) with_do = s, with_do.training.distributed_optimizer = true;
  const Scenario& b = key.lower_with_do ? with_do : s;
  const auto b_model = key.lower_with_do ? make_cost_model(b) : nullptr;
  const MemoCost cost(b_model ? *b_model : *model);
  if (shapes_.size() >= kShapesKept) {
    builder_->recycle(std::move(shapes_.front()));
    shapes_.erase(shapes_.begin());
  }
  if (ShapeBuilder::emits(b)) {
    shapes_.push_back(builder_->emit(b, cost, key, [&](LoweredSchedule& ls, LoweringSink& sink) {
      lower_one_replica_to(b, make_schedule(b), cost, ls, sink);
    }));
  } else {
    const LoweredSchedule ls = lower_one_replica(b, make_schedule(b), cost);
    shapes_.push_back(builder_->build(ls, one_replica(b, scenario_placement(b)), b, cost, key));
  }
  built_++;
  // The candidate's answers fit the shape it was lowered for; the superset shape of another candidate's answers
  // might not (a parameter gather of no bytes): then the direct estimate.
  // Lowered with the candidate's own model: its memo has every answer already (the same values, asked once).
  if (!retimer_->load(*shapes_.back(), s, key, b_model ? *model : static_cast<const CostModel&>(cost)))
    return estimate_iteration_s(s);
  return retimer_->critical_path_s(*shapes_.back(), s);
}

void lower_one_replica_to(const Scenario& s, Schedule sch, const CostModel& cost, LoweredSchedule& ls,
                          LoweringSink& sink) {
  GradSyncOptions o = grad_sync_options(s.training);
  o.replica_of_dp = s.parallel.dp > 1 || s.parallel.cp > 1;  // with cp, the data-parallel group spans its ranks
  lower_to(std::move(sch), 1, s.parallel.tp, cost, uses_scatter_gather(s), o, ls, sink);
}

LoweredSchedule lower_one_replica(const Scenario& s, Schedule sch, const CostModel& cost) {
  LoweredSchedule ls;
  std::vector<std::vector<LoweredOp>> programs;
  ProgramSink sink(programs);
  lower_one_replica_to(s, std::move(sch), cost, ls, sink);
  ls.per_worker = std::move(programs);
  // The context-parallel K/V rings, then the p2p mode, as lower_scenario() applies them to the whole lowering.
  return with_p2p_mode(add_cp_exchange(std::move(ls), s), s);
}

// The direct estimate: lowered, the DAG built and every node timed from its lowered op (the reference the structure
// cache's re-timing equals).
double estimate_iteration_s(const Scenario& s) {
  const auto model = make_cost_model(s);
  const WithAllToAlls moe(s, *model);
  const MemoCost cost(s.model.moe() ? static_cast<const CostModel&>(moe) : *model);
  const LoweredSchedule ls = lower_one_replica(s, make_schedule(s), cost);
  const Placement full = scenario_placement(s);
  const Dag dag = build_dag(ls, one_replica(s, full));
  ReplicaTiming timing(s, full, ls.groups);
  double makespan = 0;
  for (double f : earliest_finish(dag, [&](std::uint32_t u) { return timing.duration_s(costed_op(ls, dag.nodes[u])); }))
    makespan = std::max(makespan, f);
  return makespan;
}

void order_by_structure(std::vector<Candidate>& c) {
  auto key = [](const Candidate& x) {
    const ParallelSpec& p = x.scenario.parallel;
    const ScheduleSpec& s = x.scenario.schedule;
    const TrainingSpec& t = x.scenario.training;
    return std::make_tuple(s.kind, p.pp, p.v, p.micro_batches(), s.seq_slices, s.slice_tokens, p.tp == 1, p.dp > 1,
                           t.distributed_optimizer, t.overlap_grad_reduce, t.overlap_param_gather);
  };
  std::stable_sort(c.begin(), c.end(), [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
}

}  // namespace pipescope
