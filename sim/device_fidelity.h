#pragma once
// How far to trust a run on a device: the development sets that check the shipped description of that device, with
// their error, as `pipescope fidelity` last recorded them (scenarios/fidelity/baseline.json, the gate's baseline).
// The report prints it; a device no measured set checks says so.

#include <string>
#include <vector>

namespace pipescope::sim {

struct DeviceFidelity {
  std::string set;  // "h100-dense"
  int runs = 0;     // rows simulated against a measurement
  double mape = 0;  // mean |simulated - measured| / measured
};

// The sets whose cluster preset runs a device named `device` (core/model/presets.h), in the baseline's order. Empty
// when none does or the baseline is not installed.
std::vector<DeviceFidelity> device_fidelity(const std::string& device);
// One line for the report: "h100-dense: 17 runs, MAPE 10.7% (pipescope fidelity)", or why there is none.
std::string describe_fidelity(const std::string& device);

}  // namespace pipescope::sim
