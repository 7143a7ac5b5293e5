// Unit checks of the reliability suite's library pieces: atomic outputs and output path checks
// (core/util/atomic_file.h), input file checks (core/util/input_file.h), the work estimate (core/plan/work_estimate.h)
// and the range table (core/util/ranges.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/plan/search_work.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"
#include "core/util/input_file.h"
#include "core/util/ranges.h"

namespace pipescope {
namespace {

std::string scratch(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/limits_" + std::to_string(getpid()) + "_" + name;
  mkdir(d.c_str(), 0700);
  return d;
}
std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(AtomicFile, WritesWholeFileAndReplacesTheOld) {
  const std::string d = scratch("atomic");
  write_file_atomic(d + "/o.json", "old\n", "--json");
  write_file_atomic(d + "/o.json", "new\n", "--json");
  EXPECT_EQ(slurp(d + "/o.json"), "new\n");
  struct stat st {};
  ASSERT_EQ(stat((d + "/o.json").c_str(), &st), 0);
  EXPECT_NE(st.st_mode & 0044, 0u) << "not readable by others: mkstemp's 0600 leaked";
}

TEST(AtomicFile, DevFullIsAWriteError) {
  try {
    write_file_atomic("/dev/full", "x", "--json");
    ADD_FAILURE() << "no error writing to /dev/full";
  } catch (const OutputWriteError& e) {
    EXPECT_NE(std::string(e.what()).find("--json /dev/full: write failed"), std::string::npos) << e.what();
  }
}

// Appended piece by piece: the target changes only at commit(); dropped uncommitted, it stays as it was and no
// temporary file is left beside it.
TEST(AtomicFile, WriterAppendsAndCommitsOrLeavesTheOldFile) {
  const std::string d = scratch("writer");
  write_file_atomic(d + "/t.json", "old\n", "--trace");
  {
    AtomicFileWriter w(d + "/t.json", "--trace");
    w.append("new ");
    w.append("text\n");
    EXPECT_EQ(slurp(d + "/t.json"), "old\n");
  }  // no commit: an error unwound it
  EXPECT_EQ(slurp(d + "/t.json"), "old\n");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d)) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "a temporary file was left";
  AtomicFileWriter w(d + "/t.json", "--trace");
  w.append("new text\n");
  w.commit();
  EXPECT_EQ(slurp(d + "/t.json"), "new text\n");
  EXPECT_THROW(w.append("x"), std::logic_error);
  AtomicFileWriter full("/dev/full", "--trace");
  EXPECT_THROW(full.append(std::string(1 << 16, 'x')), OutputWriteError);
}

TEST(AtomicFile, OutputPathsAreCheckedBeforeTheRun) {
  const std::string d = scratch("paths");
  EXPECT_NO_THROW(check_output_paths({{"--json", d + "/a.json"}, {"--trace", d + "/b.json"}, {"--svg", ""}}));
  EXPECT_THROW(check_output_paths({{"--json", d + "/a.json"}, {"--trace", d + "/./a.json"}}), OutputPathError);
  EXPECT_THROW(check_output_paths({{"--json", d + "/missing/a.json"}}), OutputPathError);
  EXPECT_THROW(check_output_paths({{"--json", d}}), OutputPathError);
  EXPECT_THROW(check_output_paths({{"--json", "-"}, {"--trace", "-"}}), OutputPathError);
}

TEST(InputFile, RefusesDirectoriesDevicesAndBadUtf8) {
  const std::string d = scratch("input");
  EXPECT_THROW(read_input_file(d, "scenario file"), InputFileError);
  EXPECT_THROW(read_input_file("/dev/zero", "scenario file"), InputFileError);
  std::ofstream(d + "/bad.yaml") << "name: \"a\xc3\x28\"\n";
  EXPECT_THROW(read_input_file(d + "/bad.yaml", "scenario file"), InputFileError);
  EXPECT_EQ(utf8_problem("\xe2\x82\xac ok"), "");                 // a 3-byte character
  EXPECT_NE(utf8_problem("\xc0\xaf"), "");                        // overlong '/'
  EXPECT_NE(utf8_problem("\xed\xa0\x80"), "");                    // a surrogate
  EXPECT_NE(utf8_problem(std::string("ab\xf0\x9f\x98", 5)), "");  // cut short
  EXPECT_NE(utf8_problem(std::string("a\0b", 3)).find("line 1, column 2: a NUL byte"), std::string::npos);
}

