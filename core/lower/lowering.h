#pragma once
// Lowering: a compute-only Schedule becomes a LoweredSchedule, one ordered program per worker, with
// explicit point-to-point sends/receives and collectives, costs (seconds) and sizes (bytes) attached.
// Each pass is a pure function (const in, new value out) with its own tests. The simulator
// (sim/engine.h) and the validation runtime (runtime/) both execute a LoweredSchedule, and both refuse
// one that core/lower/checks.h has not accepted.
//
// A worker is one model-parallel pipeline rank of one data-parallel replica: worker = d * p + r.
// A worker stands for its whole tensor-parallel group of tp GPUs (they run the same ops in lock step);
// Placement maps (worker, tp_rank) to GPUs.
//
// Execution semantics of a worker's program (shared by the simulator, the dry run and the runtime):
// - Compute, Recv, Collective and Optimizer ops run in list order, each after the previous non-Send op.
// - A Send is posted (asynchronously, eager) after the previous non-Send op completes; the ops after it do
//   not wait for it (with LoweredSchedule::blocking_sends they do: the next non-Send op starts only once the
//   transfer has arrived). It is matched with exactly one Recv on the peer (same tag, same bytes).
// - A Recv completes when its matching transfer has arrived (and after the worker's previous op).
// - A Collective (AllReduce, AllGather) starts when every member of its group has reached it; members
//   match collectives by (group, seq): the n-th collective of a group on each member is the same call.
// - An async collective (overlapped gradient reduction / parameter gather, core/lower/grad_sync.h) is posted like an
//   eager Send: it becomes ready lead_s seconds after the worker's previous non-Send, non-async op completes, and
//   the ops after it do not wait for it. It is awaited by the worker's next Optimizer op, or, for a ParamGather,
//   by the worker's first later Compute op of the op in its `op` field (same kind, stage, micro-batch and slice; the
//   optimizer when none comes). An async collective without a
//   lead also waits for the previous async collective of its group (one communication stream per group).
// - An overlapped pair (two Compute ops marked First and Second, core/ir/schedule.h Overlap) receives all it needs
//   before its first op and sends after its second. Its two compute ops run back to back; its per-op collectives
//   (LoweredOp::overlap, core/lower/overlap.h) are posted when the pair starts (when the op before its first compute
//   op completes) and run one after another on the worker's communication stream, so that one op's communication
//   runs during the other's compute; every op after the pair's compute ops (Sends included) waits for them.

#include <vector>

#include "core/lower/grad_sync.h"
#include "core/lower/lowered_schedule.h"

namespace pipescope {

// ---------------------------------------------------------------- passes
// 1. Replicate the schedule over dp replicas; compute ops get their durations from the cost model.
LoweredSchedule lower_compute(Schedule s, int dp, int tp, const CostModel& cost);
// 2. Point-to-point send/recv for every cross-rank dependency (including the interleaved wrap-around
//    from the last rank to the first): each Send right after its producer, each Recv right before the
//    first consumer. Sizes from the cost model.
LoweredSchedule add_p2p(const LoweredSchedule& in, const CostModel& cost);
// 2b. Megatron scatter/gather (docs/papers.md#megatron): with tp > 1 each TP rank sends only its 1/tp share of
//    every pipeline message (Send/Recv bytes / tp, one flow per TP lane), and the receiver all-gathers the
//    whole tensor over its TP group (NVLink): an AllGather tagged ScatterGather right after each Recv, bytes =
//    the full message. No-op when tp == 1.
LoweredSchedule add_scatter_gather(const LoweredSchedule& in);
// 3. Tensor-parallel all-reduces: after each compute op, its 2 (forward) / 2 (+2 with recompute)
//    (backward) all-reduces per layer of b*s*h elements over the worker's TP group, folded into one
//    AllReduce op with count = number of calls. No-op when tp == 1.
LoweredSchedule add_tp_allreduce(const LoweredSchedule& in, const CostModel& cost);
// How data-parallel gradients are synchronised (training.* keys; core/lower/grad_sync.h has the passes' details).
// 4. Data-parallel gradient synchronisation (one DP group per pipeline rank, over the dp replicas of that rank):
//    an all-reduce after the flush, or with the options the distributed optimizer's reduce-scatter and bucketed,
//    overlapped reductions; then the embedding all-reduce between first and last stage when embeddings are tied.
LoweredSchedule add_grad_sync(const LoweredSchedule& in, const CostModel& cost, const GradSyncOptions& o = {});
// 5. Optimizer step at the end of every worker; with the distributed optimizer the parameter all-gather after it
//    (or, with overlap_param_gather, at the start of the program before each virtual stage's first forward).
LoweredSchedule add_optimizer(const LoweredSchedule& in, const CostModel& cost, const GradSyncOptions& o = {});

// 0. (Optional, on the compute schedule.) Every I immediately followed on its rank by the W of the same
//    (stage, micro-batch, slice) becomes one B: the same work as one op (the runtime's cheaper form). Not part
//    of lower(): it moves the input-gradient send from after I to after W.
Schedule fuse_adjacent_iw(const Schedule& s);

// All passes in order: what `simulate` and `validate` run.
// scatter_gather: run pass 2b (Scenario::schedule.scatter_gather).
// (The schedule is taken by value: a temporary is moved into the result, not copied.)
LoweredSchedule lower(Schedule s, int dp, int tp, const CostModel& cost, bool scatter_gather = false,
                      const GradSyncOptions& grad_sync = {});

// lower() with every op written to `sink` as the passes make it: `ls` gets the rest (schedule, dp, p, tp, groups;
// no programs).
void lower_to(Schedule s, int dp, int tp, const CostModel& cost, bool scatter_gather, const GradSyncOptions& grad_sync,
              LoweredSchedule& ls, LoweringSink& sink);

}  // namespace pipescope
