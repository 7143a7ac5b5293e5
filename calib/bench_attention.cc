// Attention with K/V context on its own (docs/calibration.md, "attention with context"): for each head of
// b sequences, S = Q K^T / sqrt(dh) over the c + l keys with the causal mask, P = softmax(S), O = P V, and the
// backward (dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = dS K, dK = dS^T Q): the plain attention
// with a materialised l x (c + l) score matrix that the CPU reference kernels run. CPU backends (Eigen).
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "calib/benches.h"
#include "core/model/backends.h"

namespace pipescope::calib {
namespace {

template <class T>
std::pair<std::size_t, std::size_t> time_attention(int b, int heads, int dh, int l, int c, TablePoints& pts) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int n = c + l;
  const Mat q = Mat::Random(l, dh), k = Mat::Random(n, dh), v = Mat::Random(n, dh), dout = Mat::Random(l, dh);
  Mat s(l, n), pr(l, n), o(l, dh), dp(l, n), ds(l, n), dq(l, dh), dk(n, dh), dv(n, dh);
  const T scale = T(1) / std::sqrt(static_cast<T>(dh));
  auto forward = [&] {
    s.noalias() = (q * k.transpose()) * scale;
    for (int i = 0; i < l; i++) {
      const int keys = c + i + 1;  // causal: query c + i sees keys 0 .. c + i
      const T mx = s.row(i).head(keys).maxCoeff();
      pr.row(i).head(keys) = (s.row(i).head(keys).array() - mx).exp();
      pr.row(i).head(keys) /= pr.row(i).head(keys).sum();
      pr.row(i).tail(n - keys).setZero();
    }
    o.noalias() = pr * v;
  };
  auto backward = [&] {
    dv.noalias() = pr.transpose() * dout;
    dp.noalias() = dout * v.transpose();
    for (int i = 0; i < l; i++) {
      const T dot = dp.row(i).dot(pr.row(i));
      ds.row(i) = pr.row(i).array() * (dp.row(i).array() - dot) * scale;
    }
    dq.noalias() = ds * k;
    dk.noalias() = ds.transpose() * q;
  };
  const int reps = b * heads;
  const std::size_t f = pts.time([&] {
    for (int r = 0; r < reps; r++) forward();
  });
  forward();
  const std::size_t bw = pts.time([&] {
    for (int r = 0; r < reps; r++) backward();
  });
  return {f, bw};
}

}  // namespace

void bench_attention(const std::string& backend, const ComputeConfig& cfg, int b, LayerTable& t) {
  if (!backend_on(backend, BackendDevice::Cpu)) return;
  const auto& s = cfg.shape;
  const int dh = s.layer.head_dim(), heads = s.layer.heads;
  const std::vector<std::pair<int, int>> grid = context_attention_grid(cfg);
  if (grid.empty()) return;
  Progress prog("attention with context, micro-batch " + std::to_string(b), static_cast<int>(grid.size()),
                cfg.progress);
  auto timer = thread_cpu_timer();
  TablePoints pts(*timer, cfg.policy);
  std::vector<std::pair<std::size_t, std::size_t>> at;
  for (auto [l, c] : grid) {
    at.push_back(backend_named(backend).kind == BackendKind::CpuF64 ? time_attention<double>(b, heads, dh, l, c, pts)
                                                                    : time_attention<float>(b, heads, dh, l, c, pts));
    prog.step("l = " + std::to_string(l) + ", c = " + std::to_string(c), context_attention_point_est_s(cfg, b, l, c));
  }
  for (std::size_t i = 0; i < grid.size(); i++) {
    const TimeStats f = pts.at(at[i].first), bw = pts.at(at[i].second);
    t.attention.push_back(
        ContextPoint{grid[i].first, grid[i].second, f.median_s, bw.median_s, f.rel_spread(), bw.rel_spread()});
  }
}

AttentionModel bench_attention_kernel(const std::string& backend, int head_dim, int max_seq, const TimingPolicy& policy,
                                      bool progress, double est_s) {
  const std::vector<std::pair<int, int>> grid = attention_kernel_grid(max_seq);
  Progress prog("attention kernel, head_dim " + std::to_string(head_dim), static_cast<int>(grid.size()), progress,
                est_s);
  auto timer = thread_cpu_timer();
  TablePoints table(*timer, policy);
  std::vector<std::pair<std::size_t, std::size_t>> at;
  for (auto [l, c] : grid) {
    at.push_back(backend_named(backend).kind == BackendKind::CpuF64
                     ? time_attention<double>(1, 1, head_dim, l, c, table)
                     : time_attention<float>(1, 1, head_dim, l, c, table));
    prog.step("l = " + std::to_string(l) + ", c = " + std::to_string(c));
  }
  std::vector<AttentionSample> pts;
  for (std::size_t i = 0; i < grid.size(); i++)
    pts.push_back(AttentionSample{grid[i].first, grid[i].first + grid[i].second, table.at(at[i].first).median_s,
                                  table.at(at[i].second).median_s});
  return fit_attention_model(head_dim, pts);
}

}  // namespace pipescope::calib
