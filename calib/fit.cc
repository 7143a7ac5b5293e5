#include "calib/fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pipescope::calib {
namespace {

// Least squares with rows scaled by 1/y: minimises relative, not absolute, error (times span decades).
Eigen::VectorXd relative_lsq(const Eigen::MatrixXd& X, const Eigen::VectorXd& y) {
  Eigen::MatrixXd A = X;
  Eigen::VectorXd b = y;
  for (Eigen::Index i = 0; i < A.rows(); i++) {
    A.row(i) /= y(i);
    b(i) = 1.0;
  }
  return A.colPivHouseholderQr().solve(b);
}

// The median of the held-out sizes' errors: a protocol switch (MPI eager -> rendezvous, NCCL LL -> Simple)
// between two sweep sizes leaves the one held-out size between them unpredictable by any table (its regime is
// a coin toss), which a mean would let dominate; the gates list every size above the bound by name.
double median_error(const std::vector<std::pair<double, double>>& errors) {
  if (errors.empty()) return 0.0;
  std::vector<double> e;
  for (const auto& x : errors) e.push_back(x.second);
  std::sort(e.begin(), e.end());
  const std::size_t n = e.size();
  return n % 2 ? e[n / 2] : 0.5 * (e[n / 2 - 1] + e[n / 2]);
}

}  // namespace

ContextFit fit_context(const std::vector<ContextPoint>& grid, bool forward, const std::function<double(int)>& t0) {
  std::vector<const ContextPoint*> train, test;
  int k = 0;
  for (const auto& p : grid) {
    if (p.c == 0) continue;
    (k++ % 4 == 3 ? test : train).push_back(&p);
  }
  if (train.size() < 4) throw std::invalid_argument("context fit needs at least 4 grid points with context > 0");
  auto meas = [&](const ContextPoint& p) { return forward ? p.fwd_s : p.bwd_s; };
  // Rows: c > 0 training points and every c = 0 point (t_ctx(l, 0) = 0 anchors the intercept terms).
  std::vector<const ContextPoint*> rows = train;
  for (const auto& p : grid)
    if (p.c == 0) rows.push_back(&p);
  Eigen::MatrixXd X(rows.size(), 4);
  Eigen::VectorXd y(rows.size());
  for (std::size_t i = 0; i < rows.size(); i++) {
    const double l = rows[i]->l, c = rows[i]->c;
    X.row(i) << 1.0, l, c, l * c;
    y(i) = meas(*rows[i]) - t0(rows[i]->l);
  }
  // Absolute least squares here: t_ctx is 0 at c = 0, so relative weights are undefined.
  Eigen::VectorXd a = X.colPivHouseholderQr().solve(y);
  // Attention work cannot shrink with context: when noise makes the fitted slope d/dc = a2 + a3 l negative at
  // either end of the measured l, refit without a2, and drop the context term if a3 is still negative.
  const int lmin = 1;  // the table's shortest slice may be shorter than the grid's
  int lmax = 1;
  for (const ContextPoint* p : rows) lmax = std::max(lmax, p->l);
  if (a(2) + a(3) * lmin < 0 || a(2) + a(3) * lmax < 0) {
    Eigen::MatrixXd X3(X.rows(), 3);
    X3 << X.col(0), X.col(1), X.col(3);
    const Eigen::VectorXd b = X3.colPivHouseholderQr().solve(y);
    a << b(0), b(1), 0.0, std::max(0.0, b(2));
  }
  ContextFit f;
  f.a0 = a(0), f.a1 = a(1), f.a2 = a(2), f.a3 = a(3);
  f.train_points = static_cast<int>(train.size());
  f.test_points = static_cast<int>(test.size());
  double err = 0;
  for (const ContextPoint* p : test) {
    const double pred = t0(p->l) + p->c * (f.a2 + f.a3 * p->l);
    err += std::abs(pred - meas(*p)) / meas(*p);
  }
  f.holdout_rel_err = test.empty() ? 0.0 : err / test.size();
  return f;
}

