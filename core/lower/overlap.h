#pragma once
// Overlapped pairs in a lowered program (DualPipe, DualPipeV, Megatron-Core's combined 1F1B; core/ir/schedule.h
// Overlap): the pass that turns a pair's per-op communication into communication that runs beside the pair's compute.
//
// A pair is a forward and a backward of two micro-batches. Each is a chain of compute and communication per layer
// (attention, dispatch, experts, combine; the backward in reverse), and the pair interleaves the two chains so that
// one's all-to-all or tensor-parallel all-reduce runs while the other computes: the forward starts computing while
// the backward starts with its combine's gradient exchange. The pass keeps each op's collectives as they are (the same
// calls, bytes and groups: the engine's flows on the real network) and marks them overlapped, so that the engine
// posts them when the pair starts, one after another on the worker's communication stream (core/lower/lowering.h).
// The pair then lasts about max(compute, communication), as DeepSeek-V3's and Megatron-Core's timelines show.
//
// What the overlap costs: the communication kernels hold streaming multiprocessors while they run (DeepEP's dispatch
// and combine, NCCL's channels), so the pair's compute runs on the others, slower by `compute_factor` =
// sm_count / (sm_count - comm_sm_count) (the device's comm_sm_count, core/model/config.h); a pair with no
// communication is not slowed.

#include <cstdint>

#include "core/lower/lowered_schedule.h"

namespace pipescope {

// What a pair's communication stream carries. Megatron-Core's combined 1F1B moves only the MoE all-to-alls there (its
// flag: --overlap-moe-expert-parallel-comm); the tensor-parallel collectives stay on its compute stream. DualPipeV's
// pairs run every per-op collective beside the other op's compute.
enum class PairHides : std::uint8_t { ExpertParallel, ExpertAndTensorParallel };

// The collectives that an overlapped pair hides: those made for one compute op (the MoE dispatch and combine; with
// ExpertAndTensorParallel the tensor-parallel all-reduces too). The context-parallel exchange is already posted
// beside its op (core/cost/context_parallel.h), the scatter/gather all-gather belongs to a receive, and the gradient
// collectives to the step.
bool overlappable(CollTag tag, PairHides hides);

// Marks every overlapped pair's collectives (those of `overlappable` tags carrying one of the pair's two ops, between
// its first compute op and the op after its last collective) and stretches the pair's compute ops by compute_factor
// (>= 1) when it has any. Identity for a schedule without pairs.
LoweredSchedule overlap_pairs(LoweredSchedule ls, double compute_factor,
                              PairHides hides = PairHides::ExpertAndTensorParallel);

// sm_count / (sm_count - comm_sm_count), 1 when either is 0; throws std::invalid_argument when comm_sm_count is
// negative or not below sm_count.
double overlap_compute_factor(int sm_count, int comm_sm_count);

}  // namespace pipescope
