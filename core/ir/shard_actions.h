#pragma once
// FSDP's actions in a schedule (core/ir/schedule.h ShardAction): their text, the passes with which PyTorch
// pipelining's runtime places them in a compute-only schedule, and their rules. docs/schedule-ir.md, "FSDP actions".

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/schedule.h"

namespace pipescope {

// UNSHARD, RESHARD, REDUCE_GRAD.
const char* shard_kind_name(ShardKind k);
// PyTorch's text of an action: "0UNSHARD", "3RESHARD", "1REDUCE_GRAD".
std::string shard_action_text(const ShardAction& a);

// Rank r's list in execution order, its actions among its ops: on_action(action) for each action where it sits,
// on_op(op) for each op (the schedule's text and its CSV walk it so).
template <class OnAction, class OnOp>
void walk_rank(const Schedule& s, std::size_t r, OnAction on_action, OnOp on_op) {
  const std::vector<Op>& ops = s.per_rank.at(r);
  std::size_t a = 0;
  auto actions_before = [&](std::size_t i) {
    if (r >= s.shard_actions.size()) return;
    const std::vector<ShardAction>& acts = s.shard_actions[r];
    for (; a < acts.size() && acts[a].before <= static_cast<std::int32_t>(i); a++) on_action(acts[a]);
  };
  for (std::size_t i = 0; i < ops.size(); i++) {
    actions_before(i);
    on_op(ops[i]);
  }
  actions_before(ops.size());
}

// The window of PyTorch's _add_unshard_reshard: the distinct stages a rank keeps unsharded ahead of its ops.
constexpr int kPytorchMaxActiveStages = 3;

// PyTorch's lowering of a compute-only schedule for FSDP (what _PipelineScheduleRuntime runs on a compute-only CSV):
// _add_unshard_reshard, before each op (an overlapped pair counts as one) the stages not among the next
// max_active_stages distinct stages the rank computes on are resharded and those among them not yet unsharded are
// unsharded, in the order they come; every stage still unsharded is resharded after the rank's last op; then
// _add_reduce_grad, each stage's REDUCE_GRAD right after its last B or W. Replaces any actions `s` names.
Schedule with_fsdp_actions(Schedule s, int max_active_stages = kPytorchMaxActiveStages);

// The rules of a schedule's actions (PyTorch's runtime asserts the same), CheckError naming the action and the op:
// each on the rank that holds its stage, in order, never between the two ops of an overlapped pair; UNSHARD only of a
// sharded stage, RESHARD only of an unsharded one; every compute op on an unsharded stage; exactly one REDUCE_GRAD per
// stage the rank computes on, after the stage's last B or W. Nothing to check when the schedule names no action.
void check_shard_actions(const Schedule& s);

}  // namespace pipescope
