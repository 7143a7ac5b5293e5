// Test-only driver for the SimGrid engine: every simulation test runs one of these in a subprocess
// (SimGrid allows one Engine per process and aborts on misuse). Prints `key=value` lines on stdout;
// errors go to stderr with exit code 3.
//
//   sim_runner routes   CLUSTER --pairs=a:b,c:d          route latency/bandwidth/links between GPUs
//   sim_runner flows    CLUSTER --flows=a:b:bytes,... [--lanes=0,1/8,9]  concurrent transfers (bare DAG)
//   sim_runner ring     CLUSTER --rings=0,1,2/3,4,5 --bytes=S [--count=c] [--allgather] [--collectives=...]
//   sim_runner cycle    CLUSTER                          a cyclic DAG (deadlock diagnostic)
//   sim_runner twice    CLUSTER                          simulate twice in one process (must throw)
//   sim_runner schedule CLUSTER --schedule=gpipe|1f1b|interleaved --p --m [--v --dp --tp --tf --tb
//                       --p2p-bytes --grad-bytes --opt --tp-bytes --tp-calls --sg --blocking --layout --json=F
//                       --trace=F]
// CLUSTER: --nodes --gpn --fabric=nvswitch|cubemesh|pcie --topology=star|fattree|rail --nvlink-bw --nvlink-lat
//          --pcie-bw --pcie-lat --nic-bw --nic-lat --nics (SI units), --compute=exec|timer, --fifo=0|1,
//          --fold=0|1 (replica folding), --npl (nodes per leaf), --oversub (leaf oversubscription R).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <simgrid/s4u.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "core/model/schedule_registry.h"
#include "sim/engine.h"
#include "sim/platform.h"
#include "sim/report.h"

using namespace pipescope;

namespace {

struct Args {
  std::string mode;
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string str(const std::string& k, const std::string& d) const { return has(k) ? kv.at(k) : d; }
  double num(const std::string& k, double d) const { return has(k) ? std::stod(kv.at(k)) : d; }
  int integer(const std::string& k, int d) const { return has(k) ? std::stoi(kv.at(k)) : d; }
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw std::invalid_argument("usage: sim_runner MODE [--key=value ...]");
  a.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument " + s);
    const auto eq = s.find('=');
    a.kv[s.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "1" : s.substr(eq + 1);
  }
  return a;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, sep))
    if (!x.empty()) out.push_back(x);
  return out;
}

ClusterSpec cluster_from(const Args& a) {
  ClusterSpec c;
  c.preset = "test";
  c.nodes = a.integer("nodes", 1);
  c.gpus_per_node = a.integer("gpn", 8);
  const std::string f = a.str("fabric", "nvswitch");
  c.fabric = f == "cubemesh" ? IntraNodeFabric::CubeMesh
             : f == "pcie"   ? IntraNodeFabric::PCIe
                             : IntraNodeFabric::NVSwitch;
  const std::string t = a.str("topology", "star");
  c.topology = t == "fattree" ? InterNodeTopology::FatTree
               : t == "rail"  ? InterNodeTopology::Rail
                              : InterNodeTopology::Star;
  c.nodes_per_leaf = a.integer("npl", 0);
  c.oversubscription = a.num("oversub", 1.0);
  c.nvlink_bw_Bps = a.num("nvlink-bw", 150e9);
  c.nvlink_latency_s = a.num("nvlink-lat", 1e-6);
  c.pcie_bw_Bps = a.num("pcie-bw", 10e9);
  c.pcie_latency_s = a.num("pcie-lat", 2e-6);
  c.nic_bw_Bps = a.num("nic-bw", 12.5e9);
  c.nic_latency_s = a.num("nic-lat", 5e-6);
  c.nics_per_node = a.integer("nics", 1);
  return c;
}

sim::EngineOptions options_from(const Args& a) {
  sim::EngineOptions o;
  o.collectives = a.str("collectives", "ring");
  o.compute = a.str("compute", "exec");
  o.p2p_fifo = a.integer("fifo", 1) != 0;
  o.fold_replicas = a.integer("fold", 1) != 0;
  return o;
}

// CSR successors and predecessor counts from an edge list.
void finalize(Dag& d, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges) {
  d.succ_begin.assign(d.nodes.size() + 1, 0);
  d.preds.assign(d.nodes.size(), 0);
  for (auto [u, v] : edges) d.succ_begin[u + 1]++, d.preds[v]++;
  for (std::size_t i = 0; i < d.nodes.size(); i++) d.succ_begin[i + 1] += d.succ_begin[i];
  d.succ.assign(edges.size(), 0);
  std::vector<std::uint32_t> fill(d.succ_begin.begin(), d.succ_begin.end() - 1);
  for (auto [u, v] : edges) d.succ[fill[u]++] = v;
}

