#pragma once
// Child processes of the CLI. SimGrid allows one Engine per process: every simulation a command runs more than
// once goes into a forked child (sim/child_process.h, the one fork implementation; sim/run_scenario.h runs a
// scenario that way). MPI jobs (pipescope-rank,
// pipescope-linkbench) are separate programs started through a launcher (mpirun, srun), because libsimgrid
// exports the MPI API and this binary must not be an MPI program itself.

#include <functional>
#include <string>
#include <vector>

#include "sim/child_process.h"

namespace pipescope::cli {

using sim::run_in_child;

// The launcher command split into words (shell quoting: core/shell_words.h), with --allow-run-as-root added
// for mpirun / mpiexec when running as root (Open MPI refuses otherwise; CI containers run as root).
std::vector<std::string> launcher_argv(const std::string& launcher);
// A program installed next to this executable (build/pipescope-rank next to build/pipescope).
std::string sibling_exe(const std::string& name);
// Runs argv (PATH lookup) in its own process group and returns its exit status, 128 + signal when killed.
// SIGINT / SIGTERM / SIGHUP received meanwhile are forwarded to the group; once it has ended, launch throws
// Interrupted (commands.h), so that temporary directories are removed on the way out. The job gets SIGTERM
// when this process dies (PR_SET_PDEATHSIG), and whatever is left of its group is killed when it ends.
int launch(const std::vector<std::string>& argv);
// Throws EnvironmentError naming `flag` when `name` (a path, or a program looked up in PATH) cannot be run.
void require_program(const std::string& name, const std::string& flag);

// A private temporary directory (under $TMPDIR or /tmp), removed with its files.
struct TempDir {
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

}  // namespace pipescope::cli
