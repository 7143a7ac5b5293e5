#pragma once
// validate's device drift check (drift.h): the profile's layer point re-timed before and after the measured run,
// printed and recorded, so that a simulated-vs-measured error the size of the machine's own drift reads as the
// machine's, not the model's.

#include <cstdio>
#include <optional>
#include <string>

#include "calib/drift.h"

namespace pipescope::calib {

struct DriftCheck {
  std::optional<DriftProbe> probe;
  std::string why;  // why there is no probe: "--no-drift-check", "no profile", or drift_probe_of's reason
  DriftReading before, after;
};

// Before the run: the probe of the profile at `profile_path` ("" = none) on `backend`, timed now; none when
// `skip` (--no-drift-check).
DriftCheck drift_before(const std::string& profile_path, const std::string& backend, bool skip);
// After a run that succeeded: the probe timed again (nothing without a probe).
void drift_after(DriftCheck& d, const std::string& backend);
// The line validate prints (nothing without a probe).
void print_drift(std::FILE* out, const DriftCheck& d);
// validate --json's device_drift object: checked, and the point, the profile's and both readings with their change.
std::string drift_json(const DriftCheck& d);

}  // namespace pipescope::calib
