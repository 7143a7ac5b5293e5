// The schedule validator (core/ir/schedule_check.h).
#include "core/ir/schedule_check.h"

#include <algorithm>

#include "core/ir/shard_actions.h"
#include "core/util/graph.h"

namespace pipescope {

void fail_check(const std::string& what, std::vector<std::string> ops) { throw CheckError(what, std::move(ops)); }

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

namespace {

std::string on_rank(const Op& op, int r, std::size_t i) {
  return op_text(op) + " (rank " + std::to_string(r) + ", position " + std::to_string(i) + ")";
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

// An overlapped pair is a First followed by a Second on its rank, one forward and one backward (B or I) of other
// (stage, micro-batch)s: a W has no communication to hide and a pair of one kind has nothing to overlap.
void check_pairs(const Schedule& s, int r) {
  const auto& ops = s.per_rank[r];
  for (std::size_t i = 0; i < ops.size(); i++) {
    const Op& op = ops[i];
    switch (op.overlap) {
      case Overlap::None:
        continue;
      case Overlap::First:
        if (i + 1 == ops.size() || ops[i + 1].overlap != Overlap::Second)
          fail_check(on_rank(op, r, i) + " opens an overlapped pair that the next op does not close", {op_text(op)});
        break;
      case Overlap::Second:
        if (i == 0 || ops[i - 1].overlap != Overlap::First)
          fail_check(on_rank(op, r, i) + " closes an overlapped pair that no op opens", {op_text(op)});
        continue;
    }
    const Op& b = ops[i + 1];
    const bool fb = (op.kind == OpKind::Forward) != (b.kind == OpKind::Forward);
    const bool no_w = op.kind != OpKind::BackwardWeight && b.kind != OpKind::BackwardWeight;
    if (!fb || !no_w)
      fail_check("overlapped pair (" + op_text(op) + ";" + op_text(b) + ") on rank " + std::to_string(r) +
                     ", position " + std::to_string(i) + ": a pair is one forward and one backward (B or I)",
                 {op_text(op), op_text(b)});
  }
}

}  // namespace

bool valid_op(const Schedule& s, const Op& op) {
  if (op.chunk < 0 || op.chunk >= s.v || op.stage != s.stage_of(op.rank, op.chunk) || op.microbatch < 0 ||
      op.microbatch >= s.m || op.slice < 0 || op.slice >= s.slices(op.microbatch))
    return false;
  Op bare = op;  // the grid's op carries no pairing
  bare.overlap = Overlap::None;
  return bare == op_of(s, key_of(op));
}

// A B of a (stage, micro-batch, slice) whose backward the schedule also splits into I and W.
std::string mixed_backward(const Schedule& s, const Op& op, int where, std::size_t i) {
  return op_text(op) + " (rank/worker " + std::to_string(where) + ", position " + std::to_string(i) + "): schedule '" +
         s.name + "' runs the backward of stage " + std::to_string(op.stage) + ", micro-batch " +
         std::to_string(op.microbatch) + ", slice " + std::to_string(op.slice) +
         " both fused (B) and split (I and W); use one form";
}

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
    check_pairs(s, r);
  }
  for (std::size_t slot = 0; slot < index.size(); slot++)
    if (rank_of[slot] == kNone && index.expected(index.key(slot))) {
      const Op op = op_of(s, index.key(slot));
      fail_check(op_text(op) + " is missing from rank " + std::to_string(op.rank), {op_text(op)});
    }
  // Per rank: backward after its forward, every stage-local dependency earlier. Across ranks: the
  // compute-only order must be acyclic (program order + data dependencies). The two ops of an overlapped pair start
  // together: the second's dependencies are the pair's, met before the first starts, and it needs nothing of the first.
  const std::size_t n = offset[s.p];
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  edges.reserve(2 * n);
  for (int r = 0; r < s.p; r++) {
    for (std::size_t i = 0; i < s.per_rank[r].size(); i++) {
      const Op& op = s.per_rank[r][i];
      if (i > 0) edges.emplace_back(offset[r] + i - 1, offset[r] + i);
      const std::size_t start = op.overlap == Overlap::Second ? i - 1 : i;  // where the op's pair starts
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
        if (dr == r && pos_of[d] == static_cast<std::int32_t>(start) && start != i)
          fail_check(on_rank(op, r, i) + " needs " + on_rank(dop, r, pos_of[d]) +
                         ", the op it is paired with: the two ops of an overlapped pair run together",
                     {op_text(op), op_text(dop)});
        if (dr != r) edges.emplace_back(offset[dr] + pos_of[d], offset[r] + start);
      }
    }
  }
  const CsrGraph g = csr_graph(n, edges);
  const auto left = kahn_leftover(n, g.succ_begin, g.succ, g.preds);
  const auto stuck = static_cast<std::size_t>(std::count_if(left.begin(), left.end(), [](auto x) { return x != 0; }));
  if (stuck != 0) {
    auto name = [&](std::uint32_t u) {
      const int r = static_cast<int>(std::upper_bound(offset.begin(), offset.end(), u) - offset.begin()) - 1;
      return op_text(s.per_rank[r][u - offset[r]]);
    };
    fail_cycle("schedule '" + s.name + "' deadlocks", find_cycle(n, g.succ_begin, g.succ, left), stuck, name);
  }
  check_shard_actions(s);
}

}  // namespace pipescope
