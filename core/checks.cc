// Static checker (core/checks.h): every violation is reported by the canonical names of the ops involved.
#include "core/checks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

namespace pipescope {

void fail_check(const std::string& what, std::vector<std::string> ops) { throw CheckError(what, std::move(ops)); }

namespace {

// One cycle among the nodes a Kahn pass left unfinished (pending > 0), in edge direction. Every such
// node has an unfinished predecessor, so walking predecessors must revisit a node.
std::vector<std::uint32_t> find_cycle(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                                      const std::vector<std::uint32_t>& succ,
                                      const std::vector<std::uint32_t>& pending) {
  constexpr std::uint32_t kNone = 0xffffffffu;
  std::vector<std::uint32_t> pred_of(n, kNone);
  std::uint32_t start = kNone;
  for (std::uint32_t u = 0; u < n; u++) {
    if (pending[u] == 0) continue;
    if (start == kNone) start = u;
    for (std::uint32_t e = succ_begin[u]; e < succ_begin[u + 1]; e++)
      if (pending[succ[e]] != 0 && pred_of[succ[e]] == kNone) pred_of[succ[e]] = u;
  }
  if (start == kNone) return {};
  std::vector<std::uint32_t> walk, pos(n, kNone);
  std::uint32_t x = start;
  while (pos[x] == kNone) {
    pos[x] = static_cast<std::uint32_t>(walk.size());
    walk.push_back(x);
    x = pred_of[x];
    if (x == kNone) return {};  // cannot happen for a Kahn leftover; be safe rather than loop
  }
  std::vector<std::uint32_t> cycle(walk.begin() + pos[x], walk.end());
  std::reverse(cycle.begin(), cycle.end());  // the walk followed edges backwards
  return cycle;
}

// Kahn over a CSR graph; returns the per-node pending counts left (all 0 iff acyclic).
std::vector<std::uint32_t> kahn_leftover(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                                         const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t> pending) {
  std::vector<std::uint32_t> ready;
  for (std::uint32_t i = 0; i < n; i++)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const std::uint32_t u = ready.back();
    ready.pop_back();
    for (std::uint32_t e = succ_begin[u]; e < succ_begin[u + 1]; e++)
      if (--pending[succ[e]] == 0) ready.push_back(succ[e]);
  }
  return pending;
}

[[noreturn]] void fail_cycle(const std::string& prefix, const std::vector<std::uint32_t>& cycle, std::size_t stuck,
                             const std::function<std::string(std::uint32_t)>& name) {
  std::vector<std::string> names;
  for (std::size_t k = 0; k < cycle.size() && k < 1000; k++) names.push_back(name(cycle[k]));
  std::string msg = prefix + ": " + std::to_string(stuck) + " ops can never run; cycle: ";
  const std::size_t len = cycle.size();
  for (std::size_t k = 0; k < len; k++) {
    if (len > 16 && k == 8) {
      msg += "... -> ";
      k = len - 7;
    }
    msg += name(cycle[k]) + " -> ";
  }
  msg += len ? name(cycle[0]) : "?";
  fail_check(msg, std::move(names));
}

std::string on_rank(const Op& op, int r, std::size_t i) {
  return op_text(op) + " (rank " + std::to_string(r) + ", position " + std::to_string(i) + ")";
}

std::string on_worker(const LoweredSchedule& ls, int w, std::size_t i) {
  return lowered_op_name(ls, w, i) + " (worker " + std::to_string(w) + ", position " + std::to_string(i) + ")";
}

void check_microbatches(const Schedule& s) {
  const std::string who = "schedule '" + s.name + "'";
  if (s.p < 1 || s.v < 1 || s.m < 1 || s.seq_len < 1)
    fail_check(who + ": needs p, v, m, seq_len >= 1 (got p = " + std::to_string(s.p) + ", v = " + std::to_string(s.v) +
                   ", m = " + std::to_string(s.m) + ", seq_len = " + std::to_string(s.seq_len) + ")",
               {});
  if (s.per_rank.size() != static_cast<std::size_t>(s.p))
    fail_check(who + " has " + std::to_string(s.per_rank.size()) + " rank lists for p = " + std::to_string(s.p), {});
  if (s.microbatches.size() != static_cast<std::size_t>(s.m))
    fail_check(who + " has " + std::to_string(s.microbatches.size()) + " micro-batches for m = " + std::to_string(s.m),
               {});
  for (int mb = 0; mb < s.m; mb++) {
    const auto& b = s.microbatches[mb].slice_begin;
    bool ok = !b.empty() && b[0] == 0 && b.back() < s.seq_len && s.microbatches[mb].seq_count >= 1;
    for (std::size_t j = 1; ok && j < b.size(); j++) ok = b[j] > b[j - 1];
    if (!ok) fail_check(who + ": micro-batch " + std::to_string(mb) + " has an invalid slice table or size", {});
  }
}

bool valid_op(const Schedule& s, const Op& op) {
  if (op.chunk < 0 || op.chunk >= s.v || op.stage != s.stage_of(op.rank, op.chunk) || op.microbatch < 0 ||
      op.microbatch >= s.m || op.slice < 0 || op.slice >= s.slices(op.microbatch))
    return false;
  return op == op_of(s, key_of(op));
}

// A B of a (stage, micro-batch, slice) whose backward the schedule also splits into I and W.
std::string mixed_backward(const Schedule& s, const Op& op, int where, std::size_t i) {
  return op_text(op) + " (rank/worker " + std::to_string(where) + ", position " + std::to_string(i) + "): schedule '" +
         s.name + "' runs the backward of stage " + std::to_string(op.stage) + ", micro-batch " +
         std::to_string(op.microbatch) + ", slice " + std::to_string(op.slice) +
         " both fused (B) and split (I and W); use one form";
}

}  // namespace

