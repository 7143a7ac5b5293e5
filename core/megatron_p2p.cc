#include "core/megatron_p2p.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace pipescope {

namespace {

bool is_forward_send(const LoweredOp& l) { return l.kind == LOpKind::Send && l.op.kind == OpKind::Forward; }

// One worker's program with each steady-state forward Send moved past the backward that follows its forward.
std::vector<LoweredOp> batch_steady_state_sends(const std::vector<LoweredOp>& prog) {
  // No forward after the first backward: every forward is warm-up (Megatron's M == p case), nothing is held.
  bool seen_backward = false, steady = false;
  for (const LoweredOp& l : prog)
    if (l.kind == LOpKind::Compute) {
      if (is_backward(l.op.kind))
        seen_backward = true;
      else if (seen_backward)
        steady = true;
    }
  if (!steady) return prog;
  std::vector<LoweredOp> out;
  out.reserve(prog.size());
  std::vector<LoweredOp> held;  // forward sends waiting for the next backward to finish
  bool after_backward = false;  // the last compute was a backward: flush `held` after its all-reduce
  auto flush = [&] {
    for (LoweredOp& h : held) out.push_back(std::move(h));
    held.clear();
    after_backward = false;
  };
  for (std::size_t i = 0; i < prog.size(); i++) {
    const LoweredOp& l = prog[i];
    // The backward's own tensor-parallel all-reduce belongs to it; anything else ends the backward's step.
    const bool backward_allreduce = after_backward && l.kind == LOpKind::AllReduce && l.tag == CollTag::TensorParallel;
    if (after_backward && !backward_allreduce) flush();
    if (l.kind == LOpKind::Compute) {
      if (is_backward(l.op.kind)) {
        after_backward = !held.empty();
      } else {
        flush();  // a forward follows: the held sends go with this step (send_forward_recv_forward)
      }
    }
    if (is_forward_send(l)) {
      // Held only when the next compute op is a backward (the steady state's forward-then-backward step).
      std::size_t j = i + 1;
      while (j < prog.size() && prog[j].kind != LOpKind::Compute) j++;
      if (j < prog.size() && is_backward(prog[j].op.kind)) {
        held.push_back(l);
        continue;
      }
    }
    out.push_back(l);
  }
  flush();
  return out;
}

}  // namespace

LoweredSchedule with_p2p_mode(LoweredSchedule ls, const std::string& mode, int v) {
  ls.blocking_sends = mode == "blocking";
  if (!ls.blocking_sends || v <= 1) return ls;
  for (auto& prog : ls.per_worker) prog = batch_steady_state_sends(prog);
  return ls;
}

}  // namespace pipescope