void print_result(const sim::SimResult& r) {
  std::printf("iteration_s=%.12f\npipeline_end_s=%.12f\nactivities=%zu\ncompleted=%zu\ntotal=%zu\n", r.iteration_s,
              r.pipeline_end_s, r.activities, r.completed, r.total);
  for (std::size_t i = 0; i < r.timing.size(); i++)
    std::printf("node%zu=%.12f %.12f\n", i, r.timing[i].start, r.timing[i].end);
  for (std::size_t w = 0; w < r.worker_busy_s.size(); w++) std::printf("busy%zu=%.12f\n", w, r.worker_busy_s[w]);
}

int run_routes(const Args& a) {
  const ClusterSpec c = cluster_from(a);
  std::vector<std::string> args = {"sim_runner", "--log=root.thres:warning"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);
  simgrid::s4u::Engine e(&argc, argv.data());
  sim::configure_network_model();
  const auto t0 = std::chrono::steady_clock::now();
  const sim::Platform pf = sim::build_platform(c);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("hosts=%zu\nbuild_s=%.3f\n", pf.gpus.size(), build_s);
  for (const auto& p : split(a.str("pairs", ""), ',')) {
    const auto ab = split(p, ':');
    const int x = std::stoi(ab.at(0)), y = std::stoi(ab.at(1));
    const sim::RouteInfo r = sim::route_info(pf.gpus.at(x), pf.gpus.at(y));
    std::string links;
    for (const auto& l : r.links) links += (links.empty() ? "" : " ") + l;
    std::printf("route%d_%d=%.9g %.9g %s -> %s : %s\n", x, y, r.latency_s, r.bandwidth_Bps, pf.gpus[x]->get_cname(),
                pf.gpus[y]->get_cname(), links.c_str());
  }
  return 0;
}

int run_flows(const Args& a) {
  Dag d;
  for (const auto& f : split(a.str("flows", ""), ',')) {
    const auto v = split(f, ':');
    DagNode n;
    n.kind = DagKind::Transfer;
    n.worker = 0;
    n.gpu = std::stoi(v.at(0));
    n.gpu2 = std::stoi(v.at(1));
    n.amount = std::stod(v.at(2));
    d.nodes.push_back(n);
  }
  finalize(d, {});
  // --lanes=0,1,2,3/8,9,10,11: tensor-parallel lanes of the workers whose TP-rank-0 GPUs are 0 and 8.
  sim::DagAnnotations ann;
  const ClusterSpec c = cluster_from(a);
  for (const auto& l : split(a.str("lanes", ""), '/')) {
    ann.lanes.resize(static_cast<std::size_t>(c.total_gpus()));
    const auto gpus = split(l, ',');
    auto& lane = ann.lanes.at(std::stoi(gpus.at(0)));
    for (const auto& g : gpus) lane.push_back(std::stoi(g));
  }
  print_result(sim::simulate_dag(c, d, ann, options_from(a)));
  return 0;
}

// One compute op per ring GPU (--tf seconds, staggered by --stagger * rank) feeding one collective.
int run_ring(const Args& a) {
  Dag d;
  std::vector<std::vector<std::int32_t>> rings;
  for (const auto& r : split(a.str("rings", "0,1"), '/')) {
    rings.emplace_back();
    for (const auto& g : split(r, ',')) rings.back().push_back(std::stoi(g));
  }
  d.rings.push_back(rings);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  const double tf = a.num("tf", 0.0), stagger = a.num("stagger", 0.0);
  DagNode c;
  c.kind = DagKind::Collective;
  c.worker = 0;
  c.group = 0;
  c.count = a.integer("count", 1);
  c.amount = a.num("bytes", 1e9);
  std::vector<std::uint32_t> computes;
  if (tf > 0 || stagger > 0) {
    int k = 0;
    for (const auto& ring : rings)
      for (std::int32_t g : ring) {
        DagNode x;
        x.kind = DagKind::Compute;
        x.worker = 0;
        x.gpu = g;
        x.amount = tf + stagger * k++;
        computes.push_back(static_cast<std::uint32_t>(d.nodes.size()));
        d.nodes.push_back(x);
      }
  }
  const auto cid = static_cast<std::uint32_t>(d.nodes.size());
  d.nodes.push_back(c);
  for (std::uint32_t x : computes) edges.emplace_back(x, cid);
  finalize(d, edges);
  sim::DagAnnotations ann;
  ann.group_tags = {a.str("tag", "dp") == "tp" ? CollTag::TensorParallel : CollTag::DataParallel};
  if (a.has("allgather")) ann.allgather.assign(d.nodes.size(), 0), ann.allgather[cid] = 1;
  print_result(sim::simulate_dag(cluster_from(a), d, ann, options_from(a)));
  return 0;
}

