#include "core/cost/moe_load.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/model/placement.h"

namespace pipescope {
namespace {

// SplitMix64: a counter-based generator, so a layer's draws depend on (seed, layer, expert) alone and are the same
// on every platform (the standard library's distributions are not).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double unit_open(std::uint64_t x) { return (static_cast<double>(x >> 11) + 0.5) / 9007199254740992.0; }  // (0, 1)

// A standard normal draw (Box-Muller) for expert e of layer `layer`.
double normal(int seed, int layer, int e) {
  const std::uint64_t key = mix(mix(static_cast<std::uint64_t>(seed)) ^
                                (static_cast<std::uint64_t>(layer) << 32 | static_cast<std::uint32_t>(e)));
  const double u1 = unit_open(mix(key)), u2 = unit_open(mix(key ^ 0x5bd1e995ULL));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

bool trained(const Scenario& s) { return s.training.moe_routing == "trained" && s.training.moe_expert_load_cv > 0; }

// Each expert-parallel GPU's load: the mean share of its E / ep consecutive experts (Megatron's placement).
std::vector<double> gpu_loads(const Scenario& s, const std::vector<double>& shares) {
  const int per_gpu = s.parallel.ep > 0 ? s.model.moe_experts / s.parallel.ep : 0;
  if (per_gpu < 1 || per_gpu * s.parallel.ep != s.model.moe_experts)
    throw std::invalid_argument("parallel.ep = " + std::to_string(s.parallel.ep) + " does not divide the " +
                                std::to_string(s.model.moe_experts) + " experts");
  std::vector<double> load(static_cast<std::size_t>(s.parallel.ep), 0.0);
  for (int g = 0; g < s.parallel.ep; g++) {
    for (int e = g * per_gpu; e < (g + 1) * per_gpu; e++) load[g] += shares[e];
    load[g] /= per_gpu;
  }
  return load;
}

}  // namespace

std::vector<double> expert_shares(const Scenario& s, int layer) {
  const ModelSpec& m = s.model;
  if (layer < 0 || layer >= m.layers || !m.moe_layer(layer))
    throw std::invalid_argument("expert_shares: layer " + std::to_string(layer) + " is not an MoE layer");
  const int E = m.moe_experts;
  std::vector<double> p(static_cast<std::size_t>(E), 1.0);
  if (trained(s)) {
    const double sigma = std::sqrt(std::log1p(s.training.moe_expert_load_cv * s.training.moe_expert_load_cv));
    double sum = 0;
    for (int e = 0; e < E; e++) sum += p[e] = std::exp(sigma * normal(s.training.moe_routing_seed, layer, e));
    for (double& x : p) x *= E / sum;  // mean 1: every token still goes to k experts
  }
  const double C = s.training.moe_capacity_factor;
  if (C > 0)
    for (double& x : p) x = s.training.moe_pad_to_capacity ? C : std::min(x, C);
  return p;
}

double layer_expert_overload(const Scenario& s, int layer) {
  const std::vector<double> load = gpu_loads(s, expert_shares(s, layer));
  return *std::max_element(load.begin(), load.end());
}

StageExpertLoad stage_expert_load(const Scenario& s, int stage) {
  StageExpertLoad out;
  if (!s.model.moe() || !expert_load_varies(s)) return out;
  const LayerRange r = stage_layer_range(s, stage);
  std::vector<double> gpu_sum(static_cast<std::size_t>(s.parallel.ep), 0.0);
  double time = 0;
  int n = 0;
  for (int i = r.first; i < r.first + r.count; i++) {
    if (!s.model.moe_layer(i)) continue;
    const std::vector<double> load = gpu_loads(s, expert_shares(s, i));
    for (std::size_t g = 0; g < load.size(); g++) gpu_sum[g] += load[g];
    time += *std::max_element(load.begin(), load.end());
    n++;
  }
  if (n == 0) return out;
  out.time = time / n;
  out.memory = *std::max_element(gpu_sum.begin(), gpu_sum.end()) / n;
  return out;
}

bool expert_load_varies(const Scenario& s) { return trained(s) || s.training.moe_capacity_factor > 0; }

}  // namespace pipescope
