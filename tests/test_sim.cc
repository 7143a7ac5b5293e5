// SimGrid engine tests. Pure logic (ring bookkeeping, algorithm choice, closed forms, deadlock message,
// cube-mesh table) runs in process; every SimGrid run goes through the sim_runner executable in a
// subprocess (one Engine per process; SimGrid aborts on misuse).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "sim/collectives.h"
#include "sim/engine.h"
#include "sim/platform.h"
#include "sim/report.h"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

struct Proc {
  int rc = -1;
  std::string out;                        // stdout and stderr
  std::map<std::string, std::string> kv;  // key=value lines
  double num(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end()) throw std::runtime_error("sim_runner printed no " + k + ":\n" + out);
    return std::stod(it->second);
  }
  // "start end" of node i
  std::pair<double, double> node(int i) const {
    std::istringstream is(kv.at("node" + std::to_string(i)));
    std::pair<double, double> p;
    is >> p.first >> p.second;
    return p;
  }
};

Proc runner(const std::string& args) {
  Proc r;
  const std::string cmd = std::string(SIM_RUNNER) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) throw std::runtime_error("popen failed: " + cmd);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  const int status = pclose(f);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  std::istringstream is(r.out);
  std::string line;
  while (std::getline(is, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && line.rfind("error", 0) != 0) r.kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return r;
}

