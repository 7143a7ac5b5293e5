#pragma once
// What the engine is asked to run with (sim/engine.h): its options, and what the driver needs besides the DAG.
// Apart from engine.h so that the engine's parts (sim/engine_internal.h) see the inputs without the entry points.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/lower/lowered_schedule.h"

namespace pipescope::sim {

struct EngineOptions {
  std::string collectives = "auto";  // ring | aggregate | analytic | auto
  // How compute ops and pure delays advance time. "exec": a SimGrid Exec on the GPU host (flops =
  // seconds * speed) or on the timer host. "timer": a SimGrid kernel timer at now + seconds, no activity
  // object. Identical results as long as each GPU runs one op at a time (the DAG's program-order edges
  // guarantee it; "timer" verifies it and throws otherwise). "timer" skips SimGrid 3.32's O(in-flight)
  // per-activity bookkeeping and is 3-4x faster (sim/README.md, bench/).
  std::string compute = "timer";
  // Transfers between the same ordered GPU pair run one after the other in issue order, as NCCL sends on
  // one stream do; false lets them all run at once and share bandwidth fairly (processor sharing).
  bool p2p_fifo = true;
  std::vector<std::string> simgrid_args;  // extra --cfg=/--log= arguments (log threshold: warning by default)
  // Simulate one data-parallel replica instead of all of them when that provably gives the same result
  // (sim/README.md "Replica folding"); the other replicas take its times. false always runs every replica.
  bool fold_replicas = true;
  // Measured time by message size of a link class ("intra", "inter"; (bytes, seconds) sorted by size, from a
  // calibration profile's piecewise link models): every comm on a route of that class then takes the table's
  // time for its size (a SimGrid latency / bandwidth factor per comm; platform.h install_link_tables). Routes
  // crossing a NIC are "inter". Ring steps use it too; the closed-form collective algorithms do not.
  std::map<std::string, std::vector<std::pair<double, double>>> link_tables;
};

// What the driver needs besides the DAG; simulate() derives it from the lowered schedule.
struct DagAnnotations {
  std::vector<CollTag> group_tags;  // per collective group (empty = all None)
  // Per collective group (empty = none): CollGroup::node_dedup (DeepEP's all-to-all).
  std::vector<NodeDedup> group_node_dedup;
  std::vector<std::uint8_t> allgather;  // per node (empty = none): a Collective's CollShape (all-gather, all-to-all)
  int workers = 0;                      // size of SimResult::worker_busy_s (0 = max worker + 1)
  // Data-parallel replicas: workers are d * (workers / replicas) + r (core/lower/lowering.h). With replicas > 1
  // the engine may fold identical replicas (EngineOptions::fold_replicas).
  int replicas = 1;
  // Tensor-parallel transfer lanes: when tp > 1, a Transfer between worker GPUs runs as tp parallel flows
  // (TP rank t to TP rank t), each of the node's bytes. Empty = one flow gpu -> gpu2.
  // lanes[g] = the tp GPUs of the worker whose TP-rank-0 GPU is g (only filled for such g).
  std::vector<std::vector<std::int32_t>> lanes;
  std::function<std::string(std::uint32_t)> node_name;  // names stuck nodes (default "node <i>")
};

}  // namespace pipescope::sim
