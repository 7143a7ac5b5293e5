#include "sim/platform.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/model/placement.h"
#include "core/model/profile.h"

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;

namespace {

std::string gpu_name(int node, int g) { return "node" + std::to_string(node) + "-gpu" + std::to_string(g); }

}  // namespace

// One half of a link as a route element: SimGrid's link and its latency (read once: the kernel link type is
// not part of SimGrid's installed headers).
struct Hop {
  simgrid::kernel::resource::StandardLinkImpl* impl = nullptr;
  double latency_s = 0;
  sg4::Link* link = nullptr;
};

// The flat zone of the whole cluster. Hosts: every GPU (netpoint id = GPU index), then mirror hosts. Routes
// are computed from the topology when SimGrid asks for them (route()): the GPU's port (NVLink or PCIe), its
// NIC, the fabric between the two NICs' leaves, the peer's NIC and port. Cube-mesh and PCIe nodes keep their
// per-pair paths. No route table: memory is O(GPUs) however many GPU pairs talk.
class FabricZone : public simgrid::kernel::routing::NetZoneImpl {
 public:
  explicit FabricZone(const ClusterSpec& c) : NetZoneImpl("cluster"), c_(c), leaf_nodes_(c.leaf_nodes()) {}

  // Build-time tables, filled by build_platform_open.
  std::vector<Hop> port_up, port_down;   // per GPU: NVLink port (NVSwitch) or PCIe port, UP = leaving the GPU
  std::vector<Hop> nic_up, nic_down;     // per node * nics + k: UP = leaving the node
  std::vector<Hop> bridge;               // per node (PCIe host bridge; cube mesh / PCIe nodes)
  std::vector<Hop> pair;                 // per (node * G + a) * G + b: cube-mesh NVLink a -> b (impl null = SYS)
  std::vector<Hop> leaf_up, leaf_down;   // per leaf: uplink to the spine (UP) and back (DOWN)
  std::vector<std::vector<Hop>> mirror;  // per mirror host (netpoint id - GPUs): its route from its GPU
  std::vector<std::int32_t> mirror_gpu;  // per mirror host: the GPU it mirrors

  // The leaf switch of a node's NIC k (fat tree: one leaf per group of nodes; rail: one per group and rail).
  std::size_t leaf_of(int node, int k) const {
    const std::size_t group = static_cast<std::size_t>(node / leaf_nodes_);
    switch (c_.topology) {
      case InterNodeTopology::Star:
        return 0;
      case InterNodeTopology::FatTree:
        return group;
      case InterNodeTopology::Rail:
        return group * static_cast<std::size_t>(c_.nics_per_node) + static_cast<std::size_t>(k);
    }
    return 0;
  }

  template <typename Out>
  void route(std::int32_t a, std::int32_t b, Out&& out) const {
    const int G = c_.gpus_per_node;
    const int na = a / G, nb = b / G;
    if (a == b) return;
    if (na == nb) {
      if (c_.fabric == IntraNodeFabric::NVSwitch) {
        out(port_up[a]);
        out(port_down[b]);
        return;
      }
      const Hop& p = pair[(static_cast<std::size_t>(na) * G + a % G) * G + b % G];
      if (p.impl != nullptr) {
        out(p);
        return;
      }
      out(port_up[a]);
      out(bridge[na]);
      out(port_down[b]);
      return;
    }
    const int nics = c_.nics_per_node;
    const int ka = (a % G) % nics, kb = (b % G) % nics;
    out(port_up[a]);
    out(nic_up[static_cast<std::size_t>(na) * nics + ka]);
    if (c_.topology != InterNodeTopology::Star) {
      const std::size_t la = leaf_of(na, ka), lb = leaf_of(nb, kb);
      if (la != lb) {
        out(leaf_up[la]);
        out(leaf_down[lb]);
      }
    }
    out(nic_down[static_cast<std::size_t>(nb) * nics + kb]);
    out(port_down[b]);
  }

 protected:
  void get_local_route(const simgrid::kernel::routing::NetPoint* src, const simgrid::kernel::routing::NetPoint* dst,
                       simgrid::kernel::routing::Route* into, double* latency) override {
    const auto gpus = static_cast<unsigned long>(port_up.size());
    auto add = [&](const Hop& h) {
      into->link_list_.push_back(h.impl);
      if (latency != nullptr) *latency += h.latency_s;
    };
    const unsigned long s = src->id(), d = dst->id();
    if (s < gpus && d < gpus) {
      route(static_cast<std::int32_t>(s), static_cast<std::int32_t>(d), add);
      return;
    }
    if (s < gpus && d >= gpus && d - gpus < mirror.size() && mirror_gpu[d - gpus] == static_cast<std::int32_t>(s)) {
      for (const Hop& h : mirror[d - gpus]) add(h);
      return;
    }
    throw std::logic_error(std::string("pipescope platform: no route from ") + src->get_cname() + " to " +
                           dst->get_cname());
  }

