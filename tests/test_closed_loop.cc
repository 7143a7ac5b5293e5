// The closed loop on a machine without a GPU: calibrate the CPU backend (quick grid), simulate the
// 2-rank pipeline scenario with that profile and run it with the CPU runtime under mpirun
// (`pipescope validate --profile`); the simulated iteration must be within kTolerance of the measured one (when the
// machine is not busier than its cores and held its speed: see kMaxDrift), and the kernel model must predict a layer
// at another hidden size.
// Runs alone (RUN_SERIAL): timings taken while other tests load the cores would compare noise.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/model/profile.h"

namespace {

// The target is 10% on a quiet machine; CI machines are shared, so the gate is looser and the note
// reports the figure measured on a quiet machine.
constexpr double kTolerance = 0.20;

// 1-minute load average per core. The runtime's ops are milliseconds long: on a machine busier than its cores
// they are preempted and measure the other load, not the kernels (calibration medians of short calls are not),
// so the timing gate only applies when the machine has room for the ranks.
[[maybe_unused]] double load_per_core() {  // unused in sanitized builds (no timing gate)
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  const unsigned n = std::thread::hardware_concurrency();
  return l / (n ? n : 1);
}
constexpr double kMaxLoadPerCore = 1.0;

// This machine switches speed by up to 1.5x within seconds (calib/README.md "Drift"); a run measured in another
// phase than the profile's tables differs by the phase, not by the model. The timing gate applies to a run whose
// drift readings (the calibration's own, and validate's before and after the run) are all within kMaxDrift;
// validate runs up to kValidateAttempts times to find one.
constexpr double kMaxDrift = 0.15;
#ifdef PIPESCOPE_SANITIZED
constexpr int kValidateAttempts = 1;  // no timing gate to find a steady run for (and 300 s of test time under ASan)
// Sanitized, the loop is about memory errors, not timings: shorter link sweeps and one timed iteration (the layer
// table must still reach the scenario's 256 tokens). The full loop took 259 s of a 2-core machine under ASan.
const char* const kCalibrateScale = " -e 256K -n 10";
const char* const kValidateIterations = " --iterations 1 --warmup 0";
#else
constexpr int kValidateAttempts = 3;
const char* const kCalibrateScale = " -e 2M -n 50";
const char* const kValidateIterations = " --iterations 3 --warmup 1";
#endif

// The profile's provenance.drift_during_calibration ("+5.7% (layer ...)") as a fraction.
double calibration_drift(const std::string& profile) {
  const pipescope::DeviceProfile p = pipescope::load_profile(profile);
  const auto it = p.provenance.find("drift_during_calibration");
  if (it == p.provenance.end()) throw std::runtime_error(profile + ": no drift_during_calibration");
  return std::stod(it->second) / 100;
}

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// A failed step's log, for the test's output (CI keeps only what the test prints).
std::string log_text(const std::string& path) {
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.size() > 6000) text = "...\n" + text.substr(text.size() - 6000);
  return path + ":\n" + text;
}