Proc ok(const std::string& args) {
  Proc r = runner(args);
  EXPECT_EQ(r.rc, 0) << args << "\n" << r.out;
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Per process: ctest runs the tests of this file in parallel processes that reuse the same names.
std::string tmp(const std::string& name) {
  return std::string(PIPESCOPE_BINARY_DIR) + "/test_sim_" + std::to_string(getpid()) + "_" + name;
}

// ---------------------------------------------------------------- in process: collectives

TEST(SimCollectives, ClosedFormsOfSpec) {
  // docs/simulator.md: 1 GB over 2 GPUs at 150 GB/s, no latency; 8 ranks behind a 12.5 GB/s NIC.
  EXPECT_NEAR(ring_collective_s(1e9, 2, 150e9, 0.0), 6.666666667e-3, 1e-12);
  EXPECT_NEAR(ring_collective_s(1e9, 8, 12.5e9, 12e-6), 0.140168, 1e-12);
  EXPECT_NEAR(ring_collective_s(1e9, 8, 12.5e9, 12e-6, true), 0.070084, 1e-12);
  EXPECT_EQ(ring_collective_s(1e9, 1, 1e9, 1e-6), 0.0);
  EXPECT_EQ(ring_steps(24, false), 46);
  EXPECT_EQ(ring_steps(24, true), 23);
  EXPECT_EQ(ring_steps(1, false), 0);
}

TEST(SimCollectives, AutoIsNcclsModelForEveryGroup) {
  EXPECT_EQ(collective_algorithm("auto"), CollAlgo::Analytic);
  EXPECT_EQ(collective_algorithm("ring"), CollAlgo::Ring);
  EXPECT_EQ(collective_algorithm("aggregate"), CollAlgo::Aggregate);
  EXPECT_EQ(collective_algorithm("analytic"), CollAlgo::Analytic);
  EXPECT_THROW(collective_algorithm("tree"), std::invalid_argument);
}

// Random completion orders: every comm (k, i) starts only after comm (k-1, i-1) and comm (k-1, i), each
// rank sends exactly `steps` chunks, and the collective ends exactly when the last comm does.
TEST(SimCollectives, RingProgressRespectsStepDependencies) {
  for (int n : {2, 3, 5, 8}) {
    for (unsigned seed = 1; seed <= 20; seed++) {
      const int rings = 1 + seed % 3;
      const std::uint32_t steps = 2 * (n - 1) * (1 + seed % 2);
      RingProgress rp;
      rp.reset(rings, n, steps);
      std::vector<std::uint32_t> done(rings * n, 0), in_flight;
      rp.start(in_flight);
      ASSERT_EQ(in_flight.size(), static_cast<std::size_t>(rings * n));
      std::mt19937 rng(seed);
      std::size_t comms = in_flight.size();
      while (!in_flight.empty()) {
        ASSERT_FALSE(rp.done());
        const std::size_t pick = rng() % in_flight.size();
        const std::uint32_t pos = in_flight[pick];
        in_flight.erase(in_flight.begin() + pick);
        done[pos]++;
        std::uint32_t next[2];
        const int k = rp.finish(pos, next);
        for (int j = 0; j < k; j++) {
          const std::uint32_t q = next[j];
          const std::uint32_t step = rp.current_step(q);
          const std::uint32_t prev = q % n == 0 ? q + n - 1 : q - 1;
          EXPECT_EQ(done[q], step) << "rank's own previous send must be done";
          EXPECT_GE(done[prev], step) << "data of the previous step must have arrived";
          in_flight.push_back(q);
          comms++;
        }
      }
      EXPECT_TRUE(rp.done());
      EXPECT_EQ(comms, static_cast<std::size_t>(rings) * n * steps);
      for (std::uint32_t d : done) EXPECT_EQ(d, steps);
    }
  }
}

int weakest_hop(const std::vector<std::int32_t>& ring, bool cycle) {
  int mn = 99;
  for (std::size_t i = 0; i + (cycle ? 0 : 1) < ring.size(); i++)
    mn = std::min(mn, cube_mesh_links(ring[i] % 8, ring[(i + 1) % ring.size()] % 8));
  return mn;
}

TEST(SimCollectives, CubeMeshRingsFollowNvlinkLikeNccl) {
  // A whole node in rank order crosses two SYS pairs (3-4, 7-0); the all-NV2 cycle exists.
  const std::vector<std::int32_t> node = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(weakest_hop(node, true), 0);
  const auto r = nvlink_ring_order(node, 8, cube_mesh_links);
  EXPECT_EQ(r.front(), 0);
  EXPECT_TRUE(std::is_permutation(r.begin(), r.end(), node.begin()));
  EXPECT_EQ(weakest_hop(r, true), 2) << "expected an all-NV2 cycle such as 0-3-2-1-5-6-7-4";
  // Two nodes: each node's run becomes an NVLink path and stays on its node.
  std::vector<std::int32_t> two(16);
  for (int i = 0; i < 16; i++) two[i] = i;
  const auto t = nvlink_ring_order(two, 8, cube_mesh_links);
  for (int i = 0; i < 16; i++) EXPECT_EQ(t[i] / 8, i / 8);
  EXPECT_GE(weakest_hop(std::vector<std::int32_t>(t.begin(), t.begin() + 8), false), 1);
  EXPECT_GE(weakest_hop(std::vector<std::int32_t>(t.begin() + 8, t.end()), false), 1);
  // Unchanged: a node visited twice, rings of 2, runs of 2.
  const std::vector<std::int32_t> twice = {0, 5, 8, 9, 3, 4};
  EXPECT_EQ(nvlink_ring_order(twice, 8, cube_mesh_links), twice);
  EXPECT_EQ(nvlink_ring_order({0, 5}, 8, cube_mesh_links), (std::vector<std::int32_t>{0, 5}));
  EXPECT_EQ(nvlink_ring_order({0, 5, 8, 13}, 8, cube_mesh_links), (std::vector<std::int32_t>{0, 5, 8, 13}));
}

// ---------------------------------------------------------------- in process: deadlock message, cube mesh

TEST(SimDeadlock, MessageNamesStuckNodesAndTheirWaits) {
  Dag d;
  d.nodes.resize(4);
  // 0 -> 1 -> 2 -> 1 (cycle), 2 -> 3
  d.succ_begin = {0, 1, 2, 4, 4};
  d.succ = {1, 2, 1, 3};
  d.preds = {0, 2, 1, 1};
  std::vector<NodeTiming> t(4);
  t[0] = {0.0, 1.0};
  const std::string msg = deadlock_message(d, t, [](std::uint32_t i) { return "op" + std::to_string(i); });
  EXPECT_NE(msg.find("3 of 4 DAG nodes never completed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op1 (waiting for 1 of 2 predecessors)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op3 (waiting for 1 of 1 predecessors)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("op0"), std::string::npos) << msg;
}

TEST(SimDeadlock, ListsAtMostTenNodes) {
  Dag d;
  d.nodes.resize(30);
  d.succ_begin.assign(31, 0);
  d.preds.assign(30, 1);
  std::vector<NodeTiming> t(30);
  const std::string msg = deadlock_message(d, t, {});
  EXPECT_NE(msg.find("node 9 "), std::string::npos);
  EXPECT_EQ(msg.find("node 10 "), std::string::npos);
  EXPECT_NE(msg.find(", ..."), std::string::npos);
}

TEST(SimPlatform, CubeMeshMatrixIsTheP3Topology) {
  for (int a = 0; a < 8; a++) {
    int links = 0, peers = 0, nv2 = 0;
    for (int b = 0; b < 8; b++) {
      EXPECT_EQ(cube_mesh_links(a, b), cube_mesh_links(b, a));
      links += cube_mesh_links(a, b);
      peers += cube_mesh_links(a, b) > 0;
      nv2 += cube_mesh_links(a, b) == 2;
    }
    EXPECT_EQ(links, 6) << "every V100 has 6 NVLink links";
    EXPECT_EQ(peers, 4);
    EXPECT_EQ(nv2, 2);
  }
  EXPECT_EQ(cube_mesh_links(0, 5), 0);  // docs/calibration.md: GPU0 -> GPU5 has no NVLink
  EXPECT_EQ(cube_mesh_links(0, 3), 2);
  EXPECT_EQ(cube_mesh_links(0, 1), 1);
  EXPECT_THROW(cube_mesh_links(0, 8), std::out_of_range);
}

// ---------------------------------------------------------------- subprocess: routes

// route<a>_<b>=latency bandwidth names...
std::pair<double, double> route(const Proc& r, int a, int b) {
  std::istringstream is(r.kv.at("route" + std::to_string(a) + "_" + std::to_string(b)));
  std::pair<double, double> p;
  is >> p.first >> p.second;
  return p;
}

TEST(SimPlatform, NvSwitchStarRoutes) {
  const Proc r =
      ok("routes --nodes=2 --gpn=8 --nvlink-bw=150e9 --nvlink-lat=1e-6 --nic-bw=12.5e9 --nic-lat=5e-6 "
         "--pairs=0:1,0:8,15:0");
  EXPECT_EQ(r.num("hosts"), 16);
  EXPECT_DOUBLE_EQ(route(r, 0, 1).first, 2e-6);  // two NVLink ports
  EXPECT_DOUBLE_EQ(route(r, 0, 1).second, 150e9);
  EXPECT_DOUBLE_EQ(route(r, 0, 8).first, 12e-6);  // + two NIC ports
  EXPECT_DOUBLE_EQ(route(r, 0, 8).second, 12.5e9);
  EXPECT_NE(r.kv.at("route0_8").find("node0-gpu0-nvl_UP node0-nic0_UP node1-nic0_DOWN node1-gpu0-nvl_DOWN"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.kv.at("route15_0").find("node1-nic0_UP node0-nic0_DOWN"), std::string::npos) << r.out;
  // 8 NICs: each GPU has its own (GPU i -> NIC i mod 8), one NIC's bandwidth per flow.
  const Proc r8 = ok("routes --nodes=2 --gpn=8 --nics=8 --nic-bw=25e9 --pairs=0:8,3:12,11:2");
  EXPECT_DOUBLE_EQ(route(r8, 0, 8).second, 25e9);
  EXPECT_NE(r8.kv.at("route3_12").find("node0-nic3_UP node1-nic4_DOWN"), std::string::npos) << r8.out;
  EXPECT_NE(r8.kv.at("route11_2").find("node1-nic3_UP node0-nic2_DOWN"), std::string::npos) << r8.out;
}

TEST(SimPlatform, CubeMeshRoutesFollowTheNvlinkMatrix) {
  const Proc r =
      ok("routes --nodes=2 --gpn=8 --fabric=cubemesh --nvlink-bw=25e9 --nvlink-lat=1e-6 --pcie-bw=10e9 "
         "--pcie-lat=2e-6 --nic-bw=3.125e9 --nic-lat=5e-6 --pairs=0:1,1:0,0:3,0:5,5:0,6:1,0:8");
  EXPECT_DOUBLE_EQ(route(r, 0, 1).second, 25e9);  // NV1
  EXPECT_DOUBLE_EQ(route(r, 0, 1).first, 2e-6);
  EXPECT_DOUBLE_EQ(route(r, 1, 0).second, 25e9);
  EXPECT_DOUBLE_EQ(route(r, 0, 3).second, 50e9);  // NV2
  EXPECT_DOUBLE_EQ(route(r, 0, 5).second, 10e9);  // SYS: PCIe + host bridge
  EXPECT_DOUBLE_EQ(route(r, 0, 5).first, 4e-6);
  EXPECT_NE(r.kv.at("route0_5").find("node0-gpu0-pcie_UP node0-bridge node0-gpu5-pcie_DOWN"), std::string::npos);
  EXPECT_NE(r.kv.at("route6_1").find("node0-bridge"), std::string::npos);
  EXPECT_DOUBLE_EQ(route(r, 0, 8).second, 3.125e9);  // 25 Gbps NIC
  EXPECT_DOUBLE_EQ(route(r, 0, 8).first, 2e-6 + 2e-6 + 10e-6);
  // Direct pairs use distinct directions of their link.
  EXPECT_NE(r.kv.at("route0_1").find("node0-gpu0-nv-1_UP"), std::string::npos);
  EXPECT_NE(r.kv.at("route1_0").find("node0-gpu0-nv-1_DOWN"), std::string::npos);
}

TEST(SimPlatform, PcieNodesShareOneHostBridge) {
  const Proc r = ok("routes --nodes=1 --gpn=4 --fabric=pcie --pcie-bw=12e9 --pcie-lat=1e-6 --pairs=0:1,2:3");
  EXPECT_DOUBLE_EQ(route(r, 0, 1).second, 12e9);
  EXPECT_NE(r.kv.at("route2_3").find("node0-bridge"), std::string::npos);
}

TEST(SimPlatform, FatTreeScalesTo384Nodes) {
  const Proc r =
      ok("routes --nodes=384 --gpn=8 --topology=fattree --nics=8 --nic-bw=25e9 --nvlink-bw=300e9 "
         "--pairs=0:3071,0:8,17:400");
  EXPECT_EQ(r.num("hosts"), 3072);
  EXPECT_LT(r.num("build_s"), 10.0);
  EXPECT_DOUBLE_EQ(route(r, 0, 3071).second, 25e9);  // one NIC
  EXPECT_DOUBLE_EQ(route(r, 0, 3071).first, 12e-6);  // fabric links add no latency
  EXPECT_NE(r.kv.at("route0_3071").find("node0-nic0_UP leaf0-up_UP leaf11-up_DOWN node383-nic7_DOWN"),
            std::string::npos)
      << r.out;  // 32 nodes per leaf by default, uplink = 32 nodes x 8 NICs
  for (int nodes : {1, 3, 7, 48}) {
    const Proc s = ok("routes --topology=fattree --gpn=2 --nodes=" + std::to_string(nodes) +
                      " --pairs=0:" + std::to_string(2 * nodes - 1));
    EXPECT_EQ(s.num("hosts"), 2 * nodes);
  }
}

// Per-NIC links: GPU i sends through NIC i mod nics. Two 12.5 GB/s NICs are not one 25 GB/s NIC: one flow gets
// one NIC, and two GPUs on the same NIC share it, while two GPUs on different NICs each have their own.
TEST(SimNetwork, PerNicLinksMatterWhenNicsAreTheBottleneck) {
  auto t = [](const std::string& args) { return ok("flows --nodes=2 --gpn=8 " + args).num("iteration_s"); };
  const double alpha = 12e-6;
  EXPECT_NEAR(t("--nics=1 --nic-bw=25e9 --flows=0:8:1e9"), alpha + 0.04, 1e-9);
  EXPECT_NEAR(t("--nics=2 --nic-bw=12.5e9 --flows=0:8:1e9"), alpha + 0.08, 1e-9);
  EXPECT_NEAR(t("--nics=2 --nic-bw=12.5e9 --flows=0:8:1e9,1:9:1e9"), alpha + 0.08, 1e-9);   // NICs 0 and 1
  EXPECT_NEAR(t("--nics=2 --nic-bw=12.5e9 --flows=0:8:1e9,2:10:1e9"), alpha + 0.16, 1e-9);  // both on NIC 0
  EXPECT_NEAR(t("--nics=1 --nic-bw=25e9 --flows=0:8:1e9,2:10:1e9"), alpha + 0.08, 1e-9);
}

// A data-parallel all-reduce (8 rings of 4 GPUs, one per GPU index, 4 nodes of 8 GPUs and 8 NICs): full
// bisection fat tree = star = rail within a rail; an oversubscribed tree (R = 4, one node per leaf) and
// cross-rail rings on an oversubscribed rail fabric take the spine and run R times longer (bandwidth term).
TEST(SimNetwork, TopologiesOrderAsBuiltOnADataParallelAllReduce) {
  std::string same_rail, cross_rail;
  for (int k = 0; k < 8; k++) {
    same_rail += (k ? "/" : "") + std::to_string(k) + "," + std::to_string(8 + k) + "," + std::to_string(16 + k) + "," +
                 std::to_string(24 + k);
    cross_rail += (k ? "/" : "") + std::to_string(k) + "," + std::to_string(8 + (k + 1) % 8) + "," +
                  std::to_string(16 + (k + 2) % 8) + "," + std::to_string(24 + (k + 3) % 8);
  }
  auto t = [](const std::string& args) {
    return ok("ring --nodes=4 --gpn=8 --nics=8 --nic-bw=25e9 --nvlink-bw=450e9 --bytes=1e9 " + args).num("iteration_s");
  };
  const double alpha = 6 * 12e-6, beta = 6 * (1e9 / 4) / 25e9;  // 2(n-1) steps of S/n at one NIC
  const double star = t("--topology=star --rings=" + same_rail);
  EXPECT_NEAR(star, alpha + beta, 1e-9);
  EXPECT_EQ(t("--topology=fattree --npl=1 --rings=" + same_rail), star);
  EXPECT_EQ(t("--topology=rail --npl=4 --oversub=4 --rings=" + same_rail), star);  // never leaves its rail leaf
  EXPECT_EQ(t("--topology=rail --npl=4 --rings=" + cross_rail), star);             // spine at full bisection
  EXPECT_NEAR(t("--topology=fattree --npl=1 --oversub=4 --rings=" + same_rail), alpha + 4 * beta, 1e-9);
  EXPECT_NEAR(t("--topology=rail --npl=4 --oversub=4 --rings=" + cross_rail), alpha + 4 * beta, 1e-9);
  // Two nodes per leaf: half of the ring hops stay under their leaf; the leaf's uplink carries 8 flows at R = 4.
  EXPECT_NEAR(t("--topology=fattree --npl=2 --oversub=4 --rings=" + same_rail), alpha + 2 * beta, 1e-9);
}

TEST(SimNetwork, BadTopologyIsRejectedBeforeSimGrid) {
  const Proc r = runner("flows --nodes=3 --topology=fattree --npl=2 --flows=0:9:1e6");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("nodes = 3 is not a multiple of nodes_per_leaf = 2"), std::string::npos) << r.out;
  const Proc o = runner("flows --nodes=2 --topology=rail --oversub=0 --flows=0:9:1e6");
  EXPECT_EQ(o.rc, 3);
  EXPECT_NE(o.out.find("oversubscription must be > 0"), std::string::npos) << o.out;
}

TEST(SimPlatform, BadClusterIsRejectedBeforeSimGrid) {
  const Proc r = runner("flows --fabric=cubemesh --gpn=16 --flows=0:1:1e6");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("cube mesh supports at most 8 GPUs per node"), std::string::npos) << r.out;
  const Proc z = runner("flows --nodes=2 --nic-bw=0 --flows=0:9:1e6");
  EXPECT_EQ(z.rc, 3);
  EXPECT_NE(z.out.find("nic bandwidth must be > 0"), std::string::npos) << z.out;
}

// ---------------------------------------------------------------- subprocess: alpha-beta flows

TEST(SimFlows, SingleFlowIsLatencyPlusSizeOverBottleneck) {
  const Proc intra = ok("flows --nodes=1 --gpn=8 --flows=0:1:1e9");
  EXPECT_NEAR(intra.num("iteration_s"), 2e-6 + 1e9 / 150e9, 1e-9);
  const Proc inter = ok("flows --nodes=2 --gpn=8 --flows=0:8:1e9");
  EXPECT_NEAR(inter.num("iteration_s"), 12e-6 + 1e9 / 12.5e9, 1e-9);
  const Proc sys =
      ok("flows --nodes=1 --gpn=8 --fabric=cubemesh --nvlink-bw=25e9 --pcie-bw=10e9 --pcie-lat=2e-6 "
         "--flows=0:5:1e9,1:2:1e9");
  EXPECT_NEAR(sys.node(0).second, 4e-6 + 1e9 / 10e9, 1e-9);  // SYS pair over PCIe
  EXPECT_NEAR(sys.node(1).second, 2e-6 + 1e9 / 50e9, 1e-9);  // NV2 pair
  EXPECT_EQ(inter.num("activities"), 1);
}

TEST(SimFlows, TwoFlowsSharingANicTakeTwiceAsLong) {
  const Proc shared = ok("flows --nodes=2 --gpn=8 --flows=0:8:1e9,1:9:1e9");
  EXPECT_NEAR(shared.node(0).second, 12e-6 + 2e9 / 12.5e9, 1e-9);
  EXPECT_NEAR(shared.node(1).second, 12e-6 + 2e9 / 12.5e9, 1e-9);
  // Opposite directions use the two halves of the split-duplex NIC: no contention.
  const Proc duplex = ok("flows --nodes=2 --gpn=8 --flows=0:8:1e9,9:1:1e9");
  EXPECT_NEAR(duplex.node(0).second, 12e-6 + 1e9 / 12.5e9, 1e-9);
  EXPECT_NEAR(duplex.node(1).second, 12e-6 + 1e9 / 12.5e9, 1e-9);
}

TEST(SimFlows, TransfersBetweenOneGpuPairRunInIssueOrder) {
  const double one = 12e-6 + 1e9 / 12.5e9;
  const Proc fifo = ok("flows --nodes=2 --gpn=8 --flows=0:8:1e9,0:8:1e9");
  EXPECT_NEAR(fifo.node(0).second, one, 1e-9);
  EXPECT_NEAR(fifo.node(1).first, one, 1e-9);  // starts when the first is done
  EXPECT_NEAR(fifo.node(1).second, 2 * one, 1e-9);
  const Proc shared = ok("flows --nodes=2 --gpn=8 --flows=0:8:1e9,0:8:1e9 --fifo=0");
  EXPECT_NEAR(shared.node(0).second, 12e-6 + 2e9 / 12.5e9, 1e-9);
  EXPECT_NEAR(shared.node(1).second, 12e-6 + 2e9 / 12.5e9, 1e-9);
}

TEST(SimFlows, TensorParallelTransfersRunOneFlowPerLane) {
  // Workers of 4 TP GPUs on two nodes: one transfer = 4 parallel flows through the same NIC.
  const Proc r = ok("flows --nodes=2 --gpn=8 --flows=0:8:1e9 --lanes=0,1,2,3/8,9,10,11");
  EXPECT_NEAR(r.num("iteration_s"), 12e-6 + 4e9 / 12.5e9, 1e-9);
  EXPECT_EQ(r.num("activities"), 4);
  // Inside a node every lane has its own NVLink ports: no slowdown.
  const Proc n = ok("flows --nodes=1 --gpn=8 --flows=0:4:1e9 --lanes=0,1,2,3/4,5,6,7");
  EXPECT_NEAR(n.num("iteration_s"), 2e-6 + 1e9 / 150e9, 1e-9);
}

TEST(SimFlows, EmptyAndLocalTransfersAreFree) {
  const Proc r = ok("flows --nodes=1 --gpn=2 --flows=0:1:0,1:1:1e9");
  EXPECT_EQ(r.num("iteration_s"), 0.0);
  EXPECT_EQ(r.num("activities"), 0);
}

// ---------------------------------------------------------------- subprocess: collectives

TEST(SimRing, TwoGpusOverNvlinkMatchTheSpec) {
  for (const char* compute : {"exec", "timer"}) {
    const Proc r =
        ok(std::string("ring --nodes=1 --gpn=2 --nvlink-lat=0 --rings=0,1 --bytes=1e9 --compute=") + compute);
    EXPECT_NEAR(r.num("iteration_s"), 2 * 0.5e9 / 150e9, 1e-9);
    EXPECT_EQ(r.num("activities"), 4);  // 2(n-1) steps x n comms
  }
}

TEST(SimRing, EightRanksOnTwoNodesMatchTheSpecForEveryAlgorithm) {
  const std::string base = "ring --nodes=2 --gpn=4 --rings=0,1,2,3,4,5,6,7 --bytes=1e9 ";
  for (const char* algo : {"ring", "aggregate"}) {
    const Proc r = ok(base + "--collectives=" + algo);
    EXPECT_NEAR(r.num("iteration_s"), 0.140168, 1e-9) << algo;  // 14 x (12 us + 125 MB / 12.5 GB/s)
  }
  // NCCL's model (core/cost/nccl_model.h): Simple ring at 92% of the node's one NIC, latency 8.4 + 12 x 3.4 (NVLink
  // hops) + 2 x 14 (network hops) us.
  const double nccl = 1.75e9 / (0.92 * 12.5e9) + 77.2e-6;
  EXPECT_NEAR(ok(base + "--collectives=analytic").num("iteration_s"), nccl, 1e-9);
  EXPECT_EQ(ok(base + "--collectives=ring").num("activities"), 8 * 14);
  EXPECT_EQ(ok(base + "--collectives=aggregate").num("activities"), 8 + 1);
  EXPECT_EQ(ok(base + "--collectives=analytic").num("activities"), 1);
  EXPECT_NEAR(ok(base + "--allgather").num("iteration_s"), 0.070084, 1e-9);
  EXPECT_NEAR(ok(base + "--count=3").num("iteration_s"), 3 * 0.140168, 1e-9);
  EXPECT_NEAR(ok(base + "--count=3 --collectives=analytic").num("iteration_s"), 3 * nccl, 1e-9);
}

TEST(SimRing, CubeMeshNodeRingRunsOverNvlink) {
  // Rank order 0..7 would cross the PCIe bridge twice; the engine runs the all-NV2 cycle instead.
  const std::string base =
      "ring --nodes=1 --gpn=8 --fabric=cubemesh --nvlink-bw=25e9 --nvlink-lat=1e-6 --rings=0,1,2,3,4,5,6,7 "
      "--bytes=1e9 ";
  EXPECT_NEAR(ok(base + "--collectives=ring").num("iteration_s"), 14 * (2e-6 + 125e6 / 50e9), 1e-9);
  // NCCL runs a channel per NVLink: each GPU's 6 links (150 GB/s) at 77%, Simple ring, 8.4 + 14 x 3.4 us.
  EXPECT_NEAR(ok(base + "--collectives=analytic").num("iteration_s"), 1.75e9 / (0.77 * 150e9) + 56e-6, 1e-9);
}

TEST(SimRing, RingsSharingANicContendAndAnalyticTakesItsShare) {
  // Four 2-rank rings across the same pair of nodes: each step pushes 4 chunks through one NIC direction.
  const std::string base = "ring --nodes=2 --gpn=4 --rings=0,4/1,5/2,6/3,7 --bytes=1e9 ";
  EXPECT_NEAR(ok(base).num("iteration_s"), 2 * (12e-6 + 4 * 0.5e9 / 12.5e9), 1e-9);
  // NCCL's model: one member per node of 4 GPUs gets a quarter of the NIC, at 92%; Simple, 8.4 + 2 x 14 us.
  EXPECT_NEAR(ok(base + "--collectives=analytic").num("iteration_s"), 1e9 / (0.92 * 12.5e9 / 4) + 36.4e-6, 1e-9);
}

TEST(SimRing, StartsWhenTheLastMemberArrives) {
  // Member i computes 0.5 + 0.01 i seconds before entering the collective.
  for (const char* compute : {"exec", "timer"}) {
    const Proc r = ok(std::string("ring --nodes=2 --gpn=4 --rings=0,1,2,3,4,5,6,7 --bytes=1e9 --tf=0.5 --stagger=0.01 "
                                  "--compute=") +
                      compute);
    EXPECT_NEAR(r.node(8).first, 0.57, 1e-9);
    EXPECT_NEAR(r.num("iteration_s"), 0.57 + 0.140168, 1e-9);
  }
}

TEST(SimRing, SingleGpuRingAndEmptyBufferCompleteImmediately) {
  EXPECT_EQ(ok("ring --nodes=1 --gpn=2 --rings=0/1 --bytes=1e9").num("iteration_s"), 0.0);
  EXPECT_EQ(ok("ring --nodes=1 --gpn=2 --rings=0,1 --bytes=0").num("iteration_s"), 0.0);
}

// ---------------------------------------------------------------- subprocess: failures

TEST(SimEngine, DeadlockIsReportedWithStuckNodes) {
  for (const char* compute : {"exec", "timer"}) {
    const Proc r = runner(std::string("cycle --compute=") + compute);
    EXPECT_EQ(r.rc, 3) << r.out;
    EXPECT_NE(r.out.find("simulation deadlock: 3 of 4 DAG nodes never completed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("op1 (waiting for 1 of 2 predecessors)"), std::string::npos) << r.out;
  }
}

TEST(SimEngine, SecondSimulationInOneProcessIsRefused) {
  const Proc r = runner("twice");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("one simulation per process"), std::string::npos) << r.out;
}

TEST(SimEngine, BadInputsAreRejectedBeforeSimGrid) {
  Proc r = runner("flows --nodes=1 --gpn=8 --flows=0:99:1e6");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("transfers between GPUs 0 and 99 but the cluster has 8"), std::string::npos) << r.out;
  r = runner("ring --rings=0,1/2,3,4");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("rings of unequal size"), std::string::npos) << r.out;
  r = runner("ring --rings=0,1 --collectives=tree");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("unknown algorithm 'tree'"), std::string::npos) << r.out;
  r = runner("ring --rings=0,1 --compute=gpu");
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.out.find("unknown compute mode 'gpu'"), std::string::npos) << r.out;
}

