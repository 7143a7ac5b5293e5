#include "sim/platform.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/profile.h"

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;
using Dir = sg4::LinkInRoute::Direction;

namespace {

// spec/calibration.md 8.2, `nvidia-smi topo -m` of a p3.16xlarge: 0 = SYS, 1 = NV1, 2 = NV2.
constexpr int kCubeMesh[8][8] = {
    {0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0}, {1, 2, 0, 2, 0, 0, 1, 0}, {2, 1, 2, 0, 0, 0, 0, 1},
    {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1}, {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0},
};

std::string gpu_name(int node, int g) { return "node" + std::to_string(node) + "-gpu" + std::to_string(g); }

// A node zone: its GPUs (appended to `gpus` at their global index), a gateway router, and the node's NIC
// as the gateway's link (so star and fat-tree fabrics see the same node). Returns {zone netpoint, gateway}.
std::pair<simgrid::kernel::routing::NetPoint*, simgrid::kernel::routing::NetPoint*> make_node_zone(
    const sg4::NetZone* parent, const ClusterSpec& c, int node, double speed, std::vector<sg4::Host*>& gpus,
    std::vector<sg4::Link*>& links) {
  auto keep = [&links](sg4::SplitDuplexLink* l) {
    links.push_back(l->get_link_up());
    links.push_back(l->get_link_down());
  };
  const std::string nname = "node" + std::to_string(node);
  const int G = c.gpus_per_node;
  // NVSwitch: star zone, the centre is the switch. Cube mesh and PCIe need per-pair routes: full zone.
  sg4::NetZone* nz =
      c.fabric == IntraNodeFabric::NVSwitch ? sg4::create_star_zone(nname) : sg4::create_full_zone(nname);
  nz->set_parent(parent);  // before any resource is created in it
  std::vector<sg4::Host*> local(G);
  for (int g = 0; g < G; g++) {
    local[g] = nz->create_host(gpu_name(node, g), speed)->seal();
    gpus[static_cast<std::size_t>(node) * G + g] = local[g];
  }
  auto* gw = nz->create_router(nname + "-gw");
  // All NICs of a node as one aggregate split-duplex link: UP = leaving the node, DOWN = entering it.
  auto* nic = nz->create_split_duplex_link(nname + "-nic", c.nics_per_node * c.nic_bw_Bps);
  nic->set_latency(c.nic_latency_s)->seal();
  keep(nic);

  if (c.fabric == IntraNodeFabric::NVSwitch) {
    for (int g = 0; g < G; g++) {
      auto* nvl = nz->create_split_duplex_link(gpu_name(node, g) + "-nvl", c.nvlink_bw_Bps);
      nvl->set_latency(c.nvlink_latency_s)->seal();
      keep(nvl);
      // GPU -> centre uses UP; symmetrical: centre -> GPU uses DOWN.
      nz->add_route(local[g]->get_netpoint(), nullptr, nullptr, nullptr, {{nvl, Dir::UP}}, true);
    }
    // Gateway -> centre is traffic entering the node (nic DOWN); centre -> gateway leaves it (nic UP).
    nz->add_route(gw, nullptr, nullptr, nullptr, {{nic, Dir::DOWN}}, true);
  } else {
    // Each GPU's PCIe port and one shared host bridge (CPU root complexes + inter-socket link): the path
    // of GPU pairs without NVLink ("SYS") and of every pair on a PCIe-only node. GPU <-> NIC traffic
    // takes the GPU's PCIe port.
    std::vector<sg4::SplitDuplexLink*> pcie(G);
    for (int g = 0; g < G; g++) {
      pcie[g] = nz->create_split_duplex_link(gpu_name(node, g) + "-pcie", c.pcie_bw_Bps);
      pcie[g]->set_latency(c.pcie_latency_s)->seal();
      keep(pcie[g]);
    }
    sg4::Link* bridge = nullptr;
    if (G > 1) {
      bridge = nz->create_link(nname + "-bridge", c.pcie_bw_Bps)->seal();
      links.push_back(bridge);
    }
    // Cube mesh: one split-duplex link per NVLink-connected pair; an NV2 pair is one link of twice the
    // bandwidth. UP = from the lower-numbered GPU to the higher one. Latency = two NVLink ports.
    std::vector<std::vector<sg4::SplitDuplexLink*>> pair(G, std::vector<sg4::SplitDuplexLink*>(G, nullptr));
    if (c.fabric == IntraNodeFabric::CubeMesh)
      for (int a = 0; a < G; a++)
        for (int b = a + 1; b < G; b++)
          if (int k = cube_mesh_links(a, b); k > 0) {
            auto* l = nz->create_split_duplex_link(gpu_name(node, a) + "-nv-" + std::to_string(b), k * c.nvlink_bw_Bps);
            l->set_latency(2 * c.nvlink_latency_s)->seal();
            keep(l);
            pair[a][b] = pair[b][a] = l;
          }
    for (int a = 0; a < G; a++) {
      nz->add_route(local[a]->get_netpoint(), gw, nullptr, nullptr, {{pcie[a], Dir::UP}, {nic, Dir::UP}}, false);
      nz->add_route(gw, local[a]->get_netpoint(), nullptr, nullptr, {{nic, Dir::DOWN}, {pcie[a], Dir::DOWN}}, false);
      for (int b = 0; b < G; b++) {
        if (a == b) continue;
        if (pair[a][b] != nullptr) {
          nz->add_route(local[a]->get_netpoint(), local[b]->get_netpoint(), nullptr, nullptr,
                        {{pair[a][b], a < b ? Dir::UP : Dir::DOWN}}, false);
        } else {
          nz->add_route(local[a]->get_netpoint(), local[b]->get_netpoint(), nullptr, nullptr,
                        {{pcie[a], Dir::UP}, {bridge, Dir::NONE}, {pcie[b], Dir::DOWN}}, false);
        }
      }
    }
  }
  nz->seal();
  return {nz->get_netpoint(), gw};
}

// Leaves per first-level switch of the 2-level fat tree: the largest divisor of the node count that is
// at most 16 (a 32-port switch with 16 down- and 16 uplinks), so any node count is buildable.
unsigned fat_tree_leaf_group(int nodes) {
  for (int k = std::min(nodes, 16); k > 1; k--)
    if (nodes % k == 0) return static_cast<unsigned>(k);
  return 1;
}

bool user_sets(const std::vector<std::string>& args, const std::string& item) {
  const std::string prefix = "--cfg=" + item + ":";
  return std::any_of(args.begin(), args.end(), [&](const std::string& a) { return a.rfind(prefix, 0) == 0; });
}

}  // namespace

