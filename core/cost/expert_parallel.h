#pragma once
// Expert parallelism (MoE models; docs/moe.md). Megatron-Core's parallel folding: attention keeps its tp x cp x dp
// layout, and the same tp * cp * dp GPUs of a pipeline stage hold the routed experts in expert groups of etp * ep
// consecutive ranks (Megatron's order tp, cp, dp: a worker's tp * cp GPUs are consecutive, then the next data-
// parallel replica's; inside a group etp first, then ep), each GPU E / ep experts, each expert's MLP split etp ways
// (expert tensor parallelism; etp = 1 by default). The GPUs at the same place in every expert group form an
// expert-data-parallel group of tp * cp * dp / (ep * etp) GPUs, which reduces those experts' gradients.
//
// Every MoE layer sends each token to its top-k experts and back: per layer, forward, the dispatch and the combine
// all-to-alls over the expert-parallel group, each GPU sending the k copies of its tokens (T / t rows with sequence
// parallelism, which Megatron requires for MoE with tp > 1): Tr * k * h * e bytes per call, etp times that with
// expert tensor parallelism (each copy to the etp GPUs of its expert, each returning a partial sum); the backward moves
// the gradients the same way (two more), full recomputation repeats the forward's. The collectives are the
// engine's (LOpKind::AllToAll), on the critical path of the op: the worker waits for them.

#include "core/lower/lowering.h"

namespace pipescope {

// All-to-all calls of one compute op (2 per MoE layer of its stage forward, 2 backward + 2 when the MoE layer is
// recomputed: full, or the moe module; none for W) and the bytes of one call on one GPU, those of the group's busiest
// receiver with an overload (core/cost/moe_load.h).
int moe_alltoall_calls(const Scenario& s, const Op& op);
double moe_alltoall_bytes(const Scenario& s, const Op& op, int microbatch_seqs, double overload = 1);

// DeepEP's per-node spread of a token's copies: the model's experts and picks, the router's groups.
NodeDedup node_dedup(const Scenario& s);

// The all-to-all seconds of one compute op as the engine's NCCL model prices them (core/cost/nccl_model.h), for the
// layout search's estimate, which lowers one replica without the expert groups: the group is etp * ep consecutive
// GPUs of a stage in Megatron's rank order (on min(etp * ep, GPUs per node) GPUs of each of its nodes).
double moe_alltoall_estimate_s(const Scenario& s, const Op& op, int microbatch_seqs);

// Lowering pass: after every compute op with MoE layers, its all-to-alls as one AllToAll op (tag ExpertParallel,
// count = calls) on the worker's expert group: one member worker when etp * ep divides its tp * cp GPUs, else
// the etp * ep / (tp * cp) workers of consecutive replicas at the same pipeline rank. Before each worker's optimizer
// step, the routed experts' gradient reduction (reduce-scatter with the distributed optimizer, else all-reduce; tag
// ExpertData) over the expert-data-parallel group when it has more than one GPU, and with the distributed
// optimizer their parameter all-gather after the step. Sets ls.ep. Identity for a dense model.
LoweredSchedule add_expert_parallel(LoweredSchedule ls, const Scenario& s, const CostModel& cost);

}  // namespace pipescope
