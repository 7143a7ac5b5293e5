// Launched programs (sim/launch.h): the launcher's words, the sibling program, exit codes and signals of a job in its
// own process group, forwarded interrupts, the MPI command line, helper programs and temporary directories.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/launch.h"

namespace pipescope::sim {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(Launch, LauncherWordsAndRunAsRoot) {
  const std::vector<std::string> w = launcher_argv("srun --export='A B'");
  EXPECT_EQ(w, (std::vector<std::string>{"srun", "--export=A B"}));
  const std::vector<std::string> m = launcher_argv("/usr/bin/mpirun --oversubscribe");
  ASSERT_GE(m.size(), 2u);
  EXPECT_EQ(m.back() == "--allow-run-as-root", geteuid() == 0);
  EXPECT_TRUE(launcher_argv("").empty());
}

TEST(Launch, SiblingIsNextToThisProgram) {
  const std::string exe = sibling_exe("test_launch");
  EXPECT_TRUE(exists(exe)) << exe;
  EXPECT_EQ(sibling_exe("x").substr(0, exe.size() - 11), exe.substr(0, exe.size() - 11));
}

TEST(Launch, ExitCodesAndSignals) {
  EXPECT_EQ(launch({"sh", "-c", "exit 0"}), 0);
  EXPECT_EQ(launch({"sh", "-c", "exit 3"}), 3);
  EXPECT_EQ(launch({"sh", "-c", "kill -KILL $$"}), 128 + SIGKILL);
  EXPECT_EQ(launch({"no-such-program-pipescope"}), 127);
  EXPECT_THROW(launch({}), std::runtime_error);
}

TEST(Launch, ASignalToThisProcessStopsTheJobAndThrows) {
  const std::string me = std::to_string(getpid());
  try {
    launch({"sh", "-c", "sleep 0.5; kill -INT " + me + "; sleep 20"});  // after launch() took over SIGINT
    FAIL() << "not interrupted";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal, SIGINT);
    EXPECT_STREQ(e.what(), "interrupted by signal 2");
  }
}

TEST(Launch, RequireProgram) {
  EXPECT_NO_THROW(require_program("sh", "--launcher"));
  EXPECT_NO_THROW(require_program("/bin/sh", "--launcher"));
  try {
    require_program("no-such-mpirun", "--launcher");
    FAIL() << "found a missing program";
  } catch (const EnvironmentError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--launcher: 'no-such-mpirun' not found in PATH", 0), 0u) << e.what();
  }
  EXPECT_THROW(require_program("/nonexistent/mpirun", "--launcher"), EnvironmentError);
}

TEST(Launch, MpiCommandLine) {
  const TempDir dir("pipescope-test-launch");
  const std::string out = dir.path + "/argv";
  // A launcher that writes the words it was given, one per line.
  const std::string launcher = "sh -c 'printf \"%s\\n\" \"$@\" > " + out + "' sh";
  EXPECT_EQ(launch_mpi(launcher, 3, "/bin/rank", {"--a", "b c"}, ""), 0);
  EXPECT_EQ(read_file(out), "-n\n3\n/bin/rank\n--a\nb c\n");
  EXPECT_THROW(launch_mpi("", 2, "/bin/rank", {}, ""), std::invalid_argument);
  EXPECT_THROW(launch_mpi("no-such-mpirun -x", 2, "/bin/rank", {}, ""), EnvironmentError);
}

TEST(Launch, SiblingProgram) {
  // This test program, next to itself, listing no tests.
  EXPECT_EQ(run_sibling("test_launch", {"--gtest_filter=None"}, "missing"), 0);
  try {
    run_sibling("no-such-helper", {}, "--backend cuda-f16: this pipescope was built without CUDA");
    FAIL() << "ran a missing helper";
  } catch (const EnvironmentError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--backend cuda-f16: this pipescope was built without CUDA (no " + sibling_exe("no-such-helper") + ")");
  }
}

TEST(Launch, TempDirIsPrivateAndRemovedWithItsFiles) {
  std::string path;
  {
    const TempDir d("pipescope-test-tmp");
    path = d.path;
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::ofstream(path + "/file") << "x";
    EXPECT_TRUE(exists(path + "/file"));
  }
  EXPECT_FALSE(exists(path));
}

}  // namespace
}  // namespace pipescope::sim
