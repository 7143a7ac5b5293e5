// calibrate's request (calib/calibrate_request.h): the options taken from the scenario and the overrides, the
// refusals naming their flag, --quick, the noise hook, the link job's flags, the GPU program's request and result,
// and the profile file.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "calib/calibrate_request.h"
#include "calib/driver.h"
#include "calib/options_json.h"
#include "core/model/scenario.h"

namespace pipescope::calib {
namespace {

std::string temp_dir() {
  std::string t = ::testing::TempDir() + "/calib_request_XXXXXX";
  return mkdtemp(t.data());
}

// The refusal's message for `r`, "" when accepted.
std::string refusal(const CalibrateRequest& r) {
  try {
    calibrate_options(r, default_scenario(), "cmd");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CalibrateRequest, ShapeFromTheScenarioAndOverrides) {
  const Scenario s = default_scenario();
  CalibrateRequest r;
  CalibrateOptions o = calibrate_options(r, s, "pipescope calibrate --out x.yaml");
  EXPECT_EQ(o.compute.shape.layer.hidden, s.model.hidden);
  EXPECT_EQ(o.compute.shape.layer.ffn, s.model.ffn_hidden);
  EXPECT_EQ(o.compute.shape.max_seq, s.model.seq_len);
  EXPECT_EQ(o.micro_batches, std::vector<int>{s.parallel.micro_batch_size});
  EXPECT_EQ(o.command, "pipescope calibrate --out x.yaml");
  EXPECT_EQ(o.budget_s, 0);
  r.hidden = 64, r.heads = 4, r.vocab = 128, r.seq_len = 32, r.micro_batches = {1, 2};
  o = calibrate_options(r, s, "");
  EXPECT_EQ(o.compute.shape.layer.hidden, 64);
  EXPECT_EQ(o.compute.shape.layer.ffn, 256);  // follows a given hidden size
  EXPECT_EQ(o.compute.shape.vocab, 128);
  EXPECT_EQ(o.compute.shape.max_seq, 32);
  EXPECT_EQ(o.micro_batches, (std::vector<int>{1, 2}));
}

TEST(CalibrateRequest, RefusalsNameTheFlag) {
  CalibrateRequest r;
  r.hidden = 0;
  EXPECT_EQ(refusal(r), "--hidden: must be >= 1, got 0");
  r = {};
  r.grain = 0;
  EXPECT_EQ(refusal(r), "--grain: must be >= 1, got 0");
  r = {};
  r.context_steps = -1;
  EXPECT_EQ(refusal(r), "--context-steps: must be >= 0 (0: no context grid)");
  r = {};
  r.hidden = 64, r.heads = 5;
  EXPECT_EQ(refusal(r).rfind("model shape: ", 0), 0u);
  r = {};
  r.hidden = 64, r.heads = 4, r.tp = 3;
  EXPECT_EQ(refusal(r), "--tp 3: must divide hidden, ffn and vocab");
  r = {};
  r.link_class = "rack";
  EXPECT_EQ(refusal(r), "--link-class: intra or inter");
  r = {};
  r.backend = "null";
  EXPECT_EQ(refusal(r).rfind("--backend: unknown backend 'null' (", 0), 0u);
}

TEST(CalibrateRequest, QuickPolicyAndBudget) {
  CalibrateRequest r;
  r.quick = true;
  CalibrateOptions o = calibrate_options(r, default_scenario(), "");
  EXPECT_EQ(o.compute.context_steps, 4);
  EXPECT_TRUE(o.compute.sparse_lengths);
  EXPECT_EQ(o.compute.policy.max_time_s, quick_policy().max_time_s);
  EXPECT_EQ(o.budget_s, 100);
  r.context_steps = 8, r.context_steps_given = true, r.budget_s = 5;
  o = calibrate_options(r, default_scenario(), "");
  EXPECT_EQ(o.compute.context_steps, 8);  // given on the command line: kept
  EXPECT_EQ(o.budget_s, 5);
}

TEST(CalibrateRequest, NoiseHook) {
  setenv("PIPESCOPE_CALIB_INJECT_NOISE", "0.25", 1);
  EXPECT_EQ(calibrate_options({}, default_scenario(), "").timer_noise, 0.25);
  setenv("PIPESCOPE_CALIB_INJECT_NOISE", "lots", 1);
  EXPECT_EQ(refusal({}), "PIPESCOPE_CALIB_INJECT_NOISE: expected a number >= 0, got 'lots'");
  unsetenv("PIPESCOPE_CALIB_INJECT_NOISE");
  EXPECT_EQ(calibrate_options({}, default_scenario(), "").timer_noise, 0);
}

TEST(CalibrateRequest, LinkBenchmarkFlags) {
  CalibrateRequest r;
  EXPECT_EQ(linkbench_args(r, "/t/links.json"), (std::vector<std::string>{"-b", "8", "-e", "32M", "-f", "2", "-n", "20",
                                                                          "-w", "5", "--out", "/t/links.json"}));
  r.quick = true;
  EXPECT_EQ(linkbench_args(r, "x")[3], "4M");
  r.max_bytes = "1M";
  EXPECT_EQ(linkbench_args(r, "x")[3], "1M");
  r.link_ranks = 1;
  EXPECT_THROW(linkbench_args(r, "x"), std::invalid_argument);
  r = {};
  r.min_bytes = "lots";
  try {
    linkbench_args(r, "x");
    FAIL() << "accepted -b lots";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("-b: ", 0), 0u) << e.what();
  }
}

TEST(CalibrateRequest, GpuRequestAndResultThroughTheDirectory) {
  const std::string dir = temp_dir();
  CalibrateOptions o = calibrate_options({}, default_scenario(), "cmd");
  const std::vector<std::string> args = write_gpu_request(o, dir);
  EXPECT_EQ(args, (std::vector<std::string>{dir + "/options.json", dir + "/profile.yaml"}));
  std::ifstream f(args[0]);
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(json, options_to_json(o));
  EXPECT_ANY_THROW(read_gpu_result(dir));  // the program has not written it
  DeviceProfile p = analytic_profile("dgx-a100", "test");
  write_profile_file(p, args[1]);
  EXPECT_EQ(read_gpu_result(dir).name, p.name);
}

TEST(CalibrateRequest, ProfileFileReadsBack) {
  const std::string path = temp_dir() + "/p.yaml";
  DeviceProfile p = analytic_profile("dgx-h100", "pipescope calibrate --analytic dgx-h100");
  p.source = path;
  write_profile_file(p, path);
  const DeviceProfile back = load_profile(path);
  EXPECT_EQ(back.kind, "analytic");
  EXPECT_EQ(back.device.name, p.device.name);
  EXPECT_THROW(write_profile_file(p, "/nonexistent-dir/p.yaml"), std::exception);
}

TEST(CalibrateRequest, ThisProcessCommandLine) {
  const std::string cmd = process_command_line();
  EXPECT_NE(cmd.find("test_calibrate_request"), std::string::npos) << cmd;
  EXPECT_NE(cmd.back(), ' ');
}

}  // namespace
}  // namespace pipescope::calib
