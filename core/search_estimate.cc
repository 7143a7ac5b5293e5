#include "core/search_estimate.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/cost_model.h"
#include "core/dag.h"
#include "core/grad_sync.h"
#include "core/lowering.h"
#include "core/megatron_p2p.h"
#include "core/nccl_model.h"
#include "core/pipeline.h"
#include "core/placement.h"
#include "core/scenario.h"
#include "core/search.h"

namespace pipescope {
namespace {

// The cost model asked once per distinct question. Every cost model's answer for an op depends on its kind,
// virtual stage and token range and on the micro-batch's sequence count only (not on which micro-batch or slice
// it is: the same work costs the same), so those are the key.
class MemoCost final : public CostModel {
 public:
  explicit MemoCost(const CostModel& c) : c_(c) {}
  double compute_seconds(const Op& op, int seqs) const override {
    return memo(compute_, op, seqs, [&] { return c_.compute_seconds(op, seqs); });
  }
  double p2p_bytes(const Op& op, int seqs) const override {
    return memo(p2p_, op, seqs, [&] { return c_.p2p_bytes(op, seqs); });
  }
  int tp_allreduce_calls(const Op& op) const override { return c_.tp_allreduce_calls(op); }
  double tp_allreduce_bytes(const Op& op, int seqs) const override {
    return memo(tp_, op, seqs, [&] { return c_.tp_allreduce_bytes(op, seqs); });
  }
  double grad_bytes(int rank) const override { return c_.grad_bytes(rank); }
  double optimizer_seconds(int rank) const override { return c_.optimizer_seconds(rank); }
  double embedding_grad_bytes() const override { return c_.embedding_grad_bytes(); }
  double param_bytes(int rank) const override { return c_.param_bytes(rank); }

 private:
  struct Key {
    std::uint64_t a, b;  // kind | stage | sequences, token range
    bool operator==(const Key& o) const { return a == o.a && b == o.b; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return std::hash<std::uint64_t>()(k.a * 0x9E3779B97F4A7C15ull ^ k.b); }
  };
  using Table = std::unordered_map<Key, double, KeyHash>;
  template <class F>
  static double memo(Table& table, const Op& op, int seqs, const F& ask) {
    auto u32 = [](std::int32_t x) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)); };
    const Key k{static_cast<std::uint64_t>(op.kind) | u32(op.stage) << 8 | u32(seqs) << 32,
                u32(op.tok_begin) | u32(op.tok_end) << 32};
    const auto it = table.find(k);
    if (it != table.end()) return it->second;
    const double v = ask();
    table.emplace(k, v);
    return v;
  }
  const CostModel& c_;
  mutable Table compute_, p2p_, tp_;
};

// A ring collective of `bytes` over `n` GPUs at bandwidth bw and latency lat per step, as the simulator's ring
// collectives count steps (sim/collectives.h): 2 (n - 1) for an all-reduce, n - 1 for an all-gather or a
// reduce-scatter, each moving bytes / n.
double ring_collective_s(double bytes, int n, double bw_Bps, double lat_s, bool allgather) {
  if (n < 2 || bytes <= 0) return 0;
  const double steps = allgather ? n - 1 : 2.0 * (n - 1);
  return steps / n * bytes / bw_Bps + steps * lat_s;
}

struct Link {
  double bw_Bps = 0, latency_s = 0;
  bool bridged = false;  // through the node's one shared PCIe host bridge (cube-mesh "SYS" pairs, PCIe nodes)
};

// The path between two GPUs as the platform builds it (sim/platform.h): the NICs across nodes; inside a node
// NVSwitch's per-GPU port, a cube mesh's NVLinks (one or two) or its PCIe host path, or the PCIe bridge.
Link link_between(const ClusterSpec& c, int a, int b) {
  const int n = std::max(1, c.gpus_per_node);
  if (a / n != b / n) return {c.nic_data_Bps(), c.nic_latency_s, false};
  switch (c.fabric) {
    case IntraNodeFabric::NVSwitch:
      return {c.nvlink_bw_Bps, c.nvlink_latency_s, false};
    case IntraNodeFabric::CubeMesh: {
      const int k = n <= 8 ? cube_mesh_nvlinks(a % n, b % n) : 0;
      if (k > 0) return {k * c.nvlink_bw_Bps, c.nvlink_latency_s, false};
      return {c.pcie_bw_Bps, c.pcie_latency_s, true};
    }
    case IntraNodeFabric::PCIe:
      return {c.pcie_bw_Bps, c.pcie_latency_s, true};
  }
  return {c.nvlink_bw_Bps, c.nvlink_latency_s, false};
}

