// Benchmark inputs that are right by construction: a tensor is created at its final size and filled in the same
// call (a later resize could discard its contents and leave uninitialised memory: denormals, NaN), with
// standard normal values (the scale of LayerNorm outputs and of gradients after it). Debug builds check that
// what the backend holds is finite.
#include <cassert>
#include <cmath>
#include <random>

#include "calib/benches.h"

namespace pipescope::calib {

std::vector<double> normal_values(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool all_finite(const kernels::Tensor& t) {
  for (double x : t.download())
    if (!std::isfinite(x)) return false;
  return true;
}

std::unique_ptr<kernels::Tensor> filled_tensor(kernels::Backend& be, int rows, int cols, unsigned seed) {
  auto t = be.tensor(rows, cols);
  t->upload(normal_values(static_cast<std::size_t>(rows) * cols, seed));
  assert(all_finite(*t) && "benchmark input must be finite");
  return t;
}

}  // namespace pipescope::calib
