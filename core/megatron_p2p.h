#pragma once
// Megatron-LM's point-to-point order (`sim.p2p: blocking`), applied to a lowered schedule.
//
// Megatron-LM's p2p calls are blocking (LoweredSchedule::blocking_sends): a rank's next op waits for its sends.
// Its interleaved schedule (and Seq1F1B-I, built on it) with overlap_p2p_comm off also batches the steady
// state's communication: each step runs a forward, then a backward, then one send_forward_backward_recv_forward_
// backward call that carries both outputs. A forward's output therefore leaves only after the backward that
// follows it on the rank (docs/cost-model.md, "Megatron's p2p order"). The non-interleaved 1F1B sends a forward's
// output right after it (send_forward_recv_backward), as the lowering does.

#include <string>

#include "core/lowering.h"

namespace pipescope {

// The lowered schedule with the p2p semantics of `mode` ("eager" or "blocking", Scenario::sim.p2p). With
// "blocking" and v > 1 chunks per rank, every forward Send whose next compute op on its worker is a backward
// moves to right after that backward (after its tensor-parallel all-reduce, before its own sends).
LoweredSchedule with_p2p_mode(LoweredSchedule ls, const std::string& mode, int v);

}  // namespace pipescope
