#pragma once
// `pipescope calibrate`: runs the compute benchmarks on a kernels/ backend, fits them, adds the link fits from a
// pipescope-linkbench run, and assembles a DeviceProfile with its provenance.

#include <memory>
#include <string>
#include <vector>

#include "calib/benches.h"
#include "calib/gates.h"
#include "core/model/profile.h"

namespace pipescope::calib {

struct CalibrateOptions {
  std::string backend = "cpu-f64";  // a measuring backend of core/model/backends.h
  ComputeConfig compute;
  std::vector<int> micro_batches{1};
  bool gemm = true;
  std::string device_preset;         // CUDA: the peak specs (core/model/presets.h); default: from the GPU's name
  std::string link_results;          // pipescope-linkbench JSON; empty = no link section
  std::string link_class = "intra";  // intra | inter
  std::string command;               // the exact command line, for the provenance
  double budget_s = 0;               // > 0: lower the longest measured length until the estimate fits (quick)
  bool accept_poor_fit = false;      // write the profile even when a quality gate fails (calib/gates.h)
  GateBounds gates;
  std::string clock = "cpu";  // CPU backends: cpu (thread CPU time) | wall (steady clock, what validate measures)
  double timer_noise = 0;     // test hook: sigma of log-normal noise on every compute reading (noisy_timer)
};

// Estimated seconds of the compute benchmarks of `o` with `cfg` on a machine of cfg.rates (calib/estimate.cc).
double estimate_compute_s(const CalibrateOptions& o, const ComputeConfig& cfg);

// Throws CalibrationRefused (calib/gates.h) when a quality gate fails and !accept_poor_fit.
DeviceProfile calibrate(const CalibrateOptions& o);
// The kernels backend a calibration measures with, by name (cpu-f64, cpu-f32, cuda-bf16, cuda-f16); throws
// std::invalid_argument for one that measures nothing (null).
std::unique_ptr<kernels::Backend> measuring_backend(const std::string& name);

// An analytic profile (kind: analytic) of a cluster preset: its device from public peak specs with the analytic
// model's efficiency parameters, its NVLink (intra) and network (inter) links; no measured tables.
DeviceProfile analytic_profile(const std::string& cluster_preset, const std::string& command);

// Human-readable fit report (stdout of `pipescope calibrate`).
std::string fit_report(const DeviceProfile& p);

}  // namespace pipescope::calib
