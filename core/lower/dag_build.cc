// build_dag (core/lower/dag.h): the checks, the matchers and the graph of a lowered schedule under the execution
// semantics of core/lower/lowering.h.
#include "core/lower/dag_build.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>

#include "core/ir/schedule_check.h"
#include "core/lower/dag_builder.h"

namespace pipescope {

namespace {

using dag_build::Edge;
using dag_build::is_collective;
using dag_build::Msg;
using dag_build::P2pScratch;
using dag_build::reserve_grown;

std::string exact(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string at(const LoweredSchedule& ls, int w, std::size_t i) {
  return lowered_op_name(ls, w, i) + " (worker " + std::to_string(w) + ", position " + std::to_string(i) + ")";
}

void check_shape(const LoweredSchedule& ls, const Placement& pl) {
  const std::size_t workers = static_cast<std::size_t>(ls.dp) * ls.p;
  if (ls.dp < 1 || ls.p < 1 || ls.tp < 1 || ls.per_worker.size() != workers)
    fail_check("lowered schedule has " + std::to_string(ls.per_worker.size()) +
                   " worker programs for dp = " + std::to_string(ls.dp) + ", p = " + std::to_string(ls.p),
               {});
  if (pl.dp != ls.dp || pl.p != ls.p || pl.tp != ls.tp || pl.cp != ls.cp ||
      pl.gpu.size() != workers * static_cast<std::size_t>(pl.width()))
    fail_check("placement is for dp = " + std::to_string(pl.dp) + ", p = " + std::to_string(pl.p) +
                   ", tp = " + std::to_string(pl.tp) + " (" + std::to_string(pl.gpu.size()) +
                   " GPUs) but the schedule is lowered for dp = " + std::to_string(ls.dp) +
                   ", p = " + std::to_string(ls.p) + ", tp = " + std::to_string(ls.tp),
               {});
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    const auto& ws = ls.groups[g].workers;
    if (ws.empty()) fail_check("collective group g" + std::to_string(g) + " has no members", {});
    for (std::size_t a = 0; a < ws.size(); a++) {
      if (ws[a] < 0 || static_cast<std::size_t>(ws[a]) >= workers)
        fail_check("collective group g" + std::to_string(g) + " names worker " + std::to_string(ws[a]) + " of " +
                       std::to_string(workers),
                   {});
      for (std::size_t b = 0; b < a; b++)
        if (ws[a] == ws[b])
          fail_check("collective group g" + std::to_string(g) + " lists worker " + std::to_string(ws[a]) + " twice",
                     {});
    }
  }
}

// Replicas whose programs are replica 0's moved (replica_programs_equal) while replica 0 only talks to
// itself: their messages match exactly as replica 0's do.
std::vector<char> copied_replicas(const LoweredSchedule& ls) {
  std::vector<char> same(static_cast<std::size_t>(std::max(ls.dp, 1)), 0);
  if (ls.dp <= 1) return same;  // no other replica (the search's one-replica DAGs): no pass over the programs
  for (int r = 0; r < ls.p && r < static_cast<int>(ls.per_worker.size()); r++)
    for (const LoweredOp& l : ls.per_worker[r])
      if ((l.kind == LOpKind::Send || l.kind == LOpKind::Recv) && (l.peer < 0 || l.peer >= ls.p)) return same;
  for (int d = 1; d < ls.dp; d++) same[d] = replica_programs_equal(ls, d);
  return same;
}

// The sort-based matcher: reports the first problem in key order (a duplicate send or receive, a message without its
// partner, sizes or tags that differ). Called only once the linear matcher below has found one, so that the error
// names what it always named.
[[noreturn]] void report_p2p_mismatch(const LoweredSchedule& ls, std::vector<Msg> sends, std::vector<Msg> recvs) {
  auto by_key = [](const Msg& a, const Msg& b) {
    return std::make_tuple(a.key(), a.worker, a.index) < std::make_tuple(b.key(), b.worker, b.index);
  };
  std::sort(sends.begin(), sends.end(), by_key);
  std::sort(recvs.begin(), recvs.end(), by_key);
  auto dup = [&](const std::vector<Msg>& v, const char* what) {
    for (std::size_t k = 1; k < v.size(); k++)
      if (v[k].key() == v[k - 1].key())
        fail_check(
            std::string("duplicate ") + what + ": " + at(ls, v[k - 1].worker, v[k - 1].index) + " and " +
                at(ls, v[k].worker, v[k].index) + " carry the same message",
            {lowered_op_name(ls, v[k - 1].worker, v[k - 1].index), lowered_op_name(ls, v[k].worker, v[k].index)});
  };
  dup(sends, "send");
  dup(recvs, "receive");
  std::size_t a = 0, b = 0;
  while (a < sends.size() || b < recvs.size()) {
    if (b == recvs.size() || (a < sends.size() && sends[a].key() < recvs[b].key())) {
      const Msg& s = sends[a];
      fail_check(at(ls, s.worker, s.index) + " has no matching recv on worker " + std::to_string(s.receiver),
                 {lowered_op_name(ls, s.worker, s.index)});
    }
    if (a == sends.size() || recvs[b].key() < sends[a].key()) {
      const Msg& r = recvs[b];
      fail_check(at(ls, r.worker, r.index) + " has no matching send on worker " + std::to_string(r.sender),
                 {lowered_op_name(ls, r.worker, r.index)});
    }
    const LoweredOp& so = ls.per_worker[sends[a].worker][sends[a].index];
    const LoweredOp& ro = ls.per_worker[recvs[b].worker][recvs[b].index];
    if (so.bytes != ro.bytes || so.tag != ro.tag)
      fail_check(
          at(ls, sends[a].worker, sends[a].index) + " sends " + exact(so.bytes) + " bytes but " +
              at(ls, recvs[b].worker, recvs[b].index) + " expects " + exact(ro.bytes) +
              (so.tag != ro.tag
                   ? (so.bytes == ro.bytes ? " as it should, but their tags differ" : " (and the tags differ)")
                   : ""),
          {lowered_op_name(ls, sends[a].worker, sends[a].index), lowered_op_name(ls, recvs[b].worker, recvs[b].index)});
    a++, b++;
  }
  throw std::logic_error("build_dag: the message matchers disagree");  // unreachable: the caller found a problem
}

// Murmur3's 64-bit finalizer: every input bit reaches the low bits the table index takes.
std::uint64_t mix(std::uint64_t h) {
  h = (h ^ h >> 33) * 0xff51afd7ed558ccdull;
  h = (h ^ h >> 33) * 0xc4ceb9fe1a85ec53ull;
  return h ^ h >> 33;
}

std::uint64_t key_hash(const Msg& m) {
  auto u32 = [](std::int32_t x) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)); };
  std::uint64_t h = mix(u32(m.sender) | u32(m.receiver) << 32);
  h = mix(h ^ (u32(m.stage) | u32(m.microbatch) << 32));
  return mix(h ^ (u32(m.slice) | static_cast<std::uint64_t>(m.kind) << 32));
}

