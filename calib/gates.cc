#include "calib/gates.h"

#include <algorithm>
#include <cstdio>

#include "calib/fit.h"

namespace pipescope::calib {
namespace {

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
  return b;
}
std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g ms", s * 1e3);
  return b;
}

std::string table_name(const LayerTable& t, std::size_t i) {
  return "layers[" + std::to_string(i) + "] (hidden " + std::to_string(t.hidden) + ", micro_batch " +
         std::to_string(t.micro_batch) + ", " + t.dtype + ")";
}

// t(l, 0) must grow with l: a point below the running maximum by more than the slack fails.
void monotone(const LayerTable& t, const std::string& name, bool fwd, const GateBounds& b,
              std::vector<GateFailure>& out) {
  std::string bad;
  double best = 0;
  int best_l = 0;
  for (const SlicePoint& p : t.slices) {
    const double v = fwd ? p.fwd.median_s : p.bwd.median_s;
    if (v < best * (1 - b.monotone_slack))
      bad += (bad.empty() ? "" : ", ") + ("l = " + std::to_string(p.l) + " (" + ms(v) +
                                          ") < l = " + std::to_string(best_l) + " (" + ms(best) + ")");
    if (v > best) best = v, best_l = p.l;
  }
  if (!bad.empty())
    out.push_back({name + (fwd ? " forward" : " backward") + " t(l, 0)", "does not increase with l: " + bad});
}

void spread(const std::string& table, const std::vector<std::pair<std::string, double>>& pts, const GateBounds& b,
            std::vector<GateFailure>& out) {
  std::string bad;
  for (const auto& [where, s] : pts)
    if (s > b.max_spread) bad += (bad.empty() ? "" : ", ") + where + " (" + pct(s) + ")";
  if (!bad.empty())
    out.push_back({table, "spread (95% CI of the median / median) above " + pct(b.max_spread) + " at " + bad});
}

void holdout(const std::string& table, double err, double bound, const std::string& detail,
             std::vector<GateFailure>& out) {
  if (err > bound)
    out.push_back(
        {table, "held-out error " + pct(err) + " above " + pct(bound) + (detail.empty() ? "" : " (" + detail + ")")});
}

// The held-out sizes of a link table whose own error is above the bound.
std::string worst_sizes(const std::vector<std::pair<double, double>>& pts,
                        const std::vector<std::pair<double, double>>& held, const GateBounds& b) {
  std::string s;
  for (const auto& [bytes, e] : (held.empty() ? fit_piecewise(pts) : holdout_piecewise(pts, held)).errors)
    if (e > b.link_holdout) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%.0f B (%.1f%%)", s.empty() ? "" : ", ", bytes, 100 * e);
      s += buf;
    }
  return s.empty() ? "" : "; held-out sizes above the bound: " + s;
}

}  // namespace

CalibrationRefused::CalibrationRefused(std::vector<GateFailure> f)
    : std::runtime_error([&] {
        std::string m = "calibration refused: " + std::to_string(f.size()) + " quality gate(s) failed";
        for (const auto& x : f) m += "\n  " + x.text();
        return m;
      }()),
      failures_(std::move(f)) {}

std::vector<GateFailure> check_gates(const DeviceProfile& p, double gemm_holdout, const GateBounds& b) {
  std::vector<GateFailure> out;
  for (std::size_t i = 0; i < p.layers.size(); i++) {
    const LayerTable& t = p.layers[i];
    const std::string name = table_name(t, i);
    for (bool fwd : {true, false}) {
      monotone(t, name, fwd, b, out);
      std::vector<std::pair<std::string, double>> sp;
      for (const SlicePoint& s : t.slices)
        sp.emplace_back("l = " + std::to_string(s.l), fwd ? s.fwd.rel_spread() : s.bwd.rel_spread());
      for (const ContextPoint& c : t.context_grid)
        if (c.c > 0)
          sp.emplace_back("(l, c) = (" + std::to_string(c.l) + ", " + std::to_string(c.c) + ")",
                          fwd ? c.fwd_spread : c.bwd_spread);
      spread(name + (fwd ? " forward" : " backward") + " t(l, c)", sp, b, out);
    }
    for (const auto* ends : {&t.embedding, &t.head}) {
      std::vector<std::pair<std::string, double>> sp;
      for (const EndPoint& e : *ends) {
        sp.emplace_back("l = " + std::to_string(e.l) + " forward", e.fwd_spread);
        sp.emplace_back("l = " + std::to_string(e.l) + " backward", e.bwd_spread);
      }
      spread(name + (ends == &t.embedding ? " embedding" : " head"), sp, b, out);
    }
    if (!t.context_grid.empty()) {
      const std::string pts =
          std::to_string(t.ctx_fwd.train_points) + " fitted, " + std::to_string(t.ctx_fwd.test_points) + " held out";
      holdout(name + " context fit forward", t.ctx_fwd.holdout_rel_err, b.fit_holdout, pts, out);
      holdout(name + " context fit backward", t.ctx_bwd.holdout_rel_err, b.fit_holdout, pts, out);
    }
  }
  if (gemm_holdout >= 0) holdout("gemm fit", gemm_holdout, b.fit_holdout, "", out);
  for (const auto& [cls, l] : p.links)
    holdout("links." + cls, l.holdout_rel_err, b.link_holdout, l.model + worst_sizes(l.points, l.holdout_points, b),
            out);
  for (std::size_t i = 0; i < p.collectives.size(); i++) {
    const CollectiveFit& c = p.collectives[i];
    holdout("collectives[" + std::to_string(i) + "] (" + c.op + ", " + std::to_string(c.ranks) + " ranks)",
            c.holdout_rel_err, b.link_holdout, c.model + worst_sizes(c.points, c.holdout_points, b), out);
  }
  return out;
}

}  // namespace pipescope::calib
