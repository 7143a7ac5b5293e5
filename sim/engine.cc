// The just-in-time DAG driver (docs/simulator.md): a node's SimGrid
// activity is created only when its last predecessor completed, so SimGrid holds only what is in flight.
// Hot path: no strings, maps, std::function or per-activity heap use of our own; activity metadata is a
// tagged integer stored in the activity's data pointer; collective state lives in recycled records.
//
// Before the run, a planning stage fixes what does not change while it runs: ring orders and collective
// algorithms and the replica fold (one data-parallel replica simulated for all when that is exact; its mirror
// hosts join the platform's flat zone). sim/README.md documents it.
#include "sim/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/nccl_model.h"
#include "sim/child_process.h"
#include "sim/platform.h"

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;

namespace {

using Ring = std::vector<std::int32_t>;
using Rings = std::vector<Ring>;
using HostPair = std::pair<sg4::Host*, sg4::Host*>;
constexpr std::uint32_t kNo = 0xffffffffu;

// Activity data = (payload << 3) | tag.
enum Tag : std::uintptr_t {
  kNode = 1,      // payload: DAG node (exec, transfer flow, analytic delay)
  kRing = 2,      // payload: (run << 29) | position
  kAggDelay = 3,  // payload: run
  kAggComm = 4,   // payload: run
  kLead = 5,      // payload: collective node whose lead time (DagNode::lead_s) is over
};
constexpr std::uintptr_t kPosBits = 29;

struct CollRun {
  std::uint32_t node = 0;
  std::uint32_t left = 0;  // aggregate: comms not finished
  double chunk_bytes = 0;  // per comm
  RingProgress ring;       // ring mode
};

// Everything the driver touches per node, in one 32-byte record: the decrement that makes a node ready
// brings its launch data into cache with it (the DAG itself is only read again for collectives).
struct alignas(32) Hot {
  std::uint32_t pending;     // before launch: unfinished predecessors; after: activities still running
  std::uint32_t gpu_kind;    // gpu | kind << 30
  std::int32_t aux;          // transfer: channel (-1 = moves nothing); collective: group
  std::uint32_t succ_begin;  // CSR row start (row end = next record's)
  double amount;             // seconds or bytes
  double start;              // launch time
};
static_assert(sizeof(Hot) == 32, "Hot must stay one half cache line");
constexpr std::uint32_t kGpuMask = (1u << 30) - 1;

// Finished nodes in completion order; scattered into SimResult::timing once the run is over.
struct Done {
  std::uint32_t node;
  double start, end;
};

// Per group, per ring: bottleneck latency (max over edges) and bandwidth (min over edges).
struct RingRoute {
  double alpha = 0, bw = 0;
  NcclGroup nccl;  // the ring as an NCCL communicator (Analytic: core/nccl_model.h)
};

bool laned(const DagAnnotations& ann, std::int32_t a, std::int32_t b) {
  return !ann.lanes.empty() && !ann.lanes[a].empty() && !ann.lanes[b].empty();
}

// ------------------------------------------------------------------------------------------------------
// Collective plan: ring orders, algorithm per group and (for delay-based algorithms) ring route figures,
// always derived from the whole DAG so that folding does not change any choice.
struct CollectivePlan {
  std::vector<Rings> rings;  // Dag::rings in the order they run
  std::vector<CollAlgo> algo;
  std::vector<std::vector<RingRoute>> routes;  // per group, per ring (non-ring algorithms only)
  std::vector<std::uint8_t> used;              // per group: some collective node moves bytes on it
};

CollTag tag_of(const DagAnnotations& ann, std::int32_t g) {
  return static_cast<std::size_t>(g) < ann.group_tags.size() ? ann.group_tags[g] : CollTag::None;
}

// Per-member NVLink bandwidth to the other members of its node, the weakest member's (PCIe when it has none).
CollectivePlan plan_collectives(const ClusterSpec& cluster, const Dag& dag, const EngineOptions& opt,
                                const Platform& pf) {
  CollectivePlan cp;
  // Ring orders: NCCL follows NVLink inside cube-mesh nodes; other fabrics treat every GPU pair alike.
  cp.rings = dag.rings;
  if (cluster.fabric == IntraNodeFabric::CubeMesh)
    for (auto& group : cp.rings)
      for (auto& ring : group) ring = nvlink_ring_order(ring, cluster.gpus_per_node, cube_mesh_links);
  cp.used.assign(cp.rings.size(), 0);
  for (std::size_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind == DagKind::Collective && n.amount > 0 && !cp.rings[n.group].empty()) cp.used[n.group] = 1;
  }
  cp.algo.assign(cp.rings.size(), collective_algorithm(opt.collectives));
  cp.routes.resize(cp.rings.size());
  for (std::size_t g = 0; g < cp.rings.size(); g++) {
    if (cp.algo[g] == CollAlgo::Ring || !cp.used[g]) continue;
    for (const auto& ring : cp.rings[g]) {
      RingRoute rr{0.0, std::numeric_limits<double>::infinity(), {}};
      const std::size_t n = ring.size();
      for (std::size_t i = 0; n > 1 && i < n; i++) {
        RouteInfo ri = route_info(pf.gpus[ring[i]], pf.gpus[ring[(i + 1) % n]]);
        rr.alpha = std::max(rr.alpha, ri.latency_s);
        rr.bw = std::min(rr.bw, ri.bandwidth_Bps);
      }
      rr.nccl = nccl_ring_group(cluster, ring, [&](std::int32_t a, std::int32_t b) {
        return route_info(pf.gpus[a], pf.gpus[b]).bandwidth_Bps;
      });
      cp.routes[g].push_back(rr);
    }
  }
  return cp;
}

// ------------------------------------------------------------------------------------------------------
// Replica folding. Data-parallel replicas run identical programs on identical nodes and meet only in the
// data-parallel collectives. When the checks below hold, the max-min network problem of the whole cluster
// splits into one copy per replica plus the data-parallel ring flows, and it is invariant under the shift
// replica d -> d + 1: every replica then has exactly replica 0's times. The folded run simulates replica 0
// and its collectives, with each data-parallel ring flow d -> d+1 replaced by its image under the shift, a
// flow from replica 0's GPU back into replica 0's own node (its "mirror": the sender's NVLink port and NIC
// up, the receiver-side NIC down and NVLink port of the same node). Each link then carries exactly the
// flows it carries in the full run (up to the shift), so SimGrid computes the same numbers. Checks:
//  1. every node of replica d > 0 has a replica-0 counterpart (same worker modulo p, same position) of the
//     same kind, cost, size and call count, with corresponding edges; the only nodes without one are the
//     collectives of data-parallel groups, whose rings are (x, sigma_1(x), ..., sigma_{dp-1}(x));
//  2. sigma_d (replica 0's GPUs -> replica d's) is a bijection that moves whole nodes and keeps each GPU's
//     place in its node, and no two replicas share a node;
//  3. routes: replica d's routes are replica 0's moved by sigma_d link for link (same node links in the same
//     order, same latency); each data-parallel ring flow's route has the mirror's links and latency; every
//     inter-node link outside the two end nodes (fat-tree links) only ever carries flows that all also cross
//     one node link of no larger bandwidth, so it can never be a strict bottleneck. A fabric link that carries
//     flows of several nodes ("temporal") still qualifies when its flows from each node (and to each node)
//     have such a link and, in the folded run, the flows active on it at any moment all leave one node or
//     all enter one node. That needs the folded run's times, so the folded run then happens in a forked
//     child and the full run follows in this process when the check fails. The check is sound: up to the
//     first moment the full run would violate it the two runs are the same, so the folded run shows it.
struct FoldPlan {
  bool on = false;
  std::string why;  // why not (tests, debugging)
  Dag dag;          // replica 0 and the data-parallel collectives
  std::vector<std::uint8_t> allgather;
  std::vector<std::uint32_t> rep;    // per node of the full DAG: the folded node whose times it has
  std::vector<std::uint32_t> orig;   // per folded node: its node in the full DAG
  std::vector<int> qranks;           // per group: dp for a data-parallel group run as its quotient, else 0
  std::vector<MirrorRoute> mirrors;  // x -> mirror(x) for the first GPU x of every quotient ring
  // Fabric links shared by flows of several nodes ("temporal" links): exact only if, at every moment, the
  // flows active on each of them all leave one node or all enter one node (then a link of that node
  // dominates it). Checked on the folded run's times (TemporalCheck); per link, the flows through it and,
  // per such flow, its end nodes and the full-DAG nodes (transfers, collectives) that run it.
  struct Flow {
    std::int32_t src_node, dst_node;
    std::vector<std::uint32_t> users;
  };
  std::vector<Flow> flows;
  std::vector<std::vector<std::uint32_t>> temporal;  // per temporal link: indices into `flows`
};

