#pragma once
// Placement: which GPU runs (data-parallel replica d, pipeline rank r, tensor-parallel rank t).
// GPU indices are global: gpu = node * gpus_per_node + local index. Pure data, no SimGrid.

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace pipescope {

struct Placement {
  int dp = 1, p = 1, tp = 1;
  int gpus_per_node = 1;
  std::vector<std::int32_t> gpu;   // index (d * p + r) * tp + t

  int gpu_of(int worker, int tp_rank = 0) const { return gpu[static_cast<std::size_t>(worker) * tp + tp_rank]; }
  int node_of_gpu(int g) const { return g / gpus_per_node; }
};

// Layouts:
// - "megatron": rank = r * (n / p) + d * tp + t (TP innermost, then DP, PP outermost; spec/megatron.md 3.4)
// - "stage-major": same as megatron (alias)
// - "replica-major": rank = d * (p * tp) + r * tp + t (a replica's pipeline is contiguous)
// - "terapipe": TeraPipe's layout (TP inside a node, pipeline neighbours on NVLink-connected GPUs)
// Throws std::invalid_argument when dp * p * tp exceeds the cluster or the name is unknown.
Placement make_placement(const std::string& layout, int dp, int p, int tp, const ClusterSpec& cluster);

}  // namespace pipescope