 private:
  ClusterSpec c_;
  int leaf_nodes_;
};

namespace {

Hop hop(sg4::Link* l) { return Hop{l->get_impl(), l->get_latency(), l}; }

// A node's GPUs (appended at their global index) and links, in the same order on every node: NICs, then
// NVLink ports (NVSwitch) or PCIe ports, bridge and cube-mesh pairs.
void make_node(FabricZone& z, const ClusterSpec& c, int node, double speed, Platform& pf) {
  sg4::NetZone* nz = z.get_iface();
  std::vector<sg4::Link*>& links = pf.node_links[node];
  auto split = [&](const std::string& name, double bw, double lat) {
    auto* l = nz->create_split_duplex_link(name, bw);
    l->set_latency(lat)->seal();
    links.push_back(l->get_link_up());
    links.push_back(l->get_link_down());
    return l;
  };
  const std::string nname = "node" + std::to_string(node);
  const int G = c.gpus_per_node;
  for (int g = 0; g < G; g++)
    pf.gpus[static_cast<std::size_t>(node) * G + g] = nz->create_host(gpu_name(node, g), speed)->seal();
  for (int k = 0; k < c.nics_per_node; k++) {
    auto* nic = split(nname + "-nic" + std::to_string(k), c.nic_data_Bps(), c.nic_latency_s);
    z.nic_up.push_back(hop(nic->get_link_up()));
    z.nic_down.push_back(hop(nic->get_link_down()));
  }
  // NVSwitch: one NVLink port per GPU (the switch is non-blocking). Cube mesh / PCIe: each GPU's PCIe port
  // (also its path to the NICs: GPUDirect RDMA), one shared host bridge (CPU root complexes + inter-socket
  // link) for GPU pairs without NVLink ("SYS"), one link per NVLink-connected cube-mesh pair (NV2 = 2 links).
  const bool nvswitch = c.fabric == IntraNodeFabric::NVSwitch;
  for (int g = 0; g < G; g++) {
    auto* port = nvswitch ? split(gpu_name(node, g) + "-nvl", c.nvlink_bw_Bps, c.nvlink_latency_s)
                          : split(gpu_name(node, g) + "-pcie", c.pcie_bw_Bps, c.pcie_latency_s);
    z.port_up.push_back(hop(port->get_link_up()));
    z.port_down.push_back(hop(port->get_link_down()));
  }
  if (nvswitch) return;
  z.bridge.emplace_back();
  if (G > 1) {
    sg4::Link* bridge = nz->create_link(nname + "-bridge", c.pcie_bw_Bps)->seal();
    links.push_back(bridge);
    z.bridge.back() = hop(bridge);
  }
  const std::size_t base = static_cast<std::size_t>(node) * G * G;
  z.pair.resize(base + static_cast<std::size_t>(G) * G);
  if (c.fabric != IntraNodeFabric::CubeMesh) return;
  for (int a = 0; a < G; a++)
    for (int b = a + 1; b < G; b++)
      if (int k = cube_mesh_links(a, b); k > 0) {
        auto* l = split(gpu_name(node, a) + "-nv-" + std::to_string(b), k * c.nvlink_bw_Bps, 2 * c.nvlink_latency_s);
        z.pair[base + static_cast<std::size_t>(a) * G + b] = hop(l->get_link_up());
        z.pair[base + static_cast<std::size_t>(b) * G + a] = hop(l->get_link_down());
      }
}

// Leaf uplinks: a fat-tree leaf carries all NICs of its nodes, a rail leaf NIC k of its nodes; the uplink
// has the leaf's total downlink bandwidth divided by the oversubscription R. The spine is non-blocking and
// the uplink stands for all of a leaf's uplink ports together (traffic spread evenly over the spine, no
// hash collisions). No latency: switch hops are inside the NIC alpha.
void make_fabric(FabricZone& z, const ClusterSpec& c, Platform& pf) {
  if (c.topology == InterNodeTopology::Star) return;
  const int per_leaf = c.leaf_nodes();
  const int groups = c.nodes / per_leaf;
  const bool rail = c.topology == InterNodeTopology::Rail;
  const int leaves_per_group = rail ? c.nics_per_node : 1;
  const double down_Bps = per_leaf * c.nic_data_Bps() * (rail ? 1 : c.nics_per_node);
  for (int s = 0; s < groups; s++)
    for (int k = 0; k < leaves_per_group; k++) {
      const std::string name =
          "leaf" + std::to_string(s) + (rail ? "-rail" + std::to_string(k) : std::string()) + "-up";
      auto* l = z.get_iface()->create_split_duplex_link(name, down_Bps / c.oversubscription);
      l->set_latency(0)->seal();
      z.leaf_up.push_back(hop(l->get_link_up()));
      z.leaf_down.push_back(hop(l->get_link_down()));
      pf.fabric_links.push_back(l->get_link_up());
      pf.fabric_links.push_back(l->get_link_down());
    }
}

bool user_sets(const std::vector<std::string>& args, const std::string& item) {
  const std::string prefix = "--cfg=" + item + ":";
  return std::any_of(args.begin(), args.end(), [&](const std::string& a) { return a.rfind(prefix, 0) == 0; });
}

}  // namespace

