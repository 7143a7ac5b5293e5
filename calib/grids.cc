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

std::vector<int> memory_kernel_rows(int cols, int elem_bytes) {
  // From a few rows to 1024 (the layer activations of the shapes a CPU runs: 256 tokens x 4h at h = 128), while a
  // tensor stays within 128 MiB: far past the last-level cache already, where t = fixed + bytes / bw holds. (Softmax
  // over a 51,200-token vocabulary reached 420 MB per tensor at 1024 rows, four of them made per point: 14 s of a
  // quick calibration's first-touch page faults.) At least the first three sizes, for the fit.
  constexpr double kMaxTensorBytes = 128.0 * (1 << 20);
  std::vector<int> rows;
  for (int r = 4; r <= 1024; r *= 2)
    if (rows.size() < 3 || static_cast<double>(r) * cols * elem_bytes <= kMaxTensorBytes) rows.push_back(r);
  return rows;
}

int memory_kernel_cols(MemoryKernel k, int hidden, int vocab) { return k == MemoryKernel::Softmax ? vocab : hidden; }

std::vector<std::array<int, 3>> gemm_spread_shapes() {
  // A spread of shapes independent of any one model, so the fit transfers: m (token rows) and n, k (widths) over
  // two decades each, capped at 0.07 GFLOP a call (the layers of the shapes a CPU runs; longer calls mostly measure
  // the machine's other load).
  std::vector<std::array<int, 3>> shapes;
  for (int m : {8, 24, 64, 192, 512})
    for (int n : {16, 48, 128, 384, 1024})
      for (int k : {16, 64, 256, 1024})
        if (2.0 * m * n * k <= 7e7) shapes.push_back({m, k, n});
  return shapes;
}

std::vector<std::pair<int, int>> attention_kernel_grid(int max_seq) {
  std::vector<std::pair<int, int>> grid;  // (l, c): l over powers of two, c = 0, a quarter and half the sequence
  for (int l = 8; l <= max_seq; l *= 2)
    for (int c : {0, max_seq / 4, max_seq / 2})
      if (c + l <= max_seq && (c == 0 || c >= 8)) grid.emplace_back(l, c);
  return grid;
}

int attention_kernel_length(const ComputeConfig& cfg) {
  // Up to the sequence length, or under a quick budget (which shortens the layer table) up to a quarter of it: the
  // quadratic term dominates there already, and the default scenario's 2048 took 49 of its 236 s of compute.
  return std::max(cfg.longest(), cfg.shape.max_seq / 4);
}

std::vector<int> attention_kernel_head_dims(const ComputeConfig& cfg) {
  // Half, the same and twice the model's head dimension (at least 4): the fit's head-dimension term.
  const int d = cfg.shape.layer.head_dim();
  std::vector<int> dims;
  for (int hd : {d / 2, d, 2 * d})
    if (hd >= 4) dims.push_back(hd);
  return dims;
}

kernels::ModelShape held_out_shape(const kernels::ModelShape& s) {
  // Half the calibrated width and heads (the same head dimension); double when that is too small.
  kernels::ModelShape h = s;
  const bool halve = s.layer.heads % 2 == 0 && s.layer.hidden / 2 >= 32 && s.layer.ffn % 2 == 0;
  h.layer.hidden = halve ? s.layer.hidden / 2 : s.layer.hidden * 2;
  h.layer.heads = halve ? s.layer.heads / 2 : s.layer.heads * 2;
  h.layer.ffn = halve ? s.layer.ffn / 2 : s.layer.ffn * 2;
  h.layer.tp = 1;
  return h;
}

std::vector<std::pair<int, int>> transfer_points(int longest) {
  // Up to the longest length the layer table measured (a quick budget lowers it): the check must not cost more
  // than the table.
  return {{longest / 2, 0}, {std::max(1, longest / 4), longest / 2}};
}

std::vector<std::pair<int, int>> context_attention_grid(const ComputeConfig& cfg) {
  std::vector<std::pair<int, int>> grid;  // the context grid with c = 0 too
  const int step = context_step(cfg), L = cfg.longest();
  if (step == 0) return grid;
  for (int l = step; l <= L; l += step)
    for (int c = 0; c + l <= L; c += step) grid.emplace_back(l, c);
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
