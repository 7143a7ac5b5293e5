#pragma once
// How far to trust a run on a device: the development sets that check the shipped description of that device, with
// their error, as `pipescope fidelity` last recorded them (scenarios/fidelity/baseline.json, the gate's baseline).
// A description is the shipped one when every field equals a device preset's (core/model/presets.h), whatever it is
// called; one changed field makes it a description no measured set checks. The report prints it.

#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope::sim {

struct DeviceFidelity {
  std::string set;  // "h100-dense"
  int runs = 0;     // rows simulated against a measurement
  double mape = 0;  // mean |simulated - measured| / measured
};

// The device preset `d` is (empty: none), and the sets whose cluster preset runs it, in the baseline's order. No
// sets when none does or the baseline is not installed.
std::string shipped_device(const DeviceSpec& d);
std::vector<DeviceFidelity> device_fidelity(const DeviceSpec& d);
// One line for the report: "A100-SXM4-80GB: vtrain-a100 78 runs, MAPE 7.6%; ... (pipescope fidelity)", or why there
// is none.
std::string describe_fidelity(const DeviceSpec& d);

}  // namespace pipescope::sim