// ---------------------------------------------------------------- subprocess: whole schedules

struct Closed {
  const char* schedule;
  int p, m, v;
  double expected;  // t_f = 1, t_b = 2 (docs/papers.md#megatron)
};

TEST(SimSchedule, FreeCommunicationMatchesClosedForms) {
  const Closed cases[] = {
      {"gpipe", 4, 8, 1, 33},
      {"1f1b", 4, 8, 1, 33},
      {"1f1b", 8, 16, 1, 69},
      {"gpipe", 8, 64, 1, 213},
      {"interleaved", 4, 8, 2, 28.5},
      {"interleaved", 8, 16, 2, 58.5},
      {"interleaved", 8, 64, 4, 197.25},
  };
  for (const Closed& c : cases) {
    for (const char* compute : {"exec", "timer"}) {
      const std::string args = std::string("schedule --nodes=1 --gpn=8 --schedule=") + c.schedule +
                               " --p=" + std::to_string(c.p) + " --m=" + std::to_string(c.m) +
                               " --v=" + std::to_string(c.v) + " --tf=1 --tb=2 --compute=" + compute;
      const Proc r = ok(args);
      EXPECT_NEAR(r.num("pipeline_end_s"), c.expected, 1e-9) << args;
      EXPECT_NEAR(r.num("iteration_s"), c.expected, 1e-9) << args;
      // Every worker computes m (t_f + t_b).
      for (int w = 0; w < c.p; w++) EXPECT_NEAR(r.num("busy" + std::to_string(w)), c.m * 3.0, 1e-9) << args;
    }
  }
}