TEST(WorkEstimate, GrowsWithEveryCountAndRefusesOverTheLimit) {
  const Scenario s = default_scenario();
  const WorkEstimate w = estimate_work(s);
  EXPECT_GT(w.ops, 1000);
  EXPECT_LT(w.ops, kMaxOps / 100);
  for (auto bump : {+[](Scenario& x) { x.parallel.pp *= 2; }, +[](Scenario& x) { x.parallel.dp *= 2; },
                    +[](Scenario& x) { x.parallel.global_batch *= 2; }, +[](Scenario& x) { x.parallel.v *= 2; }}) {
    Scenario b = s;
    bump(b);
    EXPECT_GT(estimate_work(b).ops, w.ops);
  }
  EXPECT_NO_THROW(check_work(s));
  Scenario big = s;
  big.parallel.global_batch = 64 * 1000 * 1000;
  set_allow_large(false);
  try {
    check_work(big);
    ADD_FAILURE() << "accepted " << estimate_work(big).text();
  } catch (const WorkTooLarge& e) {
    EXPECT_NE(std::string(e.what()).find("work estimate"), std::string::npos) << e.what();
  }
}

// The grids (sweep, search, plan) are estimated before anything runs and refused over the limits.
TEST(GridEstimate, SearchCountsThePointsTheSearchEnumerates) {
  const Scenario base = default_scenario();
  SearchSpace all, narrow, few;
  narrow.pp = {2, 4};
  narrow.micro_batch_sizes = {1, 2};
  few.schedules = {"1f1b", "interleaved", "terapipe", "seq1f1b"};
  few.tp = {1, 2};
  for (const SearchSpace* sp : {&all, &narrow, &few}) {
    const GridEstimate g = estimate_search(base, *sp, 20, 1);
    EXPECT_EQ(g.points, static_cast<double>(enumerate_candidates(base, *sp).enumerated));
    EXPECT_GT(g.seconds, 0);
    EXPECT_LT(g.seconds, kMaxGridSeconds);
    EXPECT_FALSE(g.largest.empty());
  }
  set_allow_large(false);
  EXPECT_NO_THROW(check_grid(estimate_search(base, all, 20, 1)));
  Scenario huge = base;  // dp 1 points of a 1e8 batch: stage 1 alone would build 1e10-op schedules
  huge.parallel.global_batch = 100 * 1000 * 1000;
  try {
    check_grid(estimate_search(huge, all, 20, 1), 1e15);
    ADD_FAILURE() << "accepted " << estimate_search(huge, all, 20, 1).text();
  } catch (const WorkTooLarge& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("search: work estimate: "), std::string::npos) << m;
    EXPECT_NE(m.find("schedule ops per run (the largest: "), std::string::npos) << m;
    EXPECT_NE(m.find("--allow-large"), std::string::npos) << m;
  }
  set_allow_large(true);
  EXPECT_NO_THROW(check_grid(estimate_search(base, all, 20, 1)));
  set_allow_large(false);
}

