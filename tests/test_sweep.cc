// `pipescope sweep` end to end (runs the built binary): one CSV row per combination in cartesian order, values
// equal to single `simulate` runs, flow-sequence values, determinism, progress on stderr, and bad keys / values
// stopping the sweep with the file and key named (exit 1) before anything runs; impossible combinations as rows.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_run.h"

namespace {

using pipescope::test::kExe;
using pipescope::test::Result;
using pipescope::test::slurp;
// Runs `pipescope <args>` with stdout and stderr captured in files.
Result run(const std::string& args) { return pipescope::test::run(args, "sweep_run"); }

// Minimal CSV reader (quoted fields with "" escapes, no embedded newlines).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> row;
    std::string cur;
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); i++) {
      const char c = line[i];
      if (quoted) {
        if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          i++;
        } else if (c == '"') {
          quoted = false;
        } else {
          cur += c;
        }
      } else if (c == '"') {
        quoted = true;
      } else if (c == ',') {
        row.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    row.push_back(cur);
    rows.push_back(row);
  }
  return rows;
}

std::size_t column(const std::vector<std::string>& header, const std::string& name) {
  for (std::size_t i = 0; i < header.size(); i++)
    if (header[i] == name) return i;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

std::string write_scenario() {
  // One file per test: ctest runs the tests of this file in parallel processes.
  const std::string path =
      ::testing::TempDir() + "/sweep_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".yaml";
  std::ofstream f(path);
  f << "# a small scenario for the sweep tests\n"
       "name: sweep-test\n"
       "model: {preset: gpt3-1b}\n"
       "cluster: {preset: dgx-a100, nodes: 1}\n"
       "parallel: {dp: 1, pp: 4, tp: 2, micro_batch_size: 1, global_batch: 8}\n"
       "schedule: {kind: gpipe}\n";
  return path;
}

TEST(Sweep, CartesianRowsMatchSingleRuns) {
  const std::string yaml = write_scenario();
  const std::string csv = ::testing::TempDir() + "/sweep_a.csv";
  const Result r =
      run("sweep " + yaml + " --vary schedule.kind=gpipe,1f1b --vary parallel.micro_batch_size=1,2 --out " + csv);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  // Progress: one line per run on stderr.
  EXPECT_NE(r.err.find("sweep [1/4] schedule.kind=gpipe parallel.micro_batch_size=1 ..."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sweep [4/4] schedule.kind=1f1b parallel.micro_batch_size=2 ..."), std::string::npos);
  const auto rows = parse_csv(slurp(csv));
  ASSERT_EQ(rows.size(), 5u);
  const auto& h = rows[0];
  EXPECT_EQ(h[0], "schedule.kind");
  EXPECT_EQ(h[1], "parallel.micro_batch_size");
  EXPECT_EQ(h.back(), "error");
  // First --vary is the outer loop.
  const char* kinds[] = {"gpipe", "gpipe", "1f1b", "1f1b"};
  const char* mbs[] = {"1", "2", "1", "2"};
  const char* m[] = {"8", "4", "8", "4"};
  for (int i = 0; i < 4; i++) {
    const auto& row = rows[i + 1];
    ASSERT_EQ(row.size(), h.size());
    EXPECT_EQ(row[0], kinds[i]);
    EXPECT_EQ(row[1], mbs[i]);
    EXPECT_EQ(row[column(h, "schedule")], kinds[i]);
    EXPECT_EQ(row[column(h, "m")], m[i]);
    EXPECT_EQ(row[column(h, "error")], "");
    EXPECT_GT(std::stod(row[column(h, "iteration_s")]), 0);
  }
  // The (gpipe, 1) row is the unmodified scenario: the same iteration time as `simulate --json`.
  const std::string json = ::testing::TempDir() + "/sweep_single.json";
  ASSERT_EQ(run("simulate " + yaml + " --json " + json).rc, 0);
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_NEAR(std::stod(rows[1][column(h, "iteration_s")]), j["iteration_s"].get<double>(), 1e-8);
  // 1F1B holds fewer activations than GPipe at the same micro-batch size.
  EXPECT_LT(std::stod(rows[3][column(h, "peak_memory_GB")]), std::stod(rows[1][column(h, "peak_memory_GB")]));

  // Deterministic: the same sweep to stdout gives the same bytes.
  const Result again = run("sweep " + yaml + " --vary schedule.kind=gpipe,1f1b --vary parallel.micro_batch_size=1,2");
  ASSERT_EQ(again.rc, 0);
  EXPECT_EQ(again.out, slurp(csv));
}

TEST(Sweep, FlowSequenceValuesAndSliceColumns) {
  const std::string yaml = write_scenario();
  const Result r =
      run("sweep " + yaml +
          " --vary schedule.kind=terapipe --vary 'schedule.slice_tokens=[1024,1024],[512, 512, 512, 512]'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 3u);
  const auto& h = rows[0];
  EXPECT_EQ(rows[1][1], "[1024,1024]");
  EXPECT_EQ(rows[1][column(h, "slices")], "2");
  EXPECT_EQ(rows[1][column(h, "slice_tokens")], "1024 1024");
  EXPECT_EQ(rows[2][column(h, "slices")], "4");
  EXPECT_EQ(rows[2][column(h, "slice_tokens")], "512 512 512 512");
}

TEST(Sweep, BadKeysAndValuesNameFileAndKey) {
  const std::string yaml = write_scenario();
  const std::string csv = ::testing::TempDir() + "/sweep_bad.csv";
  std::remove(csv.c_str());
  // Unknown key: the loader's message, the file and the --vary assignment; nothing runs, no CSV.
  Result r = run("sweep " + yaml + " --vary schedule.seq_slicez=2 --out " + csv);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(yaml + ": schedule.seq_slicez: unknown key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(with --vary schedule.seq_slicez=2)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("sweep ["), std::string::npos);
  EXPECT_FALSE(std::ifstream(csv).good());
  // A bad value of a key written in the file: its line and column there. The good value before it does not run.
  r = run("sweep " + yaml + " --vary parallel.tp=2,-3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(yaml + ":5:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("parallel.tp: expected a positive integer, got \"-3\""), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("sweep ["), std::string::npos);
  // Impossible combination found by the cross-field checks.
  r = run("sweep " + yaml + " --vary parallel.pp=3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("parallel."), std::string::npos) << r.err;
  r = run("sweep " + yaml + " --vary schedule.kind=1f1b,zb");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("schedule.kind: unknown value \"zb\""), std::string::npos) << r.err;
  // Malformed --vary arguments.
  for (const char* bad : {"schedule.kind", "=1", "schedule..kind=1", "schedule.kind=", "schedule.kind=1f1b,",
                          "schedule.slice_tokens=[1,2"}) {
    r = run("sweep " + yaml + " --vary '" + std::string(bad) + "'");
    EXPECT_EQ(r.rc, 1) << bad;
    EXPECT_NE(r.err.find("--vary"), std::string::npos) << bad << ": " << r.err;
  }
  r = run("sweep " + yaml + " --vary schedule.kind.x=1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("schedule.kind is not a mapping"), std::string::npos) << r.err;
  r = run("sweep " + yaml + " --vary model.layers=4 --vary model.layers=8");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("given twice"), std::string::npos);
  r = run("sweep " + yaml);
  EXPECT_EQ(r.rc, 1);  // --vary is required
  r = run("sweep /nonexistent.yaml --vary model.layers=4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent.yaml"), std::string::npos);
  r = run("sweep " + yaml + " --vary model.layers=4 --out /nonexistent-dir/x.csv");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--out /nonexistent-dir/x.csv"), std::string::npos);
}

}  // namespace

namespace {

// A combination the cross-field checks reject is a row with its reason, and the sweep goes on; it
// exits 0 unless every row failed. -j 2 writes the same CSV as -j 1.
TEST(Sweep, InvalidCombinationsBecomeRows) {
  const std::string csv1 = ::testing::TempDir() + "/sweep_rows1.csv", csv2 = ::testing::TempDir() + "/sweep_rows2.csv";
  Result r = run("sweep --vary parallel.pp=2,4 --vary parallel.tp=2,4 --out " + csv1);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("sweep [1/4] parallel.pp=2 parallel.tp=2 ... INVALID: "), std::string::npos) << r.err;
  const auto rows = parse_csv(slurp(csv1));
  ASSERT_EQ(rows.size(), 5u);
  const auto& h = rows[0];
  EXPECT_NE(rows[1][column(h, "error")].find("dp * pp * tp = 2 * 2 * 2 = 8 GPUs"), std::string::npos);
  EXPECT_EQ(rows[1][column(h, "iteration_s")], "");
  EXPECT_EQ(rows[2][column(h, "error")], "");
  EXPECT_GT(std::stod(rows[2][column(h, "iteration_s")]), 0);
  EXPECT_EQ(rows[3][column(h, "error")], "");
  EXPECT_NE(rows[4][column(h, "error")].find("32 GPUs"), std::string::npos);
  r = run("sweep --vary parallel.pp=2,4 --vary parallel.tp=2,4 -j 2 --out " + csv2);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(slurp(csv1), slurp(csv2));
  // Every row invalid: exit 1, the reasons in the rows.
  r = run("sweep --vary parallel.pp=3,5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(parse_csv(r.out).size(), 3u);
}

}  // namespace