using Rings = std::vector<std::vector<std::int32_t>>;

// What paces concurrent ring all-reduces (a collective group's rings run at once): the slowest hop, where the
// hops through a node's host bridge share it (one link for both directions).
Link rings_link(const ClusterSpec& c, const Rings& rings) {
  Link slow{0, 0, false};
  int bridged = 0;
  for (const auto& ring : rings)
    for (std::size_t i = 0; i < ring.size(); i++)
      bridged += link_between(c, ring[i], ring[(i + 1) % ring.size()]).bridged;
  for (const auto& ring : rings)
    for (std::size_t i = 0; i < ring.size(); i++) {
      Link l = link_between(c, ring[i], ring[(i + 1) % ring.size()]);
      if (l.bridged) l.bw_Bps /= std::max(1, bridged);
      if (slow.bw_Bps == 0 || l.bw_Bps < slow.bw_Bps) slow.bw_Bps = l.bw_Bps;
      slow.latency_s = std::max(slow.latency_s, l.latency_s);
    }
  return slow;
}

// A collective call as the simulator's analytic collectives time it (NCCL's algorithm and protocol choice over
// the group's bandwidths, core/nccl_model.h): the slowest of the group's rings.
double nccl_rings_s(const ClusterSpec& c, const Rings& rings, double bytes, bool allgather) {
  double t = 0;
  for (const auto& ring : rings)
    if (ring.size() > 1 && bytes > 0)
      t = std::max(t, nccl_collective_seconds(
                          nccl_ring_group(c, ring, [&](int a, int b) { return link_between(c, a, b).bw_Bps; }), bytes,
                          allgather));
  return t;
}

// One call of a collective group, timed once per distinct (size, kind) (a group's calls repeat a few).
class GroupTimes {
 public:
  GroupTimes(const ClusterSpec& c, const Rings& rings, bool nccl) : c_(c), rings_(rings), nccl_(nccl) {
    if (!rings.empty()) link_ = rings_link(c, rings);
  }
  double call_s(double bytes, bool allgather) {
    for (const Seen& x : seen_)
      if (x.bytes == bytes && x.allgather == allgather) return x.s;
    const double t = nccl_ ? nccl_rings_s(c_, rings_, bytes, allgather)
                           : ring_collective_s(bytes, static_cast<int>(rings_.front().size()), link_.bw_Bps,
                                               link_.latency_s, allgather);
    seen_.push_back({bytes, allgather, t});
    return t;
  }

 private:
  struct Seen {
    double bytes;
    bool allgather;
    double s;
  };
  const ClusterSpec& c_;
  const Rings& rings_;
  bool nccl_;
  Link link_;
  std::vector<Seen> seen_;
};

// Everything build_dag's result depends on besides costs and GPUs: per op its kind, tag, async flag, whether it
// has a lead and moves bytes, peer, group and producer op; the groups' members; blocking sends.
std::vector<std::uint64_t> signature(const LoweredSchedule& ls) {
  std::vector<std::uint64_t> sig;
  std::size_t ops = 0;
  for (const auto& prog : ls.per_worker) ops += prog.size();
  sig.reserve(3 * ops + ls.per_worker.size() + 4 * ls.groups.size() + 4);
  auto u32 = [](std::int32_t x) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)); };
  sig.push_back(ls.blocking_sends ? 1 : 0);
  sig.push_back(ls.per_worker.size());
  for (const auto& prog : ls.per_worker) {
    sig.push_back(prog.size());
    for (const LoweredOp& l : prog) {
      sig.push_back(static_cast<std::uint64_t>(l.kind) | static_cast<std::uint64_t>(l.tag) << 4 |
                    static_cast<std::uint64_t>(l.async) << 8 | static_cast<std::uint64_t>(l.lead_s > 0) << 9 |
                    static_cast<std::uint64_t>(l.bytes > 0) << 10 | static_cast<std::uint64_t>(l.op.kind) << 12 |
                    u32(l.peer) << 32);
      sig.push_back(u32(l.group) | u32(l.op.stage) << 32);
      sig.push_back(u32(l.op.microbatch) | u32(l.op.slice) << 32);
    }
  }
  sig.push_back(ls.groups.size());
  for (const CollGroup& g : ls.groups) {
    sig.push_back(static_cast<std::uint64_t>(g.tag) | static_cast<std::uint64_t>(g.workers.size()) << 8);
    for (std::int32_t w : g.workers) sig.push_back(u32(w));
  }
  return sig;
}

std::uint64_t hash_of(const std::vector<std::uint64_t>& sig) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (std::uint64_t x : sig) h = (h ^ x) * 1099511628211ull;
  return h;
}