// One Send or Recv of worker w's program at position i, checked (its peer) and added to the messages.
void add_message(const LoweredSchedule& ls, int w, std::size_t i, P2pScratch& sc) {
  const int workers = static_cast<int>(ls.per_worker.size());
  const LoweredOp& l = ls.per_worker[static_cast<std::size_t>(w)][i];
  if (l.peer < 0 || l.peer >= workers)
    fail_check(at(ls, w, i) + " names peer worker " + std::to_string(l.peer) + " of " + std::to_string(workers),
               {lowered_op_name(ls, w, i)});
  if (l.peer == w) fail_check(at(ls, w, i) + " names its own worker as the peer", {lowered_op_name(ls, w, i)});
  const bool send = l.kind == LOpKind::Send;
  Msg m{send ? w : l.peer,
        send ? l.peer : w,
        l.op.kind,
        l.op.stage,
        l.op.microbatch,
        l.op.slice,
        w,
        static_cast<std::int32_t>(i),
        l.bytes,
        l.tag};
  (send ? sc.sends : sc.recvs).push_back(m);
}

// The member slot of a collective call of worker w in its group, or -1 when match_collectives would reject the call
// (group out of range, not a member, another tag, fewer than one call).
int call_slot(const LoweredSchedule& ls, int w, const LoweredOp& l) {
  if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls.groups.size()) return -1;
  const CollGroup& g = ls.groups[static_cast<std::size_t>(l.group)];
  const auto it = std::find(g.workers.begin(), g.workers.end(), w);
  if (it == g.workers.end() || l.tag != g.tag || l.count < 1) return -1;
  return static_cast<int>(it - g.workers.begin());
}

