// Static checker (core/lower/checks.h): every violation is reported by the canonical names of the ops involved.
#include "core/lower/checks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "core/util/graph.h"

namespace pipescope {

namespace {

std::string on_worker(const LoweredSchedule& ls, int w, std::size_t i) {
  return lowered_op_name(ls, w, i) + " (worker " + std::to_string(w) + ", position " + std::to_string(i) + ")";
}

}  // namespace

CheckedSchedule check(const LoweredSchedule& ls, const Placement& placement) {
  const Schedule& s = ls.schedule;
  check_schedule(s);
  if (ls.p != s.p || ls.dp < 1 || ls.tp < 1 || ls.per_worker.size() != static_cast<std::size_t>(ls.dp) * ls.p)
    fail_check("lowered schedule has " + std::to_string(ls.per_worker.size()) +
                   " worker programs for dp = " + std::to_string(ls.dp) + ", p = " + std::to_string(ls.p) +
                   " (schedule p = " + std::to_string(s.p) + ")",
               {});
  const int p = ls.p;
  const int workers = ls.workers();

  // Costs and sizes.
  for (int w = 0; w < workers; w++)
    for (std::size_t i = 0; i < ls.per_worker[w].size(); i++) {
      const LoweredOp& l = ls.per_worker[w][i];
      if (!std::isfinite(l.seconds) || l.seconds < 0 || !std::isfinite(l.bytes) || l.bytes < 0)
        fail_check(on_worker(ls, w, i) + " has a negative or non-finite duration or size", {lowered_op_name(ls, w, i)});
    }

  // Compute ops: each op of the schedule exactly once per replica, on a worker of its rank, backward after
  // forward. Tables are per replica: slot -> (worker, position).
  const OpKeyIndex index(s);
  std::vector<std::int32_t> at_worker(index.size()), at_pos(index.size());
  std::vector<std::vector<std::int32_t>> replica_worker(static_cast<std::size_t>(ls.dp));
  auto locate = [&](int d) {
    std::fill(at_worker.begin(), at_worker.end(), -1);
    for (int r = 0; r < p; r++) {
      const int w = LoweredSchedule::worker(d, r, p);
      for (std::size_t i = 0; i < ls.per_worker[w].size(); i++) {
        const LoweredOp& l = ls.per_worker[w][i];
        if (l.kind != LOpKind::Compute) continue;
        if (l.op.rank != r || !valid_op(s, l.op))
          fail_check(
              on_worker(ls, w, i) + " is not an op of rank " + std::to_string(r) + " of schedule '" + s.name + "'",
              {lowered_op_name(ls, w, i)});
        const auto slot = static_cast<std::size_t>(index.slot(key_of(l.op)));
        if (!index.expected(key_of(l.op))) fail_check(mixed_backward(s, l.op, w, i), {lowered_op_name(ls, w, i)});
        if (at_worker[slot] >= 0)
          fail_check(op_text(l.op) + " runs twice: " + on_worker(ls, at_worker[slot], at_pos[slot]) + " and " +
                         on_worker(ls, w, i),
                     {lowered_op_name(ls, w, i)});
        at_worker[slot] = w;
        at_pos[slot] = static_cast<std::int32_t>(i);
      }
    }
    for (std::size_t slot = 0; slot < index.size(); slot++)
      if (at_worker[slot] < 0 && index.expected(index.key(slot))) {
        const Op op = op_of(s, index.key(slot));
        fail_check(op_text(op) + " is missing from worker " + std::to_string(LoweredSchedule::worker(d, op.rank, p)) +
                       " (replica " + std::to_string(d) + ")",
                   {op_text(op)});
      }
    for (std::size_t slot = 0; slot < index.size(); slot++) {
      const OpKey k = index.key(slot);
      if (!is_backward(k.kind) || at_worker[slot] < 0) continue;
      const auto f = static_cast<std::size_t>(index.slot(OpKey{OpKind::Forward, k.stage, k.microbatch, k.slice}));
      if (at_pos[f] > at_pos[slot])
        fail_check(on_worker(ls, at_worker[slot], at_pos[slot]) + " runs before its forward " +
                       on_worker(ls, at_worker[f], at_pos[f]),
                   {lowered_op_name(ls, at_worker[slot], at_pos[slot]), lowered_op_name(ls, at_worker[f], at_pos[f])});
    }
  };
  // A replica whose programs are replica 0's (peers moved) passes every per-replica check below exactly when
  // replica 0 does: check replica 0 for it.
  std::vector<char> same(static_cast<std::size_t>(ls.dp), 0);
  for (int d = 1; d < ls.dp; d++) same[d] = replica_programs_equal(ls, d);
  for (int d = 0; d < ls.dp; d++)
    if (!same[d]) locate(d);

  // Sends and receives matched, collectives matched (throws CheckError naming the ops).
  Dag dag = build_dag(ls, placement);

  // Per worker, its messages sorted by (slot, peer): where each Send / Recv sits.
  struct Msg {
    std::int64_t slot;
    std::int32_t peer, pos;
    bool operator<(const Msg& o) const { return std::tie(slot, peer) < std::tie(o.slot, o.peer); }
  };
  std::vector<std::vector<Msg>> sends(workers), recvs(workers);
  for (int w = 0; w < workers; w++) {
    if (same[w / p]) continue;
    for (std::size_t i = 0; i < ls.per_worker[w].size(); i++) {
      const LoweredOp& l = ls.per_worker[w][i];
      if (l.kind != LOpKind::Send && l.kind != LOpKind::Recv) continue;
      const std::int64_t slot = index.slot(key_of(l.op));
      if (slot < 0 || !valid_op(s, l.op))
        fail_check(on_worker(ls, w, i) + " carries an op that is not in schedule '" + s.name + "'",
                   {lowered_op_name(ls, w, i)});
      (l.kind == LOpKind::Send ? sends : recvs)[w].push_back(Msg{slot, l.peer, static_cast<std::int32_t>(i)});
    }
  }
  for (auto& v : sends) std::sort(v.begin(), v.end());
  for (auto& v : recvs) std::sort(v.begin(), v.end());
  auto find = [](const std::vector<Msg>& v, std::int64_t slot, std::int32_t peer) -> const Msg* {
    const auto it = std::lower_bound(v.begin(), v.end(), Msg{slot, peer, 0});
    return it != v.end() && it->slot == slot && it->peer == peer ? &*it : nullptr;
  };

  for (int d = 0; d < ls.dp; d++) {
    if (same[d]) continue;
    locate(d);
    for (int r = 0; r < p; r++) {
      const int w = LoweredSchedule::worker(d, r, p);
      const auto& prog = ls.per_worker[w];
      for (std::size_t i = 0; i < prog.size(); i++) {
        const LoweredOp& l = prog[i];
        if (l.kind == LOpKind::Send) {  // a Send carries the output of an earlier op of its own worker
          const auto slot = static_cast<std::size_t>(index.slot(key_of(l.op)));
          if (at_worker[slot] != w || at_pos[slot] > static_cast<std::int32_t>(i))
            fail_check(on_worker(ls, w, i) + " is not preceded by its producer " + op_text(l.op) + " on worker " +
                           std::to_string(w),
                       {lowered_op_name(ls, w, i)});
        }
        if (l.kind == LOpKind::Recv) {  // ... sent by a worker of the same replica
          const auto slot = static_cast<std::size_t>(index.slot(key_of(l.op)));
          if (at_worker[slot] != l.peer)
            fail_check(on_worker(ls, w, i) + " expects " + op_text(l.op) + " from worker " + std::to_string(l.peer) +
                           ", which does not compute it",
                       {lowered_op_name(ls, w, i)});
        }
        if (l.kind != LOpKind::Compute) continue;
        for (const OpKey& dep : op_dependencies(index, key_of(l.op))) {
          const std::int64_t slot = index.slot(dep);
          const int pw = at_worker[slot];
          const int pp = at_pos[slot];
          if (pw == w) {
            if (pp > static_cast<std::int32_t>(i))
              fail_check(
                  on_worker(ls, w, i) + " needs " + on_worker(ls, pw, pp) + ", which runs later on the same worker",
                  {lowered_op_name(ls, w, i), lowered_op_name(ls, pw, pp)});
            continue;
          }
          const Msg* rv = find(recvs[w], slot, pw);
          if (rv == nullptr || rv->pos > static_cast<std::int32_t>(i))
            fail_check(on_worker(ls, w, i) + " needs " + on_worker(ls, pw, pp) + " but worker " + std::to_string(w) +
                           (rv ? " receives it only later, at position " + std::to_string(rv->pos)
                               : " has no recv(" + op_text(ls.per_worker[pw][pp].op) + "<-" + std::to_string(pw) + ")"),
                       {lowered_op_name(ls, w, i), lowered_op_name(ls, pw, pp)});
          // The matching Send exists (build_dag matched every Recv) and follows its producer (checked above).
          if (find(sends[pw], slot, w) == nullptr)
            fail_check(on_worker(ls, w, i) + ": no send of " + op_text(ls.per_worker[pw][pp].op) + " to it", {});
        }
      }
    }
  }

  // Dependency-only dry run.
  const std::size_t done = dry_run(dag);
  if (done != dag.size()) {
    std::vector<std::uint32_t> left = kahn_leftover(dag.size(), dag.succ_begin, dag.succ, dag.preds);
    fail_cycle("the lowered schedule deadlocks", find_cycle(dag.size(), dag.succ_begin, dag.succ, left),
               dag.size() - done, [&](std::uint32_t u) { return dag_node_text(dag, ls, u); });
  }
  return CheckedSchedule(ls, placement, std::move(dag));
}

}  // namespace pipescope
