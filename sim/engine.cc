// The engine's entry points (engine.h). simulate_dag checks its inputs before SimGrid exists, creates the Engine
// and the platform, plans what does not change while the run goes (collective_plan.h, then the replica fold,
// replica_fold.h, whose mirror hosts join the platform's flat zone), runs the DAG driver (dag_driver.h) folded or
// in full, and turns the run into a SimResult; deadlock_message names the nodes that never ran. sim/README.md.
#include "sim/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/collective_plan.h"
#include "sim/dag_driver.h"
#include "sim/engine_internal.h"
#include "sim/outcome_in_child.h"
#include "sim/platform.h"
#include "sim/replica_fold.h"

namespace pipescope::sim {
namespace sg4 = simgrid::s4u;

namespace {

std::string node_label(const std::function<std::string(std::uint32_t)>& node_name, std::uint32_t i) {
  return node_name ? node_name(i) : "node " + std::to_string(i);
}

// ------------------------------------------------------------------------------------------------------ inputs
// Everything that can be wrong is checked before SimGrid exists: SimGrid aborts on misuse.
void validate_nodes(const ClusterSpec& c, const Dag& dag, const DagAnnotations& ann) {
  const auto gpus = static_cast<std::int32_t>(c.total_gpus());
  auto name = [&](std::uint32_t i) { return node_label(ann.node_name, i); };
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
}

void validate_rings_and_lanes(const ClusterSpec& c, const Dag& dag, const DagAnnotations& ann) {
  const auto gpus = static_cast<std::int32_t>(c.total_gpus());
  auto bad_gpu = [&](std::int32_t g) { return g < 0 || g >= gpus; };
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

void validate_inputs(const ClusterSpec& cluster, const Dag& dag, const DagAnnotations& ann, const EngineOptions& opt) {
  validate_collectives_option(opt.collectives);
  if (opt.compute != "exec" && opt.compute != "timer")
    throw std::invalid_argument("simulate: unknown compute mode '" + opt.compute + "' (valid: exec, timer)");
  validate_cluster(cluster);
  validate_nodes(cluster, dag, ann);
  validate_rings_and_lanes(cluster, dag, ann);
}

// ------------------------------------------------------------------------------------------------------ the Engine
// The Engine's synthetic argv: the log threshold first, so that a user's --log= (EngineOptions::simgrid_args) wins.
class EngineArgv {
 public:
  explicit EngineArgv(const std::vector<std::string>& user) : args_{"pipescope", "--log=root.thres:warning"} {
    args_.insert(args_.end(), user.begin(), user.end());
    for (auto& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    argc_ = static_cast<int>(args_.size());
  }
  EngineArgv(const EngineArgv&) = delete;  // argv_ points into args_
  EngineArgv& operator=(const EngineArgv&) = delete;
  int* argc() { return &argc_; }
  char** argv() { return argv_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> argv_;
  int argc_ = 0;
};

// The fold rests on the plain network model (configure_network_model); a user's own network or host model
// (another model, cross traffic's reverse routes, per-host penalties) turns it off.
bool plain_network(const EngineOptions& opt) {
  return std::none_of(opt.simgrid_args.begin(), opt.simgrid_args.end(), [](const std::string& a) {
    return a.rfind("--cfg=network/", 0) == 0 || a.rfind("--cfg=host/", 0) == 0;
  });
}

// ------------------------------------------------------------------------------------------------------ the run
struct Ran {
  DriverOutcome out;
  bool folded = false;  // `out` is the folded run's (times of the folded DAG)
};

// The folded run when the fold stands, else the full one; mirror hosts for the folded run's quotient rings.
Ran run_dag(sg4::Engine& engine, Platform& pf, const Dag& dag, const DagAnnotations& ann, const EngineOptions& opt,
            const CollectivePlan& cp, const FoldPlan& fold) {
  const std::vector<int> no_quotient(cp.rings.size(), 0);
  auto full = [&] { return std::make_unique<Driver>(dag, ann, ann.allgather, opt, pf, cp, no_quotient); };
  std::unique_ptr<Driver> driver =
      fold.on ? std::make_unique<Driver>(fold.dag, ann, fold.allgather, opt, pf, cp, fold.qranks) : full();
  const Endpoints endpoints(pf, fold.on ? fold.mirrors : std::vector<MirrorRoute>{});
  seal_platform(pf);
  driver->bind_hosts(endpoints);
  if (!fold.on || fold.temporal.empty()) return Ran{run_driver(engine, *driver), fold.on};

  // Only the folded run's times can show that no temporal link was ever shared across nodes. Run it in a
  // child (SimGrid runs once per process) and keep its times when they do; otherwise run in full here.
  std::optional<DriverOutcome> child = outcome_in_child([&] {
    DriverOutcome o = run_driver(engine, *driver);
    o.temporal_ok = temporally_exclusive(fold, expand_folded(fold, o.timing));
    return o;
  });
  if (child && child->temporal_ok) return Ran{std::move(*child), true};
  driver = full();
  driver->bind_hosts(endpoints);
  return Ran{run_driver(engine, *driver), false};
}

// Timer mode cannot run two compute ops on one GPU at once: name them rather than return wrong times.
void check_overlap(const Dag& dag, const DagAnnotations& ann, const FoldPlan& fold, const Ran& ran) {
  std::uint32_t a = ran.out.overlap_a, b = ran.out.overlap_b;
  if (a == kNoNode) return;
  if (ran.folded) a = fold.orig[a], b = fold.orig[b];
  throw std::runtime_error("simulate: compute ops " + node_label(ann.node_name, a) + " and " +
                           node_label(ann.node_name, b) + " overlap on GPU " + std::to_string(dag.nodes[b].gpu) +
                           "; compute mode 'timer' needs one op at a time per GPU, use compute 'exec'");
}

// Iteration time, per-worker busy time and the last compute op's end (simulate() refines it: no optimizer).
void add_times(SimResult& r, const Dag& dag, const DagAnnotations& ann) {
  int workers = ann.workers;
  for (const DagNode& n : dag.nodes) workers = std::max(workers, n.worker + 1);
  r.worker_busy_s.assign(static_cast<std::size_t>(workers), 0.0);
  for (std::uint32_t i = 0; i < dag.size(); i++) {
    const DagNode& n = dag.nodes[i];
    r.iteration_s = std::max(r.iteration_s, r.timing[i].end);
    if (n.kind == DagKind::Compute && n.worker >= 0) {
      r.worker_busy_s[n.worker] += r.timing[i].end - r.timing[i].start;
      r.pipeline_end_s = std::max(r.pipeline_end_s, r.timing[i].end);
    }
  }
}

SimResult to_result(const Dag& dag, const DagAnnotations& ann, const FoldPlan& fold, Ran ran) {
  SimResult r;
  r.wall_s = ran.out.wall_s;
  r.total = dag.size();
  r.activities = ran.out.activities;
  if (ran.folded) {
    r.timing = expand_folded(fold, ran.out.timing);  // every replica has replica 0's times (the fold's invariant)
    r.completed = 0;
    for (const NodeTiming& t : r.timing) r.completed += t.end >= 0;
  } else {
    r.timing = std::move(ran.out.timing);
    r.completed = ran.out.completed;
  }
  if (r.completed != r.total) throw std::runtime_error(deadlock_message(dag, r.timing, ann.node_name));
  check_overlap(dag, ann, fold, ran);
  add_times(r, dag, ann);
  return r;
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
    msg += node_label(node_name, u);
    msg += " (waiting for " + std::to_string(unfinished_preds[u]) + " of " + std::to_string(dag.preds[u]) +
           " predecessors)";
  }
  if (stuck > 10) msg += ", ...";
  return msg;
}

SimResult simulate_dag(const ClusterSpec& cluster, const Dag& dag, const DagAnnotations& ann,
                       const EngineOptions& opt) {
  validate_inputs(cluster, dag, ann, opt);
  static std::atomic<bool> used{false};
  if (used.exchange(true))
    throw std::logic_error("simulate: SimGrid allows one simulation per process; run each in its own process");

  EngineArgv argv(opt.simgrid_args);
  sg4::Engine engine(argv.argc(), argv.argv());
  configure_network_model(opt.simgrid_args);
  Platform pf = build_platform_open(cluster);
  install_link_tables(opt.link_tables);

  // Planning on the whole DAG: collectives, then the fold (or not).
  const CollectivePlan cp = plan_collectives(cluster, dag, opt, pf, &ann);
  FoldPlan fold;
  if (plain_network(opt) && opt.fold_replicas && ann.replicas > 1) fold = plan_replica_fold(cluster, dag, ann, cp, pf);
  return to_result(dag, ann, fold, run_dag(engine, pf, dag, ann, opt, cp, fold));
}

}  // namespace pipescope::sim