// Link k of node a's zone, by pointer.
struct LinkOwner {
  std::int32_t node = -1, index = -1;
};

class Folder {
 public:
  Folder(const ClusterSpec& c, const Dag& dag, const DagAnnotations& ann, const CollectivePlan& cp, const Platform& pf)
      : c_(c), dag_(dag), ann_(ann), cp_(cp), pf_(pf) {}

  FoldPlan plan() {
    FoldPlan fp;
    try {
      analyse();
      routes();
      build(fp);
      fp.on = true;
    } catch (const Refuse& r) {
      fp = FoldPlan{};
      fp.why = r.why;
    }
    return fp;
  }

 private:
  struct Refuse {
    std::string why;
  };
  [[noreturn]] static void refuse(const std::string& why) { throw Refuse{why}; }

  int replica(std::uint32_t n) const { return dag_.nodes[n].worker / p_; }

  // sigma_d(g0) = g, recorded and checked for consistency and injectivity.
  void bind(int d, std::int32_t g0, std::int32_t g) {
    if (g0 < 0 || g < 0) {
      if (g0 != g) refuse("a GPU field is set in one replica only");
      return;
    }
    if (owner_[g0] == -1) owner_[g0] = 0, base_[g0] = g0;
    if (owner_[g0] != 0) refuse("GPU " + std::to_string(g0) + " is used by two replicas");
    std::int32_t& s = sigma_[d][g0];
    if (s == -1) s = g;
    if (s != g) refuse("replica " + std::to_string(d) + " does not map GPU " + std::to_string(g0) + " consistently");
    if (owner_[g] == -1) owner_[g] = d, base_[g] = g0;
    if (owner_[g] != d || base_[g] != g0)
      refuse("GPU " + std::to_string(g) + " stands for two GPUs of replica 0 or is used by two replicas");
  }

