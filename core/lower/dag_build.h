#pragma once
// build_dag's steps (core/lower/dag.h) for builders that keep their own kind of node: the checks and matchers, then one
// template that numbers the nodes and makes the edges and the successor lists under the execution semantics of
// core/lower/lowering.h, handing each node to a sink. build_dag's sink writes a DagNode; stage 2 of the search
// (core/plan/search_retime.cc ShapeBuilder::build) classes the node into a duration class as it is made, with no
// DagNode written or read back. Stage 2's emitted shapes (ShapeBuilder::emit) take the nodes from the lowering itself,
// each op's kind from dag_kind_of here, and note the edges of the subset they take (eager sends, blocking collectives:
// at most two predecessors per node); tests/test_dag_build.cc times them against build_graph's.

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"

namespace pipescope {
namespace dag_build {

using Edge = std::pair<std::uint32_t, std::uint32_t>;

// One Send or Recv, keyed by (sender, receiver, producer op).
struct Msg {
  std::int32_t sender, receiver;
  OpKind kind;
  std::int32_t stage, microbatch, slice;
  std::int32_t worker;  // the worker whose program holds it
  std::int32_t index;   // its position there
  double bytes;         // its size and tag (compared between partners)
  CollTag tag;
  auto key() const { return std::tie(sender, receiver, kind, stage, microbatch, slice); }
};

// Room for n elements, grown geometrically: a builder that builds DAGs of slowly growing sizes reallocates a few times,
// not at every build (a fresh allocation is fresh pages to fault in).
template <class T>
void reserve_grown(std::vector<T>& v, std::size_t n) {
  if (n > v.capacity()) v.reserve(std::max(n, 2 * v.capacity()));
}

using pipescope::is_collective;  // core/lower/lowered_schedule.h

// The predecessors of a lowered op's node under the execution semantics of core/lower/lowering.h, stated once for
// build_graph and stage 2's emitted shapes (core/plan/search_retime.cc EmitSink): (a) a node starts after its worker's
// previous op that holds the worker: not a posted op (an eager Send, an async collective), which the ops after it do
// not wait for (blocking sends and awaited collectives add edges of their own in build_graph); (b) a Recv also waits
// for its message's transfer (the Send's node); (c) a collective call is one node shared by the members of its
// group, each member's previous op a predecessor.
constexpr bool holds_worker(LOpKind k, bool posted) { return k != LOpKind::Send && !(posted && is_collective(k)); }
// (a): the node of the worker's previous op once op `l` (node `node`) is in its program, `prev` before it. An
// overlapped pair's collective is posted too.
template <class Node>
Node prev_after(const LoweredOp& l, Node prev, Node node) {
  return holds_worker(l.kind, l.async || l.overlap) ? node : prev;
}
// An overlapped pair's collectives (core/lower/overlap.h): posted when the pair starts, one after another on the
// worker's communication stream, awaited by every op after the pair's compute that is not one of them.
constexpr bool overlapped_call(const LoweredOp& l) { return l.overlap && is_collective(l.kind); }
constexpr bool pair_compute(const LoweredOp& l, Overlap which) {
  return l.kind == LOpKind::Compute && l.op.overlap == which;
}
// (b)
constexpr bool waits_for_transfer(LOpKind k) { return k == LOpKind::Recv; }
// (c)
constexpr bool shared_by_group(LOpKind k) { return is_collective(k); }

// The kind of node a lowered op becomes: compute ops and optimizer steps compute, a receive a join (it completes
// when its transfer arrives), a send its transfer, a collective call its collective; a send or collective of no
// bytes a join. Stage 2's shapes made as the lowering writes its ops (core/plan/search_retime.cc) ask it too.
inline DagKind dag_kind_of(const LoweredOp& l) {
  switch (l.kind) {
    case LOpKind::Compute:
    case LOpKind::Optimizer:
      return DagKind::Compute;
    case LOpKind::Recv:
      return DagKind::Join;
    case LOpKind::Send:
      return l.bytes > 0 ? DagKind::Transfer : DagKind::Join;
    case LOpKind::AllReduce:
    case LOpKind::AllGather:
    case LOpKind::ReduceScatter:
    case LOpKind::AllToAll:
      break;
  }
  return l.bytes > 0 ? DagKind::Collective : DagKind::Join;
}

// A matched message: where its Send and its Recv are (worker, position in the program). Kept small: a search
// matches millions.
struct MsgPair {
  std::int32_t send_worker, send_index, recv_worker, recv_index;
};

struct P2pScratch {
  std::vector<Msg> sends, recvs;
  std::vector<std::int32_t> table;
  std::vector<MsgPair> pairs;  // matched (send, recv)
};

// Everything a build needs besides the Dag itself, kept between builds by a builder.
struct Scratch {
  P2pScratch p2p;
  std::vector<std::vector<std::vector<std::int32_t>>> calls;  // calls[g][slot][n]: member slot's n-th call on group g
  std::vector<Edge> edges, shared;
  std::vector<std::size_t> posted;
  std::vector<std::uint32_t> posted_sends, fill, pair_calls;
};

// build_dag's checks of `ls` against the placement, and its matching of sends with receives and of collective calls
// (sc.p2p.pairs, sc.calls). Throws CheckError as build_dag does.
void check_and_match(const LoweredSchedule& ls, const Placement& pl, Scratch& sc);

// The nodes, edges and successor lists (dag.node_of, succ_begin, succ, preds; not dag.nodes, not dag.rings) of
// `ls` after check_and_match. Node ids are given in build_dag's order (every worker's ops in program order, a Send's
// transfer in its place, then each group's calls); each node is handed to sink.add(kind, worker, index, lowered op,
// group) as it is numbered. Sink: begin(ops), size() (the nodes added so far), add(...).
template <class Sink>
void build_graph(const LoweredSchedule& ls, Dag& dag, Scratch& sc, Sink& sink) {
  const auto& pairs = sc.p2p.pairs;
  const auto& calls = sc.calls;
  const std::size_t workers = ls.per_worker.size();

  std::size_t ops = 0;
  for (const auto& prog : ls.per_worker) ops += prog.size();
  sink.begin(ops);
  dag.node_of.resize(workers);
  auto add = [&](DagKind kind, int w, std::size_t i, const LoweredOp& l, std::int32_t group) {
    const std::uint32_t id = sink.size();
    sink.add(kind, w, i, l, group);
    return static_cast<std::int32_t>(id);
  };
  // Nodes of everything but collectives, in program order; a Send's slot holds its transfer node for now.
  for (std::size_t w = 0; w < workers; w++) {
    const int wi = static_cast<int>(w);
    const auto& prog = ls.per_worker[w];
    auto& nodes = dag.node_of[w];
    nodes.assign(prog.size(), -1);
    for (std::size_t i = 0; i < prog.size(); i++)
      if (!shared_by_group(prog[i].kind)) nodes[i] = add(dag_kind_of(prog[i]), wi, i, prog[i], -1);
  }
  // One node per collective call (shared_by_group), owned by the group's first member.
  const std::uint32_t first_coll = sink.size();
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    const auto& ws = ls.groups[g].workers;
    const auto& prog = ls.per_worker[ws[0]];
    const auto& mine = calls[g][0];
    for (std::size_t k = 0; k < mine.size(); k++) {
      // The calls are spread over a program that no longer fits in the caches: fetched ahead.
      if (k + 8 < mine.size()) __builtin_prefetch(&prog[static_cast<std::size_t>(mine[k + 8])]);
      const LoweredOp& l = prog[static_cast<std::size_t>(mine[k])];
      const std::int32_t id =
          add(dag_kind_of(l), ws[0], static_cast<std::size_t>(mine[k]), l, static_cast<std::int32_t>(g));
      for (std::size_t s = 0; s < ws.size(); s++) dag.node_of[ws[s]][calls[g][s][k]] = id;
    }
  }