int run_cycle(const Args& a) {
  Dag d;
  for (int i = 0; i < 4; i++) {
    DagNode n;
    n.kind = DagKind::Compute;
    n.worker = 0;
    n.gpu = 0;
    n.amount = 1.0;
    d.nodes.push_back(n);
  }
  // 0 -> 1 -> 2 -> 1 (cycle between 1 and 2), 2 -> 3.
  finalize(d, {{0, 1}, {1, 2}, {2, 1}, {2, 3}});
  sim::DagAnnotations ann;
  ann.node_name = [](std::uint32_t i) { return "op" + std::to_string(i); };
  print_result(sim::simulate_dag(cluster_from(a), d, ann, options_from(a)));
  return 0;
}

int run_twice(const Args& a) {
  Dag d;
  finalize(d, {});
  sim::simulate_dag(cluster_from(a), d, {}, options_from(a));
  sim::simulate_dag(cluster_from(a), d, {}, options_from(a));
  return 0;
}

int run_schedule(const Args& a) {
  const ClusterSpec cluster = cluster_from(a);
  const int p = a.integer("p", 4), m = a.integer("m", 8), v = a.integer("v", 1);
  const int dp = a.integer("dp", 1), tp = a.integer("tp", 1);
  const std::string kind = a.str("schedule", "1f1b");
  ConstantCosts cc;
  cc.forward_s = a.num("tf", 1.0);
  cc.backward_s = a.num("tb", 2.0);
  cc.p2p_bytes = a.num("p2p-bytes", 0.0);
  cc.grad_bytes = a.num("grad-bytes", 0.0);
  cc.optimizer_s = a.num("opt", 0.0);
  cc.tp_bytes = a.num("tp-bytes", 0.0);
  cc.tp_calls_fwd = a.integer("tp-calls", 0);
  cc.v = v;
  const int seq = 1024;  // the report's model (memory_report checks the schedule against it)
  cc.seq_len = seq;
  const ConstantCostModel cost(cc);
  const auto mbs = uniform_microbatches(m, 1, seq, 1);
  const ScheduleEntry* entry = find_schedule(kind);
  if (entry == nullptr) throw std::invalid_argument("--schedule " + kind + ": unknown (" + schedule_names() + ")");
  Schedule s = entry->generate(p, v, mbs, seq);
  LoweredSchedule ls = lower(s, dp, tp, cost, a.has("sg"));
  ls.blocking_sends = a.has("blocking");
  const Placement pl = make_placement(a.str("layout", "megatron"), dp, p, tp, cluster);
  const CheckedSchedule cs = check(ls, pl);
  const sim::SimResult r = sim::simulate(cluster, cs, options_from(a));
  std::printf("iteration_s=%.12f\npipeline_end_s=%.12f\nactivities=%zu\ncompleted=%zu\ntotal=%zu\n", r.iteration_s,
              r.pipeline_end_s, r.activities, r.completed, r.total);
  for (std::size_t w = 0; w < r.worker_busy_s.size(); w++) std::printf("busy%zu=%.12f\n", w, r.worker_busy_s[w]);
  if (a.has("json") || a.has("trace") || a.has("table")) {
    Scenario sc;
    sc.name = "sim-runner";
    sc.source = "<test>";
    sc.model = {"test-model", 8, 1024, 16, 4096, 51200, seq, true};
    sc.cluster = cluster;
    sc.cluster.device.memory_bytes = 80e9;
    sc.parallel.dp = dp;
    sc.parallel.pp = p;
    sc.parallel.tp = tp;
    sc.parallel.v = v;
    sc.parallel.micro_batch_size = 1;
    sc.parallel.global_batch = m * dp;
    const sim::Report rep = sim::make_report(sc, cs, r);
    if (a.has("json")) {
      std::ofstream f(a.str("json", ""), std::ios::binary);
      sim::write_json(f, rep);
    }
    if (a.has("trace")) {
      std::ofstream f(a.str("trace", ""), std::ios::binary);
      sim::write_trace(f, cs, r);
    }
    if (a.has("table")) sim::print_table(std::cout, rep);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.mode == "routes") return run_routes(a);
    if (a.mode == "flows") return run_flows(a);
    if (a.mode == "ring") return run_ring(a);
    if (a.mode == "cycle") return run_cycle(a);
    if (a.mode == "twice") return run_twice(a);
    if (a.mode == "schedule") return run_schedule(a);
    throw std::invalid_argument("unknown mode " + a.mode);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
}