  void analyse() {
    dp_ = ann_.replicas;
    const int W = ann_.workers;
    if (dp_ < 2) refuse("one replica");
    if (W <= 0 || W % dp_ != 0) refuse("workers are not replicas x pipeline ranks");
    p_ = W / dp_;
    const std::size_t N = dag_.size();
    const std::size_t G = pf_.gpus.size();
    if (!ann_.lanes.empty() && ann_.lanes.size() != G) refuse("lanes do not list every GPU");
    // Replica-0 nodes by (worker, position).
    std::vector<std::int32_t> max_index(static_cast<std::size_t>(p_), -1);
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.worker < 0 || x.worker >= W || x.index < 0) refuse("a node has no worker or position");
      if (x.worker < p_) max_index[x.worker] = std::max(max_index[x.worker], x.index);
    }
    std::vector<std::vector<std::uint32_t>> at(static_cast<std::size_t>(p_));
    for (int w = 0; w < p_; w++) at[w].assign(static_cast<std::size_t>(max_index[w] + 1), kNo);
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.worker >= p_) continue;
      std::uint32_t& slot = at[x.worker][x.index];
      if (slot != kNo) refuse("two nodes share a worker position");
      slot = n;
    }
    rep_.assign(N, kNo);
    std::vector<std::uint32_t> seen(N, 0);
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.worker < p_) continue;
      const int w0 = x.worker % p_;
      if (x.index > max_index[w0] || at[w0][x.index] == kNo) refuse("a node of replica >0 has no counterpart");
      rep_[n] = at[w0][x.index];
      seen[rep_[n]]++;
    }
    sigma_.assign(static_cast<std::size_t>(dp_), std::vector<std::int32_t>(G, -1));
    owner_.assign(G, -1);
    base_.assign(G, -1);
    gmap_.assign(static_cast<std::size_t>(dp_), std::vector<std::int32_t>(cp_.rings.size(), -1));
    // Node by node: kind, cost, size, calls, GPUs, groups.
    for (std::uint32_t n = 0; n < N; n++) {
      if (rep_[n] == kNo) continue;
      const DagNode& x = dag_.nodes[n];
      const DagNode& r = dag_.nodes[rep_[n]];
      const int d = replica(n);
      if (x.kind != r.kind || x.amount != r.amount || x.count != r.count)
        refuse("node " + std::to_string(n) + " differs from its replica-0 counterpart");
      bind(d, r.gpu, x.gpu);
      bind(d, r.gpu2, x.gpu2);
      if (x.kind == DagKind::Collective) {
        if (x.group < 0 || r.group < 0) refuse("a collective without group");
        std::int32_t& gm = gmap_[d][r.group];
        if (gm == -1) gm = x.group;
        if (gm != x.group) refuse("collective groups do not correspond across replicas");
        if (tag_of(ann_, x.group) != tag_of(ann_, r.group)) refuse("collective tags differ across replicas");
        const bool ag_x = !ann_.allgather.empty() && ann_.allgather[n] != 0;
        const bool ag_r = !ann_.allgather.empty() && ann_.allgather[rep_[n]] != 0;
        if (ag_x != ag_r) refuse("collective kinds differ across replicas");
      }
      if (dag_.preds[n] != dag_.preds[rep_[n]]) refuse("predecessor counts differ across replicas");
    }
    // Replica-local groups: rings correspond element by element.
    for (int d = 1; d < dp_; d++)
      for (std::size_t g0 = 0; g0 < cp_.rings.size(); g0++) {
        const std::int32_t g = gmap_[d][g0];
        if (g == -1) continue;
        const Rings& a = cp_.rings[g0];
        const Rings& b = cp_.rings[g];
        if (a.size() != b.size()) refuse("ring counts differ across replicas");
        for (std::size_t k = 0; k < a.size(); k++) {
          if (a[k].size() != b[k].size()) refuse("ring sizes differ across replicas");
          for (std::size_t i = 0; i < a[k].size(); i++) bind(d, a[k][i], b[k][i]);
        }
        if (cp_.algo[g0] != cp_.algo[g]) refuse("collective algorithms differ across replicas");
      }
    // Tensor-parallel lanes of replica 0's workers.
    if (!ann_.lanes.empty())
      for (std::size_t g0 = 0; g0 < G; g0++) {
        if (owner_[g0] != 0 || ann_.lanes[g0].empty()) continue;
        for (int d = 1; d < dp_; d++) {
          const std::int32_t g = sigma_[d][g0];
          if (g < 0 || ann_.lanes[g].size() != ann_.lanes[g0].size()) refuse("lanes differ across replicas");
          for (std::size_t t = 0; t < ann_.lanes[g0].size(); t++) bind(d, ann_.lanes[g0][t], ann_.lanes[g][t]);
        }
      }
    // Shared nodes: data-parallel collectives, whose rings are (x, sigma_1(x), ...).
    shared_.assign(N, 0);
    qranks_.assign(cp_.rings.size(), 0);
    for (std::uint32_t n = 0; n < N; n++) {
      if (dag_.nodes[n].worker >= p_) continue;
      if (seen[n] == static_cast<std::uint32_t>(dp_ - 1)) continue;
      const DagNode& x = dag_.nodes[n];
      // A data-parallel collective, or one that moves nothing (a Join all replicas meet at).
      if (seen[n] != 0 || (x.kind != DagKind::Collective && x.kind != DagKind::Join) || x.group < 0)
        refuse("node " + std::to_string(n) + " of replica 0 has counterparts in some replicas only");
      shared_[n] = 1;
      if (x.kind == DagKind::Collective) qranks_[x.group] = dp_;
    }
    for (int d = 1; d < dp_; d++)
      for (std::size_t g0 = 0; g0 < cp_.rings.size(); g0++)
        if (gmap_[d][g0] != -1 && (qranks_[g0] != 0 || qranks_[gmap_[d][g0]] != 0))
          refuse("a data-parallel group is also used replica by replica");
    for (std::size_t g = 0; g < cp_.rings.size(); g++) {
      if (qranks_[g] == 0) continue;
      for (const Ring& ring : cp_.rings[g]) {
        if (ring.size() != static_cast<std::size_t>(dp_)) refuse("a data-parallel ring does not span the replicas");
        if (owner_[ring[0]] != 0) refuse("a data-parallel ring does not start on replica 0");
        for (int d = 1; d < dp_; d++)
          if (sigma_[d][ring[0]] != ring[d]) refuse("a data-parallel ring is not the replica shift");
      }
    }
    // Every replica-0 GPU has an image in every replica.
    for (std::size_t g0 = 0; g0 < G; g0++) {
      if (owner_[g0] != 0 || base_[g0] != static_cast<std::int32_t>(g0)) continue;
      gpus0_.push_back(static_cast<std::int32_t>(g0));
      for (int d = 1; d < dp_; d++)
        if (sigma_[d][g0] < 0) refuse("GPU " + std::to_string(g0) + " has no image in replica " + std::to_string(d));
    }
    // Whole nodes move, GPUs keep their place, replicas never share a node.
    const int gpn = c_.gpus_per_node;
    nu_.assign(static_cast<std::size_t>(dp_), std::vector<std::int32_t>(static_cast<std::size_t>(c_.nodes), -1));
    std::vector<std::int32_t> node_owner(static_cast<std::size_t>(c_.nodes), -1);
    for (int d = 0; d < dp_; d++)
      for (std::int32_t g0 : gpus0_) {
        const std::int32_t g = d == 0 ? g0 : sigma_[d][g0];
        if (g % gpn != g0 % gpn) refuse("replica " + std::to_string(d) + " moves a GPU within its node");
        std::int32_t& nu = nu_[d][g0 / gpn];
        if (nu == -1) nu = g / gpn;
        if (nu != g / gpn) refuse("replica " + std::to_string(d) + " splits a node");
        std::int32_t& o = node_owner[g / gpn];
        if (o == -1) o = d;
        if (o != d) refuse("two replicas share node " + std::to_string(g / gpn));
      }
    // Edges correspond: replica d's successor lists are replica 0's, moved (shared nodes stay).
    for (std::uint32_t n = 0; n < N; n++) {
      if (rep_[n] == kNo) continue;
      const std::uint32_t r = rep_[n];
      const int d = replica(n);
      const std::uint32_t bn = dag_.succ_begin[n], en = dag_.succ_begin[n + 1];
      const std::uint32_t br = dag_.succ_begin[r], er = dag_.succ_begin[r + 1];
      if (en - bn != er - br) refuse("successor counts differ across replicas");
      for (std::uint32_t k = 0; k < en - bn; k++) {
        const std::uint32_t sn = dag_.succ[bn + k], sr = dag_.succ[br + k];
        const bool ok = shared_[sr] ? sn == sr : (rep_[sn] == sr && replica(sn) == d);
        if (!ok) refuse("edges differ across replicas");
      }
    }
    // Shared nodes: their successors in replica d are those in replica 0, moved, in the same order.
    for (std::uint32_t s = 0; s < N; s++) {
      if (!shared_[s]) continue;
      std::vector<std::vector<std::uint32_t>> by(static_cast<std::size_t>(dp_));
      for (std::uint32_t e = dag_.succ_begin[s]; e < dag_.succ_begin[s + 1]; e++) {
        const std::uint32_t t = dag_.succ[e];
        if (shared_[t]) continue;
        by[replica(t)].push_back(replica(t) == 0 ? t : rep_[t]);
      }
      for (int d = 1; d < dp_; d++)
        if (by[d] != by[0]) refuse("a data-parallel collective releases replicas differently");
    }
  }

  // ---- routes
  struct FlowRoute {
    std::int32_t a, b;
    double latency;
    std::vector<sg4::Link*> links;
  };

  void routes() {
    for (std::size_t n = 0; n < pf_.node_links.size(); n++)
      for (std::size_t k = 0; k < pf_.node_links[n].size(); k++)
        owner_of_[pf_.node_links[n][k]] = LinkOwner{static_cast<std::int32_t>(n), static_cast<std::int32_t>(k)};
    // Every flow the full run can start: transfer lanes and ring edges of ring / aggregate groups.
    std::vector<std::pair<std::int32_t, std::int32_t>> channels, pairs;
    for (const DagNode& x : dag_.nodes)
      if (x.kind == DagKind::Transfer && x.amount > 0 && x.gpu != x.gpu2) channels.emplace_back(x.gpu, x.gpu2);
    std::sort(channels.begin(), channels.end());
    channels.erase(std::unique(channels.begin(), channels.end()), channels.end());
    for (const auto& [a, b] : channels) {
      if (laned(ann_, a, b)) {
        const auto& la = ann_.lanes[a];
        const auto& lb = ann_.lanes[b];
        for (std::size_t t = 0; t < la.size() && t < lb.size(); t++) pairs.emplace_back(la[t], lb[t]);
      } else {
        pairs.emplace_back(a, b);
      }
    }
    for (std::size_t g = 0; g < cp_.rings.size(); g++) {
      if (!cp_.used[g] || cp_.algo[g] == CollAlgo::Analytic) continue;
      for (const Ring& ring : cp_.rings[g])
        for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); i++)
          pairs.emplace_back(ring[i], ring[(i + 1) % ring.size()]);
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    pairs_ = pairs;
    flows_.reserve(pairs.size());
    for (const auto& [a, b] : pairs) {
      FlowRoute f{a, b, 0.0, {}};
      f.links = route_links(pf_.gpus[a], pf_.gpus[b], &f.latency);
      flows_.push_back(std::move(f));
    }
    // Fabric links: every flow through one must also cross a node link of no larger bandwidth (then it can
    // never bind alone); failing that, the flows of each of its source nodes and of each of its destination
    // nodes must have such a link, and the folded run must show them never active together across nodes.
    const int gpn = c_.gpus_per_node;
    std::vector<std::vector<sg4::Link*>> node_parts(flows_.size());
    std::unordered_map<const sg4::Link*, std::vector<std::uint32_t>> through;
    std::vector<const sg4::Link*> fabric;  // in first-seen order: deterministic
    for (std::uint32_t i = 0; i < flows_.size(); i++) {
      const FlowRoute& f = flows_[i];
      for (sg4::Link* l : f.links) {
        auto it = owner_of_.find(l);
        if (it != owner_of_.end()) {
          if (it->second.node != f.a / gpn && it->second.node != f.b / gpn) refuse("a route crosses a third node");
          node_parts[i].push_back(l);
          continue;
        }
        auto [t, added] = through.try_emplace(l);
        if (added) fabric.push_back(l);
        t->second.push_back(i);
      }
      std::sort(node_parts[i].begin(), node_parts[i].end());
    }
    // A fabric link l never binds when the node links of its flows cap them together: some set S of shared node
    // links that every flow through l crosses, with total bandwidth <= l's (then the flows through l never
    // exceed it, whatever else shares S). Candidates for S: one link common to all flows, or each flow's
    // narrowest link on its source side, or on its destination side (a leaf uplink over the NICs below it).
    auto shared = [](const sg4::Link* n) { return n->get_sharing_policy() == sg4::Link::SharingPolicy::SHARED; };
    auto dominated = [&](const sg4::Link* l, const std::vector<std::uint32_t>& fs) {
      std::vector<sg4::Link*> common = node_parts[fs[0]];
      for (std::size_t k = 1; k < fs.size() && !common.empty(); k++) {
        std::vector<sg4::Link*> keep;
        std::set_intersection(common.begin(), common.end(), node_parts[fs[k]].begin(), node_parts[fs[k]].end(),
                              std::back_inserter(keep));
        common = std::move(keep);
      }
      if (std::any_of(common.begin(), common.end(),
                      [&](const sg4::Link* n) { return shared(n) && n->get_bandwidth() <= l->get_bandwidth(); }))
        return true;
      for (int end = 0; end < 2; end++) {
        std::vector<const sg4::Link*> cap;  // per flow: its narrowest shared link in that end's node
        bool all = true;
        for (std::uint32_t i : fs) {
          const std::int32_t node = (end == 0 ? flows_[i].a : flows_[i].b) / gpn;
          const sg4::Link* best = nullptr;
          for (const sg4::Link* n : flows_[i].links) {
            auto it = owner_of_.find(n);
            if (it == owner_of_.end() || it->second.node != node || !shared(n)) continue;
            if (best == nullptr || n->get_bandwidth() < best->get_bandwidth()) best = n;
          }
          if (best == nullptr) {
            all = false;
            break;
          }
          cap.push_back(best);
        }
        if (!all) continue;
        std::sort(cap.begin(), cap.end());
        cap.erase(std::unique(cap.begin(), cap.end()), cap.end());
        double total = 0;
        for (const sg4::Link* n : cap) total += n->get_bandwidth();
        if (total <= l->get_bandwidth()) return true;
      }
      return false;
    };
    for (const sg4::Link* l : fabric) {
      const std::vector<std::uint32_t>& fs = through.at(l);
      if (l->get_sharing_policy() != sg4::Link::SharingPolicy::SHARED)
        refuse(std::string("fabric link ") + l->get_cname() + " is not a shared link");
      if (dominated(l, fs)) continue;
      for (int end = 0; end < 2; end++) {
        std::map<std::int32_t, std::vector<std::uint32_t>> by_node;
        for (std::uint32_t i : fs) by_node[(end == 0 ? flows_[i].a : flows_[i].b) / gpn].push_back(i);
        for (const auto& [node, group] : by_node)
          if (!dominated(l, group))
            refuse(std::string("fabric link ") + l->get_cname() + " carries flows of node " + std::to_string(node) +
                   " that no link of that node dominates");
      }
      temporal_.push_back(fs);
    }
    // Replica d's routes are replica 0's, moved link for link.
    auto find = [&](std::int32_t a, std::int32_t b) -> const FlowRoute* {
      auto it = std::lower_bound(pairs.begin(), pairs.end(), std::make_pair(a, b));
      return it != pairs.end() && *it == std::make_pair(a, b) ? &flows_[it - pairs.begin()] : nullptr;
    };
    for (const FlowRoute& f : flows_) {
      if (owner_[f.a] != 0 || owner_[f.b] != 0 || base_[f.a] != f.a || base_[f.b] != f.b) continue;
      const auto sig0 = signature(f);
      for (int d = 1; d < dp_; d++) {
        const FlowRoute* g = find(sigma_[d][f.a], sigma_[d][f.b]);
        if (g == nullptr) refuse("a flow of replica 0 has no counterpart");
        if (g->latency != f.latency || signature(*g) != sig0) refuse("routes differ across replicas");
      }
    }
    // Data-parallel ring flows: each has the route of the mirror of its ring's first GPU.
    for (std::size_t g = 0; g < cp_.rings.size(); g++) {
      if (qranks_[g] == 0 || !cp_.used[g] || cp_.algo[g] == CollAlgo::Analytic) continue;
      for (const Ring& ring : cp_.rings[g]) {
        const std::int32_t x = ring[0];
        const FlowRoute* first = find(ring[0], ring[1]);
        if (first == nullptr) refuse("a data-parallel ring flow has no route");
        MirrorRoute m;
        m.gpu = x;
        for (sg4::Link* l : first->links) {
          auto it = owner_of_.find(l);
          if (it == owner_of_.end()) continue;  // fabric: dominated (checked above)
          m.links.push_back(pf_.node_links[x / gpn][it->second.index]);
        }
        const auto sig = signature(*first);
        const double lat = summed_latency(m.links);
        for (std::size_t i = 0; i < ring.size(); i++) {
          const FlowRoute* f = find(ring[i], ring[(i + 1) % ring.size()]);
          if (f == nullptr || signature(*f) != sig || f->latency != lat)
            refuse("a data-parallel ring flow is not the image of the mirror route");
        }
        // Another group over the same ring (the distributed optimizer's gradient and parameter groups) shares
        // the mirror.
        auto same = std::find_if(mirrors_.begin(), mirrors_.end(), [&](const MirrorRoute& o) { return o.gpu == x; });
        if (same == mirrors_.end())
          mirrors_.push_back(std::move(m));
        else if (same->links != m.links)
          refuse("two data-parallel rings from one GPU take different mirror routes");
      }
    }
  }

  // A route's node links as (end, index) in order: end 0 = the source's node, 1 = the destination's.
  std::vector<std::pair<int, std::int32_t>> signature(const FlowRoute& f) const {
    const int gpn = c_.gpus_per_node;
    std::vector<std::pair<int, std::int32_t>> sig;
    for (sg4::Link* l : f.links) {
      auto it = owner_of_.find(l);
      if (it == owner_of_.end()) continue;
      sig.emplace_back(it->second.node == f.a / gpn ? 0 : 1, it->second.index);
    }
    return sig;
  }

  // The folded DAG: replica 0's nodes (shared collectives included, as they belong to replica 0's workers)
  // with their edges among themselves, in the original order.
  void build(FoldPlan& fp) {
    const std::size_t N = dag_.size();
    fp.rep.assign(N, kNo);
    for (std::uint32_t n = 0; n < N; n++)
      if (dag_.nodes[n].worker < p_) {
        fp.rep[n] = static_cast<std::uint32_t>(fp.orig.size());
        fp.orig.push_back(n);
      }
    Dag& f = fp.dag;
    f.nodes.reserve(fp.orig.size());
    f.succ_begin.assign(fp.orig.size() + 1, 0);
    f.preds.assign(fp.orig.size(), 0);
    for (std::uint32_t k = 0; k < fp.orig.size(); k++) {
      const std::uint32_t n = fp.orig[k];
      f.nodes.push_back(dag_.nodes[n]);
      for (std::uint32_t e = dag_.succ_begin[n]; e < dag_.succ_begin[n + 1]; e++) {
        const std::uint32_t s = fp.rep[dag_.succ[e]];
        if (dag_.nodes[dag_.succ[e]].worker >= p_) continue;
        f.succ.push_back(s);
        f.preds[s]++;
      }
      f.succ_begin[k + 1] = static_cast<std::uint32_t>(f.succ.size());
    }
    f.rings = dag_.rings;
    if (!ann_.allgather.empty()) {
      fp.allgather.resize(fp.orig.size());
      for (std::uint32_t k = 0; k < fp.orig.size(); k++) fp.allgather[k] = ann_.allgather[fp.orig[k]];
    }
    for (std::uint32_t n = 0; n < N; n++)
      if (fp.rep[n] == kNo) fp.rep[n] = fp.rep[rep_[n]];
    fp.qranks = qranks_;
    fp.mirrors = std::move(mirrors_);
    if (temporal_.empty()) return;
    // The flows of temporal links and the nodes that run them: transfers (by channel and lane), collectives.
    const int gpn = c_.gpus_per_node;
    std::vector<std::uint32_t> index(flows_.size(), kNo);
    for (const auto& fs : temporal_) {
      std::vector<std::uint32_t> mapped;
      for (std::uint32_t i : fs) {
        if (index[i] == kNo) {
          index[i] = static_cast<std::uint32_t>(fp.flows.size());
          fp.flows.push_back(FoldPlan::Flow{flows_[i].a / gpn, flows_[i].b / gpn, {}});
        }
        mapped.push_back(index[i]);
      }
      fp.temporal.push_back(std::move(mapped));
    }
    auto flow_of = [&](std::int32_t a, std::int32_t b) -> std::uint32_t {
      auto it = std::lower_bound(pairs_.begin(), pairs_.end(), std::make_pair(a, b));
      return it != pairs_.end() && *it == std::make_pair(a, b) ? index[it - pairs_.begin()] : kNo;
    };
    std::map<std::pair<std::int32_t, std::int32_t>, std::vector<std::uint32_t>> channel_flows;  // temporal lanes
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.kind == DagKind::Transfer && x.amount > 0 && x.gpu != x.gpu2) {
        auto [it, added] = channel_flows.try_emplace({x.gpu, x.gpu2});
        if (added) {
          if (laned(ann_, x.gpu, x.gpu2)) {
            const auto& la = ann_.lanes[x.gpu];
            const auto& lb = ann_.lanes[x.gpu2];
            for (std::size_t t = 0; t < la.size() && t < lb.size(); t++)
              if (std::uint32_t f = flow_of(la[t], lb[t]); f != kNo) it->second.push_back(f);
          } else if (std::uint32_t f = flow_of(x.gpu, x.gpu2); f != kNo) {
            it->second.push_back(f);
          }
        }
        for (std::uint32_t f : it->second) fp.flows[f].users.push_back(n);
      } else if (x.kind == DagKind::Collective && x.amount > 0 && cp_.algo[x.group] != CollAlgo::Analytic) {
        for (const Ring& ring : cp_.rings[x.group])
          for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); i++)
            if (std::uint32_t f = flow_of(ring[i], ring[(i + 1) % ring.size()]); f != kNo)
              fp.flows[f].users.push_back(n);
      }
    }
  }

  const ClusterSpec& c_;
  const Dag& dag_;
  const DagAnnotations& ann_;
  const CollectivePlan& cp_;
  const Platform& pf_;
  int dp_ = 1, p_ = 1;
  std::vector<std::uint32_t> rep_;
  std::vector<std::uint8_t> shared_;
  std::vector<std::vector<std::int32_t>> sigma_, gmap_, nu_;
  std::vector<std::int32_t> owner_, base_;  // per GPU: replica using it, and the replica-0 GPU it stands for
  std::vector<std::int32_t> gpus0_;
  std::vector<int> qranks_;
  std::vector<std::pair<std::int32_t, std::int32_t>> pairs_;
  std::vector<std::vector<std::uint32_t>> temporal_;  // per temporal fabric link: indices into flows_
  std::vector<FlowRoute> flows_;
  std::unordered_map<const sg4::Link*, LinkOwner> owner_of_;
  std::vector<MirrorRoute> mirrors_;
};