TEST(SimSchedule, DataParallelReplicasAndRingAllReduce) {
  // 2 replicas of a 4-stage 1F1B pipeline on 8 GPUs of one node, 1 GB of gradients per GPU.
  const std::string base = "schedule --nodes=1 --gpn=8 --nvlink-lat=0 --schedule=1f1b --p=4 --m=8 --dp=2 --tf=1 --tb=2";
  const Proc r = ok(base + " --grad-bytes=1e9");
  EXPECT_NEAR(r.num("pipeline_end_s"), 33.0, 1e-9);
  // The last stage to finish its backwards is rank 0 at 33; its 2-rank ring then takes 2 x 0.5 GB / 150 GB/s.
  EXPECT_NEAR(r.num("iteration_s"), 33.0 + 2 * 0.5e9 / 150e9, 1e-9);
}

TEST(SimSchedule, GpipeWithActivationsAddsTwoHopsPerStageBoundary) {
  // GPipe's critical path crosses every stage boundary once forward and once backward.
  const double hop = 2e-6 + 1e7 / 150e9;
  const Proc r = ok("schedule --nodes=1 --gpn=8 --schedule=gpipe --p=4 --m=8 --tf=0.01 --tb=0.02 --p2p-bytes=1e7");
  EXPECT_NEAR(r.num("pipeline_end_s"), 11 * 0.03 + 2 * 3 * hop, 1e-9);
}

