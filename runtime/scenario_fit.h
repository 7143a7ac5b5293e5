#pragma once
// Fitting a scenario to what the runtime can run here: `pipescope validate --layers/--hidden/--dp/...` shrinks
// a scenario (fewer layers, a smaller hidden size, fewer ranks), and the exactness tests build tiny ones.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/plan/pipeline.h"

namespace pipescope::runtime {

// Overrides; unset fields keep the scenario's value.
struct ScenarioOverrides {
  std::optional<std::string> schedule;  // schedule.kind
  std::optional<int> layers, hidden, heads, ffn, vocab, seq_len;
  std::optional<int> dp, pp, tp, v, micro_batch_size, global_batch, slices;
  // Mixture of experts: model.num_experts, moe_top_k, moe_ffn_hidden, parallel.ep.
  std::optional<int> experts, top_k, expert_ffn, ep;
  std::optional<std::vector<int>> slice_tokens;  // sets slicing: explicit and seq_slices
  std::optional<std::vector<int>> stage_layers;  // parallel.stage_layers (empty list = even split)
};

// Applies the overrides and fits the rest:
//   - ffn follows a changed hidden size in the scenario's ratio (4h for GPT) unless given;
//   - the cluster is refit to dp * pp * tp GPUs (whole nodes of the same size, or one smaller node);
//   - embeddings are untied (model.tied_embeddings: false): the runtime's LM head is untied, so the simulated
//     twin must not schedule an embedding all-reduce either;
//   - a schedule without token slicing drops seq_slices / slice_tokens;
//   - a scenario's parallel.stage_layers that no longer fits changed layers / pp / v is an error (give
//     stage_layers, or an empty list for the even split);
//   - MoE: a changed hidden size scales moe_ffn_hidden and moe_shared_ffn_hidden like ffn; experts on a dense
//     model get moe_ffn_hidden = ffn_hidden and top-k 1 unless given.
// Then validates (throws ScenarioError naming the scenario and the key, e.g. "parallel.pp").
Scenario fit_scenario(const Scenario& base, const ScenarioOverrides& o);

// A tiny scenario for runtime tests: model h / a / L / s / V, the given schedule and parallel sizes, one
// sequence per micro-batch, m micro-batches per replica (global batch m * dp), without scatter/gather.
Scenario tiny_scenario(const std::string& schedule, int dp, int pp, int v, int m, int layers, int hidden, int heads,
                       int seq_len, int vocab, int slices = 1, const std::vector<int>& slice_tokens = {}, int tp = 1,
                       const std::vector<int>& stage_layers = {});

// core/plan/pipeline.h prepare() with constant costs (1 s forward, 2 s backward per stage, 1 MB activations,
// 1 MB gradients; with tp > 1 the layers' 2 TP all-reduces per layer and compute op, 1 MB each): the runtime
// ignores costs, so tests need neither the analytic model nor a profile. Lowered with the scenario's
// schedule.scatter_gather and training.distributed_optimizer (reduce-scatter, sharded step, parameter all-gather).
std::unique_ptr<Prepared> prepare_with_constant_costs(const Scenario& s);

}  // namespace pipescope::runtime
