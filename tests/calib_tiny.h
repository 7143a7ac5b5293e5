#pragma once
// A real calibration small enough for a unit test (hidden 32, 4 heads, ffn 128, vocab 64; lengths in steps of 8;
// the quick policy capped at 50 ms per point), shared by the calibration tests.
#include <vector>

#include "calib/calibrate.h"
#include "core/model/profile.h"

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

// A layer table of the tiny shape whose times grow linearly with the length: forward 1 us and backward 2 us per
// token, at each of `lengths`.
inline LayerTable linear_layer_table(const std::vector<int>& lengths) {
  LayerTable t;
  t.hidden = 32, t.heads = 4, t.ffn = 128, t.vocab = 64, t.seq_len = 64;
  for (int l : lengths) {
    SlicePoint s;
    s.l = l;
    s.fwd.median_s = 1e-6 * l;
    s.bwd.median_s = 2e-6 * l;
    t.slices.push_back(s);
  }
  return t;
}

}  // namespace pipescope::testing_calib