void clear_calls(const LoweredSchedule& ls, std::vector<std::vector<std::vector<std::int32_t>>>& calls) {
  calls.resize(ls.groups.size());
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    calls[g].resize(ls.groups[g].workers.size());
    for (auto& c : calls[g]) c.clear();
  }
}

// One pass over the programs: the messages (workers of copied replicas left out) and the collective calls. A call
// that match_collectives would reject is only noted (false): its error comes after the messages' (check_and_match).
bool collect(const LoweredSchedule& ls, const std::vector<char>& same, dag_build::Scratch& sc) {
  sc.p2p.sends.clear();
  sc.p2p.recvs.clear();
  clear_calls(ls, sc.calls);
  bool calls_ok = true;
  const int workers = static_cast<int>(ls.per_worker.size());
  for (int w = 0; w < workers; w++) {
    const bool messages = !(ls.p > 0 && same[static_cast<std::size_t>(w / ls.p)]);
    const auto& prog = ls.per_worker[static_cast<std::size_t>(w)];
    for (std::size_t i = 0; i < prog.size(); i++) {
      const LoweredOp& l = prog[i];
      if (l.kind == LOpKind::Send || l.kind == LOpKind::Recv) {
        if (messages) add_message(ls, w, i, sc.p2p);
      } else if (calls_ok && is_collective(l.kind)) {
        const int slot = call_slot(ls, w, l);
        if (slot < 0)
          calls_ok = false;
        else
          sc.calls[static_cast<std::size_t>(l.group)][static_cast<std::size_t>(slot)].push_back(
              static_cast<std::int32_t>(i));
      }
    }
  }
  return calls_ok;
}

// Matches the collected Sends with Recvs in linear time (an open-addressing table of the sends by message key);
// returns the matched (send, recv) positions in receive order within the replicas matched here, then the copied
// replicas' pairs (replica 0's, moved). The order does not reach the DAG: each send has exactly one matched edge.
void match_p2p(const LoweredSchedule& ls, const std::vector<char>& same, P2pScratch& sc) {
  std::vector<Msg>& sends = sc.sends;
  std::vector<Msg>& recvs = sc.recvs;
  if (sends.size() != recvs.size()) report_p2p_mismatch(ls, sends, recvs);
  std::size_t cap = 16;
  while (cap < 2 * sends.size()) cap *= 2;
  std::vector<std::int32_t>& table = sc.table;  // index into sends; matched sends become -2 - index
  table.assign(cap, -1);
  auto find = [&](const Msg& m) -> std::int32_t& {
    for (std::size_t h = key_hash(m) & (cap - 1);; h = (h + 1) & (cap - 1)) {
      std::int32_t& t = table[h];
      if (t == -1) return t;
      const std::int32_t k = t >= 0 ? t : -2 - t;
      if (sends[static_cast<std::size_t>(k)].key() == m.key()) return t;
    }
  };
  for (std::size_t k = 0; k < sends.size(); k++) {
    std::int32_t& t = find(sends[k]);
    if (t != -1) report_p2p_mismatch(ls, sends, recvs);  // a duplicate send
    t = static_cast<std::int32_t>(k);
  }
  std::vector<dag_build::MsgPair>& pairs = sc.pairs;
  pairs.clear();
  reserve_grown(pairs, recvs.size() * static_cast<std::size_t>(std::count(same.begin(), same.end(), 1) + 1));
  for (const Msg& r : recvs) {
    std::int32_t& t = find(r);
    if (t < 0) report_p2p_mismatch(ls, sends, recvs);  // no send, or a duplicate receive
    const Msg& s = sends[static_cast<std::size_t>(t)];
    if (s.bytes != r.bytes || s.tag != r.tag) report_p2p_mismatch(ls, sends, recvs);
    pairs.push_back({s.worker, s.index, r.worker, r.index});
    t = -2 - t;
  }
  // As many receives as sends, each matched to its own send: every send is matched.
  const std::size_t own = pairs.size();
  for (int d = 1; d < ls.dp; d++) {
    if (!same[d]) continue;
    const std::int32_t shift = d * ls.p;
    for (std::size_t k = 0; k < own; k++) {
      const dag_build::MsgPair m = pairs[k];
      if (m.send_worker >= ls.p) continue;
      pairs.push_back({m.send_worker + shift, m.send_index, m.recv_worker + shift, m.recv_index});
    }
  }
}

