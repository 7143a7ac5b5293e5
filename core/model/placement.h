#pragma once
// Placement: which GPU runs (data-parallel replica d, pipeline rank r, tensor-parallel rank t), and which
// transformer layers each virtual stage holds. GPU indices are global: gpu = node * gpus_per_node + local
// index. Pure data, no SimGrid.

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

struct Placement {
  int dp = 1, p = 1, tp = 1;
  int cp = 1;  // context-parallel ranks of each worker (core/cost/context_parallel.h)
  int gpus_per_node = 1;
  // index (d * p + r) * width() + lane; lane = c * tp + t (context-parallel rank c, tensor-parallel rank t)
  std::vector<std::int32_t> gpu;

  int width() const { return tp * cp; }  // GPUs per worker
  int gpu_of(int worker, int lane = 0) const { return gpu[static_cast<std::size_t>(worker) * width() + lane]; }
  int node_of_gpu(int g) const { return g / gpus_per_node; }
};

// Layouts:
// - "megatron": rank = r * (n / p) + d * tp * cp + c * tp + t (Megatron's order tp, cp, dp, pp: TP innermost,
//   then context parallelism, DP, PP outermost; docs/papers.md#megatron)
// - "stage-major": same as megatron (alias)
// - "replica-major": rank = d * (p * tp * cp) + r * tp * cp + c * tp + t (a replica's pipeline is contiguous)
// - "terapipe": TeraPipe's layout (TP inside a node, pipeline neighbours on NVLink-connected GPUs; cp = 1 only)
// Throws std::invalid_argument when dp * p * tp * cp exceeds the cluster or the name is unknown.
Placement make_placement(const std::string& layout, int dp, int p, int tp, const ClusterSpec& cluster, int cp = 1);
// NVLink links between local GPUs a and b (0..7) of a cube-mesh node: 0 (PCIe/SYS), 1 or 2 (search's estimate).
int cube_mesh_nvlinks(int a, int b);

// ---------------------------------------------------------------- layer placement
// The one place that says which transformer layers virtual stage g (0 .. stages-1) holds: stage_layers[g]
// layers when the list is given (parallel.stage_layers, uneven layouts), else layers / stages each; stage g
// holds the global layers [first, first + count) after those of stages 0..g-1. The embedding stays on stage 0
// and the LM head on the last stage. Every user of "layers per stage" (cost, memory, runtime) goes through
// these. Throws std::invalid_argument when the list has the wrong length, a stage has no layer, the sum is not
// `layers`, or (without a list) `layers` is not divisible by `stages`.
struct LayerRange {
  int first = 0, count = 0;
};
LayerRange stage_layer_range(int layers, const std::vector<int>& stage_layers, int stages, int stage);
// model.layers, parallel.stage_layers over the scenario's model stages (pp * v; pp for DualPipe, whose virtual stages
// g and g + pp are copies of one model stage: model_stage_of in core/ir/schedule.h).
LayerRange stage_layer_range(const Scenario& s, int stage);
// The model stages parallel.stage_layers lists (pp * v, or pp with DualPipe's two copies).
int scenario_model_stages(const Scenario& s);
// The copies of each model stage the schedule holds (2 with DualPipe, else 1): they reduce their gradients together
// and the distributed optimizer shards over them like more replicas.
int stage_copies(const Scenario& s);
// Whether virtual stage `stage` runs the embedding (model stage 0) / the LM head and loss (the last model stage).
bool holds_embedding(const Scenario& s, int stage);
bool holds_head(const Scenario& s, int stage);
// Throws std::invalid_argument (the message names parallel.stage_layers / model.layers) on a layout that does
// not fit; the scenario validator reports the same conditions with the file position.
void check_stage_layers(int layers, const std::vector<int>& stage_layers, int stages);
// Megatron's uneven split of `layers` over `stages` that do not divide them: every stage ceil(layers / stages), the
// first and the last one layer lighter in turn (they hold the embedding and the head) until the sum fits. Empty when
// the layers divide evenly (the even split needs no list).
std::vector<int> ends_lighter_split(int layers, int stages);
// Layers held by pipeline rank `rank`: its v virtual stages (loop or V placement: scenario_stage_style).
int rank_layer_count(const Scenario& s, int rank);
// Of those, the layers with routed experts (ModelSpec::moe_layer); per virtual stage and per rank.
int stage_moe_layer_count(const Scenario& s, int stage);
int rank_moe_layer_count(const Scenario& s, int rank);

}  // namespace pipescope
