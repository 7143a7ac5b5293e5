// The replica fold (replica_fold.h): the symmetry checks 1-3 (Folder), the folded DAG, and the temporal-link
// condition on the folded run's times. Every check refuses with a reason rather than fold inexactly.
#include "sim/replica_fold.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <simgrid/s4u.hpp>
#include <unordered_map>
#include <utility>

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;

namespace {

CollTag tag_of(const DagAnnotations& ann, std::int32_t g) {
  return static_cast<std::size_t>(g) < ann.group_tags.size() ? ann.group_tags[g] : CollTag::None;
}

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

  // ------------------------------------------------------------ checks 1 and 2: programs, GPUs, nodes
  // In this order: the first failing check names the refusal.
  void analyse() {
    shape();
    match_counterparts();
    compare_nodes();
    compare_local_groups();
    compare_lanes();
    find_shared();
    check_dp_rings();
    check_gpu_images();
    check_whole_nodes();
    compare_edges();
    compare_shared_releases();
  }

  void shape() {
    dp_ = ann_.replicas;
    const int W = ann_.workers;
    if (dp_ < 2) refuse("one replica");
    // Expert groups (MoE) couple replicas in their own rings, which the fold's shift does not map.
    for (CollTag t : ann_.group_tags)
      if (t == CollTag::ExpertParallel || t == CollTag::ExpertData) refuse("expert-parallel groups");
    if (W <= 0 || W % dp_ != 0) refuse("workers are not replicas x pipeline ranks");
    p_ = W / dp_;
    if (!ann_.lanes.empty() && ann_.lanes.size() != pf_.gpus.size()) refuse("lanes do not list every GPU");
  }

