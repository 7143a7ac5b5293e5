#pragma once
// Runs the built `pipescope` with stdout and stderr captured in files, for the tests that check a command's
// output and exit code (test_search.cc, test_sweep.cc). Needs PIPESCOPE_BINARY_DIR (tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace pipescope::test {

inline const std::string kExe = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope";

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Result {
  int rc = -1;
  std::string out, err;
};

// `pipescope <args>`; `tag` names the capture files (one pair per call, in the test's temporary directory).
inline Result run(const std::string& args, const std::string& tag = "cli_run") {
  static int n = 0;
  const std::string base = ::testing::TempDir() + "/" + tag + std::to_string(getpid()) + "_" + std::to_string(n++);
  const int st = std::system((kExe + " " + args + " > " + base + ".out 2> " + base + ".err").c_str());
  Result r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

}  // namespace pipescope::test