// ------------------------------------------------------------------------------------------------------
// Hosts of every flow the run starts: the GPUs' own hosts (their routes are computed by the platform's
// zone), and a quotient ring's first GPU and its mirror.
class Endpoints {
 public:
  Endpoints(Platform& pf, const std::vector<MirrorRoute>& mirrors) : pf_(pf), mirror_(add_mirrors(pf, mirrors)) {}

  HostPair pair(std::int32_t a, std::int32_t b) const { return {pf_.gpus[a], pf_.gpus[b]}; }
  HostPair mirror(std::int32_t a) const {
    if (mirror_[a] == nullptr) throw std::logic_error("simulate: no mirror route for GPU " + std::to_string(a));
    return {pf_.gpus[a], mirror_[a]};
  }

 private:
  const Platform& pf_;
  std::vector<sg4::Host*> mirror_;
};

// ------------------------------------------------------------------------------------------------------
class Driver {
 public:
  Driver(const Dag& dag, const DagAnnotations& ann, const std::vector<std::uint8_t>& allgather,
         const EngineOptions& opt, const Platform& pf, const CollectivePlan& cp, const std::vector<int>& qranks)
      : dag_(dag),
        ann_(ann),
        allgather_(allgather),
        pf_(pf),
        cp_(cp),
        qranks_(qranks),
        timer_mode_(opt.compute == "timer"),
        fifo_(opt.p2p_fifo) {
    hot_.resize(dag.size() + 1);
    for (std::size_t i = 0; i < dag.size(); i++) {
      const DagNode& n = dag.nodes[i];
      Hot& h = hot_[i];
      h.pending = dag.preds[i];
      h.gpu_kind = (static_cast<std::uint32_t>(n.gpu) & kGpuMask) | static_cast<std::uint32_t>(n.kind) << 30;
      h.aux = n.kind == DagKind::Transfer ? channel_of(n) : n.group;
      h.succ_begin = dag.succ_begin[i];
      h.amount = n.amount;
      h.start = -1.0;
    }
    hot_[dag.size()].succ_begin = dag.succ_begin[dag.size()];
    done_.reserve(dag.size());
    channel_ids_.clear();
    // Rings as they run: a quotient group runs each ring as its first GPU sending to its mirror.
    exec_rings_.resize(cp.rings.size());
    for (std::size_t g = 0; g < cp.rings.size(); g++) {
      exec_rings_[g] = cp.rings[g];
      if (qranks_[g] != 0)
        for (auto& ring : exec_rings_[g]) ring.resize(1);
    }
    if (timer_mode_) gpu_running_.assign(pf.gpus.size(), kNone);
    ready_.reserve(1024);
    graveyard_.reserve(64);
  }

