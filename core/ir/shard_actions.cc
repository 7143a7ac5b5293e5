// FSDP's actions (shard_actions.h): text, PyTorch's placement passes, the rules.
#include "core/ir/shard_actions.h"

#include <algorithm>
#include <vector>

#include "core/ir/schedule_check.h"

namespace pipescope {

const char* shard_kind_name(ShardKind k) {
  switch (k) {
    case ShardKind::Unshard:
      return "UNSHARD";
    case ShardKind::Reshard:
      return "RESHARD";
    case ShardKind::ReduceGrad:
      return "REDUCE_GRAD";
  }
  return "?";
}

std::string shard_action_text(const ShardAction& a) { return std::to_string(a.stage) + shard_kind_name(a.kind); }

namespace {

// An op and, when it opens an overlapped pair, its second: the unit PyTorch's passes step over (OVERLAP_F_B is one
// action there).
std::size_t unit_size(const std::vector<Op>& ops, std::size_t i) {
  return ops[i].overlap == Overlap::First && i + 1 < ops.size() ? 2 : 1;
}

// next_stage_indices: the first `count` distinct stages of ops[i..] (a pair adds both of its stages, as PyTorch's
// sub-actions do, and may pass `count` by one).
std::vector<int> next_stages(const std::vector<Op>& ops, std::size_t i, int count) {
  std::vector<int> out;
  auto add = [&](int g) {
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  };
  while (i < ops.size() && static_cast<int>(out.size()) < count) {
    const std::size_t n = unit_size(ops, i);
    for (std::size_t k = 0; k < n; k++) add(ops[i + k].stage);
    i += n;
  }
  return out;
}

bool weight_gradient(OpKind k) { return k == OpKind::Backward || k == OpKind::BackwardWeight; }

std::vector<ShardAction> rank_actions(const std::vector<Op>& ops, int max_active_stages) {
  std::vector<ShardAction> out;
  std::vector<int> active;  // unsharded stages, ascending (PyTorch's set of small ints iterates so)
  int top = 0;
  for (const Op& op : ops) top = std::max(top, op.stage + 1);
  std::vector<std::size_t> last(static_cast<std::size_t>(top), ops.size());  // per stage: its last B or W
  for (std::size_t i = 0; i < ops.size(); i++)
    if (weight_gradient(ops[i].kind)) last[static_cast<std::size_t>(ops[i].stage)] = i;
  auto at = [](ShardKind k, int stage, std::size_t before) {
    return ShardAction{k, static_cast<std::int32_t>(stage), static_cast<std::int32_t>(before)};
  };
  for (std::size_t i = 0; i < ops.size();) {
    const std::vector<int> next = next_stages(ops, i, max_active_stages);
    for (int g : std::vector<int>(active))
      if (std::find(next.begin(), next.end(), g) == next.end()) {
        out.push_back(at(ShardKind::Reshard, g, i));
        active.erase(std::find(active.begin(), active.end(), g));
      }
    for (int g : next)
      if (std::find(active.begin(), active.end(), g) == active.end()) {
        out.push_back(at(ShardKind::Unshard, g, i));
        active.insert(std::upper_bound(active.begin(), active.end(), g), g);
      }
    const std::size_t n = unit_size(ops, i);
    for (std::size_t k = 0; k < n; k++)
      if (last[static_cast<std::size_t>(ops[i + k].stage)] == i + k)
        out.push_back(at(ShardKind::ReduceGrad, ops[i + k].stage, i + n));
    i += n;
  }
  for (int g : active) out.push_back(at(ShardKind::Reshard, g, ops.size()));
  return out;
}

std::string on_rank(int r) { return "rank " + std::to_string(r) + ": "; }

// One rank's walk: the actions' state machine against the ops.
class RankActions {
 public:
  RankActions(const Schedule& s, int r) : s_(s), r_(r), ops_(s.per_rank[r]), acts_(s.shard_actions[r]) {}

