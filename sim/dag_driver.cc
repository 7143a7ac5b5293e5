// The DAG driver (dag_driver.h): node records, activity creation per node kind, collectives as ring steps,
// aggregate comms or analytic delays, and the completion callback that releases successors.
#include "sim/dag_driver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <simgrid/kernel/Timer.hpp>
#include <stdexcept>
#include <string>
#include <tuple>

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;

// ------------------------------------------------------------------------------------------------------ Endpoints
Endpoints::Endpoints(Platform& pf, const std::vector<MirrorRoute>& mirrors)
    : pf_(pf), mirror_(add_mirrors(pf, mirrors)) {}

HostPair Endpoints::mirror(std::int32_t a) const {
  if (mirror_[a] == nullptr) throw std::logic_error("simulate: no mirror route for GPU " + std::to_string(a));
  return {pf_.gpus[a], mirror_[a]};
}

// ------------------------------------------------------------------------------------------------------ set-up
Driver::Driver(const Dag& dag, const DagAnnotations& ann, const std::vector<std::uint8_t>& allgather,
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
  if (timer_mode_) gpu_running_.assign(pf.gpus.size(), kNoNode);
  ready_.reserve(1024);
  graveyard_.reserve(64);
}

void Driver::bind_hosts(const Endpoints& ep) {
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
    const bool all_pairs = g < ann_.group_tags.size() && ann_.group_tags[g] == CollTag::ExpertParallel;
    for (const Ring& ring : exec_rings_[g]) {
      std::vector<HostPair> hp;
      if (all_pairs) {  // an all-to-all: every member sends to every other one
        for (std::int32_t a : ring)
          for (std::int32_t b : ring)
            if (a != b) hp.push_back(ep.pair(a, b));
      } else if (qranks_[g] != 0) {
        if (cp_.used[g]) hp.push_back(ep.mirror(ring[0]));
      } else {
        for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); i++)
          hp.push_back(ep.pair(ring[i], ring[(i + 1) % ring.size()]));
      }
      ring_hosts_[g].push_back(std::move(hp));
    }
  }
}

// Channel of a transfer (one per ordered GPU pair), or -1 when it moves nothing.
std::int32_t Driver::channel_of(const DagNode& n) {
  if (n.amount <= 0 || n.gpu == n.gpu2) return -1;
  auto [it, added] = channel_ids_.try_emplace({n.gpu, n.gpu2}, static_cast<std::int32_t>(channels_.size()));
  if (added) channels_.push_back(Channel{n.gpu, n.gpu2, false, 0, {}, {}});
  return it->second;
}

std::vector<NodeTiming> Driver::timing() const {
  std::vector<NodeTiming> t(dag_.size());
  for (const Done& d : done_) t[d.node] = NodeTiming{d.start, d.end};
  return t;
}

// ------------------------------------------------------------------------------------------------------ completion
void Driver::run_roots() {
  for (std::uint32_t i = 0; i < dag_.size(); i++)
    if (hot_[i].pending == 0) ready_.push_back(i);
  drain();
}

void Driver::on_activity(const sg4::Activity& a) {
  // Drop what completed in earlier callbacks; the activity completing now must outlive its callback.
  graveyard_.clear();
  graveyard_.emplace_back(const_cast<sg4::Activity*>(&a), false);  // adopt the reference launch() kept
  dispatch(reinterpret_cast<std::uintptr_t>(a.get_data<void>()));
}