TEST(SimSchedule, ExecAndTimerComputeGiveIdenticalResults) {
  const std::string base =
      "schedule --nodes=2 --gpn=4 --schedule=1f1b --p=4 --m=8 --dp=2 --tf=0.01 --tb=0.02 "
      "--p2p-bytes=3e7 --grad-bytes=2e9 --opt=0.005 --compute=";
  const Proc a = ok(base + "exec"), b = ok(base + "timer");
  EXPECT_NEAR(a.num("iteration_s"), b.num("iteration_s"), 1e-9);
  EXPECT_NEAR(a.num("pipeline_end_s"), b.num("pipeline_end_s"), 1e-9);
  for (int w = 0; w < 8; w++) EXPECT_NEAR(a.num("busy" + std::to_string(w)), b.num("busy" + std::to_string(w)), 1e-9);
}

TEST(SimSchedule, JsonAndTraceAreByteIdenticalAcrossRuns) {
  const std::string base =
      "schedule --nodes=2 --gpn=4 --schedule=1f1b --p=4 --m=8 --dp=2 --tf=0.01 --tb=0.02 "
      "--p2p-bytes=3e7 --grad-bytes=2e9 --opt=0.005";
  ok(base + " --json=" + tmp("a.json") + " --trace=" + tmp("a.trace.json"));
  ok(base + " --json=" + tmp("b.json") + " --trace=" + tmp("b.trace.json"));
  const std::string ja = slurp(tmp("a.json")), ta = slurp(tmp("a.trace.json"));
  ASSERT_FALSE(ja.empty());
  ASSERT_FALSE(ta.empty());
  EXPECT_EQ(ja, slurp(tmp("b.json")));
  EXPECT_EQ(ta, slurp(tmp("b.trace.json")));

  const Proc table = ok(base + " --table");
  EXPECT_NE(table.out.find("iteration time          " + table.kv.at("iteration_s").substr(0, 11) + " s"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("pipeline bubble         "), std::string::npos);
  EXPECT_NE(table.out.find("time breakdown (mean over 8 workers)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("fits on every rank"), std::string::npos) << table.out;

  const auto report = nlohmann::json::parse(ja);
  EXPECT_EQ(report["schedule"], "1f1b");
  EXPECT_EQ(report["gpus"], 8);
  EXPECT_GT(report["iteration_s"].get<double>(), report["pipeline_end_s"].get<double>());
  EXPECT_EQ(report["workers"].size(), 8u);
  EXPECT_TRUE(report.contains("memory"));

  const auto trace = nlohmann::json::parse(ta);
  int compute = 0, p2p = 0, coll = 0, names = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names++;
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["cat"] == "compute") compute++;
    if (e["cat"] == "p2p") p2p++;
    if (e["cat"] == "collective") coll++;
  }
  EXPECT_EQ(compute, 2 * 4 * 8 * 2 + 8);  // dp x p x m x (F, B) + one optimizer step per worker
  EXPECT_EQ(p2p, 2 * 2 * 3 * 8 * 2);      // (send, receive) x dp x (p - 1) boundaries x m x (activation, gradient)
  EXPECT_EQ(coll, 4 * 2);                 // one DP all-reduce per stage, shown on both replicas' GPUs
  EXPECT_GE(names, 8);
}

// ---------------------------------------------------------------- replica folding

// Whole-node workers (tp = GPUs per node) on a fat tree: the replicas are translates of each other, so the
// engine simulates replica 0 only (fewer activities) and must give byte-identical reports and traces.
TEST(SimFold, FoldedReplicasGiveByteIdenticalReportsAndTraces) {
  const std::string cases[] = {
      // dp 2, interleaved, scatter/gather, tensor-parallel rings, data-parallel ring all-reduce
      "schedule --nodes=8 --gpn=2 --topology=fattree --nic-bw=25e9 --tp=2 --dp=2 --p=4 --m=8 --v=2 "
      "--schedule=interleaved --sg --tf=0.01 --tb=0.02 --p2p-bytes=2e7 --grad-bytes=3e8 --tp-bytes=1e7 --tp-calls=2 "
      "--opt=0.001",
      // dp 3 (a ring of three replicas), 1F1B, star fabric
      "schedule --nodes=12 --gpn=2 --tp=2 --dp=3 --p=4 --m=8 --schedule=1f1b --tf=0.01 --tb=0.02 --p2p-bytes=2e7 "
      "--grad-bytes=3e8 --opt=0.001",
      // no gradients to reduce (the replicas meet at a zero-byte collective), blocking sends
      "schedule --nodes=12 --gpn=2 --tp=2 --dp=3 --p=4 --m=8 --schedule=gpipe --tf=0.01 --tb=0.02 --p2p-bytes=2e7 "
      "--opt=0.001 --blocking",
  };
  for (const std::string& base : cases)
    for (const char* algo : {"ring", "aggregate", "analytic"})
      for (const char* compute : {"timer", "exec"}) {
        const std::string args = base + " --collectives=" + algo + " --compute=" + compute;
        const Proc full = ok(args + " --fold=0 --json=" + tmp("full.json") + " --trace=" + tmp("full.trace.json"));
        const Proc fold = ok(args + " --fold=1 --json=" + tmp("fold.json") + " --trace=" + tmp("fold.trace.json"));
        EXPECT_LT(fold.num("activities"), full.num("activities")) << args << ": the replicas were not folded";
        EXPECT_EQ(full.kv.at("iteration_s"), fold.kv.at("iteration_s")) << args;
        EXPECT_EQ(full.num("completed"), fold.num("completed")) << args;
        const std::string ja = slurp(tmp("full.json")), ta = slurp(tmp("full.trace.json"));
        ASSERT_FALSE(ja.empty());
        EXPECT_EQ(ja, slurp(tmp("fold.json"))) << args;
        EXPECT_EQ(ta, slurp(tmp("fold.trace.json"))) << args;
      }
}

// 36 one-GPU nodes on a 3-leaf fat tree, 4 stages x 9 replicas: some spine ports carry flows of different
// nodes (a backward hop of stage 1, a forward hop of stage 2). Folding is exact only if those flows never
// overlap; the folded run's times decide, and the full run follows when they do overlap. Either way the
// output is the full run's.
// Leaf uplinks carry flows of many nodes. At full bisection (R = 1) an uplink has the bandwidth of all NICs
// below it, so it never binds and the replicas fold; oversubscribed (R = 12: one NIC's bandwidth for 12 nodes)
// it does bind, and the fold must refuse (or its temporal check fail): full run. Same bytes either way.
TEST(SimFold, LeafUplinksFoldAtFullBisectionAndRefuseWhenOversubscribed) {
  const std::string base =
      "schedule --nodes=36 --gpn=1 --topology=fattree --npl=12 --nic-bw=25e9 --tp=1 --dp=9 --p=4 --m=8 "
      "--schedule=1f1b --tf=0.01 --tb=0.02 --grad-bytes=3e8 --compute=timer --collectives=ring --p2p-bytes=2e7";
  double t_full_bisection = 0;
  for (const char* oversub : {"1", "12"}) {
    const std::string args = base + " --oversub=" + oversub;
    const Proc full = ok(args + " --fold=0 --json=" + tmp("full.json") + " --trace=" + tmp("full.trace.json"));
    const Proc fold = ok(args + " --fold=1 --json=" + tmp("fold.json") + " --trace=" + tmp("fold.trace.json"));
    if (std::string(oversub) == "1") {
      EXPECT_LT(fold.num("activities"), full.num("activities")) << args << ": uplinks never bind: folded";
      t_full_bisection = full.num("iteration_s");
    } else {
      EXPECT_EQ(fold.num("activities"), full.num("activities")) << args << ": uplinks bind: full run";
      EXPECT_GT(full.num("iteration_s"), t_full_bisection * 1.02) << args;
    }
    EXPECT_EQ(full.kv.at("iteration_s"), fold.kv.at("iteration_s")) << args;
    EXPECT_EQ(slurp(tmp("full.json")), slurp(tmp("fold.json"))) << args;
    EXPECT_EQ(slurp(tmp("full.trace.json")), slurp(tmp("fold.trace.json"))) << args;
  }
}

// Replicas sharing a node (tp < GPUs per node) share its NIC: folding is refused, results are unchanged.
TEST(SimFold, ReplicasSharingANodeAreNotFolded) {
  const std::string base =
      "schedule --nodes=2 --gpn=4 --tp=1 --dp=2 --p=4 --m=8 --schedule=1f1b --tf=0.01 --tb=0.02 --p2p-bytes=3e7 "
      "--grad-bytes=2e9 --opt=0.005 --compute=timer";
  const Proc full = ok(base + " --fold=0"), fold = ok(base + " --fold=1");
  EXPECT_EQ(full.num("activities"), fold.num("activities"));
  EXPECT_EQ(full.kv.at("iteration_s"), fold.kv.at("iteration_s"));
}

// ---------------------------------------------------------------- blocking sends (Megatron-LM p2p)

TEST(SimBlockingSends, NextOpWaitsForEverySendPostedBeforeIt) {
  ConstantCosts cc;
  cc.forward_s = 1;
  cc.backward_s = 2;
  cc.p2p_bytes = 1e6;
  const ConstantCostModel cost(cc);
  LoweredSchedule ls = lower(make_1f1b(3, uniform_microbatches(4, 1, 1, 1), 1), 1, 1, cost);
  ClusterSpec c;
  c.nodes = 1;
  c.gpus_per_node = 3;
  const Placement pl = make_placement("megatron", 1, 3, 1, c);
  const Dag overlapped = check(ls, pl).dag();
  ls.blocking_sends = true;
  const Dag blocking = check(ls, pl).dag();
  ASSERT_EQ(overlapped.size(), blocking.size());
  auto has_edge = [](const Dag& d, std::int32_t from, std::int32_t to) {
    for (std::uint32_t e = d.succ_begin[from]; e < d.succ_begin[from + 1]; e++)
      if (d.succ[e] == static_cast<std::uint32_t>(to)) return true;
    return false;
  };
  int sends = 0;
  for (int w = 0; w < 3; w++) {
    const auto& prog = ls.per_worker[w];
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].kind != LOpKind::Send) continue;
      std::size_t j = i + 1;
      while (j < prog.size() && prog[j].kind == LOpKind::Send) j++;
      if (j == prog.size()) continue;
      // The Send's transfer node carries (worker, index); the next non-Send op now waits for it.
      std::int32_t t = -1;
      for (std::uint32_t n = 0; n < blocking.size(); n++)
        if (blocking.nodes[n].worker == w && blocking.nodes[n].index == static_cast<std::int32_t>(i)) t = n;
      ASSERT_GE(t, 0);
      EXPECT_TRUE(has_edge(blocking, t, blocking.node_of[w][j])) << lowered_op_name(ls, w, i);
      EXPECT_FALSE(has_edge(overlapped, t, overlapped.node_of[w][j])) << lowered_op_name(ls, w, i);
      sends++;
    }
  }
  EXPECT_GT(sends, 0);
  EXPECT_EQ(dry_run(blocking), blocking.size());
}

