// validate's measured side without MPI (runtime/measured_run.h) and its report (runtime/validate_report.h): option
// checks, the fitted scenario, the rank program and flags, the results file, the timeline spans, the header, the
// exactness check and the --json document.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/lower/checks.h"
#include "core/plan/work_estimate.h"
#include "runtime/measured_compare.h"
#include "runtime/measured_run.h"
#include "runtime/scenario_fit.h"
#include "runtime/validate_report.h"
#include "tests/printed.h"

namespace pipescope::runtime {
namespace {

using testing_print::printed;

RankJob small_job() {
  RankJob j;
  j.layers = 4, j.hidden = 32, j.heads = 2, j.vocab = 64, j.seq_len = 16, j.global_batch = 4;
  j.dp = 1, j.pp = 2, j.tp = 1;
  return j;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/validate_run_" + std::to_string(getpid()) + "_" + name;
}

// Worker w's op i runs from i to i + 0.25 s, a send completes at i + 0.5 s; the iteration ends at 10 + it s.
JobResult synthetic_run(const LoweredSchedule& ls, int iterations) {
  JobResult r;
  r.backend = "cpu-f64";
  r.steps = iterations;
  for (int w = 0; w < ls.workers(); w++) {
    WorkerResult wr;
    wr.worker = w;
    for (int it = 0; it < iterations; it++) {
      IterationStats st;
      for (std::size_t i = 0; i < ls.per_worker[w].size(); i++) st.ops.push_back({1.0 * i, i + 0.25, i + 0.5});
      st.end_s = 10 + it;
      wr.iterations.push_back(st);
    }
    r.workers.push_back(wr);
  }
  return r;
}

TEST(ValidateRun, JobChecks) {
  RankJob j = small_job();
  EXPECT_FALSE(validation_job(j).no_check);
  j.backend = "null";
  EXPECT_TRUE(validation_job(j).no_check);  // no arithmetic, nothing to compare
  j = small_job();
  j.iterations = 0;
  EXPECT_THROW(validation_job(j), std::invalid_argument);
  j = small_job();
  j.warmup = -1;
  EXPECT_THROW(validation_job(j), std::invalid_argument);
  j = small_job();
  j.watchdog_s = 0;
  EXPECT_THROW(validation_job(j), std::invalid_argument);
}

TEST(ValidateRun, FittedScenario) {
  const Scenario s = validation_scenario(small_job(), "");
  EXPECT_EQ(s.model.layers, 4);
  EXPECT_EQ(s.model.hidden, 32);
  EXPECT_EQ(s.parallel.pp, 2);
  EXPECT_TRUE(s.sim.profile.empty());
}

TEST(ValidateRun, RankCountRankProgramAndFlags) {
  EXPECT_NO_THROW(check_rank_count(kMaxValidateRanks));
  EXPECT_THROW(check_rank_count(kMaxValidateRanks + 1), std::invalid_argument);
  set_allow_large(true);
  EXPECT_NO_THROW(check_rank_count(kMaxValidateRanks + 1));
  set_allow_large(false);
  EXPECT_EQ(rank_program("", "/bin/sh"), "/bin/sh");
  EXPECT_EQ(rank_program("/bin/sh", "/nonexistent"), "/bin/sh");
  try {
    rank_program("/nonexistent/pipescope-rank", "");
    FAIL() << "accepted a missing rank program";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--rank-exe /nonexistent/pipescope-rank: not an executable (build pipescope-rank)");
  }
  const std::vector<std::string> args = rank_args(small_job(), "/tmp/x.bin");
  ASSERT_GE(args.size(), 2u);
  EXPECT_EQ(args[args.size() - 2], "--out");
  EXPECT_EQ(args.back(), "/tmp/x.bin");
  const auto prep = prepare_with_constant_costs(validation_scenario(small_job(), ""));
  EXPECT_EQ(measured_ranks(prep->lowered), 2);
}

TEST(ValidateRun, ResultsFileRoundTripsAndTruncationIsRefused) {
  const auto prep = prepare_with_constant_costs(validation_scenario(small_job(), ""));
  const JobResult r = synthetic_run(prep->lowered, 2);
  const std::string path = temp_path("results.bin");
  const std::vector<double> v = pack(r);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
  const JobResult back = read_measured(path, 4);
  ASSERT_EQ(back.workers.size(), r.workers.size());
  EXPECT_EQ(back.workers[1].iterations[1].end_s, 11);
  EXPECT_EQ(back.workers[1].iterations[1].ops[2].end, 2.25);
  std::ofstream(path, std::ios::binary) << "1234567";  // not a whole number of doubles
  EXPECT_THROW(read_measured(path, 4), std::runtime_error);
  unlink(path.c_str());
  EXPECT_THROW(read_measured(path, 4), std::runtime_error);
}

TEST(ValidateRun, LastIterationSpansEndSendsAtTheirCompletion) {
  const auto prep = prepare_with_constant_costs(validation_scenario(small_job(), ""));
  const LoweredSchedule& ls = prep->lowered;
  const MeasuredSpans m = last_iteration_spans(ls, synthetic_run(ls, 2));
  EXPECT_EQ(m.end_s, 11);
  ASSERT_EQ(m.per_worker.size(), ls.per_worker.size());
  for (std::size_t w = 0; w < ls.per_worker.size(); w++) {
    ASSERT_EQ(m.per_worker[w].size(), ls.per_worker[w].size());
    for (std::size_t i = 0; i < ls.per_worker[w].size(); i++)
      EXPECT_EQ(m.per_worker[w][i].second, i + (ls.per_worker[w][i].kind == LOpKind::Send ? 0.5 : 0.25));
  }
}

TEST(ValidateReport, HeaderNamesTheRunAndAnUnevenLayout) {
  RankJob j = small_job();
  j.stage_layers = {1, 3};
  const Scenario s = validation_scenario(j, "");
  const auto prep = prepare_with_constant_costs(s);
  const std::string h =
      printed([&](std::FILE* out) { print_validate_header(out, s, prep->lowered, j, "analytic cost model", {}); });
  EXPECT_EQ(h.rfind("validate default (<builtin>)\n", 0), 0u) << h;
  EXPECT_NE(h.find("  model: 4 layers, layers 1,3 per stage, hidden 32"), std::string::npos) << h;
  EXPECT_NE(h.find("  measured: backend cpu-f64, 2 MPI ranks, 3 timed iteration(s) after 1 warm-up\n"),
            std::string::npos)
      << h;
}

TEST(ValidateReport, ExactnessCheckAndCostNote) {
  RankJob j = small_job();
  const Scenario s = validation_scenario(j, "");
  const auto prep = prepare_with_constant_costs(s);
  const ModelConfig mc = ModelConfig::for_validation(s.model, s.parallel.stage_layers);
  const JobResult r = synthetic_run(prep->lowered, 1);  // no gradients gathered: every module missing
  const ExactnessCheck x = check_exactness(r, prep->lowered, mc, j);
  EXPECT_TRUE(x.checked);
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.tolerance, exactness_tolerance("cpu-f64"));
  EXPECT_NE(printed([&](std::FILE* out) { print_exactness(out, x); }).find(": FAILED\n"), std::string::npos);
  j.no_check = true;
  const ExactnessCheck off = check_exactness(r, prep->lowered, mc, j);
  EXPECT_FALSE(off.checked);
  EXPECT_TRUE(off.ok);
  EXPECT_EQ(printed([&](std::FILE* out) { print_exactness(out, off); }), "");
  EXPECT_EQ(printed([&](std::FILE* out) { print_cost_note(out, s, "cpu-f64", true); }), "");
  EXPECT_NE(printed([&](std::FILE* out) {
              print_cost_note(out, s, "cpu-f64", false);
            }).find("with the analytic cost model while the measured side ran the cpu-f64 backend"),
            std::string::npos);
}

TEST(ValidateReport, JsonDocumentKeysInOrder) {
  const RankJob j = small_job();
  const Scenario s = validation_scenario(j, "");
  const auto prep = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  const Comparison c =
      compare_runs(cs, std::vector<double>(cs.dag().size(), 1.0), 7.0, synthetic_run(prep->lowered, 1));
  ValidateRecord rec{"analytic cost model",
                     R"j({"kind":"analytic (no profile)"})j",
                     "cpu-f64",
                     R"({"checked":false,"why":"no profile"})",
                     &c,
                     {}};
  auto doc = nlohmann::ordered_json::parse(validate_json(s, j, rec));
  std::vector<std::string> keys;
  for (const auto& [k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"schema", "scenario", "source", "cost_model", "profile", "schedule", "dp", "pp",
                                      "tp", "v", "m", "model", "backend", "iterations", "warmup", "iteration_s",
                                      "per_op_kind", "runtime_overhead_us_per_op", "device_drift"}));
  EXPECT_EQ(doc["schema"], "pipescope.validate/1");
  EXPECT_EQ(doc["device_drift"]["why"], "no profile");
  rec.exactness.checked = true;
  doc = nlohmann::ordered_json::parse(validate_json(s, j, rec));
  EXPECT_TRUE(doc.contains("exactness"));
  EXPECT_EQ(doc["exactness"]["ok"], true);
}

}  // namespace
}  // namespace pipescope::runtime