  // Resolves the hosts of every channel lane and ring edge (call once, after the mirror hosts exist).
  void bind_hosts(const Endpoints& ep) {
    for (Channel& ch : channels_) {
      ch.hosts.clear();
      if (laned(ann_, ch.src, ch.dst)) {
        const auto& a = ann_.lanes[ch.src];
        const auto& b = ann_.lanes[ch.dst];
        for (std::size_t t = 0; t < a.size(); t++) ch.hosts.push_back(ep.pair(a[t], b[t]));
      } else {
        ch.hosts.push_back(ep.pair(ch.src, ch.dst));
      }
    }
    ring_hosts_.assign(exec_rings_.size(), {});
    for (std::size_t g = 0; g < exec_rings_.size(); g++) {
      if (cp_.algo[g] == CollAlgo::Analytic) continue;
      for (const Ring& ring : exec_rings_[g]) {
        std::vector<HostPair> hp;
        if (qranks_[g] != 0) {
          if (cp_.used[g]) hp.push_back(ep.mirror(ring[0]));
        } else {
          for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); i++)
            hp.push_back(ep.pair(ring[i], ring[(i + 1) % ring.size()]));
        }
        ring_hosts_[g].push_back(std::move(hp));
      }
    }
  }

  void run_roots() {
    for (std::uint32_t i = 0; i < dag_.size(); i++)
      if (hot_[i].pending == 0) ready_.push_back(i);
    drain();
  }

  // Activity::on_completion: every Exec/Comm of this simulation.
  void on_activity(const sg4::Activity& a) {
    // Drop what completed in earlier callbacks; the activity completing now must outlive its callback.
    graveyard_.clear();
    graveyard_.emplace_back(const_cast<sg4::Activity*>(&a), false);  // adopt the reference launch() kept
    dispatch(reinterpret_cast<std::uintptr_t>(a.get_data<void>()));
  }

  void finish_run() { graveyard_.clear(); }

  // Two compute ops that ran at the same time on one GPU in timer mode (kNone when none did).
  std::pair<std::uint32_t, std::uint32_t> overlap() const { return {overlap_a_, overlap_b_}; }
  static constexpr std::uint32_t kNone = 0xffffffffu;

  std::size_t completed() const { return completed_; }
  std::size_t activities() const { return activities_; }
  std::vector<NodeTiming> timing() const {
    std::vector<NodeTiming> t(dag_.size());
    for (const Done& d : done_) t[d.node] = NodeTiming{d.start, d.end};
    return t;
  }

 private:
  void dispatch(std::uintptr_t code) {
    const std::uintptr_t payload = code >> 3;
    switch (code & 7) {
      case kNode: {
        const auto node = static_cast<std::uint32_t>(payload);
        Hot& h = hot_[node];
        if (--h.pending != 0) break;
        const auto kind = static_cast<DagKind>(h.gpu_kind >> 30);
        if (timer_mode_ && kind == DagKind::Compute) {
          std::uint32_t& running = gpu_running_[h.gpu_kind & kGpuMask];
          if (running == node) running = kNone;
        }
        if (kind == DagKind::Transfer && fifo_) {
          Channel& ch = channels_[h.aux];
          ch.busy = false;
          if (ch.head < ch.queue.size()) start_transfer(ch.queue[ch.head++]);
          if (ch.head == ch.queue.size()) ch.queue.clear(), ch.head = 0;
        }
        finish_node(node);
        break;
      }
      case kRing:
        ring_comm_done(static_cast<std::uint32_t>(payload >> kPosBits),
                       static_cast<std::uint32_t>(payload & ((std::uintptr_t{1} << kPosBits) - 1)));
        break;
      case kAggDelay:
        aggregate_start_comms(static_cast<std::uint32_t>(payload));
        break;
      case kAggComm: {
        const auto run = static_cast<std::uint32_t>(payload);
        if (--runs_[run].left == 0) finish_collective(run);
        break;
      }
      case kLead: {  // an overlapped bucket's gradients are ready: the collective starts now
        const auto node = static_cast<std::uint32_t>(payload);
        hot_[node].start = sg4::Engine::get_clock();
        if (!launch_collective(node, dag_.nodes[node])) finish_node(node);
        break;
      }
      default:
        throw std::logic_error("simulate: activity with unknown tag");
    }
    drain();
  }

  void finish_node(std::uint32_t node) {
    const Hot& h = hot_[node];
    done_.push_back(Done{node, h.start, sg4::Engine::get_clock()});
    completed_++;
    for (std::uint32_t e = h.succ_begin, end = hot_[node + 1].succ_begin; e < end; e++) {
      const std::uint32_t s = dag_.succ[e];
      if (--hot_[s].pending == 0) ready_.push_back(s);
    }
  }

  // Ready nodes launch in the order they became ready (successor lists keep program order), so
  // simultaneous transfers on one channel queue in program order.
  void drain() {
    if (draining_) return;
    draining_ = true;
    for (std::size_t k = 0; k < ready_.size(); k++) launch(ready_[k]);
    ready_.clear();
    draining_ = false;
  }

  // ------------------------------------------------------------ activity creation
  void delay(double seconds, std::uintptr_t code) {
    activities_++;
    if (timer_mode_) {
      simgrid::kernel::timer::Timer::set(sg4::Engine::get_clock() + seconds, [this, code] { dispatch(code); });
      return;
    }
    exec(pf_.timer, seconds, code);
  }

  void exec(sg4::Host* host, double seconds, std::uintptr_t code) {
    sg4::ExecPtr x = sg4::Exec::init();
    x->set_flops_amount(seconds * host->get_speed());  // alone on its host: duration = flops / speed
    x->set_host(host);                                 // on an INITED exec this does not start it
    x->set_data(reinterpret_cast<void*>(code));
    x->start();
    x.detach();  // the reference is adopted back in on_activity()
  }

  void comm(const HostPair& hosts, double bytes, std::uintptr_t code) {
    activities_++;
    // Call order matters in 3.32: sendto_init, payload, then start (docs/simulator.md).
    sg4::CommPtr c = sg4::Comm::sendto_init(hosts.first, hosts.second);
    c->set_payload_size(static_cast<std::uint64_t>(std::llround(bytes)));
    c->set_data(reinterpret_cast<void*>(code));
    c->start();
    c.detach();
  }

  static std::uintptr_t code(Tag t, std::uintptr_t payload) { return (payload << 3) | t; }

  void launch(std::uint32_t node) {
    Hot& h = hot_[node];
    h.start = sg4::Engine::get_clock();
    const std::int32_t gpu = static_cast<std::int32_t>(h.gpu_kind & kGpuMask);
    switch (static_cast<DagKind>(h.gpu_kind >> 30)) {
      case DagKind::Compute:
        if (h.amount <= 0) break;
        h.pending = 1;
        if (timer_mode_) {
          // A timer cannot share its GPU with another op the way an Exec would: refuse rather than be wrong.
          if (gpu_running_[gpu] != kNone && overlap_a_ == kNone) overlap_a_ = gpu_running_[gpu], overlap_b_ = node;
          gpu_running_[gpu] = node;
          delay(h.amount, code(kNode, node));
        } else {
          activities_++;
          exec(pf_.gpus[gpu], h.amount, code(kNode, node));
        }
        return;
      case DagKind::Transfer: {
        // No data, or source = destination: nothing crosses a link (a zero-time join).
        if (h.aux < 0) break;
        Channel& ch = channels_[h.aux];
        if (fifo_ && ch.busy) {
          ch.queue.push_back(node);  // starts (and gets its start time) when the channel frees up
          return;
        }
        start_transfer(node);
        return;
      }
      case DagKind::Join:
        break;
      case DagKind::Collective:
        if (dag_.nodes[node].lead_s > 0) {
          delay(dag_.nodes[node].lead_s, code(kLead, node));
          return;
        }
        if (launch_collective(node, dag_.nodes[node])) return;
        break;
    }
    finish_node(node);  // completes at its start time
  }

  // One flow, or one per tensor-parallel lane, between the transfer's GPUs.
  void start_transfer(std::uint32_t node) {
    Hot& h = hot_[node];
    Channel& ch = channels_[h.aux];
    ch.busy = true;
    h.start = sg4::Engine::get_clock();
    h.pending = static_cast<std::uint32_t>(ch.hosts.size());
    for (const HostPair& hp : ch.hosts) comm(hp, h.amount, code(kNode, node));
  }

  // Channel of a transfer (one per ordered GPU pair), or -1 when it moves nothing.
  std::int32_t channel_of(const DagNode& n) {
    if (n.amount <= 0 || n.gpu == n.gpu2) return -1;
    auto [it, added] = channel_ids_.try_emplace({n.gpu, n.gpu2}, static_cast<std::int32_t>(channels_.size()));
    if (added) channels_.push_back(Channel{n.gpu, n.gpu2, false, 0, {}, {}});
    return it->second;
  }

  // Returns false when the collective completes immediately (no bytes, single-GPU rings, no rings).
  bool launch_collective(std::uint32_t node, const DagNode& n) {
    const auto& rings = exec_rings_[n.group];
    const int q = qranks_[n.group];
    // A quotient ring keeps the full ring's rank count (steps, chunk size) but runs one position per ring.
    const int ranks = q != 0 ? q : rings.empty() ? 0 : static_cast<int>(rings[0].size());
    const bool allgather = !allgather_.empty() && allgather_[node] != 0;
    const int steps = ring_steps(ranks, allgather);
    if (n.amount <= 0 || steps == 0 || n.count <= 0 || rings.empty()) return false;
    const std::uint32_t total_steps = static_cast<std::uint32_t>(steps) * static_cast<std::uint32_t>(n.count);
    const CollAlgo algo = cp_.algo[n.group];

    if (algo == CollAlgo::Analytic) {
      double t = 0;
      for (const RingRoute& rr : cp_.routes[n.group])
        t = std::max(t, n.count * nccl_collective_seconds(rr.nccl, n.amount, allgather));
      hot_[node].pending = 1;
      delay(t, code(kNode, node));
      return true;
    }

    const std::uint32_t run = new_run(node);
    CollRun& r = runs_[run];
    r.chunk_bytes = n.amount / ranks;
    const int positions = q != 0 ? 1 : ranks;
    if (algo == CollAlgo::Ring) {
      r.ring.reset(static_cast<int>(rings.size()), positions, total_steps);
      start_positions_.clear();
      r.ring.start(start_positions_);
      for (std::uint32_t pos : start_positions_) ring_comm(run, n.group, pos);
      return true;
    }
    // Aggregate: latency of all but one step as a delay, then the whole volume in one comm per rank.
    double alpha = 0;
    for (const RingRoute& rr : cp_.routes[n.group]) alpha = std::max(alpha, rr.alpha);
    r.chunk_bytes *= total_steps;
    r.left = static_cast<std::uint32_t>(rings.size() * positions);
    const double d = (total_steps - 1.0) * alpha;
    if (d > 0) {
      delay(d, code(kAggDelay, run));
    } else {
      aggregate_start_comms(run);
    }
    return true;
  }

  std::uint32_t new_run(std::uint32_t node) {
    std::uint32_t run;
    if (!free_runs_.empty()) {
      run = free_runs_.back();
      free_runs_.pop_back();
    } else {
      run = static_cast<std::uint32_t>(runs_.size());
      if (run >= (std::uint32_t{1} << 30)) throw std::runtime_error("simulate: too many concurrent collectives");
      runs_.emplace_back();
    }
    runs_[run].node = node;
    return run;
  }

  void ring_comm(std::uint32_t run, std::int32_t group, std::uint32_t pos) {
    const auto n = static_cast<std::uint32_t>(runs_[run].ring.n());
    comm(ring_hosts_[group][pos / n][pos % n], runs_[run].chunk_bytes,
         code(kRing, (std::uintptr_t{run} << kPosBits) | pos));
  }

  void ring_comm_done(std::uint32_t run, std::uint32_t pos) {
    std::uint32_t next[2];
    const int k = runs_[run].ring.finish(pos, next);
    const std::int32_t group = dag_.nodes[runs_[run].node].group;
    for (int i = 0; i < k; i++) ring_comm(run, group, next[i]);
    if (runs_[run].ring.done()) finish_collective(run);
  }

  void aggregate_start_comms(std::uint32_t run) {
    const DagNode& n = dag_.nodes[runs_[run].node];
    for (const auto& hosts : ring_hosts_[n.group])
      for (const HostPair& hp : hosts) comm(hp, runs_[run].chunk_bytes, code(kAggComm, run));
  }

  void finish_collective(std::uint32_t run) {
    const std::uint32_t node = runs_[run].node;
    free_runs_.push_back(run);
    finish_node(node);
  }

  const Dag& dag_;
  const DagAnnotations& ann_;
  const std::vector<std::uint8_t>& allgather_;
  const Platform& pf_;
  const CollectivePlan& cp_;
  const std::vector<int>& qranks_;
  const bool timer_mode_;
  const bool fifo_;
  // Point-to-point channels: transfers between one ordered GPU pair run one at a time in issue order when
  // p2p_fifo is set (one NCCL stream per peer), all at once otherwise.
  struct Channel {
    std::int32_t src, dst;
    bool busy = false;
    std::size_t head = 0;  // queue[head..] waits
    std::vector<std::uint32_t> queue;
    std::vector<HostPair> hosts;  // one per lane
  };
  std::vector<Channel> channels_;
  std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> channel_ids_;  // construction only
  std::vector<Hot> hot_;  // per node, plus a sentinel holding the CSR end
  std::vector<Done> done_;
  std::vector<Rings> exec_rings_;                               // per group: the rings as they run
  std::vector<std::vector<std::vector<HostPair>>> ring_hosts_;  // per group, ring, position: sender -> receiver
  std::vector<CollRun> runs_;
  std::vector<std::uint32_t> free_runs_;
  std::vector<std::uint32_t> ready_;
  bool draining_ = false;
  std::vector<std::uint32_t> start_positions_;
  std::vector<sg4::ActivityPtr> graveyard_;
  std::vector<std::uint32_t> gpu_running_;  // timer mode: compute node running on each GPU
  std::uint32_t overlap_a_ = kNone, overlap_b_ = kNone;
  std::size_t completed_ = 0, activities_ = 0;
};

