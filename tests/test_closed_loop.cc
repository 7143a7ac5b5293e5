// The closed loop of issue 6 on a machine without a GPU: calibrate the CPU backend (quick grid), simulate the
// 2-rank pipeline scenario with that profile and run it with the CPU runtime under mpirun
// (`pipescope validate --profile`); the simulated iteration must be within kTolerance of the measured one.
// Runs alone (RUN_SERIAL): timings taken while other tests load the cores would compare noise.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

// The target is 10% on a quiet machine; CI machines are shared, so the gate is looser and the note
// reports the figure measured on a quiet machine.
constexpr double kTolerance = 0.20;

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

TEST(ClosedLoop, CalibrateSimulateValidateCpu) {
  const std::string bin = PIPESCOPE_BINARY_DIR "/pipescope";
  const std::string scen = PIPESCOPE_SOURCE_DIR "/scenarios/calib/cpu-2rank.yaml";
  const std::string dir = PIPESCOPE_BINARY_DIR "/closed_loop";
  ASSERT_EQ(run("mkdir -p " + dir), 0);
  const std::string profile = dir + "/cpu-f64.yaml", json = dir + "/validate.json";
  // --accept-poor-fit: the quality gates have their own tests (test_calib_gates); on a shared CI machine a link
  // size or two may be noisy, and this test is about the closed loop (failures are in calibrate.log).
  ASSERT_EQ(run(bin + " calibrate " + scen + " --backend cpu-f64 --grain 32 --context-steps 4 --quick -e 2M -n 50 " +
                "--accept-poor-fit --no-progress --out " + profile + " > " + dir + "/calibrate.log 2>&1"),
            0)
      << "see " << dir << "/calibrate.log";
  ASSERT_EQ(run(bin + " validate " + scen + " --backend cpu-f64 --profile " + profile +
                " --iterations 3 --warmup 1 --json " + json + " > " + dir + "/validate.log 2>&1"),
            0)
      << "see " << dir << "/validate.log";
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_NE(j.at("cost_model").get<std::string>().find("measured layer tables"), std::string::npos);
  EXPECT_TRUE(j.at("exactness").at("ok").get<bool>());
  const double meas = j.at("iteration_s").at("measured").get<double>();
  const double sim = j.at("iteration_s").at("simulated").get<double>();
  const double err = (sim - meas) / meas;
  std::printf("closed loop: measured %.4f s, simulated %.4f s, error %+.1f%%\n", meas, sim, 100 * err);
  EXPECT_GT(meas, 0);
  EXPECT_GT(sim, 0);
#ifndef PIPESCOPE_SANITIZED
  EXPECT_LE(std::abs(err), kTolerance) << "measured " << meas << " s, simulated " << sim << " s";
#endif
}

}  // namespace