int cube_mesh_links(int a, int b) { return cube_mesh_nvlinks(a, b); }  // the one table: core/model/placement.cc

void configure_network_model() { configure_network_model({}); }

void configure_network_model(const std::vector<std::string>& user_args) {
  // Plain alpha-beta: no LV08 correction factors, no TCP window cap, no reverse "ack" traffic.
  if (!user_sets(user_args, "network/model")) sg4::Engine::set_config("network/model:CM02");
  if (!user_sets(user_args, "network/TCP-gamma")) sg4::Engine::set_config("network/TCP-gamma:0");
  if (!user_sets(user_args, "network/crosstraffic")) sg4::Engine::set_config("network/crosstraffic:0");
}

void install_link_tables(const std::map<std::string, std::vector<std::pair<double, double>>>& tables) {
  if (tables.empty()) return;
  auto* nm = sg4::Engine::get_instance()->get_netzone_root()->get_network_model();
  // Per comm: (latency part, transfer part) of the table's time for its route class and size.
  auto split = [tables](double size, const std::vector<sg4::Link*>& links) -> std::pair<double, double> {
    bool inter = false;
    for (const auto* l : links) inter = inter || l->get_name().find("-nic") != std::string::npos;
    const auto it = tables.find(inter ? "inter" : "intra");
    if (it == tables.end() || it->second.size() < 2) return {-1, -1};
    const auto& pts = it->second;
    const double t = piecewise_seconds(pts, size);
    // The segment's intercept is the latency (never negative, never above t); the rest moves the bytes.
    std::size_t i = 1;
    while (i + 1 < pts.size() && size > pts[i].first) i++;
    const double slope = (pts[i].second - pts[i - 1].second) / (pts[i].first - pts[i - 1].first);
    const double alpha = std::clamp(pts[i - 1].second - slope * pts[i - 1].first, 0.0, t);
    return {alpha, t - alpha};
  };
  nm->set_lat_factor_cb([split](double size, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& links,
                                const std::unordered_set<sg4::NetZone*>&) {
    const auto [alpha, rest] = split(size, links);
    if (alpha < 0) return 1.0;
    const double lat = summed_latency(links);
    return lat > 0 ? alpha / lat : 1.0;
  });
  nm->set_bw_factor_cb([split](double size, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& links,
                               const std::unordered_set<sg4::NetZone*>&) {
    const auto [alpha, rest] = split(size, links);
    if (alpha < 0 || !(size > 0) || !(rest > 0)) return 1.0;
    double bw = std::numeric_limits<double>::infinity();
    for (const auto* l : links) bw = std::min(bw, l->get_bandwidth());
    return (size / rest) / bw;
  });
}

void validate_cluster(const ClusterSpec& c) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("cluster" + (c.preset.empty() ? std::string() : " '" + c.preset + "'") + ": " + what);
  };
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto non_negative = [](double x) { return std::isfinite(x) && x >= 0; };
  if (c.nodes < 1) fail("nodes must be >= 1");
  if (c.gpus_per_node < 1) fail("gpus_per_node must be >= 1");
  if (c.fabric != IntraNodeFabric::PCIe && c.gpus_per_node > 1 && !positive(c.nvlink_bw_Bps))
    fail("nvlink bandwidth must be > 0");
  if ((c.fabric != IntraNodeFabric::NVSwitch) && !positive(c.pcie_bw_Bps)) fail("pcie bandwidth must be > 0");
  if (c.fabric == IntraNodeFabric::CubeMesh && c.gpus_per_node > 8)
    fail("cube mesh supports at most 8 GPUs per node, got " + std::to_string(c.gpus_per_node));
  if (c.nics_per_node < 1) fail("nics_per_node must be >= 1");
  if (c.nodes > 1 && !positive(c.nic_bw_Bps)) fail("nic bandwidth must be > 0 with more than one node");
  if (!non_negative(c.nvlink_latency_s) || !non_negative(c.pcie_latency_s) || !non_negative(c.nic_latency_s))
    fail("latencies must be >= 0");
  if (!positive(c.oversubscription)) fail("oversubscription must be > 0");
  if (c.nodes_per_leaf < 0) fail("nodes_per_leaf must be >= 1");
  if (c.nodes_per_leaf > 0 && c.nodes % c.nodes_per_leaf != 0)
    fail("nodes = " + std::to_string(c.nodes) +
         " is not a multiple of nodes_per_leaf = " + std::to_string(c.nodes_per_leaf));
}