TEST(GridEstimate, SweepAndPlanRefuseOverTheLimits) {
  set_allow_large(false);
  EXPECT_NO_THROW(check_grid(estimate_sweep(100, 1.0, 1)));
  EXPECT_THROW(check_grid(estimate_sweep(1e6, 0.01, 1)), WorkTooLarge);   // the count
  EXPECT_THROW(check_grid(estimate_sweep(5000, 10.0, 1)), WorkTooLarge);  // the time: 14 hours
  EXPECT_NO_THROW(check_grid(estimate_sweep(5000, 10.0, 1000)));          // ... over 1000 jobs
  const Scenario s = default_scenario();
  const std::vector<Scenario> runs(3, s);
  EXPECT_NEAR(estimate_sweep(runs, 1).seconds, 3 * estimate_sweep(1, estimate_work(s).seconds, 1).seconds, 1e-9);
  // -j N: N runs at once, each in its own process, so the memory of the N largest together.
  EXPECT_NEAR(estimate_sweep(runs, 1).bytes, estimate_work(s).bytes, 1);
  EXPECT_NEAR(estimate_sweep(runs, 2).bytes, 2 * estimate_work(s).bytes, 1);
  EXPECT_NEAR(estimate_sweep(runs, 8).bytes, 3 * estimate_work(s).bytes, 1);
  EXPECT_NO_THROW(check_grid(estimate_sweep(runs, 1), 1.5 * estimate_work(s).bytes));
  try {
    check_grid(estimate_sweep(runs, 2), 1.5 * estimate_work(s).bytes);
    ADD_FAILURE() << "two runs at once over the memory available: accepted";
  } catch (const WorkTooLarge& e) {
    EXPECT_NE(std::string(e.what()).find("run fewer at once (-j)"), std::string::npos) << e.what();
  }
  try {
    check_grid(estimate_sweep(1e6, 0.01, 1));
  } catch (const WorkTooLarge& e) {
    EXPECT_NE(std::string(e.what()).find("sweep: work estimate: 1e+06 runs, about "), std::string::npos) << e.what();
  }
  Scenario tp = s;
  tp.model.seq_len = 2048;
  EXPECT_NO_THROW(check_grid(estimate_plan(tp, 8, 1, false)));
  EXPECT_THROW(check_grid(estimate_plan(tp, 1, 10, false), 1e15), WorkTooLarge);   // 2e7 cells
  EXPECT_THROW(check_grid(estimate_plan(tp, 1, 1000, false), 1e9), WorkTooLarge);  // 67 GB: even --allow-large
  EXPECT_GT(estimate_plan(tp, 8, 1, true).seconds, estimate_plan(tp, 8, 1, false).seconds);
  set_allow_large(true);
  EXPECT_NO_THROW(check_grid(estimate_plan(tp, 1, 10, false), 1e15));
  EXPECT_THROW(check_grid(estimate_plan(tp, 1, 1000, false), 1e9), WorkTooLarge);
  set_allow_large(false);
}

TEST(GridEstimate, MaxBatchPredictsTheBatchBeforeSearchingForIt) {
  const Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/terapipe/setting-1.yaml");
  const GridEstimate g = estimate_max_batch(s, 4000e9);
  const double b = max_batch_gpipe(s, 4000e9).per_replica;  // 8079; peaks grow about linearly with the batch
  EXPECT_NEAR(g.points, b, 0.05 * b);
  set_allow_large(false);
  EXPECT_NO_THROW(check_grid(estimate_max_batch(s, 0), 1e15));  // the device's 80 GB
  try {
    check_grid(estimate_max_batch(s, 1e14), 1e15);  // `plan --max-batch --memory-GB 1e5` ran 47 s
    ADD_FAILURE() << "accepted " << estimate_max_batch(s, 1e14).text();
  } catch (const WorkTooLarge& e) {
    EXPECT_NE(std::string(e.what()).find("Lower --memory-GB, or pass --allow-large"), std::string::npos) << e.what();
  }
}

TEST(Ranges, EveryKeyHasAnOrderedRange) {
  int n = 0;
  for (const KeyRange* r = key_ranges_begin(); r != key_ranges_end(); ++r, ++n) {
    EXPECT_LE(r->min, r->max) << r->key;
    EXPECT_EQ(key_range(r->key), r);
    EXPECT_EQ(range_violation(r->key, r->max), "");
    EXPECT_NE(range_violation(r->key, r->max * 10 + 1), "") << r->key;
  }
  EXPECT_GT(n, 30);
  EXPECT_EQ(key_range("no.such.key"), nullptr);
}

}  // namespace
}  // namespace pipescope
