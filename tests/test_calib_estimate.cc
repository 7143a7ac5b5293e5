// calib/estimate.cc and the kernel-fit grids: the work estimate behind progress and the quick budget counts every
// phase (the reference paired with each sample, making modules and inputs), and the memory-bound kernels' tensors
// stay within their byte cap; the progress line's time left. Figures computed by hand.
#include <gtest/gtest.h>

#include <vector>

#include "calib/benches.h"
#include "calib/calibrate.h"
#include "calib/driver.h"
#include "kernels/layer.h"

namespace pipescope::calib {
namespace {

TEST(CalibEstimate, MemoryKernelTensorsStayWithin128MiB) {
  // 8-byte values: 2048 columns reach 16 MiB at 1024 rows (all nine sizes); a 51,200-token vocabulary 100 MiB at 256
  // rows and 200 MiB at 512 (dropped); a huge row keeps the first three sizes for the fit.
  EXPECT_EQ(memory_kernel_rows(2048, 8), (std::vector<int>{4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(memory_kernel_rows(51200, 8), (std::vector<int>{4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(memory_kernel_rows(51200, 4), (std::vector<int>{4, 8, 16, 32, 64, 128, 256, 512}));
  EXPECT_EQ(memory_kernel_rows(1 << 24, 8), (std::vector<int>{4, 8, 16}));
}

TEST(CalibEstimate, PointCountsItsReference) {
  // Quick policy, 0.1 s call: warm-up max(1 call, 5 ms) = 0.1 s; samples min(max(5 x 0.1, 20 ms), max(0.4, 0.5)) =
  // 0.5 s; with a reference every sample is paired with one lasting a quarter of it: 0.1 + 0.625.
  TimingPolicy p = quick_policy();
  EXPECT_DOUBLE_EQ(estimated_point_s(0.1, p), 0.6);
  p.reference = [] {};
  EXPECT_DOUBLE_EQ(estimated_point_s(0.1, p), 0.725);
}

CalibrateOptions default_shape() {
  CalibrateOptions o;
  o.compute.shape.layer = {2048, 16, 8192, 1};
  o.compute.shape.vocab = 51200;
  o.compute.shape.max_seq = 2048;
  o.compute.max_len = 16;
  o.compute.sparse_lengths = true;
  o.compute.context_steps = 4;
  o.compute.policy = quick_policy();
  o.compute.rates.flop_s = 1e10;
  o.compute.rates.bw_Bps = 1e10;
  o.compute.rates.create_s_per_value = 0;
  return o;
}

TEST(CalibEstimate, MakingTheModulesIsPartOfTheBudget) {
  // The built-in scenario's embedding and head hold 2 x 51,200 x 2048 + 2048 x 2048 + 2 x 2048 values; at 100 ns a
  // value, making them alone is over 21 s of the estimate.
  CalibrateOptions o = default_shape();
  const double without = estimate_compute_s(o, o.compute);
  o.compute.rates.create_s_per_value = 100e-9;
  const double with = estimate_compute_s(o, o.compute);
  const double ends =
      100e-9 * static_cast<double>(kernels::param_count(kernels::ModuleKind::kEmbedding, o.compute.shape) +
                                   kernels::param_count(kernels::ModuleKind::kHead, o.compute.shape));
  EXPECT_GT(ends, 21.0);
  EXPECT_DOUBLE_EQ(ends_setup_est_s(o.compute), ends);
  EXPECT_GT(with - without, ends);  // the GEMM operands, the transfer check's layer and the memory kernels' tensors too
}

TEST(CalibEstimate, KernelFitsArePartOfTheBudget) {
  // The CPU kernel fits (GEMM spread, attention kernels, memory-bound kernels, transfer check) are estimated; a GPU
  // backend has none.
  CalibrateOptions o = default_shape();
  const double fits = kernel_fits_est_s(o.compute, "cpu-f64");
  EXPECT_GT(fits, gemm_spread_est_s(o.compute));
  EXPECT_GT(fits, memory_kernels_est_s(o.compute, 8));
  EXPECT_EQ(kernel_fits_est_s(o.compute, "cuda-bf16"), 0.0);
  EXPECT_GT(estimate_compute_s(o, o.compute), fits);
}

// The time left trusts the pace seen so far in proportion to the share of the plan done. By hand: 100 s planned,
// 20 done in 40 (pace 2): 80 x (0.8 + 0.2 x 2) = 96 s; the pace alone would say 160. At the plan's end the pace is
// the whole answer: 100 planned, 90 done in 180 (pace 2): 10 x (0.1 + 0.9 x 2) = 19 s.
TEST(CalibEstimate, TimeLeftTrustsThePaceAsThePlanIsDone) {
  EXPECT_DOUBLE_EQ(time_left_s(100, 20, 40), 96);
  EXPECT_DOUBLE_EQ(time_left_s(100, 90, 180), 19);
  EXPECT_DOUBLE_EQ(time_left_s(100, 50, 50), 50);   // on plan
  EXPECT_DOUBLE_EQ(time_left_s(100, 120, 130), 0);  // past the plan
  EXPECT_DOUBLE_EQ(time_left_s(0, 0, 10), 0);       // no plan
}

}  // namespace
}  // namespace pipescope::calib