  void check() {
    unsharded_.assign(static_cast<std::size_t>(s_.stages()), 0);
    unused_.assign(static_cast<std::size_t>(s_.stages()), 0);
    reduced_.assign(static_cast<std::size_t>(s_.stages()), 0);
    last_weight_.assign(static_cast<std::size_t>(s_.stages()), -1);
    for (std::size_t i = 0; i < ops_.size(); i++)
      if (weight_gradient(ops_[i].kind)) last_weight_[static_cast<std::size_t>(ops_[i].stage)] = static_cast<int>(i);
    std::size_t a = 0;
    for (std::size_t i = 0; i <= ops_.size(); i++) {
      for (; a < acts_.size() && acts_[a].before <= static_cast<std::int32_t>(i); a++) apply(acts_[a], i);
      if (i < ops_.size()) compute(i);
    }
    if (a < acts_.size()) fail(acts_[a], "sits after the rank's last op (position " + pos(acts_[a]) + ")");
    for (std::size_t g = 0; g < unused_.size(); g++)
      if (unused_[g])
        fail_check(on_rank(r_) + std::to_string(g) +
                       "UNSHARD: no op of the stage runs after it (PyTorch's runtime "
                       "refuses an unused unshard)",
                   {std::to_string(g) + "UNSHARD"});
    for (std::size_t g = 0; g < last_weight_.size(); g++)
      if (last_weight_[g] >= 0 && !reduced_[g])
        fail_check(on_rank(r_) + "stage " + std::to_string(g) + " has no REDUCE_GRAD after its last backward",
                   {op_text(ops_[static_cast<std::size_t>(last_weight_[g])])});
  }

 private:
  std::string pos(const ShardAction& x) const { return std::to_string(x.before); }
  [[noreturn]] void fail(const ShardAction& x, const std::string& why) const {
    fail_check(on_rank(r_) + shard_action_text(x) + " " + why, {shard_action_text(x)});
  }

  void apply(const ShardAction& x, std::size_t i) {
    if (x.before < static_cast<std::int32_t>(i)) fail(x, "is out of order (before op " + pos(x) + ")");
    if (x.stage < 0 || x.stage >= s_.stages() || stage_rank(s_.style, s_.p, x.stage) != r_)
      fail(x, "names a stage this rank does not hold");
    if (i < ops_.size() && ops_[i].overlap == Overlap::Second)
      fail(x, "sits between the two ops of an overlapped pair");
    const auto g = static_cast<std::size_t>(x.stage);
    switch (x.kind) {
      case ShardKind::Unshard:
        if (unsharded_[g]) fail(x, "unshards a stage already unsharded (no RESHARD since its UNSHARD)");
        unsharded_[g] = 1;
        unused_[g] = 1;
        break;
      case ShardKind::Reshard:
        if (!unsharded_[g]) fail(x, "reshards a stage that is not unsharded");
        if (unused_[g]) fail(x, "reshards the stage before any op used its UNSHARD");
        unsharded_[g] = 0;
        break;
      case ShardKind::ReduceGrad:
        if (reduced_[g]) fail(x, "reduces the stage's gradients a second time");
        if (last_weight_[g] < 0) fail(x, "reduces a stage this rank runs no backward of");
        if (static_cast<int>(i) <= last_weight_[g])
          fail(x, "comes before the stage's last backward " + op_text(ops_[static_cast<std::size_t>(last_weight_[g])]));
        reduced_[g] = 1;
        break;
    }
  }

  void compute(std::size_t i) {
    const Op& op = ops_[i];
    if (op.stage < 0 || op.stage >= s_.stages()) return;  // check_schedule names it
    if (!unsharded_[static_cast<std::size_t>(op.stage)])
      fail_check(on_rank(r_) + op_text(op) + " computes on stage " + std::to_string(op.stage) +
                     ", which is sharded there (no UNSHARD of it since its last RESHARD)",
                 {op_text(op)});
    unused_[static_cast<std::size_t>(op.stage)] = 0;
  }

  const Schedule& s_;
  const int r_;
  const std::vector<Op>& ops_;
  const std::vector<ShardAction>& acts_;
  std::vector<char> unsharded_, reduced_, unused_;  // per stage; unused_: unsharded, no op since
  std::vector<int> last_weight_;                    // per stage: index of its last B or W on this rank, -1 when none
};

}  // namespace

Schedule with_fsdp_actions(Schedule s, int max_active_stages) {
  if (max_active_stages < 1) invalid_generator_args("with_fsdp_actions", "max_active_stages must be >= 1");
  s.shard_actions.assign(s.per_rank.size(), {});
  for (std::size_t r = 0; r < s.per_rank.size(); r++)
    s.shard_actions[r] = rank_actions(s.per_rank[r], max_active_stages);
  return s;
}

void check_shard_actions(const Schedule& s) {
  if (s.shard_actions.empty()) return;
  if (s.shard_actions.size() != s.per_rank.size())
    fail_check("the schedule's FSDP actions list " + std::to_string(s.shard_actions.size()) + " ranks, its ops " +
                   std::to_string(s.per_rank.size()),
               {});
  for (int r = 0; r < static_cast<int>(s.per_rank.size()); r++) RankActions(s, r).check();
}

}  // namespace pipescope