TEST(ClosedLoop, CalibrateSimulateValidateCpu) {
  const std::string bin = PIPESCOPE_BINARY_DIR "/pipescope";
  const std::string scen = PIPESCOPE_SOURCE_DIR "/scenarios/calib/cpu-2rank.yaml";
  const std::string dir = PIPESCOPE_BINARY_DIR "/closed_loop";
  ASSERT_EQ(run("mkdir -p " + dir), 0);
  const std::string profile = dir + "/cpu-f64.yaml", json = dir + "/validate.json";
  // --accept-poor-fit: the quality gates have their own tests (test_calib_gates); on a shared CI machine a link
  // size or two may be noisy, and this test is about the closed loop (failures are in calibrate.log).
  ASSERT_EQ(
      run(bin + " calibrate " + scen + " --backend cpu-f64 --grain 32 --context-steps 4 --quick" + kCalibrateScale +
          " --accept-poor-fit --no-progress --out " + profile + " > " + dir + "/calibrate.log 2>&1"),
      0)
      << log_text(dir + "/calibrate.log");
  const double cal_drift = calibration_drift(profile);
  double err = 0;
  bool steady = false;
  for (int attempt = 1; attempt <= kValidateAttempts && !steady; attempt++) {
    ASSERT_EQ(run(bin + " validate " + scen + " --backend cpu-f64 --profile " + profile + kValidateIterations +
                  " --json " + json + " > " + dir + "/validate.log 2>&1"),
              0)
        << log_text(dir + "/validate.log");
    std::ifstream f(json);
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_NE(j.at("cost_model").get<std::string>().find("measured layer tables"), std::string::npos);
    EXPECT_TRUE(j.at("exactness").at("ok").get<bool>());
    const double meas = j.at("iteration_s").at("measured").get<double>();
    const double sim = j.at("iteration_s").at("simulated").get<double>();
    EXPECT_GT(meas, 0);
    EXPECT_GT(sim, 0);
    err = (sim - meas) / meas;
    const nlohmann::json& d = j.at("device_drift");
    ASSERT_TRUE(d.at("checked").get<bool>());
    const double before = d.at("before").at("change").get<double>(), after = d.at("after").at("change").get<double>();
    std::printf(
        "closed loop: measured %.4f s, simulated %.4f s, error %+.1f%%; machine drift %+.1f%% during the "
        "calibration, %+.1f%% / %+.1f%% before / after the run\n",
        meas, sim, 100 * err, 100 * cal_drift, 100 * before, 100 * after);
    steady = std::max({std::abs(cal_drift), std::abs(before), std::abs(after)}) <= kMaxDrift;
    if (std::abs(cal_drift) > kMaxDrift) break;  // the profile itself straddles phases: another run cannot help
  }
#ifndef PIPESCOPE_SANITIZED
  if (load_per_core() > kMaxLoadPerCore) {
    std::printf("load average %.1f per core: the timing gate is not applied (see bench/bench_closed_loop)\n",
                load_per_core());
    return;
  }
  if (!steady) {
    std::printf(
        "the machine moved by more than %.0f%% against its profile: the timing gate is not applied (the error "
        "is the machine's; calib/README.md \"Drift\")\n",
        100 * kMaxDrift);
    return;
  }
  EXPECT_LE(std::abs(err), kTolerance);
#endif
}

// The kernel model's transfer: calibrate a tiny shape (hidden 64, 2 heads, 64 tokens), which also times one layer at
// a shape none of the kernel fits saw (hidden 32) and records the prediction next to the measurement. The
// target is 15% per op on a quiet machine (bench/bench_closed_loop and `pipescope calibrate` report it); the gate
// here is the median of the four held-out layer timings within kTransferTolerance.
constexpr double kTransferTolerance = 0.30;

TEST(ClosedLoop, KernelModelTransfersToAnotherHiddenSize) {
  const std::string bin = PIPESCOPE_BINARY_DIR "/pipescope";
  const std::string scen = PIPESCOPE_SOURCE_DIR "/scenarios/calib/cpu-2rank.yaml";
  const std::string dir = PIPESCOPE_BINARY_DIR "/closed_loop";
  ASSERT_EQ(run("mkdir -p " + dir), 0);
  const std::string profile = dir + "/tiny-f64.yaml";
  // --accept-poor-fit as above: this test is about the transfer, the gates are tested in test_calib_gates.
  ASSERT_EQ(run(bin + " calibrate " + scen + " --backend cpu-f64 --hidden 64 --heads 2 --seq-len 64 --vocab 128 " +
                "--grain 16 --context-steps 4 --quick --no-links --accept-poor-fit --no-progress --out " + profile +
                " > " + dir + "/tiny.log 2>&1"),
            0)
      << log_text(dir + "/tiny.log");
  const pipescope::DeviceProfile p = pipescope::load_profile(profile);
  ASSERT_EQ(p.kernels.dtype, "fp64");
  ASSERT_EQ(p.kernels.transfer.size(), 4u);
  std::vector<double> errs;
  for (const auto& t : p.kernels.transfer) {
    EXPECT_NE(t.hidden, 64) << "the transfer check must use a shape other than the calibrated one";
    std::printf("transfer %s hidden %d l %d c %d: measured %.1f us, predicted %.1f us, slowdown x%.2f (%+.1f%%)\n",
                t.op.c_str(), t.hidden, t.l, t.c, t.measured_s * 1e6, t.predicted_s * 1e6, t.slowdown,
                100 * t.rel_err());
    errs.push_back(std::abs(t.rel_err()));
  }
  std::sort(errs.begin(), errs.end());
#ifndef PIPESCOPE_SANITIZED
  EXPECT_LE(0.5 * (errs[1] + errs[2]), kTransferTolerance);
#endif
}

}  // namespace
