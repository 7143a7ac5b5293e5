// Least-squares fits of the kernel models (core/model/kernel_model.h) to measured kernel timings, relative-error
// weighted, non-negative coefficients, each with its error on held-out points.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/model/kernel_model.h"

namespace pipescope {

namespace {

// min sum ((X b - y) / y)^2 over b >= 0: the best of the column subsets whose unconstrained solution is
// non-negative (a handful of columns: exhaustive). Returns the coefficients (0 for dropped columns).
Eigen::VectorXd nonneg_relative_lsq(const Eigen::MatrixXd& X, const Eigen::VectorXd& y) {
  const int n = static_cast<int>(X.cols());
  Eigen::MatrixXd Xw = X;
  Eigen::VectorXd ones = Eigen::VectorXd::Ones(y.size());
  for (int r = 0; r < X.rows(); r++) Xw.row(r) /= y(r);
  double best_err = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best = Eigen::VectorXd::Zero(n);
  for (int mask = 1; mask < (1 << n); mask++) {
    std::vector<int> cols;
    for (int j = 0; j < n; j++)
      if (mask & (1 << j)) cols.push_back(j);
    Eigen::MatrixXd A(X.rows(), static_cast<Eigen::Index>(cols.size()));
    for (std::size_t j = 0; j < cols.size(); j++) A.col(static_cast<Eigen::Index>(j)) = Xw.col(cols[j]);
    const Eigen::VectorXd b = A.colPivHouseholderQr().solve(ones);
    if ((b.array() < 0).any() || !b.allFinite()) continue;
    const double err = (A * b - ones).squaredNorm();
    if (err < best_err) {
      best_err = err;
      best.setZero();
      for (std::size_t j = 0; j < cols.size(); j++) best(cols[j]) = b(static_cast<Eigen::Index>(j));
    }
  }
  return best;
}

template <class P>
void split(const std::vector<P>& pts, int every, std::vector<P>& train, std::vector<P>& test) {
  for (std::size_t i = 0; i < pts.size(); i++)
    (every > 1 && pts.size() >= 8 && static_cast<int>(i % every) == every - 1 ? test : train).push_back(pts[i]);
}

double mean_abs_rel(const std::vector<std::pair<double, double>>& pred_meas) {
  if (pred_meas.empty()) return 0;
  double s = 0;
  for (auto [p, m] : pred_meas) s += std::abs(p - m) / m;
  return s / static_cast<double>(pred_meas.size());
}

void need_points(std::size_t n, std::size_t min, const std::string& what) {
  if (n < min)
    throw std::invalid_argument("kernel fit " + what + ": needs at least " + std::to_string(min) + " points, got " +
                                std::to_string(n));
}

GemmModel fit_gemm_lsq(const std::vector<GemmSample>& pts) {
  // t = fixed + (2 / R) (mnk + k0 mn + n0 mk + m0 nk): linear in (fixed, 2/R, 2 k0/R, 2 n0/R, 2 m0/R).
  Eigen::MatrixXd X(static_cast<Eigen::Index>(pts.size()), 5);
  Eigen::VectorXd y(static_cast<Eigen::Index>(pts.size()));
  for (std::size_t i = 0; i < pts.size(); i++) {
    const auto r = static_cast<Eigen::Index>(i);
    const double m = pts[i].m, n = pts[i].n, k = pts[i].k;
    X.row(r) << 1, 2 * m * n * k, 2 * m * n, 2 * m * k, 2 * n * k;
    y(r) = pts[i].seconds;
  }
  const Eigen::VectorXd b = nonneg_relative_lsq(X, y);
  if (!(b(1) > 0)) throw std::invalid_argument("kernel fit GEMM: no positive rate fits the points");
  GemmModel g;
  g.fixed_s = b(0);
  g.rate_flops = 1.0 / b(1);
  g.k0 = b(2) / b(1);
  g.n0 = b(3) / b(1);
  g.m0 = b(4) / b(1);
  return g;
}

// One pass of outlier rejection: points more than max(25%, 3 x the median) off the first fit (a call preempted by
// another process, a cache-unfriendly outlier shape) are dropped and the rest refitted.
GemmModel fit_gemm_once(const std::vector<GemmSample>& pts) {
  const GemmModel first = fit_gemm_lsq(pts);
  std::vector<double> err;
  for (const auto& p : pts) err.push_back(std::abs(first.seconds(p.m, p.n, p.k) - p.seconds) / p.seconds);
  std::vector<double> sorted = err;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  const double bound = std::max(0.25, 3 * sorted[sorted.size() / 2]);
  std::vector<GemmSample> kept;
  for (std::size_t i = 0; i < pts.size(); i++)
    if (err[i] <= bound) kept.push_back(pts[i]);
  return kept.size() >= 4 && kept.size() < pts.size() ? fit_gemm_lsq(kept) : first;
}

}  // namespace

GemmModel fit_gemm_model(const std::vector<GemmSample>& pts, int holdout_every) {
  need_points(pts.size(), 4, "GEMM");
  std::vector<GemmSample> train, test;
  split(pts, holdout_every, train, test);
  GemmModel held = fit_gemm_once(train);
  std::vector<std::pair<double, double>> pm;
  for (const auto& p : test) pm.emplace_back(held.seconds(p.m, p.n, p.k), p.seconds);
  GemmModel g = fit_gemm_once(pts);
  g.holdout_rel_err = mean_abs_rel(pm);
  g.train_points = static_cast<int>(train.size());
  g.test_points = static_cast<int>(test.size());
  return g;
}

AttentionModel fit_attention_model(int head_dim, const std::vector<AttentionSample>& pts, int holdout_every) {
  need_points(pts.size(), 3, "attention");
  auto fit = [](const std::vector<AttentionSample>& ps, bool bwd) {
    Eigen::MatrixXd X(static_cast<Eigen::Index>(ps.size()), 3);
    Eigen::VectorXd y(static_cast<Eigen::Index>(ps.size()));
    for (std::size_t i = 0; i < ps.size(); i++) {
      const auto r = static_cast<Eigen::Index>(i);
      X(r, 0) = 1;
      X(r, 1) = ps[i].l;
      X(r, 2) = static_cast<double>(ps[i].l) * ps[i].keys;
      y(r) = bwd ? ps[i].bwd_s : ps[i].fwd_s;
    }
    const Eigen::VectorXd b = nonneg_relative_lsq(X, y);
    return std::array<double, 3>{b(0), b(1), b(2)};
  };
  std::vector<AttentionSample> train, test;
  split(pts, holdout_every, train, test);
  AttentionModel held{head_dim, fit(train, false), fit(train, true), 0};
  std::vector<std::pair<double, double>> pm;
  auto eval = [](const std::array<double, 3>& c, const AttentionSample& p) {
    return c[0] + c[1] * p.l + c[2] * static_cast<double>(p.l) * p.keys;
  };
  for (const auto& p : test) {
    pm.emplace_back(eval(held.fwd, p), p.fwd_s);
    pm.emplace_back(eval(held.bwd, p), p.bwd_s);
  }
  AttentionModel a{head_dim, fit(pts, false), fit(pts, true), mean_abs_rel(pm)};
  return a;
}

MemoryModel fit_memory_model(MemoryKernel kind, const std::vector<std::pair<double, double>>& pts, int holdout_every) {
  need_points(pts.size(), 2, std::string("memory ") + to_string(kind));
  auto fit = [&](const std::vector<std::pair<double, double>>& ps) {
    Eigen::MatrixXd X(static_cast<Eigen::Index>(ps.size()), 2);
    Eigen::VectorXd y(static_cast<Eigen::Index>(ps.size()));
    for (std::size_t i = 0; i < ps.size(); i++) {
      X(static_cast<Eigen::Index>(i), 0) = 1;
      X(static_cast<Eigen::Index>(i), 1) = ps[i].first;
      y(static_cast<Eigen::Index>(i)) = ps[i].second;
    }
    const Eigen::VectorXd b = nonneg_relative_lsq(X, y);
    if (!(b(1) > 0))
      throw std::invalid_argument(std::string("kernel fit memory ") + to_string(kind) +
                                  ": time does not grow with bytes on the measured sizes");
    MemoryModel m;
    m.kind = kind;
    m.fixed_s = b(0);
    m.bw_Bps = 1.0 / b(1);
    return m;
  };
  std::vector<std::pair<double, double>> train, test;
  split(pts, holdout_every, train, test);
  const MemoryModel held = fit(train);
  std::vector<std::pair<double, double>> pm;
  for (auto [bytes, s] : test) pm.emplace_back(held.seconds(bytes), s);
  MemoryModel m = fit(pts);
  m.holdout_rel_err = mean_abs_rel(pm);
  return m;
}

}  // namespace pipescope
