#pragma once
// build_dag's steps (core/dag.h) for builders that keep their own kind of node: the checks and matchers, and one
// template that numbers the nodes and makes the edges and the successor lists under the execution semantics of
// core/lowering.h, handing each node to a sink. build_dag's sink writes a DagNode; stage 2 of the search
// (core/search_retime.cc) classes the node into a duration class as it is made, with no DagNode written or read
// back. One copy of the semantics: both go through build_graph.

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dag.h"
#include "core/lowering.h"
#include "core/placement.h"

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

inline bool is_collective(LOpKind k) {
  return k == LOpKind::AllReduce || k == LOpKind::AllGather || k == LOpKind::ReduceScatter;
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
  std::vector<Edge> edges, shared, blocking;
  std::vector<std::size_t> posted;
  std::vector<std::uint32_t> posted_sends, fill;
  // Per collective op met in program order: (its group, which call of its member it is). Its node is numbered only
  // once every worker's program has been read: edges name it by kCollRef | its entry until then.
  std::vector<std::pair<std::int32_t, std::int32_t>> coll_refs;
  std::vector<std::uint32_t> coll_base;  // per group: the node of its first call
};

// An edge end that is a collective call not numbered yet: kCollRef | index into Scratch::coll_refs.
constexpr std::uint32_t kCollRef = 0x80000000u;

// build_dag's checks of `ls` against the placement (its shape, its groups), before the programs are read; the
// messages and calls cleared. Returns, per replica, whether its messages are replica 0's moved (copied_replicas).
std::vector<char> check_shape_and_start(const LoweredSchedule& ls, const Placement& pl, Scratch& sc);
// One Send or Recv of worker w's program at position i, checked (its peer) and added to the messages.
void add_message(const LoweredSchedule& ls, int w, std::size_t i, P2pScratch& sc);
// The member slot of a collective call of worker w in its group, or -1 when the call is malformed (group out of range,
// not a member, another tag, fewer than one call): its error comes after the messages' (match_and_check).
int call_slot(const LoweredSchedule& ls, int w, const LoweredOp& l);
// Once every program is read: the messages matched (sc.p2p.pairs), then the collective calls checked, with
// build_dag's errors in its order (CheckError).
void match_and_check(const LoweredSchedule& ls, const std::vector<char>& same, bool calls_ok, Scratch& sc);

