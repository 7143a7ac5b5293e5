#pragma once

#include <vector>

#include "core/model/config.h"

namespace pipescope {

// Expert load imbalance and capacity (docs/moe.md, "Load imbalance"). The experts of an MoE layer receive shares
// of the routed tokens with mean 1: all 1 with training.moe_routing balanced; with trained, drawn once per layer
// (lognormal, coefficient of variation training.moe_expert_load_cv, seeded by training.moe_routing_seed and the
// layer's index: the same router for every layout of the model). A capacity factor C caps each share at C
// (dropped tokens), or with padding sets every share to C. An expert-parallel GPU holds E / ep consecutive
// experts; its load is their mean share, and the busiest GPU's sets both the grouped expert GEMMs' time and what the
// all-to-all must deliver to it, for every GPU of the group (they meet at the combine).

// The experts' shares of MoE layer `layer` (0-based over all layers; it must be an MoE layer), capacity applied.
std::vector<double> expert_shares(const Scenario& s, int layer);
// The busiest expert-parallel GPU's load / the mean of a balanced routing, for MoE layer `layer`.
double layer_expert_overload(const Scenario& s, int layer);
// Of virtual stage g's MoE layers: the mean of their overloads (what the stage's expert kernels and all-to-alls are
// scaled by), and the largest mean load of one GPU over them (its stored expert activations). 1 without MoE layers.
struct StageExpertLoad {
  double time = 1;
  double memory = 1;
};
StageExpertLoad stage_expert_load(const Scenario& s, int stage);
// Whether any layer's load differs from the balanced one (the cost model then keys its memo by stage).
bool expert_load_varies(const Scenario& s);

}  // namespace pipescope
