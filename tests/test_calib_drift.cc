// The machine-drift check (calib/drift.h): which point of a profile it re-times, when it refuses, that the
// re-timed reading compares with the profile's own numbers, and that a CPU calibration records its own drift.
#include <gtest/gtest.h>

#include <cmath>

#include "calib/calibrate.h"
#include "calib/drift.h"
#include "core/model/profile.h"
#include "tests/calib_tiny.h"

namespace pipescope {
namespace {

calib::CalibrateOptions tiny() {
  calib::CalibrateOptions o = testing_calib::tiny_calibration(0.0, 32);
  o.accept_poor_fit = true;  // about the drift record, not this machine's noise
  return o;
}

DeviceProfile table_profile(const std::string& backend) {
  DeviceProfile p;
  p.kind = "measured";
  p.provenance = {{"backend", backend}, {"timer", "thread CPU time (test)"}};
  p.layers.push_back(testing_calib::linear_layer_table({8, 16, 24, 32, 48, 64}));
  return p;
}

TEST(CalibDrift, ProbeIsTheLongestPointUpToHalfTheSequence) {
  std::string why;
  const auto d = calib::drift_probe_of(table_profile("cpu-f64"), "cpu-f64", why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->l, 32);
  EXPECT_DOUBLE_EQ(d->profile_fwd_s, 32e-6);
  EXPECT_DOUBLE_EQ(d->profile_bwd_s, 64e-6);
  EXPECT_TRUE(d->cpu_clock);
  EXPECT_EQ(d->describe(), "layer h 32, 4 heads, ffn 128, b 1, l 32");
}

TEST(CalibDrift, RefusesWhatItCannotReTimeHere) {
  std::string why;
  EXPECT_FALSE(calib::drift_probe_of(table_profile("cpu-f64"), "cpu-f32", why));
  EXPECT_EQ(why, "the profile was measured with another backend");
  EXPECT_FALSE(calib::drift_probe_of(table_profile("cuda-bf16"), "cuda-bf16", why));
  EXPECT_EQ(why, "GPU kernels run only in the rank program");
  DeviceProfile analytic = table_profile("cpu-f64");
  analytic.kind = "analytic";
  EXPECT_FALSE(calib::drift_probe_of(analytic, "cpu-f64", why));
  EXPECT_EQ(why, "the profile has no measured layer table");
}

TEST(CalibDrift, ReTimedPointComparesWithTheProfilesOwnNumbers) {
  const DeviceProfile p = calib::calibrate(tiny());
  std::string why;
  auto d = calib::drift_probe_of(p, "cpu-f64", why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->l, 16);
  const calib::DriftReading r = calib::retime_probe(*d, "cpu-f64");
  ASSERT_GT(r.fwd_s, 0);
  ASSERT_GT(r.bwd_s, r.fwd_s * 0.5);
  const double change = calib::drift_change(*d, r);
  EXPECT_LT(std::abs(change), 3.0) << "the same point re-timed a moment later, off by more than 4x";
  // A profile that had measured the machine twice as slow reads as the machine running at half its time.
  d->profile_fwd_s *= 2;
  d->profile_bwd_s *= 2;
  EXPECT_NEAR(calib::drift_change(*d, r), (1 + change) / 2 - 1, 1e-12);
  // The calibration re-timed the same point at its end and recorded how far the machine moved.
  ASSERT_TRUE(p.provenance.count("drift_during_calibration"));
  EXPECT_NE(p.provenance.at("drift_during_calibration").find("layer h 32, 4 heads, ffn 128, b 1, l 16"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
