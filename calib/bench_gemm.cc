// GEMMs at the shapes one layer and the LM head issue (docs/calibration.md), forward orientation, on the CPU
// with Eigen (the CPU reference kernels' GEMM) in the backend's precision.
#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <functional>
#include <memory>

#include "calib/benches.h"
#include "core/model/backends.h"

namespace pipescope::calib {

std::vector<std::array<int, 3>> gemm_shapes(const ComputeConfig& cfg, const std::vector<int>& bs) {
  const auto& s = cfg.shape;
  const int h = s.layer.hidden, f = s.layer.ffn / cfg.tp, V = s.vocab / cfg.tp, ht = h / cfg.tp;
  std::vector<int> tokens;
  // l = 16, 32, ... up to the longest length, and at least 16 and 32: the fit's saturation term needs two token
  // counts (with one, a quick budget's l <= 16 left the fit five shapes of one m, and its held-out error at 33%), and
  // at m = 8 the wide GEMMs stream their weights (3.6-6.8 GFLOP/s over the five shapes), which t = (F + F_half) / R
  // cannot follow (held-out error 22% in one of two runs with l = 8, 16).
  for (int b : bs)
    for (int l = 16; l <= std::max(32, cfg.longest()); l *= 2) tokens.push_back(b * l);
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  std::vector<std::array<int, 3>> shapes;  // (M, K, N)
  for (int T : tokens)
    for (auto kn : {std::array<int, 2>{h, 3 * ht}, {ht, h}, {h, f}, {f, h}, {h, V}})
      shapes.push_back({T, kn[0], kn[1]});
  return shapes;
}

std::vector<GemmPoint> bench_gemm(const std::string& backend, const ComputeConfig& cfg, const std::vector<int>& bs) {
  if (!backend_on(backend, BackendDevice::Cpu)) return {};
  const auto shapes = gemm_shapes(cfg, bs);
  Progress prog("GEMM", static_cast<int>(shapes.size()), cfg.progress);
  std::vector<GemmPoint> out;
  const std::string dt = backend_named(backend).dtype;
  auto timer = thread_cpu_timer();
  TablePoints pts(*timer, cfg.policy);
  for (const auto& [m, k, n] : shapes) {
    pts.time(gemm_call(backend, m, k, n));
    prog.step(std::to_string(m) + " x " + std::to_string(k) + " x " + std::to_string(n),
              gemm_point_est_s(cfg, m, k, n));
  }
  for (std::size_t i = 0; i < shapes.size(); i++)
    out.push_back(GemmPoint{shapes[i][0], shapes[i][2], shapes[i][1], dt, pts.at(i).median_s});
  return out;
}

std::function<void()> gemm_call(const std::string& backend, int m, int k, int n) {
  auto make = [&](auto zero) -> std::function<void()> {
    using T = decltype(zero);
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    auto mats =
        std::make_shared<std::array<Mat, 3>>(std::array<Mat, 3>{Mat::Random(m, k), Mat::Random(k, n), Mat(m, n)});
    return [mats] { (*mats)[2].noalias() = (*mats)[0] * (*mats)[1]; };
  };
  return backend_named(backend).kind == BackendKind::CpuF64 ? make(0.0) : make(0.0f);
}

std::vector<GemmSample> bench_gemm_spread(const std::string& backend, const TimingPolicy& policy, bool progress,
                                          double est_s) {
  if (!backend_on(backend, BackendDevice::Cpu)) return {};
  const std::vector<std::array<int, 3>> shapes = gemm_spread_shapes();
  Progress prog("GEMM spread", static_cast<int>(shapes.size()), progress, est_s);
  std::vector<GemmSample> out;
  auto timer = thread_cpu_timer();
  TablePoints pts(*timer, policy);
  for (const auto& [m, k, n] : shapes) {
    pts.time(gemm_call(backend, m, k, n));
    prog.step(std::to_string(m) + " x " + std::to_string(k) + " x " + std::to_string(n));
  }
  for (std::size_t i = 0; i < shapes.size(); i++)
    out.push_back(GemmSample{shapes[i][0], shapes[i][2], shapes[i][1], pts.at(i).median_s});
  return out;
}

}  // namespace pipescope::calib
