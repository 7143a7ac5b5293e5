#include "core/plan/layout_fit.h"

#include <Eigen/Dense>
#include <map>
#include <stdexcept>
#include <utility>

namespace pipescope {
namespace {

// The pipeline's slots times the layers per stage: what multiplies the per-layer cost of one micro-batch.
double slot_layers(const MeasuredRun& r) {
  const std::string where = r.source + ":" + std::to_string(r.line) + ": ";
  if (!(r.measured_s > 0)) throw std::invalid_argument(where + "layout fit: measured time must be positive");
  if (r.pp < 1 || r.micro_batches < 1 || r.mbs < 1 || r.layers < 1 || r.layers % r.pp != 0)
    throw std::invalid_argument(where + "layout fit: layers " + std::to_string(r.layers) + " over pp " +
                                std::to_string(r.pp) + " with " + std::to_string(r.micro_batches) +
                                " micro-batches of " + std::to_string(r.mbs) + " do not make a 1F1B pipeline");
  return static_cast<double>(r.micro_batches + r.pp - 1) * (r.layers / r.pp);
}

}  // namespace

LayoutFit fit_layout_only(const std::vector<MeasuredRun>& runs) {
  LayoutFit fit;
  fit.predicted_s.assign(runs.size(), 0.0);
  std::map<std::pair<std::string, int>, std::vector<std::size_t>> cells;
  for (std::size_t i = 0; i < runs.size(); i++) cells[{runs[i].group(), runs[i].tp}].push_back(i);
  for (const auto& [key, rows] : cells) {
    // Relative residual (w (x b + y) - t) / t: linear in (x, y) with the rows scaled by 1 / t, target 1.
    const auto n = static_cast<Eigen::Index>(rows.size());
    Eigen::MatrixXd A(n, 2);
    Eigen::VectorXd ones = Eigen::VectorXd::Ones(n);
    for (Eigen::Index k = 0; k < n; k++) {
      const MeasuredRun& r = runs[rows[static_cast<std::size_t>(k)]];
      const double w = slot_layers(r) / r.measured_s;
      A(k, 0) = w * r.mbs;
      A(k, 1) = w;
    }
    const Eigen::Vector2d xy = A.completeOrthogonalDecomposition().solve(ones);
    for (std::size_t i : rows) {
      const MeasuredRun& r = runs[i];
      fit.predicted_s[i] = slot_layers(r) * (xy(0) * r.mbs + xy(1));
    }
    fit.cells.push_back({key.first, key.second, static_cast<int>(rows.size()), xy(0), xy(1)});
  }
  return fit;
}

}  // namespace pipescope