// build_dag's checks, its matching of sends with receives and of collective calls, and the nodes, edges and successor
// lists (dag.node_of, succ_begin, succ, preds; not dag.nodes, not dag.rings) of `ls`, under the execution semantics
// of core/lowering.h, in one pass over the programs (a search builds DAGs of millions of nodes: each pass over the
// programs is a sweep over memory). Throws CheckError as build_dag does. Node ids are given in build_dag's order
// (every worker's ops in program order, a Send's transfer in its place, then each group's calls); each node is handed
// to sink.add(kind, worker, index, lowered op, group) as it is numbered. Sink: begin(ops), size() (the nodes added so
// far), add(...).
template <class Sink>
void build_graph(const LoweredSchedule& ls, const Placement& pl, Dag& dag, Scratch& sc, Sink& sink) {
  const std::vector<char> same = check_shape_and_start(ls, pl, sc);
  const auto& pairs = sc.p2p.pairs;
  auto& calls = sc.calls;
  const std::size_t workers = ls.per_worker.size();

  std::size_t ops = 0;
  for (const auto& prog : ls.per_worker) ops += prog.size();
  sink.begin(ops);
  dag.node_of.resize(workers);
  auto add = [&](DagKind kind, int w, std::size_t i, const LoweredOp& l, std::int32_t group) {
    const std::uint32_t id = sink.size();
    sink.add(kind, w, i, l, group);
    return id;
  };
  std::vector<Edge>& edges = sc.edges;
  std::vector<Edge>& shared = sc.shared;      // collective -> collective, may repeat once per member
  std::vector<Edge>& blocking = sc.blocking;  // blocking sends' edges (after the matched messages')
  edges.clear();
  shared.clear();
  blocking.clear();
  sc.coll_refs.clear();
  reserve_grown(edges, ops + ops / 2);
  auto link = [&](std::uint32_t from, std::uint32_t to) {
    ((from & to & kCollRef) ? shared : edges).emplace_back(from, to);
  };
  bool calls_ok = true;
  // Per worker, in program order: its messages and collective calls collected, its nodes numbered (a Send's slot holds
  // its transfer node for now; a collective's node is a reference until all calls are known), and its edges made.
  for (std::size_t w = 0; w < workers; w++) {
    const int wi = static_cast<int>(w);
    const bool messages = !(ls.p > 0 && same[w / static_cast<std::size_t>(ls.p)]);
    const auto& prog = ls.per_worker[w];
    auto& nodes = dag.node_of[w];
    nodes.resize(prog.size());
    std::int64_t prev = -1;
    std::vector<std::size_t>& posted = sc.posted;  // async collectives not awaited yet (core/lowering.h)
    posted.clear();
    std::vector<std::uint32_t>& sends = sc.posted_sends;  // transfers posted since the last non-Send op
    sends.clear();
    for (std::size_t i = 0; i < prog.size(); i++) {
      const LoweredOp& l = prog[i];
      std::uint32_t node = 0;
      switch (l.kind) {
        case LOpKind::Compute:
        case LOpKind::Optimizer:
          node = add(DagKind::Compute, wi, i, l, -1);
          break;
        case LOpKind::Recv:
          if (messages) add_message(ls, wi, i, sc.p2p);
          node = add(DagKind::Join, wi, i, l, -1);
          break;
        case LOpKind::Send:
          if (messages) add_message(ls, wi, i, sc.p2p);
          node = add(l.bytes > 0 ? DagKind::Transfer : DagKind::Join, wi, i, l, -1);
          break;
        case LOpKind::AllReduce:
        case LOpKind::AllGather:
        case LOpKind::ReduceScatter: {
          const int slot = calls_ok ? call_slot(ls, wi, l) : -1;
          node = kCollRef | static_cast<std::uint32_t>(sc.coll_refs.size());
          if (slot < 0) {
            calls_ok = false;  // reported once the messages are matched
            sc.coll_refs.emplace_back(0, 0);
            break;
          }
          auto& mine = calls[static_cast<std::size_t>(l.group)][static_cast<std::size_t>(slot)];
          sc.coll_refs.emplace_back(l.group, static_cast<std::int32_t>(mine.size()));
          mine.push_back(static_cast<std::int32_t>(i));
          break;
        }
      }
      nodes[i] = static_cast<std::int32_t>(node);
      // Blocking sends: the worker's next non-Send op also waits for each transfer posted before it.
      if (ls.blocking_sends) {
        if (l.kind == LOpKind::Send) {
          sends.push_back(node);
        } else {
          for (std::uint32_t t : sends) blocking.emplace_back(t, node);
          sends.clear();
        }
      }
      if (prev >= 0) link(static_cast<std::uint32_t>(prev), node);
      if (l.async && is_collective(l.kind)) {
        // One communication stream per group: a bucket without a lead (posted all at once: the parameter
        // gather) starts after the group's previous one. A bucket with a lead starts at its own ready time, counted
        // from its predecessor op; if the previous bucket still runs, the two share the links.
        if (!posted.empty() && !(l.lead_s > 0)) {
          for (auto a = posted.rbegin(); a != posted.rend(); ++a)
            if (prog[*a].group == l.group) {
              link(static_cast<std::uint32_t>(nodes[*a]), node);
              break;
            }
        }
        posted.push_back(i);
        continue;
      }
      // An Optimizer waits for every posted collective; a Compute for the parameter gathers of its stage.
      auto awaited = [&](std::size_t a) {
        if (l.kind == LOpKind::Optimizer) return true;
        return prog[a].tag == CollTag::ParamGather && l.kind == LOpKind::Compute && l.op.stage == prog[a].op.stage;
      };
      std::size_t keep = 0;
      for (std::size_t a : posted) {
        if (awaited(a))
          link(static_cast<std::uint32_t>(nodes[a]), node);
        else
          posted[keep++] = a;
      }
      posted.resize(keep);
      if (l.kind != LOpKind::Send) prev = node;
    }
  }
  match_and_check(ls, same, calls_ok, sc);

  // One node per collective call, owned by the group's first member.
  sc.coll_base.resize(ls.groups.size());
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    sc.coll_base[g] = sink.size();
    const auto& ws = ls.groups[g].workers;
    const auto& prog = ls.per_worker[ws[0]];
    const auto& mine = calls[g][0];
    for (std::size_t k = 0; k < mine.size(); k++) {
      // The calls are spread over a program that no longer fits in the caches: fetched ahead.
      if (k + 8 < mine.size()) __builtin_prefetch(&prog[static_cast<std::size_t>(mine[k + 8])]);
      const LoweredOp& l = prog[static_cast<std::size_t>(mine[k])];
      const auto id = static_cast<std::int32_t>(add(l.bytes > 0 ? DagKind::Collective : DagKind::Join, ws[0],
                                                    static_cast<std::size_t>(mine[k]), l, static_cast<std::int32_t>(g)));
      for (std::size_t s = 0; s < ws.size(); s++) dag.node_of[ws[s]][calls[g][s][k]] = id;
    }
  }
  // The collective references resolved: build_dag's edges, in its order.
  if (!sc.coll_refs.empty()) {
    auto resolve = [&](std::uint32_t x) {
      if (!(x & kCollRef)) return x;
      const auto& r = sc.coll_refs[x & ~kCollRef];
      return sc.coll_base[static_cast<std::size_t>(r.first)] + static_cast<std::uint32_t>(r.second);
    };
    for (Edge& e : edges) e = {resolve(e.first), resolve(e.second)};
    for (Edge& e : shared) e = {resolve(e.first), resolve(e.second)};
    for (Edge& e : blocking) e.second = resolve(e.second);
  }
  for (const MsgPair& m : pairs)
    edges.emplace_back(static_cast<std::uint32_t>(dag.node_of[m.send_worker][m.send_index]),
                       static_cast<std::uint32_t>(dag.node_of[m.recv_worker][m.recv_index]));
  edges.insert(edges.end(), blocking.begin(), blocking.end());
  std::sort(shared.begin(), shared.end());
  shared.erase(std::unique(shared.begin(), shared.end()), shared.end());
  edges.insert(edges.end(), shared.begin(), shared.end());
  // Sends are folded into their transfer node. Every send is in a matched pair (match_and_check): no pass over the
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
