#pragma once
// Fits of calibration data (Eigen least squares), each with its error on points it did not use.
//   - context term (TeraPipe): t(l, c) - t(l, 0) = a0 + a1 l + a2 c + a3 l c on the (l, c) grid, 75/25 split
//     (every fourth point held out); the error reported is that of the prediction the cost model makes,
//     t(l, 0) + c (a2 + a3 l), against the measured t(l, c);
//   - alpha-beta (docs/calibration.md): alpha = median time over the small-size plateau (S <= 64 KiB), the
//     bandwidth by least squares over S >= 8 MiB (the upper half of the sizes when fewer than 4 are that large),
//     every third of those held out; the error is measured on the held-out and the in-between sizes;
//   - GEMMs: t = (F + F_half) / R, the analytic model's saturating form, fitted on 3 of 4 shapes.

#include <functional>
#include <utility>
#include <vector>

#include "core/model/profile.h"

namespace pipescope::calib {

// t0(l) = measured t(l, 0). Needs at least 4 points with c > 0.
ContextFit fit_context(const std::vector<ContextPoint>& grid, bool forward, const std::function<double(int)>& t0);

struct AlphaBeta {
  double alpha_s = 0, bw_Bps = 0;  // t(S) = alpha + S / bw
  double holdout_rel_err = 0;      // mean |rel. error| on the sizes not used
  int holdout_points = 0;
};
// points: (bytes, seconds), any order. Needs >= 2 distinct sizes.
AlphaBeta fit_alpha_beta(std::vector<std::pair<double, double>> points);

// Piecewise model of a link table (core/model/profile.h piecewise_seconds): every second interior size is held out,
// predicted by interpolating its neighbours, so the error is that of the table at a size between two measured
// ones (sweeps step by a factor 2). `errors`: (bytes, rel. error) of each held-out size; holdout_rel_err is their
// median (a protocol switch between two sweep sizes makes the one size between them a coin toss for any table;
// the gates name every held-out size above the bound).
struct PiecewiseFit {
  double holdout_rel_err = 0;
  std::vector<std::pair<double, double>> errors;
};
// points: (bytes, seconds), sorted by bytes, at least 3 sizes for a held-out error (fewer: error 0).
PiecewiseFit fit_piecewise(const std::vector<std::pair<double, double>>& points);
// The error of the table `points` (all used) at separately measured held-out sizes. With `held_out_ci` (the
// half-width of each held-out median's 95% confidence interval, same order) the part of a miss within the
// measurement's own uncertainty is not counted: error = max(0, |table - t| - ci) / t.
PiecewiseFit holdout_piecewise(const std::vector<std::pair<double, double>>& points,
                               const std::vector<std::pair<double, double>>& held_out,
                               const std::vector<double>& held_out_ci = {});

struct GemmFit {
  double rate_flops = 0;      // asymptotic FLOP/s (R)
  double half_sat_flops = 0;  // F_half: GEMM size at half the asymptotic rate
  double holdout_rel_err = 0;
};
GemmFit fit_gemm(const std::vector<GemmPoint>& gemms);

}  // namespace pipescope::calib