void validate_dag(const ClusterSpec& c, const Dag& dag, const DagAnnotations& ann) {
  const auto gpus = static_cast<std::int32_t>(c.total_gpus());
  auto name = [&](std::uint32_t i) { return ann.node_name ? ann.node_name(i) : "node " + std::to_string(i); };
  auto bad_gpu = [&](std::int32_t g) { return g < 0 || g >= gpus; };
  if (dag.succ_begin.size() != dag.size() + 1 || dag.preds.size() != dag.size())
    throw std::invalid_argument("simulate: malformed DAG (successor/predecessor tables do not match the nodes)");
  for (std::uint32_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (!std::isfinite(n.amount) || n.amount < 0)
      throw std::invalid_argument("simulate: " + name(i) + " has a negative or non-finite cost");
    if (n.kind == DagKind::Compute && n.amount > 0 && bad_gpu(n.gpu))
      throw std::invalid_argument("simulate: " + name(i) + " runs on GPU " + std::to_string(n.gpu) +
                                  " but the cluster has " + std::to_string(gpus));
    if (n.kind == DagKind::Transfer && n.amount > 0 && (bad_gpu(n.gpu) || bad_gpu(n.gpu2)))
      throw std::invalid_argument("simulate: " + name(i) + " transfers between GPUs " + std::to_string(n.gpu) +
                                  " and " + std::to_string(n.gpu2) + " but the cluster has " + std::to_string(gpus));
    if (n.kind == DagKind::Collective && (n.group < 0 || static_cast<std::size_t>(n.group) >= dag.rings.size()))
      throw std::invalid_argument("simulate: " + name(i) + " uses unknown collective group " + std::to_string(n.group));
  }
  for (std::size_t g = 0; g < dag.rings.size(); g++) {
    std::size_t size = dag.rings[g].empty() ? 0 : dag.rings[g][0].size();
    for (const auto& ring : dag.rings[g]) {
      if (ring.size() != size)
        throw std::invalid_argument("simulate: collective group " + std::to_string(g) + " has rings of unequal size");
      for (std::int32_t x : ring)
        if (bad_gpu(x))
          throw std::invalid_argument("simulate: collective group " + std::to_string(g) + " uses GPU " +
                                      std::to_string(x) + " but the cluster has " + std::to_string(gpus));
    }
  }
  if (!ann.lanes.empty()) {
    if (ann.lanes.size() != static_cast<std::size_t>(gpus))
      throw std::invalid_argument("simulate: transfer lanes must list every GPU");
    for (const auto& l : ann.lanes)
      for (std::int32_t x : l)
        if (bad_gpu(x)) throw std::invalid_argument("simulate: transfer lane uses GPU " + std::to_string(x));
  }
}

