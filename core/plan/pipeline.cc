#include "core/plan/pipeline.h"

#include <stdexcept>
#include <utility>

#include "core/cost/context_parallel.h"
#include "core/cost/expert_parallel.h"
#include "core/ir/schedule_csv.h"
#include "core/ir/shard_actions.h"
#include "core/lower/megatron_p2p.h"
#include "core/lower/overlap.h"
#include "core/model/schedule_registry.h"
#include "core/model/seq1f1b.h"
#include "core/plan/terapipe_planner.h"
#include "core/plan/work_estimate.h"

namespace pipescope {

std::vector<MicroBatch> sliced_scenario_microbatches(const Scenario& s, int m) {
  const ParallelSpec& par = s.parallel;
  const ScheduleSpec& sch = s.schedule;
  // Seq1F1B segments: cwp (equal causal FLOPs, TP-rounded), uniform or explicit (core/model/seq1f1b.h).
  if (schedule_entry(sch.kind).traits.slicing == SlicePlan::Seq1F1B)
    return sliced_microbatches(m, par.micro_batch_size, seq1f1b_split_lengths(s));
  if (!sch.slice_tokens.empty()) return sliced_microbatches(m, par.micro_batch_size, sch.slice_tokens);
  return uniform_microbatches(m, par.micro_batch_size, s.model.seq_len, sch.seq_slices);
}

namespace {

// A schedule file under FSDP runs as PyTorch's runtime runs it: the actions it names, or, for a compute-only file,
// those its loader places (core/ir/shard_actions.h with_fsdp_actions). Actions without FSDP have nothing to act on.
Schedule file_schedule(const Scenario& s, Schedule f) {
  if (!f.shard_actions.empty() && !s.training.fsdp)
    throw std::invalid_argument(s.source + ": schedule.file " + s.schedule.file +
                                " names FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD), which need training.fsdp: true");
  if (s.training.fsdp && f.shard_actions.empty()) return with_fsdp_actions(std::move(f));
  return f;
}

}  // namespace

Schedule make_schedule(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  const ScheduleSpec& sch = s.schedule;
  const ScheduleEntry& entry = schedule_entry(sch.kind);
  const int m = par.micro_batches();
  std::vector<MicroBatch> mbs;
  if (entry.traits.slicing == SlicePlan::TeraPipe && sch.slicing == "dp") {
    // TeraPipe's planner (core/plan/terapipe_planner.h): joint micro-batch / token split, exact, 8-token grain.
    const SlicingPlan plan = plan_scenario(s, PlannerOptions{}, par.micro_batch_size);
    int seq = 0;
    for (const auto& g : plan.groups)
      for (int i = 0; i < g.count; i++) {
        MicroBatch mb;
        mb.seq_begin = seq;
        mb.seq_count = g.b;
        int tok = 0;
        for (int l : g.slice_tokens) mb.slice_begin.push_back(tok), tok += l;
        mbs.push_back(std::move(mb));
        seq += g.b;
      }
  } else {
    mbs = sliced_scenario_microbatches(s, m);
  }
  if (entry.traits.from_file)
    return file_schedule(s, load_schedule_csv(sch.file, {par.pp, par.v, mbs, s.model.seq_len}));
  try {
    Schedule out = entry.generate(par.pp, par.v, mbs, s.model.seq_len);
    out.name = entry.name;  // the scenario's kind, also where one generator serves two (gpipe / terapipe)
    return sch.overlap_moe_a2a ? pair_steady_state(std::move(out)) : out;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(s.source + ": schedule: " + e.what());
  }
}

LoweredSchedule lower_scenario(const Scenario& s, const Schedule& sch, const CostModel& cost) {
  // Megatron reduces gradients over the data-parallel group with context parallelism (dp * cp GPUs): with dp = 1 and
  // cp > 1 that group is the worker's own context-parallel ranks, a group of one worker.
  GradSyncOptions o = grad_sync_options(s.training);
  o.replica_of_dp = s.parallel.dp == 1 && s.parallel.cp > 1;
  LoweredSchedule ls = lower(sch, s.parallel.dp, s.parallel.tp, cost, uses_scatter_gather(s), o);
  // Context-parallel K/V rings (no-op at cp = 1), then the MoE all-to-alls and expert gradients (dense: no-op).
  // Overlapped pairs last: their per-op collectives are all in place (core/lower/overlap.h).
  const DeviceSpec& d = s.cluster.device;
  return overlap_pairs(with_p2p_mode(add_expert_parallel(add_cp_exchange(std::move(ls), s), s, cost), s),
                       overlap_compute_factor(d.sm_count, d.comm_sm_count),
                       s.schedule.overlap_moe_a2a ? PairHides::ExpertParallel : PairHides::ExpertAndTensorParallel);
}

Placement scenario_placement(const Scenario& s) {
  return make_placement(s.sim.placement, s.parallel.dp, s.parallel.pp, s.parallel.tp, s.cluster, s.parallel.cp);
}

std::unique_ptr<Prepared> prepare(const Scenario& s) {
  check_work(s);  // refuse runaway configurations before allocating anything (core/plan/work_estimate.h)
  auto p = std::make_unique<Prepared>();
  p->scenario = s;
  p->cost = make_cost_model(s);
  p->schedule = make_schedule(s);
  p->lowered = lower_scenario(s, p->schedule, *p->cost);
  p->placement = scenario_placement(s);
  return p;
}

}  // namespace pipescope
