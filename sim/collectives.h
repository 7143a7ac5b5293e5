#pragma once
// Collectives as the engine runs them (docs/simulator.md). No SimGrid here: the algorithm
// choice, the closed forms and the ring step bookkeeping are plain code with in-process tests; the engine
// turns each startable ring step into a host-to-host comm.
//
// Ring (NCCL-like): per call, all-reduce = 2(n-1) steps, all-gather = n-1 steps; in step k rank i sends
// S/n bytes to rank i+1. Comm (k, i) needs comm (k-1, i-1) (it delivered the data) and comm (k-1, i)
// (rank i's previous send). `count` folded calls run back to back as one sequence of count * steps steps
// under the same rule (rank i's first step of call c+1 waits until it sent and received its last chunk
// of call c).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cost/ring_collective.h"  // ring_steps, the closed form of one call
#include "core/lower/lowering.h"

namespace pipescope::sim {

enum class CollAlgo : std::uint8_t {
  Ring,       // explicit ring steps (exact alpha-beta, contends with everything else)
  Aggregate,  // per ring: a (count*steps - 1) * alpha delay, then one comm i -> i+1 of count*steps*S/n
  Analytic,   // a pure delay: NCCL's own model of the call (core/cost/nccl_model.h) on the ring's group
};

// Algorithm used for a group under an option value; "auto" is "analytic" for every group: tensor-parallel
// all-reduces run per layer on the critical path, where NCCL's algorithm and protocol choice and its per-hop
// latencies decide the time, and data-parallel rings cross nodes on one NCCL channel per NIC, which one
// simulated ring of host-to-host comms (one NIC per node boundary) cannot express. "ring" keeps explicit steps
// (contention with pipeline traffic on the links) for the studies that need it. Throws std::invalid_argument on
// an unknown value.
CollAlgo collective_algorithm(const std::string& option);
void validate_collectives_option(const std::string& option);
const char* to_string(CollAlgo a);

// The order in which a ring visits its GPUs, as NCCL's topology search would pick it on cube-mesh nodes
// (an all-reduce or all-gather does not depend on the order): each run of consecutive members on one
// node is permuted so that neighbours are NVLink-connected where possible, maximising the weakest hop
// (NVLink links: 0 = SYS, 1 = NV1, 2 = NV2) and then the total. A ring inside one node is searched as a
// cycle, a run inside a multi-node ring as a path (the NICs hang off every GPU alike). Rings whose node
// appears in more than one run are returned unchanged. `links(a, b)` gives the links between local GPUs.
std::vector<std::int32_t> nvlink_ring_order(const std::vector<std::int32_t>& ring, int gpus_per_node,
                                            int (*links)(int, int));

// Step bookkeeping of `rings` concurrent rings of n ranks each, `steps` steps per rank. A position is
// ring * n + rank; at most one comm per position is in flight.
class RingProgress {
 public:
  void reset(int rings, int n, std::uint32_t steps);
  // Positions whose first comm can start (all of them, step 0). Appends to `out`.
  void start(std::vector<std::uint32_t>& out);
  // The comm of `pos` finished. Writes up to 2 newly startable positions to `next` and returns how many.
  int finish(std::uint32_t pos, std::uint32_t next[2]);
  bool done() const { return ranks_left_ == 0; }
  // Step index of the comm that `pos` most recently started.
  std::uint32_t current_step(std::uint32_t pos) const { return launched_[pos] - 1; }
  int n() const { return n_; }

 private:
  bool try_start(std::uint32_t pos);
  int n_ = 0, rings_ = 0;
  std::uint32_t steps_ = 0, ranks_left_ = 0;
  std::vector<std::uint32_t> done_, launched_;
};

}  // namespace pipescope::sim