int cube_mesh_links(int a, int b) {
  if (a < 0 || a >= 8 || b < 0 || b >= 8) throw std::out_of_range("cube_mesh_links: GPU index outside 0..7");
  return kCubeMesh[a][b];
}

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
  if (c.topology == InterNodeTopology::Star) {
    // One non-blocking switch: node zones hang off a star with empty routes (the NIC is in the node zone).
    auto* cluster = sg4::create_star_zone("cluster");
    cluster->set_parent(root);
    for (int n = 0; n < c.nodes; n++) {
      auto [np, gw] = make_node_zone(cluster, cc, n, speed, pf.gpus, pf.node_links[n]);
      cluster->add_route(np, nullptr, gw, nullptr, {}, true);
    }
    cluster->seal();
  } else {
    // 2-level fat tree with full bisection: k nodes per first-level switch, k second-level switches, every
    // fabric link at the node's aggregate NIC bandwidth, no extra latency (switch hops are in the NIC alpha).
    const unsigned k = fat_tree_leaf_group(c.nodes);
    const unsigned groups = static_cast<unsigned>(c.nodes) / k;
    sg4::ClusterCallbacks cbs(
        [&cc, &pf, speed](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
          return make_node_zone(zone, cc, static_cast<int>(id), speed, pf.gpus, pf.node_links[id]);
        });
    sg4::create_fatTree_zone("cluster", root, {2, {k, groups}, {1, k}, {1, 1}}, cbs, cc.nics_per_node * cc.nic_bw_Bps,
                             0.0, sg4::Link::SharingPolicy::SPLITDUPLEX)
        ->seal();
  }
  // Pure delays (collective alpha terms, analytic collectives): one exec per delay at 1 flop/s.
  pf.timer = root->create_host("timer", 1.0)->set_core_count(1000000)->seal();
  for (auto* h : pf.gpus)
    if (h == nullptr) throw std::logic_error("build_platform: a GPU host was not created");
  return pf;
}

void seal_platform(Platform& pf) {
  if (pf.root == nullptr) throw std::logic_error("seal_platform: the platform is already sealed");
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
  double lat = 0;  // FullZone::get_local_route: += link latency, in route order, from the caller's 0
  for (const auto* l : links) lat += l->get_latency();
  return lat;
}

RouteZone add_route_zone(Platform& pf, const std::vector<ZoneRoute>& routes) {
  if (pf.root == nullptr) throw std::logic_error("add_route_zone: needs an open platform (build_platform_open)");
  RouteZone rz;
  rz.host.assign(pf.gpus.size(), nullptr);
  rz.mirror.assign(pf.gpus.size(), nullptr);
  if (routes.empty()) return rz;
  auto* zone = sg4::create_full_zone("routes");
  zone->set_parent(pf.root);
  auto stand_in = [&](std::int32_t g) {
    if (rz.host[g] == nullptr) rz.host[g] = zone->create_host("route-gpu" + std::to_string(g), 1.0)->seal();
    return rz.host[g];
  };
  for (const ZoneRoute& r : routes) {
    sg4::Host* a = stand_in(r.src);
    sg4::Host* b = nullptr;
    if (r.mirror) {
      if (rz.mirror[r.src] == nullptr)
        rz.mirror[r.src] = zone->create_host("route-mirror" + std::to_string(r.src), 1.0)->seal();
      b = rz.mirror[r.src];
    } else {
      b = stand_in(r.dst);
    }
    std::vector<sg4::LinkInRoute> list;
    list.reserve(r.links.size());
    for (auto* l : r.links) list.emplace_back(l);
    zone->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, list, false);
    rz.routes++;
  }
  zone->seal();
  return rz;
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