// ------------------------------------------------------------------------------------------------------
// One run of a driver, and what comes back of it (also through a pipe from a forked child).
struct Outcome {
  std::vector<NodeTiming> timing;  // per node of the driver's DAG
  std::size_t activities = 0, completed = 0;
  std::uint32_t overlap_a = Driver::kNone, overlap_b = Driver::kNone;
  double wall_s = 0;
  bool temporal_ok = false;
};

Outcome run(sg4::Engine& engine, Driver& driver) {
  sg4::Activity::on_completion_cb([&driver](const sg4::Activity& a) { driver.on_activity(a); });
  const auto t0 = std::chrono::steady_clock::now();
  driver.run_roots();
  engine.run();
  driver.finish_run();
  Outcome o;
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.timing = driver.timing();
  o.activities = driver.activities();
  o.completed = driver.completed();
  std::tie(o.overlap_a, o.overlap_b) = driver.overlap();
  return o;
}

// Times of every node of the full DAG from the folded run's.
std::vector<NodeTiming> expand(const FoldPlan& fold, const std::vector<NodeTiming>& folded) {
  std::vector<NodeTiming> t(fold.rep.size());
  for (std::size_t i = 0; i < t.size(); i++) t[i] = folded[fold.rep[i]];
  return t;
}

// The temporal links' condition on the (expanded) folded times: at every moment the flows active on a
// link all leave one node or all enter one node. Flows run over [start, end) of the node that runs them.
bool temporally_exclusive(const FoldPlan& fold, const std::vector<NodeTiming>& timing) {
  struct Span {
    double start, end;
    std::int32_t src, dst;
  };
  for (const auto& flows : fold.temporal) {
    std::vector<Span> spans;
    for (std::uint32_t f : flows)
      for (std::uint32_t n : fold.flows[f].users)
        if (timing[n].end > timing[n].start)
          spans.push_back(Span{timing[n].start, timing[n].end, fold.flows[f].src_node, fold.flows[f].dst_node});
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
    auto later_end = [](const Span& a, const Span& b) { return a.end > b.end; };
    std::vector<Span> active;  // min-heap on end
    std::map<std::int32_t, int> by_src, by_dst;
    for (const Span& sp : spans) {
      while (!active.empty() && active.front().end <= sp.start) {
        const Span gone = active.front();
        std::pop_heap(active.begin(), active.end(), later_end);
        active.pop_back();
        by_src[gone.src]--, by_dst[gone.dst]--;
      }
      active.push_back(sp);
      std::push_heap(active.begin(), active.end(), later_end);
      const int n = static_cast<int>(active.size());
      const int from = ++by_src[sp.src], to = ++by_dst[sp.dst];
      if (from != n && to != n) return false;
    }
  }
  return true;
}

