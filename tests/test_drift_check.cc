// validate's device drift check (calib/drift_check.h): when there is no probe and why, a probe re-timed before and
// after, the printed line and the JSON object.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "calib/drift_check.h"
#include "core/model/profile.h"
#include "tests/calib_tiny.h"
#include "tests/printed.h"

namespace pipescope::calib {
namespace {

using testing_print::printed;

// A measured cpu-f64 profile (the CPU device of a shipped test profile) with one small layer table (h 32): its probe
// re-times in milliseconds.
std::string write_table_profile() {
  DeviceProfile p = load_profile(PIPESCOPE_SOURCE_DIR "/tests/data/profile-cpu-kernels.yaml");  // its device
  p.provenance["backend"] = "cpu-f64";
  p.provenance["timer"] = "thread CPU time (test)";
  LayerTable t = testing_calib::linear_layer_table({8, 16, 32, 64});
  t.dtype = "fp64";
  p.layers.push_back(t);
  const std::string path = ::testing::TempDir() + "/drift_check_" + std::to_string(getpid()) + ".yaml";
  std::ofstream f(path);
  write_profile(p, f);
  return path;
}

TEST(DriftCheck, NoProbeSaysWhy) {
  DriftCheck d = drift_before("", "cpu-f64", false);
  EXPECT_FALSE(d.probe);
  EXPECT_EQ(d.why, "no profile");
  drift_after(d, "cpu-f64");  // nothing to re-time
  EXPECT_EQ(d.after.fwd_s, 0);
  EXPECT_EQ(printed([&](std::FILE* out) { print_drift(out, d); }), "");
  EXPECT_EQ(drift_json(d), R"({"checked":false,"why":"no profile"})");
  EXPECT_EQ(drift_before("any.yaml", "cpu-f64", true).why, "--no-drift-check");  // the profile is not even read
}

TEST(DriftCheck, ProbeReTimedBeforeAndAfter) {
  const std::string path = write_table_profile();
  DriftCheck d = drift_before(path, "cpu-f64", false);
  unlink(path.c_str());
  ASSERT_TRUE(d.probe) << d.why;
  EXPECT_GT(d.before.fwd_s, 0);
  EXPECT_EQ(d.after.fwd_s, 0);
  drift_after(d, "cpu-f64");
  EXPECT_GT(d.after.bwd_s, 0);
  const std::string line = printed([&](std::FILE* out) { print_drift(out, d); });
  EXPECT_EQ(line.rfind("device drift since the profile (" + d.probe->describe(), 0), 0u) << line;
  const auto j = nlohmann::ordered_json::parse(drift_json(d));
  EXPECT_EQ(j["checked"], true);
  EXPECT_EQ(j["point"], d.probe->describe());
  EXPECT_EQ(j["profile"]["forward_s"], d.probe->profile_fwd_s);
  EXPECT_EQ(j["after"]["change"], drift_change(*d.probe, d.after));
}

}  // namespace
}  // namespace pipescope::calib
