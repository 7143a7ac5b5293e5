#pragma once
// Megatron-LM's point-to-point order (`sim.p2p: blocking`), applied to a lowered schedule.
//
// Megatron-LM's p2p calls are blocking (LoweredSchedule::blocking_sends): a rank's next op waits for its sends.
// Its interleaved schedule (and Seq1F1B-I, built on it) with overlap_p2p_comm off also batches the steady
// state's communication: each step runs a forward, then a backward, then one send_forward_backward_recv_forward_
// backward call that carries both outputs. A forward's output therefore leaves only after the backward that
// follows it on the rank (docs/cost-model.md, "Megatron's p2p order"). The non-interleaved 1F1B sends a forward's
// output right after it (send_forward_recv_backward), as the lowering does.

#include "core/lower/lowering.h"
#include "core/model/config.h"

namespace pipescope {

// The lowered schedule with the scenario's p2p semantics (sim.p2p: "eager" or "blocking"). With "blocking" and a
// Megatron-style interleaved schedule (registry traits: interleaved, looped stage placement, whole backward), for
// each steady-state step "forward F, backward B" F's sends move to right after B (after its tensor-parallel
// all-reduce, before B's own sends) and B's receives to right before F: one batched call between steps.
LoweredSchedule with_p2p_mode(LoweredSchedule ls, const Scenario& s);

// Whether every rank runs all its forwards before its first backward. Megatron's interleaved schedule (and the
// Seq1F1B authors' Seq1F1B-I, built on it) does so when the micro-batch count equals the pipeline ranks: every
// unit is warm-up, GPipe-like, and all micro-batches are in flight at the end of the forwards (docs/cost-model.md,
// "Megatron's p2p order").
bool every_forward_first(const Schedule& s);

// Whether pipeline messages take Megatron's scatter/gather (schedule.scatter_gather, tp > 1). Not with sequence
// parallelism: there the activation between layers is already split along the sequence over the TP group, so
// each TP rank sends its own shard (the cost model's p2p bytes are that shard) and nothing is gathered after the
// receive (Megatron-LM's p2p_communication: scatter/gather only "and not sequence_parallel").
bool uses_scatter_gather(const Scenario& s);

}  // namespace pipescope