// Collective calls per group: calls[g][slot][n] = position of member `slot`'s n-th call on group g.
// (collect_calls throws the first malformed call's error; check_calls compares the members' calls.)
void collect_calls(const LoweredSchedule& ls, std::vector<std::vector<std::vector<std::int32_t>>>& calls) {
  clear_calls(ls, calls);
  for (std::size_t w = 0; w < ls.per_worker.size(); w++) {
    const auto& prog = ls.per_worker[w];
    for (std::size_t i = 0; i < prog.size(); i++) {
      const LoweredOp& l = prog[i];
      if (!is_collective(l.kind)) continue;
      const int wi = static_cast<int>(w);
      if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls.groups.size())
        fail_check(at(ls, wi, i) + " uses collective group " + std::to_string(l.group) + " of " +
                       std::to_string(ls.groups.size()),
                   {lowered_op_name(ls, wi, i)});
      const auto& ws = ls.groups[l.group].workers;
      const auto it = std::find(ws.begin(), ws.end(), wi);
      if (it == ws.end())
        fail_check(at(ls, wi, i) + " runs on a worker that is not a member of group g" + std::to_string(l.group),
                   {lowered_op_name(ls, wi, i)});
      if (l.tag != ls.groups[l.group].tag)
        fail_check(at(ls, wi, i) + " has a different tag than its group g" + std::to_string(l.group),
                   {lowered_op_name(ls, wi, i)});
      if (l.count < 1)
        fail_check(at(ls, wi, i) + " folds " + std::to_string(l.count) + " calls", {lowered_op_name(ls, wi, i)});
      calls[l.group][it - ws.begin()].push_back(static_cast<std::int32_t>(i));
    }
  }
}

void check_calls(const LoweredSchedule& ls, const std::vector<std::vector<std::vector<std::int32_t>>>& calls) {
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    const auto& ws = ls.groups[g].workers;
    const auto& c0 = calls[g][0];
    for (std::size_t s = 1; s < ws.size(); s++) {
      const auto& cs = calls[g][s];
      const std::size_t n = std::min(c0.size(), cs.size());
      for (std::size_t k = 0; k < n; k++) {
        const LoweredOp& a = ls.per_worker[ws[0]][c0[k]];
        const LoweredOp& b = ls.per_worker[ws[s]][cs[k]];
        if (a.kind != b.kind || a.bytes != b.bytes || a.count != b.count)
          fail_check("collective call " + std::to_string(k) + " of group g" + std::to_string(g) +
                         " does not match: " + at(ls, ws[0], c0[k]) + " vs " + at(ls, ws[s], cs[k]),
                     {lowered_op_name(ls, ws[0], c0[k]), lowered_op_name(ls, ws[s], cs[k])});
      }
      if (c0.size() != cs.size()) {
        const bool first_more = c0.size() > cs.size();
        const int w = first_more ? ws[0] : ws[s];
        const auto& longer = first_more ? c0 : cs;
        fail_check("group g" + std::to_string(g) + ": worker " + std::to_string(ws[0]) + " makes " +
                       std::to_string(c0.size()) + " collective calls but worker " + std::to_string(ws[s]) + " makes " +
                       std::to_string(cs.size()) + "; unmatched: " + at(ls, w, longer[n]),
                   {lowered_op_name(ls, w, longer[n])});
      }
    }
  }
}

}  // namespace

