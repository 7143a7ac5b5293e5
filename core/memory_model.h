#pragma once
// Memory model: per pipeline rank, static state (weights, gradients, optimizer state) plus activations
// of the micro-batches (or slices/chunks) in flight at the worst point of the rank's program, walked
// from the schedule itself (so every schedule family gets its own peak). Bytes, SI.

#include <vector>

#include "core/config.h"
#include "core/schedule.h"

namespace pipescope {

struct RankMemory {
  double weights_bytes = 0;
  double grads_bytes = 0;
  double optimizer_bytes = 0;
  double activation_peak_bytes = 0;
  double peak_in_flight = 0;      // in-flight micro-batch units (whole stage-micro-batches) at the peak
  double peak_bytes = 0;          // total
  bool oom = false;               // peak_bytes > device memory
};

struct MemoryReport {
  std::vector<RankMemory> ranks;  // size p
  double device_bytes = 0;
  bool any_oom() const;
};

// Activation bytes stored by one layer for b sequences of `tokens` tokens each (per TP GPU).
double layer_activation_bytes(const Scenario& s, int b, int tokens);

MemoryReport memory_report(const Scenario& s, const Schedule& sched);

}  // namespace pipescope