void Driver::dispatch(std::uintptr_t code) {
  const std::uintptr_t payload = code >> 3;
  switch (code & 7) {
    case kNode:
      node_done(static_cast<std::uint32_t>(payload));
      break;
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

// One activity of the node ended; the node completes with its last one.
void Driver::node_done(std::uint32_t node) {
  Hot& h = hot_[node];
  if (--h.pending != 0) return;
  const auto kind = static_cast<DagKind>(h.gpu_kind >> 30);
  if (timer_mode_ && kind == DagKind::Compute) {
    std::uint32_t& running = gpu_running_[h.gpu_kind & kGpuMask];
    if (running == node) running = kNoNode;
  }
  if (kind == DagKind::Transfer && fifo_) {
    Channel& ch = channels_[h.aux];
    ch.busy = false;
    if (ch.head < ch.queue.size()) start_transfer(ch.queue[ch.head++]);
    if (ch.head == ch.queue.size()) ch.queue.clear(), ch.head = 0;
  }
  finish_node(node);
}

void Driver::finish_node(std::uint32_t node) {
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
void Driver::drain() {
  if (draining_) return;
  draining_ = true;
  for (std::size_t k = 0; k < ready_.size(); k++) launch(ready_[k]);
  ready_.clear();
  draining_ = false;
}

// ------------------------------------------------------------------------------------------------------ activities
void Driver::delay(double seconds, std::uintptr_t code) {
  activities_++;
  if (timer_mode_) {
    simgrid::kernel::timer::Timer::set(sg4::Engine::get_clock() + seconds, [this, code] { dispatch(code); });
    return;
  }
  exec(pf_.timer, seconds, code);
}

void Driver::exec(sg4::Host* host, double seconds, std::uintptr_t code) {
  sg4::ExecPtr x = sg4::Exec::init();
  x->set_flops_amount(seconds * host->get_speed());  // alone on its host: duration = flops / speed
  x->set_host(host);                                 // on an INITED exec this does not start it
  x->set_data(reinterpret_cast<void*>(code));
  x->start();
  x.detach();  // the reference is adopted back in on_activity()
}

void Driver::comm(const HostPair& hosts, double bytes, std::uintptr_t code) {
  activities_++;
  // Call order matters in 3.32: sendto_init, payload, then start (docs/simulator.md).
  sg4::CommPtr c = sg4::Comm::sendto_init(hosts.first, hosts.second);
  c->set_payload_size(static_cast<std::uint64_t>(std::llround(bytes)));
  c->set_data(reinterpret_cast<void*>(code));
  c->start();
  c.detach();
}

void Driver::launch(std::uint32_t node) {
  Hot& h = hot_[node];
  h.start = sg4::Engine::get_clock();
  switch (static_cast<DagKind>(h.gpu_kind >> 30)) {
    case DagKind::Compute:
      if (h.amount <= 0) break;
      launch_compute(node);
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

void Driver::launch_compute(std::uint32_t node) {
  Hot& h = hot_[node];
  const std::int32_t gpu = static_cast<std::int32_t>(h.gpu_kind & kGpuMask);
  h.pending = 1;
  if (timer_mode_) {
    // A timer cannot share its GPU with another op the way an Exec would: refuse rather than be wrong.
    if (gpu_running_[gpu] != kNoNode && overlap_a_ == kNoNode) overlap_a_ = gpu_running_[gpu], overlap_b_ = node;
    gpu_running_[gpu] = node;
    delay(h.amount, code(kNode, node));
  } else {
    activities_++;
    exec(pf_.gpus[gpu], h.amount, code(kNode, node));
  }
}

// One flow, or one per tensor-parallel lane, between the transfer's GPUs.
void Driver::start_transfer(std::uint32_t node) {
  Hot& h = hot_[node];
  Channel& ch = channels_[h.aux];
  ch.busy = true;
  h.start = sg4::Engine::get_clock();
  h.pending = static_cast<std::uint32_t>(ch.hosts.size());
  for (const HostPair& hp : ch.hosts) comm(hp, h.amount, code(kNode, node));
}

// ------------------------------------------------------------------------------------------------------ collectives
// Returns false when the collective completes immediately (no bytes, single-GPU rings, no rings).
bool Driver::launch_collective(std::uint32_t node, const DagNode& n) {
  const auto& rings = exec_rings_[n.group];
  const int q = qranks_[n.group];
  // A quotient ring keeps the full ring's rank count (steps, chunk size) but runs one position per ring.
  const int ranks = q != 0 ? q : rings.empty() ? 0 : static_cast<int>(rings[0].size());
  const CollShape shape = allgather_.empty() ? CollShape::AllReduce : static_cast<CollShape>(allgather_[node]);
  const bool allgather = shape == CollShape::AllGather;
  // An all-to-all has no ring steps; ranks - 1 only says whether it moves anything.
  const int steps = shape == CollShape::AllToAll ? ranks - 1 : ring_steps(ranks, allgather);
  if (n.amount <= 0 || steps == 0 || n.count <= 0 || rings.empty()) return false;
  const std::uint32_t total_steps = static_cast<std::uint32_t>(steps) * static_cast<std::uint32_t>(n.count);
  const CollAlgo algo = cp_.algo[n.group];

  if (algo == CollAlgo::Analytic) {
    double t = 0;
    for (const RingRoute& rr : cp_.routes[n.group])
      t = std::max(t, n.count * (shape == CollShape::AllToAll ? nccl_alltoall_seconds(rr.nccl, n.amount)
                                                              : nccl_collective_seconds(rr.nccl, n.amount, allgather)));
    hot_[node].pending = 1;
    delay(t, code(kNode, node));
    return true;
  }

  const std::uint32_t run = new_run(node);
  CollRun& r = runs_[run];
  r.chunk_bytes = n.amount / ranks;
  if (shape == CollShape::AllToAll) {  // NCCL's all-to-all: all peers at once, each 1/ranks of the buffer per call
    std::uint32_t pairs = 0;
    for (const auto& hp : ring_hosts_[n.group]) pairs += static_cast<std::uint32_t>(hp.size());
    start_aggregate(run, n.group, static_cast<std::uint32_t>(n.count), pairs);
    return true;
  }
  const int positions = q != 0 ? 1 : ranks;
  if (algo == CollAlgo::Ring) {
    r.ring.reset(static_cast<int>(rings.size()), positions, total_steps);
    start_positions_.clear();
    r.ring.start(start_positions_);
    for (std::uint32_t pos : start_positions_) ring_comm(run, n.group, pos);
    return true;
  }
  start_aggregate(run, n.group, total_steps, static_cast<std::uint32_t>(rings.size() * positions));
  return true;
}

// Aggregate: latency of all but one step as a delay, then the whole volume in one comm per rank.
void Driver::start_aggregate(std::uint32_t run, std::int32_t group, std::uint32_t total_steps, std::uint32_t comms) {
  double alpha = 0;
  for (const RingRoute& rr : cp_.routes[group]) alpha = std::max(alpha, rr.alpha);
  CollRun& r = runs_[run];
  r.chunk_bytes *= total_steps;
  r.left = comms;
  const double d = (total_steps - 1.0) * alpha;
  if (d > 0) {
    delay(d, code(kAggDelay, run));
  } else {
    aggregate_start_comms(run);
  }
}

std::uint32_t Driver::new_run(std::uint32_t node) {
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

void Driver::ring_comm(std::uint32_t run, std::int32_t group, std::uint32_t pos) {
  const auto n = static_cast<std::uint32_t>(runs_[run].ring.n());
  comm(ring_hosts_[group][pos / n][pos % n], runs_[run].chunk_bytes,
       code(kRing, (std::uintptr_t{run} << kPosBits) | pos));
}

void Driver::ring_comm_done(std::uint32_t run, std::uint32_t pos) {
  std::uint32_t next[2];
  const int k = runs_[run].ring.finish(pos, next);
  const std::int32_t group = dag_.nodes[runs_[run].node].group;
  for (int i = 0; i < k; i++) ring_comm(run, group, next[i]);
  if (runs_[run].ring.done()) finish_collective(run);
}

void Driver::aggregate_start_comms(std::uint32_t run) {
  const DagNode& n = dag_.nodes[runs_[run].node];
  for (const auto& hosts : ring_hosts_[n.group])
    for (const HostPair& hp : hosts) comm(hp, runs_[run].chunk_bytes, code(kAggComm, run));
}

void Driver::finish_collective(std::uint32_t run) {
  const std::uint32_t node = runs_[run].node;
  free_runs_.push_back(run);
  finish_node(node);
}

// ------------------------------------------------------------------------------------------------------ one run
DriverOutcome run_driver(sg4::Engine& engine, Driver& driver) {
  sg4::Activity::on_completion_cb([&driver](const sg4::Activity& a) { driver.on_activity(a); });
  const auto t0 = std::chrono::steady_clock::now();
  driver.run_roots();
  engine.run();
  driver.finish_run();
  DriverOutcome o;
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.timing = driver.timing();
  o.activities = driver.activities();
  o.completed = driver.completed();
  std::tie(o.overlap_a, o.overlap_b) = driver.overlap();
  return o;
}

}  // namespace pipescope::sim