constexpr std::size_t kShapesKept = 8;

}  // namespace

struct Stage2Estimator::Shape {
  struct Node {
    DagKind kind;
    std::int32_t worker, index, group;
  };
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> sig;
  std::vector<Node> nodes;
  std::vector<std::uint32_t> succ_begin, succ;
  std::vector<std::uint32_t> order;  // topological
};

Stage2Estimator::Stage2Estimator() = default;
Stage2Estimator::~Stage2Estimator() = default;

namespace {

// The DAG's topology in a compact form and a topological order (Kahn's algorithm); throws on a cycle.
std::unique_ptr<Stage2Estimator::Shape> make_shape(const LoweredSchedule& ls, const Placement& pl,
                                                   std::vector<std::uint64_t> sig, std::uint64_t hash,
                                                   const std::string& source) {
  const Dag dag = build_dag(ls, pl);
  auto sh = std::make_unique<Stage2Estimator::Shape>();
  sh->hash = hash;
  sh->sig = std::move(sig);
  sh->nodes.reserve(dag.size());
  for (const DagNode& n : dag.nodes) sh->nodes.push_back({n.kind, n.worker, n.index, n.group});
  sh->succ_begin = dag.succ_begin;
  sh->succ = dag.succ;
  std::vector<std::uint32_t> pending(dag.preds), ready;
  for (std::uint32_t i = 0; i < dag.size(); i++)
    if (pending[i] == 0) ready.push_back(i);
  sh->order.reserve(dag.size());
  while (!ready.empty()) {
    const std::uint32_t u = ready.back();
    ready.pop_back();
    sh->order.push_back(u);
    for (std::uint32_t e = dag.succ_begin[u]; e < dag.succ_begin[u + 1]; e++)
      if (--pending[dag.succ[e]] == 0) ready.push_back(dag.succ[e]);
  }
  if (sh->order.size() != dag.size()) throw std::runtime_error(source + ": the lowered schedule's DAG has a cycle");
  return sh;
}

}  // namespace

double Stage2Estimator::estimate(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  const ClusterSpec& c = s.cluster;
  const auto model = make_cost_model(s);
  const MemoCost cost(*model);
  const Schedule sch = make_schedule(s);
  LoweredSchedule ls = lower_one_replica(s, sch, cost);
  const Placement full = scenario_placement(s);
  Placement one = full;
  one.dp = 1;
  one.gpu.assign(full.gpu.begin(), full.gpu.begin() + static_cast<std::ptrdiff_t>(par.pp) * par.tp);

  std::vector<std::uint64_t> sig = signature(ls);
  const std::uint64_t hash = hash_of(sig);
  const Shape* shape = nullptr;
  for (const auto& sh : shapes_)
    if (sh->hash == hash && sh->sig == sig) shape = sh.get();
  if (!shape) {
    if (shapes_.size() >= kShapesKept) shapes_.erase(shapes_.begin());
    shapes_.push_back(make_shape(ls, one, std::move(sig), hash, s.source));
    shape = shapes_.back().get();
    built_++;
  }

  // The simulator's `analytic` and `auto` collectives follow NCCL's cost model; `ring` and `aggregate` are flows
  // over the links (sim/collectives.h), estimated here by a ring all-reduce at the slowest hop.
  const bool nccl = s.sim.collectives == "analytic" || s.sim.collectives == "auto";
  auto rings = collective_rings(ls, one);
  // The data-parallel groups of the one replica stand for a pipeline rank's real group: its dp peers' GPUs, one
  // ring per TP rank (as build_dag rings a multi-worker group).
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    const CollGroup& grp = ls.groups[g];
    if (grp.tag != CollTag::DataParallel && grp.tag != CollTag::ParamGather) continue;
    const int r = grp.workers.front();
    rings[g].assign(static_cast<std::size_t>(par.tp), {});
    for (int t = 0; t < par.tp; t++)
      for (int d = 0; d < par.dp; d++) rings[g][static_cast<std::size_t>(t)].push_back(full.gpu_of(d * par.pp + r, t));
  }
  std::vector<GroupTimes> groups;
  groups.reserve(rings.size());
  for (const Rings& r : rings) groups.emplace_back(c, r, nccl);

  // Each node's duration: compute its seconds, a transfer its bytes over the link, a collective as the simulator's
  // collective model times it; no contention (SimGrid's job in stage 3).
  const std::size_t n = shape->nodes.size();
  dur_.resize(n);
  for (std::size_t u = 0; u < n; u++) {
    const Shape::Node& node = shape->nodes[u];
    const LoweredOp& l = ls.per_worker[static_cast<std::size_t>(node.worker)][static_cast<std::size_t>(node.index)];
    double d = 0;
    switch (node.kind) {
      case DagKind::Compute:
        d = l.seconds;
        break;
      case DagKind::Transfer: {
        // tp lanes run at once (one per TP rank); through a host bridge they share it.
        const int a = one.gpu_of(node.worker, 0), b = one.gpu_of(l.peer, 0);
        const Link k = link_between(c, a, b);
        const double bw = k.bridged ? k.bw_Bps / std::max(1, par.tp) : k.bw_Bps;
        d = a == b ? 0.0 : k.latency_s + l.bytes / bw;
        break;
      }
      case DagKind::Collective: {
        const auto g = static_cast<std::size_t>(node.group);
        if (rings[g].empty() || rings[g].front().size() < 2) break;
        // An async bucket becomes ready lead_s after its predecessor (core/lowering.h); the simulator times
        // all-gathers and reduce-scatters alike (n - 1 steps).
        const bool allgather = l.kind == LOpKind::AllGather || l.kind == LOpKind::ReduceScatter;
        d = (l.async ? l.lead_s : 0.0) + l.count * groups[g].call_s(l.bytes, allgather);
        break;
      }
      case DagKind::Join:
        break;
    }
    dur_[u] = d;
  }
  // The longest path, in topological order.
  start_.assign(n, 0.0);
  double makespan = 0;
  for (std::uint32_t u : shape->order) {
    const double f = start_[u] + dur_[u];
    makespan = std::max(makespan, f);
    for (std::uint32_t e = shape->succ_begin[u]; e < shape->succ_begin[u + 1]; e++) {
      double& st = start_[shape->succ[e]];
      st = std::max(st, f);
    }
  }
  return makespan;
}

