// The measurement grids shared by the benchmarks, and the FLOP estimates that size progress and budgets.
#include <algorithm>

#include "calib/benches.h"

namespace pipescope::calib {

std::vector<int> slice_lengths(const ComputeConfig& cfg) {
  const int L = cfg.longest(), g = cfg.grain;
  std::vector<int> ls;
  if (!cfg.sparse_lengths) {
    for (int l = g; l <= L; l += g) ls.push_back(l);
    return ls;
  }
  // grain x {1, 2, 3, 4, 6, 8, 12, 16, ...}: about two lengths per octave, and the longest multiple of grain.
  for (long p2 = 1; p2 * g <= L; p2 *= 2) {
    ls.push_back(static_cast<int>(p2 * g));
    if (p2 >= 2 && 3 * p2 / 2 * g <= L) ls.push_back(static_cast<int>(3 * p2 / 2 * g));
  }
  // The context fit needs t(l, 0) at every l of the context grid.
  if (const int step = context_step(cfg); step > 0)
    for (int l = step; l <= L; l += step) ls.push_back(l);
  std::sort(ls.begin(), ls.end());
  if (!ls.empty() && L / g * g != ls.back()) ls.push_back(L / g * g);
  ls.erase(std::unique(ls.begin(), ls.end()), ls.end());
  return ls;
}

int context_step(const ComputeConfig& cfg) {
  if (cfg.context_steps <= 0) return 0;
  return std::max(cfg.grain, (cfg.longest() / cfg.context_steps) / cfg.grain * cfg.grain);
}

std::vector<std::pair<int, int>> context_points(const ComputeConfig& cfg) {
  std::vector<std::pair<int, int>> grid;
  const int step = context_step(cfg), L = cfg.longest();
  if (step == 0) return grid;
  for (int l = step; l <= L; l += step)
    for (int c = step; c + l <= L; c += step) grid.emplace_back(l, c);
  return grid;
}

double layer_flops(const ComputeConfig& cfg, int b, int l, int c) {
  const double h = cfg.shape.layer.hidden, f = cfg.shape.layer.ffn;
  // QKV 3h^2 + projection h^2 + MLP 2 h f per token; scores and weighted sum 2 (c + l) h per token.
  return 2.0 * b * l * (4 * h * h + 2 * h * f) + 4.0 * b * l * (c + l) * h;
}

double head_flops(const ComputeConfig& cfg, int b, int l) {
  return 2.0 * b * l * static_cast<double>(cfg.shape.layer.hidden) * cfg.shape.vocab;
}

double attention_flops(const ComputeConfig& cfg, int b, int l, int c) {
  return 4.0 * b * l * (c + l) * static_cast<double>(cfg.shape.layer.hidden);
}

}  // namespace pipescope::calib