TEST(SimBlockingSends, SendersPayForTheirTransfersOnlyWhenSendsBlock) {
  const std::string base =
      "schedule --nodes=1 --gpn=8 --nvlink-lat=0 --schedule=gpipe --p=2 --m=2 --tf=1 --tb=2 --compute=timer";
  // Free communication: blocking changes nothing (GPipe closed form (m + p - 1)(t_f + t_b)).
  EXPECT_NEAR(ok(base + " --blocking").num("pipeline_end_s"), 9.0, 1e-9);
  // 1.5 GB per hop over 150 GB/s NVLink: h = 10 ms. Eager sends put two hops on the critical path (F1 to stage
  // 1, B0 back to stage 0). Blocking sends add the two the senders now wait for: stage 0 starts F1 only after
  // send(F0), stage 1 starts B0 only after send(B1).
  const double h = 1.5e9 / 150e9;
  EXPECT_NEAR(ok(base + " --p2p-bytes=1.5e9").num("pipeline_end_s"), 9.0 + 2 * h, 1e-9);
  EXPECT_NEAR(ok(base + " --p2p-bytes=1.5e9 --blocking").num("pipeline_end_s"), 9.0 + 4 * h, 1e-9);
}

TEST(SimFold, ReplicaProgramsEqualOnlyForShiftedCopies) {
  ConstantCosts cc;
  cc.forward_s = 1;
  cc.backward_s = 2;
  cc.p2p_bytes = 1e6;
  cc.grad_bytes = 1e8;
  const ConstantCostModel cost(cc);
  const Schedule s = make_1f1b(4, uniform_microbatches(8, 1, 1, 1), 1);
  LoweredSchedule ls = lower(s, 3, 1, cost);
  EXPECT_TRUE(replica_programs_equal(ls, 1));
  EXPECT_TRUE(replica_programs_equal(ls, 2));
  // Replica 2's sends and receives name replica 2's workers; a changed cost or peer breaks the equality.
  LoweredSchedule other = ls;
  other.per_worker[9][0].seconds += 1;
  EXPECT_FALSE(replica_programs_equal(other, 2));
  other = ls;
  for (auto& op : other.per_worker[4])
    if (op.peer >= 0) {
      op.peer = 1;  // replica 0's worker instead of replica 1's
      break;
    }
  EXPECT_FALSE(replica_programs_equal(other, 1));
  // The lowering's shortcut (replica 0's messages moved to the other replicas) gives what the checker accepts.
  ClusterSpec c;
  c.nodes = 3;
  c.gpus_per_node = 4;
  EXPECT_NO_THROW(check(ls, make_placement("megatron", 3, 4, 1, c)));
}

