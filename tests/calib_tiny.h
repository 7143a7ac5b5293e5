#pragma once
// A real calibration small enough for a unit test (hidden 32, 4 heads, ffn 128, vocab 64; lengths in steps of 8;
// the quick policy capped at 50 ms per point), shared by the calibration tests.
#include "calib/calibrate.h"

namespace pipescope::testing_calib {

inline calib::CalibrateOptions tiny_calibration(double timer_noise, int max_seq = 16) {
  calib::CalibrateOptions o;
  o.backend = "cpu-f64";
  auto& sh = o.compute.shape;
  sh.layer = {32, 4, 128};
  sh.vocab = 64;
  sh.max_seq = max_seq;
  o.compute.grain = 8;
  o.compute.context_steps = 0;
  o.compute.policy = calib::quick_policy();
  o.compute.policy.max_time_s = 0.05;
  o.compute.progress = false;
  o.timer_noise = timer_noise;
  return o;
}

}  // namespace pipescope::testing_calib
