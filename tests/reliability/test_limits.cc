// Unit checks of issue #21's library pieces: atomic outputs and output path checks (core/atomic_file.h), input
// file checks (core/input_file.h), the work estimate (core/work_estimate.h) and the range table (core/ranges.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/atomic_file.h"
#include "core/input_file.h"
#include "core/ranges.h"
#include "core/scenario.h"
#include "core/work_estimate.h"

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