// The memory table's reserved column: the replay's figure, FRAG where only the allocator fails, and "-" for a report
// made without the replay (the search's re-simulated candidates) rather than a reserved size of 0.
TEST(SimReport, ReservedColumnShowsTheReplayOrNothing) {
  sim::Report r;
  r.pp = 2, r.dp = 1, r.tp = 1, r.v = 1, r.m = 1, r.gpus = 2;
  r.worker_busy_s = {1.0, 1.0};
  r.worker_idle_s = {0.0, 0.0};
  r.memory.device_bytes = 80e9;
  r.memory.ranks.resize(2);
  r.memory.ranks[0].peak_bytes = 10e9, r.memory.ranks[0].reserved_peak_bytes = 12.5e9;
  r.memory.ranks[1].peak_bytes = 70e9, r.memory.ranks[1].reserved_peak_bytes = 81e9;
  r.memory.ranks[1].allocator_failed = true;
  auto table = [&] {
    std::ostringstream os;
    sim::print_table(os, r);
    return os.str();
  };
  r.memory.allocator_replayed = true;
  const std::string on = table();
  EXPECT_NE(on.find("12.500"), std::string::npos) << on;
  EXPECT_NE(on.find("81.000"), std::string::npos) << on;
  EXPECT_NE(on.find("FRAG"), std::string::npos) << on;
  EXPECT_NE(on.find("caching allocator runs out"), std::string::npos) << on;
  r.memory.allocator_replayed = false;
  r.memory.ranks[1].allocator_failed = false;
  const std::string off = table();
  EXPECT_EQ(off.find("12.500"), std::string::npos) << off;
  // Rank 0's row: rank, busy min / max, idle max, peak, activations, reserved, in flight, oom.
  std::istringstream rows(off.substr(off.find("\n     0 ")));
  std::vector<std::string> f(9);
  for (std::string& x : f) rows >> x;
  EXPECT_EQ(f[4], "10.000");
  EXPECT_EQ(f[6], "-") << off;
  EXPECT_NE(off.find("fits on every rank"), std::string::npos) << off;
}

}  // namespace
