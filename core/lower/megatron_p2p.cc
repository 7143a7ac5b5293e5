#include "core/lower/megatron_p2p.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/model/schedule_registry.h"

namespace pipescope {

namespace {

// Ops that travel with a Recv: the scatter/gather all-gather that rebuilds the received tensor.
bool is_receive_part(const LoweredOp& l) {
  return l.kind == LOpKind::Recv || (l.kind == LOpKind::AllGather && l.tag == CollTag::ScatterGather);
}

// One worker's program in Megatron's interleaved steady-state order. For each step "forward F, backward B" (a
// forward whose next compute is a backward): F's sends move to right after B and its tensor-parallel all-reduce
// (one batched call with B's sends), and B's receives move to right before F (they were posted in the batch
// that ended the previous step). Every other op keeps its place.
std::vector<LoweredOp> megatron_interleaved_order(const std::vector<LoweredOp>& prog) {
  std::vector<std::size_t> computes;
  for (std::size_t i = 0; i < prog.size(); i++)
    if (prog[i].kind == LOpKind::Compute) computes.push_back(i);
  // No forward after the first backward: every forward is warm-up (Megatron's M == p case); nothing moves.
  bool seen_backward = false, steady = false;
  for (std::size_t c : computes) {
    if (is_backward(prog[c].op.kind))
      seen_backward = true;
    else if (seen_backward)
      steady = true;
  }
  if (!steady) return prog;
  // Position keys: op i sits at i; a moved op at half a step before its new neighbour, in its old order.
  std::vector<double> key(prog.size());
  for (std::size_t i = 0; i < prog.size(); i++) key[i] = static_cast<double>(i);
  const double tiny = 1.0 / (4.0 * static_cast<double>(prog.size() + 1));
  for (std::size_t k = 1; k + 1 < computes.size(); k++) {
    const std::size_t f = computes[k], b = computes[k + 1];
    if (is_backward(prog[f].op.kind) || !is_backward(prog[b].op.kind)) continue;
    std::size_t after_b = b + 1;  // the first op after B's own all-reduce
    while (after_b < prog.size() && prog[after_b].kind == LOpKind::AllReduce &&
           prog[after_b].tag == CollTag::TensorParallel && !prog[after_b].async)
      after_b++;
    std::size_t moved = 0;
    for (std::size_t i = f + 1; i < b; i++) {
      if (prog[i].kind == LOpKind::Send && prog[i].op.kind == OpKind::Forward)
        key[i] = static_cast<double>(after_b) - 0.5 + tiny * static_cast<double>(++moved);
      else if (is_receive_part(prog[i]))
        key[i] = static_cast<double>(f) - 0.5 + tiny * static_cast<double>(++moved);
    }
  }
  std::vector<std::size_t> order(prog.size());
  for (std::size_t i = 0; i < order.size(); i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t c) { return key[a] < key[c]; });
  std::vector<LoweredOp> out;
  out.reserve(prog.size());
  for (std::size_t i : order) out.push_back(prog[i]);
  return out;
}

}  // namespace

LoweredSchedule with_p2p_mode(LoweredSchedule ls, const Scenario& s) {
  ls.blocking_sends = s.sim.p2p == "blocking";
  const ScheduleTraits& t = schedule_entry(s.schedule.kind).traits;
  const bool megatron_interleaved = t.interleaved && t.style == StageStyle::Loop && !t.split_backward;
  if (!ls.blocking_sends || !megatron_interleaved || s.parallel.v <= 1) return ls;
  for (auto& prog : ls.per_worker) prog = megatron_interleaved_order(prog);
  return ls;
}

bool every_forward_first(const Schedule& s) {
  for (const auto& ops : s.per_rank) {
    bool seen_backward = false;
    for (const Op& op : ops) {
      if (is_backward(op.kind))
        seen_backward = true;
      else if (seen_backward)
        return false;
    }
  }
  return true;
}

bool uses_scatter_gather(const Scenario& s) { return s.schedule.scatter_gather && !s.parallel.sequence_parallel; }

}  // namespace pipescope
