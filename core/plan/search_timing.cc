#include "core/plan/search_timing.h"

#include <algorithm>

#include "core/cost/nccl_model.h"
#include "core/cost/ring_collective.h"

namespace pipescope {
namespace {

using Rings = ReplicaTiming::Rings;

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

// The NCCL view of each ring of a group (core/cost/nccl_model.h), made once per group: its calls of other sizes reuse
// it.
std::vector<NcclGroup> nccl_groups(const ClusterSpec& c, const Rings& rings) {
  std::vector<NcclGroup> out;
  out.reserve(rings.size());
  for (const auto& ring : rings)
    if (ring.size() > 1)
      out.push_back(nccl_ring_group(c, ring, [&](int a, int b) { return link_between(c, a, b).bw_Bps; }));
  return out;
}

// A collective call as the simulator's analytic collectives time it (NCCL's algorithm and protocol choice over
// the group's bandwidths): the slowest of the group's rings (`groups`: nccl_groups of them).
double nccl_rings_s(const std::vector<NcclGroup>& groups, double bytes, bool allgather) {
  double t = 0;
  if (bytes > 0)
    for (const NcclGroup& g : groups) t = std::max(t, nccl_collective_seconds(g, bytes, allgather));
  return t;
}
}  // namespace

// One call of a collective group, timed once per distinct (size, kind) (a group's calls repeat a few).
struct ReplicaTiming::Group {
  const Rings* rings = nullptr;
  bool link_known = false;
  Link link;
  std::vector<NcclGroup> nccl;  // with link_known: nccl_groups of the rings
  struct Seen {
    double bytes;
    bool allgather;
    double s;
  };
  std::vector<Seen> seen;

  double call_s(const ClusterSpec& c, bool nccl, double bytes, bool allgather) {
    for (const Seen& x : seen)
      if (x.bytes == bytes && x.allgather == allgather) return x.s;
    if (!link_known) {
      if (nccl)
        this->nccl = nccl_groups(c, *rings);
      else
        link = rings_link(c, *rings);
      link_known = true;
    }
    const double t = nccl ? nccl_rings_s(this->nccl, bytes, allgather)
                          : ring_collective_s(bytes, static_cast<int>(rings->front().size()), link.bw_Bps,
                                              link.latency_s, allgather);
    seen.push_back({bytes, allgather, t});
    return t;
  }
};

ReplicaTiming::ReplicaTiming(const Scenario& s, const Placement& full, const std::vector<CollGroup>& groups)
    : s_(s), full_(full) {
  // The simulator's `analytic` and `auto` collectives follow NCCL's cost model; `ring` and `aggregate` are flows
  // over the links (sim/collectives.h), estimated here by a ring all-reduce at the slowest hop.
  nccl_ = s.sim.collectives == "analytic" || s.sim.collectives == "auto";
  const ParallelSpec& par = s.parallel;
  LoweredSchedule skeleton;  // collective_rings reads the groups, tp and cp
  skeleton.tp = par.tp;
  skeleton.cp = par.cp;
  skeleton.groups = groups;
  rings_ = collective_rings(skeleton, full);
  // The data-parallel groups of the one replica stand for a pipeline rank's real group: its dp peers' GPUs with their
  // context-parallel ranks, one ring per TP rank (as build_dag rings a multi-worker group).
  for (std::size_t g = 0; g < groups.size(); g++) {
    const CollGroup& grp = groups[g];
    if (grp.tag != CollTag::DataParallel && grp.tag != CollTag::ParamGather) continue;
    const int r = grp.workers.front();
    rings_[g].assign(static_cast<std::size_t>(par.tp), {});
    for (int t = 0; t < par.tp; t++) {
      auto& ring = rings_[g][static_cast<std::size_t>(t)];
      ring.reserve(static_cast<std::size_t>(par.dp) * par.cp);  // built for every candidate: no growth step by step
      for (int d = 0; d < par.dp; d++)
        for (int c = 0; c < par.cp; c++) ring.push_back(full.gpu_of(d * par.pp + r, c * par.tp + t));
    }
  }
  groups_.resize(rings_.size());
  for (std::size_t g = 0; g < rings_.size(); g++) groups_[g].rings = &rings_[g];
}

ReplicaTiming::~ReplicaTiming() = default;

// A group on the rings of a group already timed (a worker's TP and scatter/gather groups; a rank's gradient and
// parameter groups) takes its NCCL view or slowest hop, made once per candidate rather than once per group.
void ReplicaTiming::share_link(std::size_t g) {
  for (const Group& h : groups_)
    if (h.link_known && *h.rings == rings_[g]) {
      groups_[g].nccl = h.nccl;
      groups_[g].link = h.link;
      groups_[g].link_known = true;
      return;
    }
}

double ReplicaTiming::duration_s(const CostedOp& op) {
  const ClusterSpec& c = s_.cluster;
  switch (op.dag) {
    case DagKind::Compute:
      return op.seconds;
    case DagKind::Transfer: {
      // tp lanes run at once (one per TP rank); through a host bridge they share it.
      const int a = full_.gpu_of(op.worker, 0), b = full_.gpu_of(op.peer, 0);
      const Link k = link_between(c, a, b);
      const double bw = k.bridged ? k.bw_Bps / std::max(1, s_.parallel.tp) : k.bw_Bps;
      return a == b ? 0.0 : k.latency_s + op.bytes / bw;
    }
    case DagKind::Collective: {
      const auto g = static_cast<std::size_t>(op.group);
      if (rings_[g].empty() || rings_[g].front().size() < 2) return 0;
      if (!groups_[g].link_known) share_link(g);
      // An async bucket becomes ready lead_s after its predecessor (core/lower/lowering.h); the simulator times
      // all-gathers and reduce-scatters alike (n - 1 steps).
      const bool allgather = op.kind == LOpKind::AllGather || op.kind == LOpKind::ReduceScatter;
      return (op.async ? op.lead_s : 0.0) + op.count * groups_[g].call_s(c, nccl_, op.bytes, allgather);
    }
    case DagKind::Join:
      return 0;
  }
  return 0;
}

}  // namespace pipescope
