#pragma once
// Programs started by a command: MPI jobs (pipescope-rank, pipescope-linkbench) through a launcher (mpirun, srun)
// and helper programs next to this executable (pipescope-calibrate-cuda). Separate programs because libsimgrid
// exports the MPI API: a binary that links SimGrid must not be an MPI program itself. Each runs in its own process
// group behind a guard process (forked by sim::fork_child, the one fork), so that SIGINT / SIGTERM reach the whole
// job and nothing is left running or on disk when the command ends, however it ends.

#include <stdexcept>
#include <string>
#include <vector>

#include "sim/child_process.h"

namespace pipescope::sim {

// This machine cannot do what was asked (no launcher, no GPU, a helper program not built), not because of the input.
struct EnvironmentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A forwarded SIGINT / SIGTERM / SIGHUP stopped a launched job; the command ends with 128 + signal.
struct Interrupted : std::runtime_error {
  explicit Interrupted(int sig) : std::runtime_error("interrupted by signal " + std::to_string(sig)), signal(sig) {}
  int signal;
};

// The launcher command split into words (shell quoting: core/util/shell_words.h), with --allow-run-as-root added
// for mpirun / mpiexec when running as root (Open MPI refuses otherwise; CI containers run as root).
std::vector<std::string> launcher_argv(const std::string& launcher);
// A program installed next to this executable (build/pipescope-rank next to build/pipescope).
std::string sibling_exe(const std::string& name);
// Runs argv (PATH lookup) in its own process group and returns its exit status, 128 + signal when killed.
// SIGINT / SIGTERM / SIGHUP received meanwhile are forwarded to the group; once it has ended, launch throws
// Interrupted, so that temporary directories are removed on the way out. The job gets SIGTERM when this process
// dies (PR_SET_PDEATHSIG), and whatever is left of its group is killed when it ends.
int launch(const std::vector<std::string>& argv);
// Throws EnvironmentError naming `flag` when `name` (a path, or a program looked up in PATH) cannot be run.
void require_program(const std::string& name, const std::string& flag);

// `<launcher words> -n <ranks> <exe> <args...>` through launch(), after `announce` on stderr. Throws
// std::invalid_argument for an empty --launcher and EnvironmentError for one that is not installed, before anything
// runs. Returns the launcher's exit code.
int launch_mpi(const std::string& launcher, int ranks, const std::string& exe, const std::vector<std::string>& args,
               const std::string& announce);
// `program` (next to this executable) with `args` through launch(). Throws EnvironmentError "<missing> (no <path>)"
// when it is not there and std::runtime_error when it dies of a signal; returns its exit code otherwise.
int run_sibling(const std::string& program, const std::vector<std::string>& args, const std::string& missing);

// A private temporary directory (under $TMPDIR or /tmp), removed with its files: by the destructor, or by a
// signal handler when a signal ends the process outside launch() (e.g. during a simulation).
struct TempDir {
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

}  // namespace pipescope::sim
