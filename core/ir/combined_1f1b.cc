// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): the steady state of a 1F1B-style schedule run as
// overlapped pairs, each step's forward with the backward after it, so that one micro-batch's all-to-all hides
// behind the other's compute (core/ir/schedule.h Overlap).
#include "core/ir/schedule.h"

namespace pipescope {

Schedule pair_steady_state(Schedule s) {
  for (auto& ops : s.per_rank)
    for (std::size_t i = 0; i + 1 < ops.size(); i++) {
      const Op& f = ops[i];
      const Op& b = ops[i + 1];
      // A backward of the forward's own (stage, micro-batch) needs it: the last rank's steps of a one-chunk 1F1B run
      // alone, as in Megatron.
      const bool own = b.stage == f.stage && b.microbatch == f.microbatch && b.slice == f.slice;
      if (f.kind != OpKind::Forward || (b.kind != OpKind::Backward && b.kind != OpKind::BackwardInput) || own ||
          f.paired() || b.paired())
        continue;
      pair_ops(ops, i);
      i++;
    }
  return s;
}

}  // namespace pipescope