AlphaBeta fit_alpha_beta(std::vector<std::pair<double, double>> pts) {
  std::sort(pts.begin(), pts.end());
  if (pts.size() < 2 || pts.front().first == pts.back().first)
    throw std::invalid_argument("alpha-beta fit needs at least two message sizes");
  constexpr double kSmall = 64.0 * 1024, kLarge = 8.0 * 1024 * 1024;
  std::vector<double> small;
  std::vector<std::pair<double, double>> large, rest;
  for (const auto& p : pts) {
    if (p.first <= kSmall)
      small.push_back(p.second);
    else if (p.first >= kLarge)
      large.push_back(p);
    else
      rest.push_back(p);
  }
  if (large.size() < 4) {  // short sweep: the upper half of the sizes carries the bandwidth
    large.assign(pts.begin() + static_cast<std::ptrdiff_t>(pts.size() / 2), pts.end());
    rest.clear();
    for (std::size_t i = 0; i < pts.size() / 2; i++)
      if (pts[i].first > kSmall) rest.push_back(pts[i]);
  }
  // Every third large size is held out too, so the bandwidth's own range is tested.
  std::vector<std::pair<double, double>> used;
  for (std::size_t i = 0; i < large.size(); i++) (i % 3 == 1 && large.size() >= 4 ? rest : used).push_back(large[i]);
  large = used;
  AlphaBeta ab;
  if (!small.empty()) {
    std::sort(small.begin(), small.end());
    ab.alpha_s = small[small.size() / 2];
  }
  // t - alpha = S / bw over the large sizes: one-parameter least squares, relative weights.
  double num = 0, den = 0;
  for (const auto& [s, t] : large) {
    const double y = t - ab.alpha_s;
    num += (s / t) * (y / t);
    den += (s / t) * (s / t);
  }
  const double inv_bw = den > 0 ? num / den : 0;
  if (!(inv_bw > 0))
    throw std::invalid_argument("alpha-beta fit: the large messages are not slower than the small ones");
  ab.bw_Bps = 1.0 / inv_bw;
  double err = 0;
  for (const auto& [s, t] : rest) err += std::abs(ab.alpha_s + s * inv_bw - t) / t;
  ab.holdout_points = static_cast<int>(rest.size());
  ab.holdout_rel_err = rest.empty() ? 0.0 : err / rest.size();
  return ab;
}

PiecewiseFit fit_piecewise(const std::vector<std::pair<double, double>>& pts) {
  PiecewiseFit f;
  double sum = 0;
  for (std::size_t i = 1; i + 1 < pts.size(); i += 2) {
    const std::vector<std::pair<double, double>> nb{pts[i - 1], pts[i + 1]};
    const double e = std::abs(piecewise_seconds(nb, pts[i].first) - pts[i].second) / pts[i].second;
    f.errors.emplace_back(pts[i].first, e);
    sum += e;
  }
  f.holdout_rel_err = median_error(f.errors);
  (void)sum;
  return f;
}

PiecewiseFit holdout_piecewise(const std::vector<std::pair<double, double>>& pts,
                               const std::vector<std::pair<double, double>>& held, const std::vector<double>& ci) {
  PiecewiseFit f;
  double sum = 0;
  for (std::size_t i = 0; i < held.size(); i++) {
    const auto& [bytes, t] = held[i];
    const double u = i < ci.size() ? ci[i] : 0.0;
    const double e = std::max(0.0, std::abs(piecewise_seconds(pts, bytes) - t) - u) / t;
    f.errors.emplace_back(bytes, e);
    sum += e;
  }
  f.holdout_rel_err = median_error(f.errors);
  (void)sum;
  return f;
}

GemmFit fit_gemm(const std::vector<GemmPoint>& gemms) {
  std::vector<const GemmPoint*> train, test;
  for (std::size_t i = 0; i < gemms.size(); i++) (i % 4 == 3 ? test : train).push_back(&gemms[i]);
  if (train.size() < 2) throw std::invalid_argument("GEMM fit needs at least 2 shapes");
  // t = F / R + F_half / R: linear in (F, 1).
  Eigen::MatrixXd X(train.size(), 2);
  Eigen::VectorXd y(train.size());
  for (std::size_t i = 0; i < train.size(); i++) {
    X.row(i) << 2.0 * train[i]->m * train[i]->n * train[i]->k, 1.0;
    y(i) = train[i]->median_s;
  }
  const Eigen::VectorXd x = relative_lsq(X, y);
  GemmFit g;
  if (!(x(0) > 0)) throw std::invalid_argument("GEMM fit: time does not grow with GEMM size");
  g.rate_flops = 1.0 / x(0);
  g.half_sat_flops = std::max(0.0, x(1) / x(0));
  double err = 0;
  for (const GemmPoint* p : test) {
    const double f = 2.0 * p->m * p->n * p->k;
    err += std::abs((f + g.half_sat_flops) / g.rate_flops - p->median_s) / p->median_s;
  }
  g.holdout_rel_err = test.empty() ? 0.0 : err / test.size();
  return g;
}

}  // namespace pipescope::calib