// Runs `fn` in a forked child (sim/child_process.h) and returns its Outcome, or nothing when the child failed.
std::optional<Outcome> in_fork(const std::function<Outcome()>& fn) {
  // The answer: five header words, the wall time, then the timings as raw bytes (same machine, same build).
  std::string got;
  try {
    got = run_in_child([&] {
      const Outcome o = fn();
      const std::uint64_t head[5] = {o.timing.size(), o.activities, o.completed,
                                     (std::uint64_t{o.overlap_a} << 32) | o.overlap_b, o.temporal_ok ? 1u : 0u};
      std::string s(reinterpret_cast<const char*>(head), sizeof head);
      s.append(reinterpret_cast<const char*>(&o.wall_s), sizeof o.wall_s);
      s.append(reinterpret_cast<const char*>(o.timing.data()), o.timing.size() * sizeof(NodeTiming));
      return s;
    });
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::uint64_t head[5];
  Outcome o;
  if (got.size() < sizeof head + sizeof o.wall_s) return std::nullopt;
  std::memcpy(head, got.data(), sizeof head);
  std::memcpy(&o.wall_s, got.data() + sizeof head, sizeof o.wall_s);
  const std::size_t at = sizeof head + sizeof o.wall_s;
  if (got.size() != at + head[0] * sizeof(NodeTiming)) return std::nullopt;
  o.timing.resize(head[0]);
  std::memcpy(o.timing.data(), got.data() + at, got.size() - at);
  o.activities = head[1];
  o.completed = head[2];
  o.overlap_a = static_cast<std::uint32_t>(head[3] >> 32);
  o.overlap_b = static_cast<std::uint32_t>(head[3]);
  o.temporal_ok = head[4] != 0;
  return o;
}

}  // namespace

std::string deadlock_message(const Dag& dag, const std::vector<NodeTiming>& timing,
                             const std::function<std::string(std::uint32_t)>& node_name) {
  std::vector<std::uint32_t> unfinished_preds(dag.size(), 0);
  std::size_t stuck = 0;
  for (std::uint32_t u = 0; u < dag.size(); u++) {
    if (timing[u].end >= 0) continue;
    stuck++;
    for (std::uint32_t e = dag.succ_begin[u]; e < dag.succ_begin[u + 1]; e++) unfinished_preds[dag.succ[e]]++;
  }
  std::string msg = "simulation deadlock: " + std::to_string(stuck) + " of " + std::to_string(dag.size()) +
                    " DAG nodes never completed (cyclic or unmatched dependencies); stuck:";
  int listed = 0;
  for (std::uint32_t u = 0; u < dag.size() && listed < 10; u++) {
    if (timing[u].end >= 0) continue;
    msg += listed++ ? ", " : " ";
    msg += node_name ? node_name(u) : "node " + std::to_string(u);
    msg += " (waiting for " + std::to_string(unfinished_preds[u]) + " of " + std::to_string(dag.preds[u]) +
           " predecessors)";
  }
  if (stuck > 10) msg += ", ...";
  return msg;
}

SimResult simulate_dag(const ClusterSpec& cluster, const Dag& dag, const DagAnnotations& ann,
                       const EngineOptions& opt) {
  // Everything that can be wrong is checked before SimGrid exists: SimGrid aborts on misuse.
  validate_collectives_option(opt.collectives);
  if (opt.compute != "exec" && opt.compute != "timer")
    throw std::invalid_argument("simulate: unknown compute mode '" + opt.compute + "' (valid: exec, timer)");
  validate_cluster(cluster);
  validate_dag(cluster, dag, ann);
  static std::atomic<bool> used{false};
  if (used.exchange(true))
    throw std::logic_error("simulate: SimGrid allows one simulation per process; run each in its own process");

  std::vector<std::string> args = {"pipescope", "--log=root.thres:warning"};
  args.insert(args.end(), opt.simgrid_args.begin(), opt.simgrid_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());

  sg4::Engine engine(&argc, argv.data());
  configure_network_model(opt.simgrid_args);
  Platform pf = build_platform_open(cluster);
  install_link_tables(opt.link_tables);

  // Planning: collectives on the whole DAG, then the fold (or not). The fold rests on the plain network model
  // (configure_network_model); a user's own network or host model (another model, cross traffic's reverse
  // routes, per-host penalties) turns it off.
  const bool plain = std::none_of(opt.simgrid_args.begin(), opt.simgrid_args.end(), [](const std::string& a) {
    return a.rfind("--cfg=network/", 0) == 0 || a.rfind("--cfg=host/", 0) == 0;
  });
  const CollectivePlan cp = plan_collectives(cluster, dag, opt, pf);
  FoldPlan fold;
  if (plain && opt.fold_replicas && ann.replicas > 1) fold = Folder(cluster, dag, ann, cp, pf).plan();
  const std::vector<int> no_quotient(cp.rings.size(), 0);

  // The driver of the run (folded or full); mirror hosts for the folded run's quotient rings.
  std::unique_ptr<Driver> driver;
  if (fold.on)
    driver = std::make_unique<Driver>(fold.dag, ann, fold.allgather, opt, pf, cp, fold.qranks);
  else
    driver = std::make_unique<Driver>(dag, ann, ann.allgather, opt, pf, cp, no_quotient);
  const Endpoints endpoints(pf, fold.on ? fold.mirrors : std::vector<MirrorRoute>{});
  seal_platform(pf);
  driver->bind_hosts(endpoints);

  Outcome out;
  bool folded = fold.on;
  if (fold.on && !fold.temporal.empty()) {
    // Only the folded run's times can show that no temporal link was ever shared across nodes. Run it in a
    // child (SimGrid runs once per process) and keep its times when they do; otherwise run in full here.
    std::optional<Outcome> child = in_fork([&] {
      Outcome o = run(engine, *driver);
      o.temporal_ok = temporally_exclusive(fold, expand(fold, o.timing));
      return o;
    });
    if (child && child->temporal_ok) {
      out = std::move(*child);
    } else {
      folded = false;
      driver = std::make_unique<Driver>(dag, ann, ann.allgather, opt, pf, cp, no_quotient);
      driver->bind_hosts(endpoints);
      out = run(engine, *driver);
    }
  } else {
    out = run(engine, *driver);
  }

  SimResult r;
  r.wall_s = out.wall_s;
  r.total = dag.size();
  r.activities = out.activities;
  if (folded) {
    r.timing = expand(fold, out.timing);  // every replica has replica 0's times (the fold's invariant)
    r.completed = 0;
    for (const NodeTiming& t : r.timing) r.completed += t.end >= 0;
  } else {
    r.timing = std::move(out.timing);
    r.completed = out.completed;
  }
  if (r.completed != r.total) throw std::runtime_error(deadlock_message(dag, r.timing, ann.node_name));
  if (std::uint32_t a = out.overlap_a, b = out.overlap_b; a != Driver::kNone) {
    if (folded) a = fold.orig[a], b = fold.orig[b];
    auto name = [&](std::uint32_t i) { return ann.node_name ? ann.node_name(i) : "node " + std::to_string(i); };
    throw std::runtime_error("simulate: compute ops " + name(a) + " and " + name(b) + " overlap on GPU " +
                             std::to_string(dag.nodes[b].gpu) +
                             "; compute mode 'timer' needs one op at a time per GPU, use compute 'exec'");
  }

  int workers = ann.workers;
  for (const DagNode& n : dag.nodes) workers = std::max(workers, n.worker + 1);
  r.worker_busy_s.assign(static_cast<std::size_t>(workers), 0.0);
  for (std::uint32_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    r.iteration_s = std::max(r.iteration_s, r.timing[i].end);
    if (n.kind == DagKind::Compute && n.worker >= 0) {
      r.worker_busy_s[n.worker] += r.timing[i].end - r.timing[i].start;
      r.pipeline_end_s = std::max(r.pipeline_end_s, r.timing[i].end);  // simulate() refines (no optimizer)
    }
  }
  return r;
}

}  // namespace pipescope::sim