namespace dag_build {

void check_and_match(const LoweredSchedule& ls, const Placement& pl, Scratch& sc) {
  check_shape(ls, pl);
  const std::vector<char> same = copied_replicas(ls);
  const bool calls_ok = collect(ls, same, sc);
  match_p2p(ls, same, sc.p2p);
  // build_dag's errors in their order: the messages', then the collective calls' (collect_calls throws the first).
  if (!calls_ok) collect_calls(ls, sc.calls);
  check_calls(ls, sc.calls);
}

}  // namespace dag_build

namespace {

// A DagNode per node (build_dag's nodes).
struct DagNodes {
  Dag& dag;
  const Placement& pl;
  void begin(std::size_t ops) {
    dag.nodes.clear();
    reserve_grown(dag.nodes, ops);
  }
  std::uint32_t size() const { return static_cast<std::uint32_t>(dag.nodes.size()); }
  void add(DagKind kind, int w, std::size_t i, const LoweredOp& l, std::int32_t group) {
    DagNode n;
    n.kind = kind;
    n.worker = w;
    n.index = static_cast<std::int32_t>(i);
    switch (l.kind) {
      case LOpKind::Compute:
      case LOpKind::Optimizer:
        n.gpu = pl.gpu_of(w, 0);
        n.amount = l.seconds;
        break;
      case LOpKind::Recv:
        break;
      case LOpKind::Send:
        n.gpu = pl.gpu_of(w, 0);
        n.gpu2 = pl.gpu_of(l.peer, 0);
        n.amount = l.bytes;
        break;
      case LOpKind::AllReduce:
      case LOpKind::AllGather:
      case LOpKind::ReduceScatter:
      case LOpKind::AllToAll:
        n.group = group;
        n.count = l.count;
        n.amount = l.bytes;
        n.lead_s = l.async ? l.lead_s : 0.0;
        break;
    }
    dag.nodes.push_back(n);
  }
};

// build_dag into `dag`, reusing its storage and the scratch's.
void build_into(const LoweredSchedule& ls, const Placement& pl, Dag& dag, dag_build::Scratch& sc) {
  dag_build::check_and_match(ls, pl, sc);
  DagNodes nodes{dag, pl};
  dag_build::build_graph(ls, dag, sc, nodes);
  dag.rings = collective_rings(ls, pl);
}

}  // namespace

struct DagBuilder::Scratch : dag_build::Scratch {};

DagBuilder::DagBuilder() : scratch_(std::make_unique<Scratch>()) {}
DagBuilder::~DagBuilder() = default;

const Dag& DagBuilder::build(const LoweredSchedule& ls, const Placement& placement) {
  build_into(ls, placement, dag_, *scratch_);
  return dag_;
}

Dag build_dag(const LoweredSchedule& ls, const Placement& pl) {
  Dag dag;
  dag_build::Scratch scratch;
  build_into(ls, pl, dag, scratch);
  return dag;
}