  // Edges.
  std::vector<Edge>& edges = sc.edges;
  std::vector<Edge>& shared = sc.shared;  // collective -> collective, may repeat once per member
  edges.clear();
  shared.clear();
  reserve_grown(edges, ops + pairs.size());
  for (std::size_t w = 0; w < workers; w++) {
    const auto& prog = ls.per_worker[w];
    const auto& nodes = dag.node_of[w];
    std::int64_t prev = -1;
    std::vector<std::size_t>& posted = sc.posted;  // async collectives not awaited yet (core/lower/lowering.h)
    posted.clear();
    std::vector<std::uint32_t>& pair_calls = sc.pair_calls;  // the current overlapped pair's collectives
    pair_calls.clear();
    std::int64_t pair_start = -1;  // the op the current pair starts after
    auto link = [&](std::uint32_t from, std::uint32_t to) {
      (from >= first_coll && to >= first_coll ? shared : edges).emplace_back(from, to);
    };
    for (std::size_t i = 0; i < prog.size(); i++) {
      const auto node = static_cast<std::uint32_t>(nodes[i]);
      if (pair_compute(prog[i], Overlap::First)) pair_start = prev;
      if (overlapped_call(prog[i])) {
        // On the pair's communication stream: after the pair's start and the pair's previous call.
        if (!pair_calls.empty())
          link(pair_calls.back(), node);
        else if (pair_start >= 0)
          link(static_cast<std::uint32_t>(pair_start), node);
        pair_calls.push_back(node);
        continue;  // posted: prev stays
      }
      // The ops after the pair wait for its calls: the next op that holds the worker, and every send before it (a
      // posted collective, e.g. a context-parallel exchange before the pair's second op, does not).
      const bool posted_call = prog[i].async && is_collective(prog[i].kind);
      if (!pair_calls.empty() && !pair_compute(prog[i], Overlap::Second) && !posted_call) {
        for (std::uint32_t c : pair_calls) link(c, node);
        if (prog[i].kind != LOpKind::Send) pair_calls.clear();
      }
      if (prev >= 0) link(static_cast<std::uint32_t>(prev), node);
      if (prog[i].async && is_collective(prog[i].kind)) {
        // One communication stream per group: a bucket without a lead (posted all at once: the parameter
        // gather) starts after the group's previous one. A bucket with a lead starts at its own ready time, counted
        // from its predecessor op; if the previous bucket still runs, the two share the links.
        if (!posted.empty() && !(prog[i].lead_s > 0)) {
          for (auto a = posted.rbegin(); a != posted.rend(); ++a)
            if (prog[*a].group == prog[i].group) {
              link(static_cast<std::uint32_t>(nodes[*a]), node);
              break;
            }
        }
        posted.push_back(i);
      } else {
        // An Optimizer waits for every posted collective; a Compute for the parameter gathers that name it.
        auto awaited = [&](std::size_t a) {
          if (prog[i].kind == LOpKind::Optimizer) return true;
          return prog[a].tag == CollTag::ParamGather && prog[i].kind == LOpKind::Compute &&
                 key_of(prog[i].op) == key_of(prog[a].op);
        };
        std::size_t keep = 0;
        for (std::size_t a : posted) {
          if (awaited(a))
            link(static_cast<std::uint32_t>(nodes[a]), node);
          else
            posted[keep++] = a;
        }
        posted.resize(keep);
      }
      prev = prev_after<std::int64_t>(prog[i], prev, node);
    }
  }
  // (b): every matched pair's second op is a Recv (check_and_match), which waits for its Send's transfer.
  static_assert(waits_for_transfer(LOpKind::Recv));
  for (const MsgPair& m : pairs)
    edges.emplace_back(static_cast<std::uint32_t>(dag.node_of[m.send_worker][m.send_index]),
                       static_cast<std::uint32_t>(dag.node_of[m.recv_worker][m.recv_index]));
  // Blocking sends: the worker's next non-Send op also waits for each transfer posted before it.
  if (ls.blocking_sends)
    for (std::size_t w = 0; w < workers; w++) {
      const auto& prog = ls.per_worker[w];
      const auto& nodes = dag.node_of[w];
      std::vector<std::uint32_t>& posted = sc.posted_sends;
      posted.clear();
      for (std::size_t i = 0; i < prog.size(); i++) {
        const auto node = static_cast<std::uint32_t>(nodes[i]);
        if (prog[i].kind == LOpKind::Send) {
          posted.push_back(node);
          continue;
        }
        for (std::uint32_t t : posted) edges.emplace_back(t, node);
        posted.clear();
      }
    }
  std::sort(shared.begin(), shared.end());
  shared.erase(std::unique(shared.begin(), shared.end()), shared.end());
  edges.insert(edges.end(), shared.begin(), shared.end());
  // Sends are folded into their transfer node. Every send is in a matched pair (check_and_match): no pass over the
  // programs needed.
  for (const MsgPair& m : pairs) dag.node_of[m.send_worker][m.send_index] = -1;

  // CSR by counting sort; successors keep insertion order (program order first).
  const std::size_t n = sink.size();
  reserve_grown(dag.succ_begin, n + 1);
  reserve_grown(dag.preds, n);
  dag.succ_begin.assign(n + 1, 0);
  dag.preds.assign(n, 0);
  for (const Edge& e : edges) {
    dag.succ_begin[e.first + 1]++;
    dag.preds[e.second]++;
  }
  for (std::size_t i = 0; i < n; i++) dag.succ_begin[i + 1] += dag.succ_begin[i];
  reserve_grown(dag.succ, edges.size());
  dag.succ.resize(edges.size());
  std::vector<std::uint32_t>& fill = sc.fill;
  reserve_grown(fill, n);
  fill.assign(dag.succ_begin.begin(), dag.succ_begin.end() - 1);
  for (const Edge& e : edges) dag.succ[fill[e.first]++] = e.second;
}

}  // namespace dag_build
}  // namespace pipescope
