#pragma once
// Is the machine still the one the profile measured? A measured profile is a snapshot: on a shared machine
// (a VM whose neighbours share its caches and memory bandwidth) the same kernel runs 20-40% slower or faster
// from one minute to the next, and a closed-loop error of that size is the machine's, not the model's. The
// check re-times one point of the profile's layer table now, with the profile's own timer, before and after a
// measured run, so that `validate` can say how far the machine moved.

#include <optional>
#include <string>

#include "core/model/profile.h"

namespace pipescope::calib {

// The layer-table point to re-time and what the profile measured there.
struct DriftProbe {
  int hidden = 0, heads = 0, ffn = 0, vocab = 0, micro_batch = 1, l = 0, seq_len = 0;
  double profile_fwd_s = 0, profile_bwd_s = 0;
  bool cpu_clock = true;         // the profile's timer: thread CPU time (calibrate --clock cpu) or the steady clock
  std::string describe() const;  // "layer h 128, 4 heads, ffn 512, b 1, l 128"
};

struct DriftReading {
  double fwd_s = 0, bwd_s = 0;
};

// The probe of a measured profile on `backend`, or nullopt with the reason in `why`: an analytic profile, no
// layer table, a profile of another backend, or a GPU backend (its kernels run only in the rank program).
std::optional<DriftProbe> drift_probe_of(const DeviceProfile& p, const std::string& backend, std::string& why);

// Forward and backward of the probe's point on this machine now (the quick timing policy: well under a second).
DriftReading retime_probe(const DriftProbe& d, const std::string& backend);

// Forward + backward now over forward + backward in the profile, minus 1 (+0.2 = 20% slower than calibrated).
double drift_change(const DriftProbe& d, const DriftReading& r);

}  // namespace pipescope::calib