std::vector<std::vector<std::vector<std::int32_t>>> collective_rings(const LoweredSchedule& ls, const Placement& pl) {
  // Rings (lane c * tp + t of a worker is its context-parallel rank c, tensor-parallel rank t): a one-worker
  // group is one ring of tp GPUs per context-parallel rank (TP, scatter/gather), or one ring of cp GPUs per TP
  // rank (the context-parallel K/V exchange); a multi-worker group runs as tp parallel rings, ring t over TP rank
  // t of every member and context-parallel rank (DP: Megatron's data-parallel group with context parallelism), or
  // one ring per lane (embedding: first and last stage of the same context-parallel rank).
  std::vector<std::vector<std::vector<std::int32_t>>> out(ls.groups.size());
  const int tp = ls.tp, cp = ls.cp;
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    const auto& ws = ls.groups[g].workers;
    auto& rings = out[g];
    const CollTag tag = ls.groups[g].tag;
    // A new ring with room for its n GPUs (the search builds the rings for every candidate: no growth step by step).
    auto ring = [&](std::size_t n) -> std::vector<std::int32_t>& {
      rings.emplace_back();
      rings.back().reserve(n);
      return rings.back();
    };
    if (tag == CollTag::ExpertParallel || tag == CollTag::ExpertData) {
      // The members' GPUs in Megatron's rank order (worker by worker, lane c * tp + t), cut into expert-parallel
      // groups of ep consecutive GPUs; an expert-data-parallel ring takes the GPUs at one place in every group.
      std::vector<std::int32_t> all;
      for (std::int32_t w : ws)
        for (int lane = 0; lane < tp * cp; lane++) all.push_back(pl.gpu_of(w, lane));
      const auto ep = static_cast<std::size_t>(std::max(1, ls.ep));
      if (tag == CollTag::ExpertParallel) {
        for (std::size_t i = 0; i + ep <= all.size(); i += ep) ring(ep).assign(all.begin() + i, all.begin() + i + ep);
      } else {
        for (std::size_t j = 0; j < ep; j++) {
          auto& r = ring(all.size() / ep);
          for (std::size_t i = j; i < all.size(); i += ep) r.push_back(all[i]);
        }
      }
    } else if (ws.size() == 1 && tag == CollTag::ContextParallel) {
      // Context-parallel rank c = j * a2a + i: all-to-all group j, place i in it.
      const int a2a = std::max(1, ls.cp_a2a), groups = cp / a2a;
      for (int t = 0; t < tp; t++) switch (ls.groups[g].cp_ring) {
          case CpRing::Whole: {
            auto& r = ring(static_cast<std::size_t>(cp));
            for (int c = 0; c < cp; c++) r.push_back(pl.gpu_of(ws[0], c * tp + t));
            break;
          }
          case CpRing::Inner:
            for (int j = 0; j < groups; j++) {
              auto& r = ring(static_cast<std::size_t>(a2a));
              for (int i = 0; i < a2a; i++) r.push_back(pl.gpu_of(ws[0], (j * a2a + i) * tp + t));
            }
            break;
          case CpRing::Outer:
            for (int i = 0; i < a2a; i++) {
              auto& r = ring(static_cast<std::size_t>(groups));
              for (int j = 0; j < groups; j++) r.push_back(pl.gpu_of(ws[0], (j * a2a + i) * tp + t));
            }
            break;
        }
    } else if (ws.size() == 1 && tag != CollTag::DataParallel && tag != CollTag::ParamGather) {
      for (int c = 0; c < cp; c++) {
        auto& r = ring(static_cast<std::size_t>(tp));
        for (int t = 0; t < tp; t++) r.push_back(pl.gpu_of(ws[0], c * tp + t));
      }
    } else if (tag == CollTag::Embedding) {
      for (int lane = 0; lane < tp * cp; lane++) {
        auto& r = ring(ws.size());
        for (std::int32_t w : ws) r.push_back(pl.gpu_of(w, lane));
      }
    } else {
      for (int t = 0; t < tp; t++) {
        auto& r = ring(ws.size() * static_cast<std::size_t>(cp));
        for (std::int32_t w : ws)
          for (int c = 0; c < cp; c++) r.push_back(pl.gpu_of(w, c * tp + t));
      }
    }
  }
  return out;
}

}  // namespace pipescope