  // Replica 0's nodes by (worker, position).
  std::vector<std::vector<std::uint32_t>> replica0_slots() const {
    const std::size_t N = dag_.size();
    std::vector<std::int32_t> max_index(static_cast<std::size_t>(p_), -1);
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.worker < 0 || x.worker >= ann_.workers || x.index < 0) refuse("a node has no worker or position");
      if (x.worker < p_) max_index[x.worker] = std::max(max_index[x.worker], x.index);
    }
    std::vector<std::vector<std::uint32_t>> at(static_cast<std::size_t>(p_));
    for (int w = 0; w < p_; w++) at[w].assign(static_cast<std::size_t>(max_index[w] + 1), kNoNode);
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.worker >= p_) continue;
      std::uint32_t& slot = at[x.worker][x.index];
      if (slot != kNoNode) refuse("two nodes share a worker position");
      slot = n;
    }
    return at;
  }

  // rep_: the replica-0 counterpart of every node of a replica d > 0; seen_: how many nodes each stands for.
  void match_counterparts() {
    const auto at = replica0_slots();
    const std::size_t N = dag_.size();
    rep_.assign(N, kNoNode);
    seen_.assign(N, 0);
    for (std::uint32_t n = 0; n < N; n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.worker < p_) continue;
      const auto& slots = at[x.worker % p_];
      if (static_cast<std::size_t>(x.index) >= slots.size() || slots[x.index] == kNoNode)
        refuse("a node of replica >0 has no counterpart");
      rep_[n] = slots[x.index];
      seen_[rep_[n]]++;
    }
  }

  // Node by node: kind, cost, size, calls, GPUs, groups.
  void compare_nodes() {
    const std::size_t G = pf_.gpus.size();
    sigma_.assign(static_cast<std::size_t>(dp_), std::vector<std::int32_t>(G, -1));
    owner_.assign(G, -1);
    base_.assign(G, -1);
    gmap_.assign(static_cast<std::size_t>(dp_), std::vector<std::int32_t>(cp_.rings.size(), -1));
    for (std::uint32_t n = 0; n < dag_.size(); n++) {
      if (rep_[n] == kNoNode) continue;
      const DagNode& x = dag_.nodes[n];
      const DagNode& r = dag_.nodes[rep_[n]];
      const int d = replica(n);
      if (x.kind != r.kind || x.amount != r.amount || x.count != r.count)
        refuse("node " + std::to_string(n) + " differs from its replica-0 counterpart");
      bind(d, r.gpu, x.gpu);
      bind(d, r.gpu2, x.gpu2);
      if (x.kind == DagKind::Collective) compare_collective(n, d);
      if (dag_.preds[n] != dag_.preds[rep_[n]]) refuse("predecessor counts differ across replicas");
    }
  }

  void compare_collective(std::uint32_t n, int d) {
    const DagNode& x = dag_.nodes[n];
    const DagNode& r = dag_.nodes[rep_[n]];
    if (x.group < 0 || r.group < 0) refuse("a collective without group");
    std::int32_t& gm = gmap_[d][r.group];
    if (gm == -1) gm = x.group;
    if (gm != x.group) refuse("collective groups do not correspond across replicas");
    if (tag_of(ann_, x.group) != tag_of(ann_, r.group)) refuse("collective tags differ across replicas");
    const int shape_x = ann_.allgather.empty() ? 0 : ann_.allgather[n];
    const int shape_r = ann_.allgather.empty() ? 0 : ann_.allgather[rep_[n]];
    if (shape_x != shape_r) refuse("collective kinds differ across replicas");
  }

  // Replica-local groups: rings correspond element by element.
  void compare_local_groups() {
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
  }

  // Tensor-parallel lanes of replica 0's workers.
  void compare_lanes() {
    if (ann_.lanes.empty()) return;
    for (std::size_t g0 = 0; g0 < pf_.gpus.size(); g0++) {
      if (owner_[g0] != 0 || ann_.lanes[g0].empty()) continue;
      for (int d = 1; d < dp_; d++) {
        const std::int32_t g = sigma_[d][g0];
        if (g < 0 || ann_.lanes[g].size() != ann_.lanes[g0].size()) refuse("lanes differ across replicas");
        for (std::size_t t = 0; t < ann_.lanes[g0].size(); t++) bind(d, ann_.lanes[g0][t], ann_.lanes[g][t]);
      }
    }
  }

  // Shared nodes: data-parallel collectives, whose rings are (x, sigma_1(x), ...).
  void find_shared() {
    const std::size_t N = dag_.size();
    shared_.assign(N, 0);
    qranks_.assign(cp_.rings.size(), 0);
    for (std::uint32_t n = 0; n < N; n++) {
      if (dag_.nodes[n].worker >= p_) continue;
      if (seen_[n] == static_cast<std::uint32_t>(dp_ - 1)) continue;
      const DagNode& x = dag_.nodes[n];
      // A data-parallel collective, or one that moves nothing (a Join all replicas meet at).
      if (seen_[n] != 0 || (x.kind != DagKind::Collective && x.kind != DagKind::Join) || x.group < 0)
        refuse("node " + std::to_string(n) + " of replica 0 has counterparts in some replicas only");
      shared_[n] = 1;
      if (x.kind == DagKind::Collective) qranks_[x.group] = dp_;
    }
  }

  void check_dp_rings() {
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
  }

  // Every replica-0 GPU has an image in every replica.
  void check_gpu_images() {
    for (std::size_t g0 = 0; g0 < pf_.gpus.size(); g0++) {
      if (owner_[g0] != 0 || base_[g0] != static_cast<std::int32_t>(g0)) continue;
      gpus0_.push_back(static_cast<std::int32_t>(g0));
      for (int d = 1; d < dp_; d++)
        if (sigma_[d][g0] < 0) refuse("GPU " + std::to_string(g0) + " has no image in replica " + std::to_string(d));
    }
  }

  // Whole nodes move, GPUs keep their place, replicas never share a node.
  void check_whole_nodes() const {
    const int gpn = c_.gpus_per_node;
    const auto nodes = static_cast<std::size_t>(c_.nodes);
    std::vector<std::vector<std::int32_t>> nu(static_cast<std::size_t>(dp_), std::vector<std::int32_t>(nodes, -1));
    std::vector<std::int32_t> node_owner(nodes, -1);
    for (int d = 0; d < dp_; d++)
      for (std::int32_t g0 : gpus0_) {
        const std::int32_t g = d == 0 ? g0 : sigma_[d][g0];
        if (g % gpn != g0 % gpn) refuse("replica " + std::to_string(d) + " moves a GPU within its node");
        std::int32_t& image = nu[d][g0 / gpn];
        if (image == -1) image = g / gpn;
        if (image != g / gpn) refuse("replica " + std::to_string(d) + " splits a node");
        std::int32_t& o = node_owner[g / gpn];
        if (o == -1) o = d;
        if (o != d) refuse("two replicas share node " + std::to_string(g / gpn));
      }
  }

  // Edges correspond: replica d's successor lists are replica 0's, moved (shared nodes stay).
  void compare_edges() const {
    for (std::uint32_t n = 0; n < dag_.size(); n++) {
      if (rep_[n] == kNoNode) continue;
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
  }

  // Shared nodes: their successors in replica d are those in replica 0, moved, in the same order.
  void compare_shared_releases() const {
    for (std::uint32_t s = 0; s < dag_.size(); s++) {
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

  // ------------------------------------------------------------ check 3: routes
  struct FlowRoute {
    std::int32_t a, b;
    double latency;
    std::vector<sg4::Link*> links;
  };
  // Link k of node a's zone, by pointer.
  struct LinkOwner {
    std::int32_t node = -1, index = -1;
  };

  void routes() {
    for (std::size_t n = 0; n < pf_.node_links.size(); n++)
      for (std::size_t k = 0; k < pf_.node_links[n].size(); k++)
        owner_of_[pf_.node_links[n][k]] = LinkOwner{static_cast<std::int32_t>(n), static_cast<std::int32_t>(k)};
    collect_flows();
    check_fabric_links();
    compare_replica_routes();
    plan_mirrors();
  }

  // Every flow the full run can start: transfer lanes and ring edges of ring / aggregate groups.
  void collect_flows() {
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
  }

  // Fabric links: every flow through one must also cross a node link of no larger bandwidth (then it can
  // never bind alone); failing that, the flows of each of its source nodes and of each of its destination
  // nodes must have such a link, and the folded run must show them never active together across nodes.
  void check_fabric_links() {
    std::unordered_map<const sg4::Link*, std::vector<std::uint32_t>> through;
    std::vector<const sg4::Link*> fabric;  // in first-seen order: deterministic
    split_links(through, fabric);
    const int gpn = c_.gpus_per_node;
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
  }

  // Each flow's links: those of its end nodes (node_parts_, sorted) and fabric links (flows through each).
  void split_links(std::unordered_map<const sg4::Link*, std::vector<std::uint32_t>>& through,
                   std::vector<const sg4::Link*>& fabric) {
    const int gpn = c_.gpus_per_node;
    node_parts_.assign(flows_.size(), {});
    for (std::uint32_t i = 0; i < flows_.size(); i++) {
      const FlowRoute& f = flows_[i];
      for (sg4::Link* l : f.links) {
        auto it = owner_of_.find(l);
        if (it != owner_of_.end()) {
          if (it->second.node != f.a / gpn && it->second.node != f.b / gpn) refuse("a route crosses a third node");
          node_parts_[i].push_back(l);
          continue;
        }
        auto [t, added] = through.try_emplace(l);
        if (added) fabric.push_back(l);
        t->second.push_back(i);
      }
      std::sort(node_parts_[i].begin(), node_parts_[i].end());
    }
  }

  static bool shared_link(const sg4::Link* n) { return n->get_sharing_policy() == sg4::Link::SharingPolicy::SHARED; }

  // A fabric link l never binds when the node links of its flows cap them together: some set S of shared node
  // links that every flow through l crosses, with total bandwidth <= l's (then the flows through l never
  // exceed it, whatever else shares S). Candidates for S: one link common to all flows, or each flow's
  // narrowest link on its source side, or on its destination side (a leaf uplink over the NICs below it).
  bool dominated(const sg4::Link* l, const std::vector<std::uint32_t>& fs) const {
    std::vector<sg4::Link*> common = node_parts_[fs[0]];
    for (std::size_t k = 1; k < fs.size() && !common.empty(); k++) {
      std::vector<sg4::Link*> keep;
      std::set_intersection(common.begin(), common.end(), node_parts_[fs[k]].begin(), node_parts_[fs[k]].end(),
                            std::back_inserter(keep));
      common = std::move(keep);
    }
    if (std::any_of(common.begin(), common.end(),
                    [&](const sg4::Link* n) { return shared_link(n) && n->get_bandwidth() <= l->get_bandwidth(); }))
      return true;
    return end_capped(l, fs, 0) || end_capped(l, fs, 1);
  }

  // Each flow's narrowest shared link in its node at `end` (0 = source, 1 = destination), summed over the
  // distinct ones, is no wider than l.
  bool end_capped(const sg4::Link* l, const std::vector<std::uint32_t>& fs, int end) const {
    const int gpn = c_.gpus_per_node;
    std::vector<const sg4::Link*> cap;
    for (std::uint32_t i : fs) {
      const std::int32_t node = (end == 0 ? flows_[i].a : flows_[i].b) / gpn;
      const sg4::Link* best = nullptr;
      for (const sg4::Link* n : flows_[i].links) {
        auto it = owner_of_.find(n);
        if (it == owner_of_.end() || it->second.node != node || !shared_link(n)) continue;
        if (best == nullptr || n->get_bandwidth() < best->get_bandwidth()) best = n;
      }
      if (best == nullptr) return false;
      cap.push_back(best);
    }
    std::sort(cap.begin(), cap.end());
    cap.erase(std::unique(cap.begin(), cap.end()), cap.end());
    double total = 0;
    for (const sg4::Link* n : cap) total += n->get_bandwidth();
    return total <= l->get_bandwidth();
  }

  const FlowRoute* flow_route(std::int32_t a, std::int32_t b) const {
    auto it = std::lower_bound(pairs_.begin(), pairs_.end(), std::make_pair(a, b));
    return it != pairs_.end() && *it == std::make_pair(a, b) ? &flows_[it - pairs_.begin()] : nullptr;
  }

  // Replica d's routes are replica 0's, moved link for link.
  void compare_replica_routes() const {
    for (const FlowRoute& f : flows_) {
      if (owner_[f.a] != 0 || owner_[f.b] != 0 || base_[f.a] != f.a || base_[f.b] != f.b) continue;
      const auto sig0 = signature(f);
      for (int d = 1; d < dp_; d++) {
        const FlowRoute* g = flow_route(sigma_[d][f.a], sigma_[d][f.b]);
        if (g == nullptr) refuse("a flow of replica 0 has no counterpart");
        if (g->latency != f.latency || signature(*g) != sig0) refuse("routes differ across replicas");
      }
    }
  }

  // Data-parallel ring flows: each has the route of the mirror of its ring's first GPU.
  void plan_mirrors() {
    for (std::size_t g = 0; g < cp_.rings.size(); g++) {
      if (qranks_[g] == 0 || !cp_.used[g] || cp_.algo[g] == CollAlgo::Analytic) continue;
      for (const Ring& ring : cp_.rings[g]) {
        MirrorRoute m = mirror_route(ring);
        // Another group over the same ring (the distributed optimizer's gradient and parameter groups) shares
        // the mirror.
        auto same =
            std::find_if(mirrors_.begin(), mirrors_.end(), [&](const MirrorRoute& o) { return o.gpu == m.gpu; });
        if (same == mirrors_.end())
          mirrors_.push_back(std::move(m));
        else if (same->links != m.links)
          refuse("two data-parallel rings from one GPU take different mirror routes");
      }
    }
  }

  // The mirror of the ring's first GPU x: the node links of x's route to its successor, all in x's node.
  MirrorRoute mirror_route(const Ring& ring) const {
    const int gpn = c_.gpus_per_node;
    const std::int32_t x = ring[0];
    const FlowRoute* first = flow_route(ring[0], ring[1]);
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
      const FlowRoute* f = flow_route(ring[i], ring[(i + 1) % ring.size()]);
      if (f == nullptr || signature(*f) != sig || f->latency != lat)
        refuse("a data-parallel ring flow is not the image of the mirror route");
    }
    return m;
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

  // ------------------------------------------------------------ the folded DAG
  void build(FoldPlan& fp) {
    build_dag(fp);
    fp.qranks = qranks_;
    fp.mirrors = std::move(mirrors_);
    if (temporal_.empty()) return;
    add_flow_users(fp, map_temporal_flows(fp));
  }

  // Replica 0's nodes (shared collectives included, as they belong to replica 0's workers) with their edges
  // among themselves, in the original order.
  void build_dag(FoldPlan& fp) const {
    const std::size_t N = dag_.size();
    fp.rep.assign(N, kNoNode);
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
      if (fp.rep[n] == kNoNode) fp.rep[n] = fp.rep[rep_[n]];
  }

  // The flows of temporal links as FoldPlan::flows; returns, per flow of flows_, its index there (or kNoNode).
  std::vector<std::uint32_t> map_temporal_flows(FoldPlan& fp) const {
    const int gpn = c_.gpus_per_node;
    std::vector<std::uint32_t> index(flows_.size(), kNoNode);
    for (const auto& fs : temporal_) {
      std::vector<std::uint32_t> mapped;
      for (std::uint32_t i : fs) {
        if (index[i] == kNoNode) {
          index[i] = static_cast<std::uint32_t>(fp.flows.size());
          fp.flows.push_back(FoldPlan::Flow{flows_[i].a / gpn, flows_[i].b / gpn, {}});
        }
        mapped.push_back(index[i]);
      }
      fp.temporal.push_back(std::move(mapped));
    }
    return index;
  }

  // The temporal flow of the GPU pair (a, b), or kNoNode.
  std::uint32_t flow_of(const std::vector<std::uint32_t>& index, std::int32_t a, std::int32_t b) const {
    auto it = std::lower_bound(pairs_.begin(), pairs_.end(), std::make_pair(a, b));
    return it != pairs_.end() && *it == std::make_pair(a, b) ? index[it - pairs_.begin()] : kNoNode;
  }

  // The temporal flows of a transfer channel, one per lane.
  std::vector<std::uint32_t> channel_flows(const std::vector<std::uint32_t>& index, std::int32_t a,
                                           std::int32_t b) const {
    std::vector<std::uint32_t> out;
    if (laned(ann_, a, b)) {
      const auto& la = ann_.lanes[a];
      const auto& lb = ann_.lanes[b];
      for (std::size_t t = 0; t < la.size() && t < lb.size(); t++)
        if (std::uint32_t f = flow_of(index, la[t], lb[t]); f != kNoNode) out.push_back(f);
    } else if (std::uint32_t f = flow_of(index, a, b); f != kNoNode) {
      out.push_back(f);
    }
    return out;
  }

  // The full-DAG nodes that run each temporal flow: transfers (by channel and lane), collectives.
  void add_flow_users(FoldPlan& fp, const std::vector<std::uint32_t>& index) const {
    std::map<std::pair<std::int32_t, std::int32_t>, std::vector<std::uint32_t>> by_channel;
    for (std::uint32_t n = 0; n < dag_.size(); n++) {
      const DagNode& x = dag_.nodes[n];
      if (x.kind == DagKind::Transfer && x.amount > 0 && x.gpu != x.gpu2) {
        auto [it, added] = by_channel.try_emplace({x.gpu, x.gpu2});
        if (added) it->second = channel_flows(index, x.gpu, x.gpu2);
        for (std::uint32_t f : it->second) fp.flows[f].users.push_back(n);
      } else if (x.kind == DagKind::Collective && x.amount > 0 && cp_.algo[x.group] != CollAlgo::Analytic) {
        for (const Ring& ring : cp_.rings[x.group])
          for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); i++)
            if (std::uint32_t f = flow_of(index, ring[i], ring[(i + 1) % ring.size()]); f != kNoNode)
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
  std::vector<std::uint32_t> seen_;  // per replica-0 node: how many nodes of other replicas it stands for
  std::vector<std::uint8_t> shared_;
  std::vector<std::vector<std::int32_t>> sigma_, gmap_;
  std::vector<std::int32_t> owner_, base_;  // per GPU: replica using it, and the replica-0 GPU it stands for
  std::vector<std::int32_t> gpus0_;
  std::vector<int> qranks_;
  std::vector<std::pair<std::int32_t, std::int32_t>> pairs_;  // GPU pairs of flows_, sorted
  std::vector<std::vector<std::uint32_t>> temporal_;          // per temporal fabric link: indices into flows_
  std::vector<FlowRoute> flows_;
  std::vector<std::vector<sg4::Link*>> node_parts_;  // per flow: its links in its end nodes, sorted
  std::unordered_map<const sg4::Link*, LinkOwner> owner_of_;
  std::vector<MirrorRoute> mirrors_;
};

}  // namespace

FoldPlan plan_replica_fold(const ClusterSpec& c, const Dag& dag, const DagAnnotations& ann, const CollectivePlan& cp,
                           const Platform& pf) {
  return Folder(c, dag, ann, cp, pf).plan();
}

std::vector<NodeTiming> expand_folded(const FoldPlan& fold, const std::vector<NodeTiming>& folded) {
  std::vector<NodeTiming> t(fold.rep.size());
  for (std::size_t i = 0; i < t.size(); i++) t[i] = folded[fold.rep[i]];
  return t;
}

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

}  // namespace pipescope::sim