Platform build_platform(const ClusterSpec& c) {
  Platform pf = build_platform_open(c);
  seal_platform(pf);
  return pf;
}

Platform build_platform_open(const ClusterSpec& c) {
  validate_cluster(c);
  // Host speed is only a scale (flops = seconds * speed); the device peak keeps SimGrid's own outputs
  // readable. An unused NIC (one node) still needs a positive bandwidth.
  const double speed = c.device.peak_flops_fp16 > 0 ? c.device.peak_flops_fp16 : 1e12;
  ClusterSpec cc = c;
  if (!(cc.nic_bw_Bps > 0)) cc.nic_bw_Bps = 1e9;
  if (!(cc.nvlink_bw_Bps > 0)) cc.nvlink_bw_Bps = 1e9;
  if (!(cc.pcie_bw_Bps > 0)) cc.pcie_bw_Bps = 1e9;

  Platform pf;
  pf.gpus.assign(static_cast<std::size_t>(c.nodes) * c.gpus_per_node, nullptr);
  pf.node_links.assign(static_cast<std::size_t>(c.nodes), {});
  auto* root = sg4::create_star_zone("pipescope");
  pf.root = root;
  auto* zone = new FabricZone(cc);  // owned by SimGrid's zone tree (as create_*_zone's zones are)
  zone->set_parent(root->get_impl());
  pf.zone = zone;
  for (int n = 0; n < c.nodes; n++) make_node(*zone, cc, n, speed, pf);
  make_fabric(*zone, cc, pf);
  // Pure delays (collective alpha terms, analytic collectives): one exec per delay at 1 flop/s.
  pf.timer = root->create_host("timer", 1.0)->set_core_count(1000000)->seal();
  for (std::size_t g = 0; g < pf.gpus.size(); g++)
    if (pf.gpus[g] == nullptr || pf.gpus[g]->get_netpoint()->id() != g)
      throw std::logic_error("build_platform: GPU host " + std::to_string(g) + " is not the zone's vertex " +
                             std::to_string(g));
  return pf;
}

void seal_platform(Platform& pf) {
  if (pf.root == nullptr) throw std::logic_error("seal_platform: the platform is already sealed");
  pf.zone->get_iface()->seal();
  pf.root->seal();
  pf.root = nullptr;
}

std::vector<sg4::Link*> route_links(const sg4::Host* src, const sg4::Host* dst, double* latency_s) {
  std::vector<sg4::Link*> links;
  double lat = 0;
  src->route_to(dst, links, &lat);
  if (latency_s != nullptr) *latency_s = lat;
  return links;
}

double summed_latency(const std::vector<sg4::Link*>& links) {
  double lat = 0;  // FabricZone::get_local_route: += link latency, in route order, from the caller's 0
  for (const auto* l : links) lat += l->get_latency();
  return lat;
}

std::vector<sg4::Host*> add_mirrors(Platform& pf, const std::vector<MirrorRoute>& mirrors) {
  if (pf.root == nullptr) throw std::logic_error("add_mirrors: needs an open platform (build_platform_open)");
  std::vector<sg4::Host*> host(pf.gpus.size(), nullptr);
  FabricZone& z = *pf.zone;
  for (const MirrorRoute& m : mirrors) {
    if (host.at(m.gpu) != nullptr) throw std::logic_error("add_mirrors: GPU " + std::to_string(m.gpu) + " twice");
    host[m.gpu] = z.get_iface()->create_host("mirror-gpu" + std::to_string(m.gpu), 1.0)->seal();
    if (host[m.gpu]->get_netpoint()->id() != pf.gpus.size() + z.mirror.size())
      throw std::logic_error("add_mirrors: unexpected host numbering");
    std::vector<Hop> hops;
    for (sg4::Link* l : m.links) hops.push_back(hop(l));
    z.mirror.push_back(std::move(hops));
    z.mirror_gpu.push_back(m.gpu);
  }
  return host;
}

RouteInfo route_info(const sg4::Host* src, const sg4::Host* dst) {
  RouteInfo r;
  std::vector<sg4::Link*> links;
  double lat = 0;
  src->route_to(dst, links, &lat);
  r.latency_s = lat;
  r.bandwidth_Bps = std::numeric_limits<double>::infinity();
  for (auto* l : links) {
    r.bandwidth_Bps = std::min(r.bandwidth_Bps, l->get_bandwidth());
    r.links.emplace_back(l->get_cname());
  }
  return r;
}

}  // namespace pipescope::sim
