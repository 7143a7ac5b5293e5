#pragma once
// Data-parallel gradient synchronisation inside the lowering passes (core/lower/lowering.h, passes 4 and 5), one DP
// group per pipeline rank over its dp replicas:
// - default: one all-reduce of the rank's gradients after its last op (Megatron without overlap);
// - distributed_optimizer (ZeRO-1, Megatron --use-distributed-optimizer): a reduce-scatter of the gradients
//   instead, the optimizer step on the 1/dp shard (the cost model's optimizer_seconds), then an all-gather of the
//   updated parameters (cost.param_bytes) after it;
// - overlap_grad_reduce: the reduction is cut into buckets of bucket_bytes per virtual stage (the rank's gradient
//   bytes shared equally by its virtual stages; at most 1024 buckets per stage); a stage's buckets are async
//   collectives posted before its last backward (B, or W for split backwards), bucket j of n becoming ready (j + 1) / n
//   of the way through that op (Megatron reduces a bucket when its layers' last weight gradients are written, in
//   reverse layer order). They share the links with the pipeline's traffic; the optimizer waits for all of them;
// - overlap_param_gather: the all-gather is cut the same way and moved to the start of the program (the next
//   iteration's forwards, which in steady state follow this iteration's step), each stage's buckets awaited by
//   that stage's first compute op;
// - reshard_after_forward (FSDP): the stage's gather before each of its forwards and backwards instead (see the
// option);
// - FSDP actions a schedule names (core/ir/shard_actions.h): each UNSHARD the stage's gather and each REDUCE_GRAD its
//   reduce-scatter, posted where the action sits, in place of the placements above.
// DualPipe (StageStyle::Dual): ranks r and p-1-r hold copies of the same two model stages, so one group of their 2 dp
// workers reduces (and gathers) for both, the copies taking part as more replicas; it runs even at dp = 1, and the
// distributed optimizer's shard is 1 / (2 dp) (placement.h stage_copies).
// Async collectives: core/lower/lowering.h (execution semantics).

#include "core/lower/lowered_schedule.h"

namespace pipescope {

class CostModel;

struct GradSyncOptions {
  bool distributed_optimizer = false;  // reduce-scatter + optimizer on the shard + parameter all-gather
  bool overlap_grad_reduce = false;    // bucketed reductions during the last backward of each virtual stage
  double bucket_bytes = 40e6;          // gradient bytes per bucket (overlap_grad_reduce)
  bool overlap_param_gather = false;   // the parameter all-gather beside the (next iteration's) first forwards
  // FSDP resharding after forward (TrainingSpec::fsdp_reshard_after_forward): every forward and backward (B or I)
  // gathers its stage's share again, in buckets posted before it; the op waits for the first, the rank's next op for
  // the rest (the blocks after the first are prefetched while the op computes).
  bool reshard_after_forward = false;
  // One replica (dp = 1) of a data-parallel run lowered alone: its gradient (and parameter) collectives where lower()
  // of the whole run puts them, on groups of its one worker (the search's estimate rings them over the dp peers).
  // Also a run of dp = 1 with context parallelism: its data-parallel group is the worker's cp ranks.
  bool replica_of_dp = false;
};
GradSyncOptions grad_sync_options(const TrainingSpec& t);

// Per pipeline rank, the index of a new group (tag `tag`) over the dp workers of that rank, ring order = replica
// order. DualPipe's ranks r and p-1-r share one group of their 2 dp workers (both copies of the same two model
// stages reduce together, as more replicas). Appended to ls.groups.
std::vector<std::int32_t> rank_groups(LoweredSchedule& ls, CollTag tag);

// Appends (or inserts) the DP gradient collectives for every pipeline rank; dp > 1 (or o.replica_of_dp). Its groups
// go to ls.groups, its ops to `sink` (the overlapped buckets into sink.program(w)).
void add_dp_grad_sync(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o, LoweringSink& sink);
// With the distributed optimizer: the parameter all-gather after each worker's Optimizer op (or at its program
// start with overlap_param_gather); nothing otherwise. Run after the Optimizer ops are appended; dp > 1.
void add_param_gather(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o, LoweringSink& sink);
// The same on ls's own programs.
void add_dp_grad_sync(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o);
void add_param_gather(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o);

}  // namespace pipescope
