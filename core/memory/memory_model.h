#pragma once
// Memory model: per pipeline rank, static state (weights, gradients, optimizer state) plus activations
// of the micro-batches (or slices/chunks) in flight at the worst point of the rank's program, walked
// from the schedule itself (so every schedule family gets its own peak). Bytes, SI.
// Formulas at the top of core/memory/memory_model.cc.

#include <vector>

#include "core/ir/schedule.h"
#include "core/model/config.h"

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
  // With the caching-allocator replay (AllocatorReplay::On): the static state plus the most the allocator held
  // (torch.cuda.max_memory_reserved(); up to its first failure), and whether some allocation found no room even
  // after the cache was released (PyTorch's out-of-memory error; possible while peak_bytes fits). 0 / false
  // without the replay.
  double reserved_peak_bytes = 0;
  bool allocator_failed = false;
};

struct MemoryReport {
  std::vector<RankMemory> ranks;  // size p
  double device_bytes = 0;
  bool allocator_replayed = false;  // reserved_peak_bytes and allocator_failed are set
  bool any_oom() const;
};

// Activation bytes stored by one layer for b sequences of `tokens` tokens each (per TP GPU), attending to
// `context` earlier tokens as well (token slices; the score matrix is tokens x (context + tokens)). Follows
// training.flash_attention (no score matrix) and parallel.sequence_parallel (nothing replicated over TP).
double layer_activation_bytes(const Scenario& s, int b, int tokens, int context = 0);
// The score-matrix part of layer_activation_bytes alone (5 B per score at 2-byte activations; 0 with flash).
double layer_score_bytes(const Scenario& s, int b, int tokens, int context = 0);
// K and V of `tokens` tokens of b sequences for one layer on one TP GPU: 2 * b * tokens * (h/t) * e.
double layer_kv_bytes(const Scenario& s, int b, int tokens);

// The largest batch whose GPipe baseline fits: micro-batches of one sequence, no token slicing, the whole
// per-replica mini-batch in flight (how TeraPipe chose B, docs/papers.md#terapipe). Token slicing only
// shrinks the score rectangles, so the sliced run of the same batch fits too.
struct MaxBatch {
  int per_replica = 0;            // B_r: sequences per pipeline replica (0 = not even one sequence fits)
  int global = 0;                 // B = B_r * dp (Table 1's B)
  double limit_bytes = 0;         // per-GPU capacity used
  double static_bytes = 0;        // weights + gradients + optimizer state, worst rank
  double per_sequence_bytes = 0;  // activations of one more sequence, worst rank
  double peak_bytes = 0;          // peak at per_replica (worst rank)
  int worst_rank = 0;             // the rank that binds
};
// limit_bytes <= 0: the device memory. Throws std::invalid_argument on a scenario the model cannot take.
MaxBatch max_batch_gpipe(const Scenario& s, double limit_bytes = 0);

// AllocatorReplay::On also replays every rank's activation tensors, in the walk's order, through the model of
// PyTorch's caching allocator (core/memory/caching_allocator.h) for the reserved bytes; it costs a set operation per
// tensor, so searches leave it off.
enum class AllocatorReplay { Off, On };
// Throws std::invalid_argument when the schedule does not match the scenario (p, v, seq_len) or a backward
// comes before its forward on a rank.
MemoryReport memory_report(const Scenario& s, const Schedule& sched, AllocatorReplay replay = AllocatorReplay::Off);

}  // namespace pipescope
