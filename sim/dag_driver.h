#pragma once
// The just-in-time DAG driver (docs/simulator.md): a node's SimGrid activity is created only when its last
// predecessor completed, so SimGrid holds only what is in flight. Hot path: no strings, maps, std::function or
// per-activity heap use of our own; activity metadata is a tagged integer stored in the activity's data
// pointer; collective state lives in recycled records. Also: the hosts each flow runs between (Endpoints) and
// one run of a driver on the Engine (run_driver).

#include <cstddef>
#include <cstdint>
#include <map>
#include <simgrid/s4u.hpp>
#include <utility>
#include <vector>

#include "sim/collective_plan.h"
#include "sim/engine_internal.h"
#include "sim/platform.h"

namespace pipescope::sim {

// Hosts of every flow the run starts: the GPUs' own hosts (their routes are computed by the platform's
// zone), and a quotient ring's first GPU and its mirror (replica_fold.h).
class Endpoints {
 public:
  Endpoints(Platform& pf, const std::vector<MirrorRoute>& mirrors);

  HostPair pair(std::int32_t a, std::int32_t b) const { return {pf_.gpus[a], pf_.gpus[b]}; }
  HostPair mirror(std::int32_t a) const;

 private:
  const Platform& pf_;
  std::vector<simgrid::s4u::Host*> mirror_;
};

class Driver {
 public:
  // `qranks` per group: the replica count of a data-parallel group run as its quotient (folded run), else 0.
  Driver(const Dag& dag, const DagAnnotations& ann, const std::vector<std::uint8_t>& allgather,
         const EngineOptions& opt, const Platform& pf, const CollectivePlan& cp, const std::vector<int>& qranks);

  // Resolves the hosts of every channel lane and ring edge (call once, after the mirror hosts exist).
  void bind_hosts(const Endpoints& ep);

  void run_roots();

  // Activity::on_completion: every Exec/Comm of this simulation.
  void on_activity(const simgrid::s4u::Activity& a);

  void finish_run() { graveyard_.clear(); }

  // Two compute ops that ran at the same time on one GPU in timer mode (kNoNode when none did).
  std::pair<std::uint32_t, std::uint32_t> overlap() const { return {overlap_a_, overlap_b_}; }

  std::size_t completed() const { return completed_; }
  std::size_t activities() const { return activities_; }
  std::vector<NodeTiming> timing() const;

 private:
  // Activity data = (payload << 3) | tag.
  enum Tag : std::uintptr_t {
    kNode = 1,      // payload: DAG node (exec, transfer flow, analytic delay)
    kRing = 2,      // payload: (run << 29) | position
    kAggDelay = 3,  // payload: run
    kAggComm = 4,   // payload: run
    kLead = 5,      // payload: collective node whose lead time (DagNode::lead_s) is over
  };
  static constexpr std::uintptr_t kPosBits = 29;

  // One collective in flight.
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
  static constexpr std::uint32_t kGpuMask = (1u << 30) - 1;

  // Finished nodes in completion order; scattered into SimResult::timing once the run is over.
  struct Done {
    std::uint32_t node;
    double start, end;
  };

  // Point-to-point channels: transfers between one ordered GPU pair run one at a time in issue order when
  // p2p_fifo is set (one NCCL stream per peer), all at once otherwise.
  struct Channel {
    std::int32_t src, dst;
    bool busy = false;
    std::size_t head = 0;  // queue[head..] waits
    std::vector<std::uint32_t> queue;
    std::vector<HostPair> hosts;  // one per lane
  };

  static std::uintptr_t code(Tag t, std::uintptr_t payload) { return (payload << 3) | t; }

  void dispatch(std::uintptr_t code);
  void node_done(std::uint32_t node);
  void finish_node(std::uint32_t node);
  void drain();
  void delay(double seconds, std::uintptr_t code);
  void exec(simgrid::s4u::Host* host, double seconds, std::uintptr_t code);
  void comm(const HostPair& hosts, double bytes, std::uintptr_t code);
  void launch(std::uint32_t node);
  void launch_compute(std::uint32_t node);
  void start_transfer(std::uint32_t node);
  std::int32_t channel_of(const DagNode& n);
  bool launch_collective(std::uint32_t node, const DagNode& n);
  std::uint32_t new_run(std::uint32_t node);
  void ring_comm(std::uint32_t run, std::int32_t group, std::uint32_t pos);
  void ring_comm_done(std::uint32_t run, std::uint32_t pos);
  void start_aggregate(std::uint32_t run, std::int32_t group, std::uint32_t total_steps, std::uint32_t comms);
  void aggregate_start_comms(std::uint32_t run);
  void finish_collective(std::uint32_t run);

  const Dag& dag_;
  const DagAnnotations& ann_;
  const std::vector<std::uint8_t>& allgather_;
  const Platform& pf_;
  const CollectivePlan& cp_;
  const std::vector<int>& qranks_;
  const bool timer_mode_;
  const bool fifo_;
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
  std::vector<simgrid::s4u::ActivityPtr> graveyard_;
  std::vector<std::uint32_t> gpu_running_;  // timer mode: compute node running on each GPU
  std::uint32_t overlap_a_ = kNoNode, overlap_b_ = kNoNode;
  std::size_t completed_ = 0, activities_ = 0;
};

// Runs the driver's DAG to the end on the Engine (whose platform is sealed) and returns what came of it.
DriverOutcome run_driver(simgrid::s4u::Engine& engine, Driver& driver);

}  // namespace pipescope::sim