void check_schedule(const Schedule& s) {
  check_microbatches(s);
  const OpKeyIndex index(s);
  constexpr std::int32_t kNone = -1;
  std::vector<std::int32_t> rank_of(index.size(), kNone), pos_of(index.size(), kNone);
  std::vector<std::uint32_t> offset(static_cast<std::size_t>(s.p) + 1, 0);
  for (int r = 0; r < s.p; r++) {
    offset[r + 1] = offset[r] + static_cast<std::uint32_t>(s.per_rank[r].size());
    for (std::size_t i = 0; i < s.per_rank[r].size(); i++) {
      const Op& op = s.per_rank[r][i];
      if (op.rank != r)
        fail_check(
            "rank " + std::to_string(r) + " runs " + on_rank(op, r, i) + ", an op of rank " + std::to_string(op.rank),
            {op_text(op)});
      if (!valid_op(s, op))
        fail_check(on_rank(op, r, i) + " is not an op of schedule '" + s.name +
                       "' (chunk, stage, micro-batch, slice or token range out of place)",
                   {op_text(op)});
      const auto slot = static_cast<std::size_t>(index.slot(key_of(op)));
      if (!index.expected(key_of(op))) fail_check(mixed_backward(s, op, r, i), {op_text(op)});
      if (rank_of[slot] != kNone)
        fail_check(
            op_text(op) + " appears twice: " + on_rank(op, rank_of[slot], pos_of[slot]) + " and " + on_rank(op, r, i),
            {op_text(op)});
      rank_of[slot] = r;
      pos_of[slot] = static_cast<std::int32_t>(i);
    }
  }
  for (std::size_t slot = 0; slot < index.size(); slot++)
    if (rank_of[slot] == kNone && index.expected(index.key(slot))) {
      const Op op = op_of(s, index.key(slot));
      fail_check(op_text(op) + " is missing from rank " + std::to_string(op.rank), {op_text(op)});
    }
  // Per rank: backward after its forward, every stage-local dependency earlier. Across ranks: the
  // compute-only order must be acyclic (program order + data dependencies).
  const std::size_t n = offset[s.p];
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  edges.reserve(2 * n);
  for (int r = 0; r < s.p; r++) {
    for (std::size_t i = 0; i < s.per_rank[r].size(); i++) {
      const Op& op = s.per_rank[r][i];
      if (i > 0) edges.emplace_back(offset[r] + i - 1, offset[r] + i);
      if (is_backward(op.kind)) {
        const auto f = static_cast<std::size_t>(index.slot(OpKey{OpKind::Forward, op.stage, op.microbatch, op.slice}));
        if (pos_of[f] > static_cast<std::int32_t>(i))
          fail_check(on_rank(op, r, i) + " runs before its forward " + on_rank(s.per_rank[r][pos_of[f]], r, pos_of[f]),
                     {op_text(op), op_text(s.per_rank[r][pos_of[f]])});
      }
      for (const OpKey& dep : op_dependencies(index, key_of(op))) {
        const auto d = static_cast<std::size_t>(index.slot(dep));
        const int dr = rank_of[d];
        const Op& dop = s.per_rank[dr][pos_of[d]];
        if (dr == r && pos_of[d] > static_cast<std::int32_t>(i))
          fail_check(on_rank(op, r, i) + " needs " + on_rank(dop, r, pos_of[d]) + ", which runs later on the same rank",
                     {op_text(op), op_text(dop)});
        if (dr != r) edges.emplace_back(offset[dr] + pos_of[d], offset[r] + i);
      }
    }
  }
  std::vector<std::uint32_t> succ_begin(n + 1, 0), succ(edges.size()), preds(n, 0);
  for (const auto& e : edges) succ_begin[e.first + 1]++, preds[e.second]++;
  for (std::size_t i = 0; i < n; i++) succ_begin[i + 1] += succ_begin[i];
  std::vector<std::uint32_t> fill(succ_begin.begin(), succ_begin.end() - 1);
  for (const auto& e : edges) succ[fill[e.first]++] = e.second;
  const auto left = kahn_leftover(n, succ_begin, succ, preds);
  const auto stuck = static_cast<std::size_t>(std::count_if(left.begin(), left.end(), [](auto x) { return x != 0; }));
  if (stuck != 0) {
    auto name = [&](std::uint32_t u) {
      const int r = static_cast<int>(std::upper_bound(offset.begin(), offset.end(), u) - offset.begin()) - 1;
      return op_text(s.per_rank[r][u - offset[r]]);
    };
    fail_cycle("schedule '" + s.name + "' deadlocks", find_cycle(n, succ_begin, succ, left), stuck, name);
  }
}

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
