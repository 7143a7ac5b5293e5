#pragma once
// Quality gates of a calibration: a profile is written only when every fit predicts the points it did not use
// and every measured point is stable. Bounds (documented in calib/README.md):
//   - layer context fits and the GEMM fit: held-out error <= 15%;
//   - link and collective models: held-out error (median over the held-out sizes) <= 10%;
//   - forward and backward t(l, 0) increase with l (a point more than 3% below an earlier one fails);
//   - every measured point's spread (the width of its median's 95% confidence interval over the median,
//     TimeStats::rel_spread) <= 25%, after sampling up to the policy's time cap.
// A failure names the table and the points. `pipescope calibrate` exits 5 and writes nothing, unless
// --accept-poor-fit, which writes the profile with the failures in provenance.gate_failures (joined by " | ").

#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/profile.h"

namespace pipescope::calib {

struct GateBounds {
  double fit_holdout = 0.15;
  double link_holdout = 0.10;
  double monotone_slack = 0.03;
  double max_spread = 0.25;
};

// One failed gate: the table ("layers[0] forward t(l, 0)", "links.intra", ...) and what failed, with points.
struct GateFailure {
  std::string table, what;
  std::string text() const { return table + ": " + what; }
};

// `gemm_holdout`: the GEMM fit's held-out error (< 0: no GEMM fit).
std::vector<GateFailure> check_gates(const DeviceProfile& p, double gemm_holdout, const GateBounds& b = {});

class CalibrationRefused : public std::runtime_error {
 public:
  explicit CalibrationRefused(std::vector<GateFailure> f);
  const std::vector<GateFailure>& failures() const { return failures_; }

 private:
  std::vector<GateFailure> failures_;
};

}  // namespace pipescope::calib
