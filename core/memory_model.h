#pragma once
// Memory model: per pipeline rank, static state (weights, gradients, optimizer state) plus activations
// of the micro-batches (or slices/chunks) in flight at the worst point of the rank's program, walked
// from the schedule itself (so every schedule family gets its own peak). Bytes, SI.
// Formulas at the top of core/memory_model.cc.

#include <vector>

#include "core/config.h"
#include "core/schedule.h"

namespace pipescope {

struct RankMemory {
  double weights_bytes = 0;
  double grads_bytes = 0;
  double optimizer_bytes = 0;
  double activation_peak_bytes = 0;
  double peak_in_flight = 0;  // in-flight micro-batch units (whole stage-micro-batches) at the peak
  double max_in_flight = 0;   // largest in-flight unit count anywhere in the rank's program
  double peak_bytes = 0;      // total
  bool oom = false;           // peak_bytes > device memory
};

struct MemoryReport {
  std::vector<RankMemory> ranks;  // size p
  double device_bytes = 0;
  bool any_oom() const;
};

// Activation bytes stored by one layer for b sequences of `tokens` tokens each (per TP GPU), attending to
// `context` earlier tokens as well (token slices; the score matrix is tokens x (context + tokens)).
double layer_activation_bytes(const Scenario& s, int b, int tokens, int context = 0);

// Throws std::invalid_argument when the schedule does not match the scenario (p, v, seq_len) or a backward
// comes before its forward on a rank.
MemoryReport memory_report(const Scenario& s, const Schedule& sched);

}  // namespace pipescope