LoweredSchedule lower_one_replica(const Scenario& s, const Schedule& sch, const CostModel& cost) {
  const GradSyncOptions o = grad_sync_options(s.training);
  LoweredSchedule ls = lower(sch, 1, s.parallel.tp, cost, uses_scatter_gather(s), o);
  // The p2p mode last, as prepare() applies it to the whole lowering.
  if (s.parallel.dp == 1) return with_p2p_mode(std::move(ls), s);
  // lower() of one replica has no data-parallel collectives. They go where lower() puts them for dp > 1: before the
  // tail its later passes appended (each program's embedding all-reduce and optimizer step; the embedding groups
  // last), the parameter gather after it. (Calling the passes one by one would copy the programs at each.)
  std::vector<std::vector<LoweredOp>> tails(ls.per_worker.size());
  for (std::size_t w = 0; w < ls.per_worker.size(); w++) {
    auto& prog = ls.per_worker[w];
    while (!prog.empty() && (prog.back().kind == LOpKind::Optimizer || prog.back().tag == CollTag::Embedding)) {
      tails[w].insert(tails[w].begin(), prog.back());
      prog.pop_back();
    }
  }
  std::vector<CollGroup> embedding;
  while (!ls.groups.empty() && ls.groups.back().tag == CollTag::Embedding) {
    embedding.insert(embedding.begin(), ls.groups.back());
    ls.groups.pop_back();
  }
  const auto before = static_cast<std::int32_t>(ls.groups.size());
  add_dp_grad_sync(ls, cost, o);
  const auto shift = static_cast<std::int32_t>(ls.groups.size()) - before;
  for (CollGroup& g : embedding) ls.groups.push_back(std::move(g));
  for (std::size_t w = 0; w < ls.per_worker.size(); w++)
    for (LoweredOp& l : tails[w]) {
      if (l.tag == CollTag::Embedding) l.group += shift;
      ls.per_worker[w].push_back(l);
    }
  add_param_gather(ls, cost, o);
  return with_p2p_mode(std::move(ls), s);
}

double estimate_iteration_s(const Scenario& s) { return Stage2Estimator().estimate(s); }

void order_by_structure(std::vector<Candidate>& c) {
  auto key = [](const Candidate& x) {
    const ParallelSpec& p = x.scenario.parallel;
    const ScheduleSpec& s = x.scenario.schedule;
    const TrainingSpec& t = x.scenario.training;
    return std::make_tuple(s.kind, p.pp, p.v, p.micro_batches(), s.seq_slices, s.slice_tokens, p.tp > 1, p.dp > 1,
                           t.distributed_optimizer, t.overlap_grad_reduce, t.overlap_param_gather);
  };
  std::stable_sort(c.begin(), c.end(), [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
}

}  // namespace pipescope
