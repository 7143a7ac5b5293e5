// calib/options_json.h: the options `pipescope calibrate` hands to pipescope-calibrate-cuda survive the trip
// exactly (every field, doubles bit for bit), and a damaged file is an error naming the key. Also: a program
// linked without the CUDA objects gets the explicit refusals of cuda_absent.cc, not a crash.
#include <gtest/gtest.h>

#include <string>

#include "calib/benches.h"
#include "calib/options_json.h"
#include "kernels/backend.h"

namespace pipescope::calib {
namespace {

CalibrateOptions unusual() {
  CalibrateOptions o;
  o.backend = "cuda-f16";
  o.compute.shape.layer = {96, 6, 384, 2};
  o.compute.shape.vocab = 1000;
  o.compute.shape.max_seq = 320;
  o.compute.grain = 16;
  o.compute.context_steps = 3;
  o.compute.tp = 2;
  o.compute.max_len = 160;
  o.compute.sparse_lengths = true;
  o.compute.policy = quick_policy();
  o.compute.policy.cold = true;
  o.compute.policy.target_rel_spread = 0.1 / 3;
  o.compute.progress = false;
  o.micro_batches = {1, 4};
  o.gemm = false;
  o.device_preset = "H100-SXM";
  o.link_results = "/tmp/x/links.json";
  o.link_class = "inter";
  o.command = "pipescope calibrate --backend cuda-f16 \"quoted\" \xc3\xa9";
  o.budget_s = 100.0 / 7;
  o.accept_poor_fit = true;
  o.gates.fit_holdout = 0.2;
  o.gates.max_spread = 1e-300;
  o.clock = "wall";
  o.timer_noise = 0.25;
  return o;
}

TEST(CalibrateOptionsJson, RoundTripIsExact) {
  const std::string text = options_to_json(unusual());
  const CalibrateOptions r = options_from_json(text);
  EXPECT_EQ(options_to_json(r), text);
  EXPECT_EQ(r.compute.shape.layer.tp, 2);
  EXPECT_EQ(r.compute.policy.target_rel_spread, 0.1 / 3);
  EXPECT_EQ(r.budget_s, 100.0 / 7);
  EXPECT_EQ(r.gates.max_spread, 1e-300);
  EXPECT_EQ(r.micro_batches, (std::vector<int>{1, 4}));
  EXPECT_EQ(r.command, unusual().command);
  EXPECT_TRUE(r.compute.policy.cold);
  EXPECT_FALSE(r.gemm);
}

TEST(CalibrateOptionsJson, DamagedFileNamesTheKey) {
  std::string text = options_to_json(unusual());
  const auto at = text.find("\"grain\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 7, "\"grein\"");
  try {
    options_from_json(text);
    FAIL() << "accepted a file without compute.grain";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("grain"), std::string::npos) << e.what();
  }
  EXPECT_THROW(options_from_json("{}"), std::invalid_argument);
  EXPECT_THROW(options_from_json("not json"), std::invalid_argument);
}

// This test links pipescope_calib without the CUDA objects, as `pipescope` does.
TEST(CudaAbsent, RefusesClearly) {
  EXPECT_THROW(kernels::make_cuda_backend(kernels::DType::kBF16), kernels::KernelError);
  EXPECT_EQ(kernels::cuda_device_count(), 0);
  EXPECT_THROW(bench_gemm_cuda("cuda-bf16", ComputeConfig{}, {1}), std::logic_error);
  EXPECT_THROW(cuda_event_timer(nullptr), std::logic_error);
}

}  // namespace
}  // namespace pipescope::calib
