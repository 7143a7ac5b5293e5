// The just-in-time DAG driver (spec/simgrid.md 4.2, spec/simgrid-proto/main.cpp `Sim`): a node's SimGrid
// activity is created only when its last predecessor completed, so SimGrid holds only what is in flight.
// Hot path: no strings, maps, std::function or per-activity heap use of our own; activity metadata is a
// tagged integer stored in the activity's data pointer; collective state lives in recycled records.
#include "sim/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <map>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/platform.h"

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;

namespace {

// Activity data = (payload << 3) | tag.
enum Tag : std::uintptr_t {
  kNode = 1,      // payload: DAG node (exec, transfer flow, analytic delay)
  kRing = 2,      // payload: (run << 29) | position
  kAggDelay = 3,  // payload: run
  kAggComm = 4,   // payload: run
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
};

class Driver {
 public:
  Driver(const ClusterSpec& cluster, const Dag& dag, const DagAnnotations& ann, const EngineOptions& opt,
         const Platform& pf)
      : dag_(dag), ann_(ann), pf_(pf), timer_mode_(opt.compute == "timer"), fifo_(opt.p2p_fifo) {
    // Ring orders: NCCL follows NVLink inside cube-mesh nodes; other fabrics treat every GPU pair alike.
    rings_ = dag.rings;
    if (cluster.fabric == IntraNodeFabric::CubeMesh)
      for (auto& group : rings_)
        for (auto& ring : group) ring = nvlink_ring_order(ring, cluster.gpus_per_node, cube_mesh_links);
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
    // Comms that ring-expanding every tensor-parallel collective would start ("auto" choice).
    auto tag_of = [&](std::int32_t g) {
      return static_cast<std::size_t>(g) < ann.group_tags.size() ? ann.group_tags[g] : CollTag::None;
    };
    std::size_t tp_ring_comms = 0;
    for (std::size_t i = 0; i < dag.size(); i++) {
      const DagNode& n = dag.nodes[i];
      if (n.kind != DagKind::Collective || n.amount <= 0 || rings_[n.group].empty()) continue;
      const CollTag tag = tag_of(n.group);
      if (tag != CollTag::TensorParallel && tag != CollTag::ScatterGather) continue;
      const int ranks = static_cast<int>(rings_[n.group][0].size());
      const bool allgather = !ann.allgather.empty() && ann.allgather[i] != 0;
      tp_ring_comms += static_cast<std::size_t>(std::max(0, n.count)) * ring_steps(ranks, allgather) * ranks *
                       rings_[n.group].size();
    }
    algo_.resize(rings_.size());
    for (std::size_t g = 0; g < rings_.size(); g++)
      algo_[g] = collective_algorithm(opt.collectives, tag_of(static_cast<std::int32_t>(g)), dag.size(), tp_ring_comms,
                                      opt.auto_limits);
    routes_.resize(rings_.size());
    for (std::size_t g = 0; g < rings_.size(); g++) {
      if (algo_[g] == CollAlgo::Ring) continue;
      for (const auto& ring : rings_[g]) {
        RingRoute rr{0.0, std::numeric_limits<double>::infinity()};
        const std::size_t n = ring.size();
        for (std::size_t i = 0; n > 1 && i < n; i++) {
          RouteInfo ri = route_info(pf.gpus[ring[i]], pf.gpus[ring[(i + 1) % n]]);
          rr.alpha = std::max(rr.alpha, ri.latency_s);
          rr.bw = std::min(rr.bw, ri.bandwidth_Bps);
        }
        routes_[g].push_back(rr);
      }
    }
    if (timer_mode_) gpu_running_.assign(pf.gpus.size(), kNone);
    ready_.reserve(1024);
    graveyard_.reserve(64);
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

  void comm(std::int32_t src, std::int32_t dst, double bytes, std::uintptr_t code) {
    activities_++;
    // Call order matters in 3.32: sendto_init, payload, then start (spec/simgrid.md 6).
    sg4::CommPtr c = sg4::Comm::sendto_init(pf_.gpus[src], pf_.gpus[dst]);
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
    const std::int32_t src = ch.src, dst = ch.dst;
    const bool laned = !ann_.lanes.empty() && !ann_.lanes[src].empty() && !ann_.lanes[dst].empty();
    if (!laned) {
      h.pending = 1;
      comm(src, dst, h.amount, code(kNode, node));
      return;
    }
    const auto& a = ann_.lanes[src];
    const auto& b = ann_.lanes[dst];
    h.pending = static_cast<std::uint32_t>(a.size());
    for (std::size_t t = 0; t < a.size(); t++) comm(a[t], b[t], h.amount, code(kNode, node));
  }

  // Channel of a transfer (one per ordered GPU pair), or -1 when it moves nothing.
  std::int32_t channel_of(const DagNode& n) {
    if (n.amount <= 0 || n.gpu == n.gpu2) return -1;
    auto [it, added] = channel_ids_.try_emplace({n.gpu, n.gpu2}, static_cast<std::int32_t>(channels_.size()));
    if (added) channels_.push_back(Channel{n.gpu, n.gpu2});
    return it->second;
  }

  // Returns false when the collective completes immediately (no bytes, single-GPU rings, no rings).
  bool launch_collective(std::uint32_t node, const DagNode& n) {
    const auto& rings = rings_[n.group];
    const int ranks = rings.empty() ? 0 : static_cast<int>(rings[0].size());
    const bool allgather = !ann_.allgather.empty() && ann_.allgather[node] != 0;
    const int steps = ring_steps(ranks, allgather);
    if (n.amount <= 0 || steps == 0 || n.count <= 0) return false;
    const std::uint32_t total_steps = static_cast<std::uint32_t>(steps) * static_cast<std::uint32_t>(n.count);
    const CollAlgo algo = algo_[n.group];

    if (algo == CollAlgo::Analytic) {
      double t = 0;
      for (const RingRoute& rr : routes_[n.group])
        t = std::max(t, n.count * ring_collective_seconds(ranks, n.amount, rr.alpha, rr.bw, allgather));
      hot_[node].pending = 1;
      delay(t, code(kNode, node));
      return true;
    }

    const std::uint32_t run = new_run(node);
    CollRun& r = runs_[run];
    r.chunk_bytes = n.amount / ranks;
    if (algo == CollAlgo::Ring) {
      r.ring.reset(static_cast<int>(rings.size()), ranks, total_steps);
      start_positions_.clear();
      r.ring.start(start_positions_);
      for (std::uint32_t pos : start_positions_) ring_comm(run, n.group, pos);
      return true;
    }
    // Aggregate: latency of all but one step as a delay, then the whole volume in one comm per rank.
    double alpha = 0;
    for (const RingRoute& rr : routes_[n.group]) alpha = std::max(alpha, rr.alpha);
    r.chunk_bytes *= total_steps;
    r.left = static_cast<std::uint32_t>(rings.size() * ranks);
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
    const int ranks = runs_[run].ring.n();
    const auto& ring = rings_[group][pos / ranks];
    const std::uint32_t i = pos % ranks;
    const std::uint32_t j = i + 1 == static_cast<std::uint32_t>(ranks) ? 0 : i + 1;
    comm(ring[i], ring[j], runs_[run].chunk_bytes, code(kRing, (std::uintptr_t{run} << kPosBits) | pos));
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
    for (const auto& ring : rings_[n.group]) {
      const std::size_t ranks = ring.size();
      for (std::size_t i = 0; i < ranks; i++)
        comm(ring[i], ring[(i + 1) % ranks], runs_[run].chunk_bytes, code(kAggComm, run));
    }
  }

  void finish_collective(std::uint32_t run) {
    const std::uint32_t node = runs_[run].node;
    free_runs_.push_back(run);
    finish_node(node);
  }

  const Dag& dag_;
  const DagAnnotations& ann_;
  const Platform& pf_;
  const bool timer_mode_;
  const bool fifo_;
  // Point-to-point channels: transfers between one ordered GPU pair run one at a time in issue order when
  // p2p_fifo is set (one NCCL stream per peer), all at once otherwise.
  struct Channel {
    std::int32_t src, dst;
    bool busy = false;
    std::size_t head = 0;  // queue[head..] waits
    std::vector<std::uint32_t> queue;
  };
  std::vector<Channel> channels_;
  std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> channel_ids_;  // construction only
  std::vector<Hot> hot_;  // per node, plus a sentinel holding the CSR end
  std::vector<Done> done_;
  std::vector<std::vector<std::vector<std::int32_t>>> rings_;  // Dag::rings in the order they run
  std::vector<CollAlgo> algo_;
  std::vector<std::vector<RingRoute>> routes_;
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
  const Platform pf = build_platform(cluster);

  Driver driver(cluster, dag, ann, opt, pf);
  sg4::Activity::on_completion_cb([&driver](const sg4::Activity& a) { driver.on_activity(a); });
  const auto t0 = std::chrono::steady_clock::now();
  driver.run_roots();
  engine.run();
  driver.finish_run();
  const auto t1 = std::chrono::steady_clock::now();

  SimResult r;
  r.wall_s = std::chrono::duration<double>(t1 - t0).count();
  r.total = dag.size();
  r.completed = driver.completed();
  r.activities = driver.activities();
  r.timing = driver.timing();
  if (const char* dump = std::getenv("PIPESCOPE_TMP_DUMP")) {  // TEMP-HC
    FILE* f = std::fopen(dump, "wb");
    for (std::uint32_t i = 0; i < dag.size(); i++) {
      struct { std::int32_t w, idx, kind, pad; double s, e; } rec{dag.nodes[i].worker, dag.nodes[i].index, (int)dag.nodes[i].kind, 0, r.timing[i].start, r.timing[i].end};
      std::fwrite(&rec, sizeof rec, 1, f);
    }
    std::fclose(f);
  }
  if (r.completed != r.total) throw std::runtime_error(deadlock_message(dag, r.timing, ann.node_name));
  if (auto [a, b] = driver.overlap(); a != Driver::kNone) {
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
