#pragma once
// Engine internals shared by its parts (collective plan, replica fold, DAG driver, child-process encoding,
// entry points): ring and host-pair types, the "no node" marker, tensor-parallel lanes and the outcome of
// one driver run. Not for use outside sim/engine*.cc and the files they are split into.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/engine_options.h"
#include "sim/report.h"

namespace simgrid::s4u {
class Host;
}  // namespace simgrid::s4u

namespace pipescope::sim {

using Ring = std::vector<std::int32_t>;
using Rings = std::vector<Ring>;
using HostPair = std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>;  // sender, receiver

// No node (unmatched fold counterpart, no overlapping compute op).
constexpr std::uint32_t kNoNode = 0xffffffffu;

// A transfer between GPUs a and b runs as one flow per tensor-parallel lane (DagAnnotations::lanes).
inline bool laned(const DagAnnotations& ann, std::int32_t a, std::int32_t b) {
  return !ann.lanes.empty() && !ann.lanes[a].empty() && !ann.lanes[b].empty();
}

// One run of a driver, and what comes back of it (also through a pipe from a forked child).
struct DriverOutcome {
  std::vector<NodeTiming> timing;  // per node of the driver's DAG
  std::size_t activities = 0, completed = 0;
  std::uint32_t overlap_a = kNoNode, overlap_b = kNoNode;  // two compute ops that overlapped on a GPU (timer mode)
  double wall_s = 0;
  bool temporal_ok = false;  // the folded run met its temporal-link condition (replica_fold.h)
};

}  // namespace pipescope::sim
