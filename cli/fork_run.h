#pragma once
// Child processes of the CLI. SimGrid allows one Engine per process: every simulation a command runs more than
// once goes into a forked child that sends a text answer back through a pipe. MPI jobs (pipescope-rank,
// pipescope-linkbench) are separate programs started through a launcher (mpirun, srun), because libsimgrid
// exports the MPI API and this binary must not be an MPI program itself.

#include <functional>
#include <string>
#include <vector>

namespace pipescope::cli {

// Runs `child` in a forked process and returns the string it produced. An exception in the child comes back
// as std::runtime_error with its message; a child that dies without answering (abort, signal) likewise.
std::string run_in_child(const std::function<std::string()>& child);

// The launcher command split into words (shell quoting: core/shell_words.h), with --allow-run-as-root added
// for mpirun / mpiexec when running as root (Open MPI refuses otherwise; CI containers run as root).
std::vector<std::string> launcher_argv(const std::string& launcher);
// A program installed next to this executable (build/pipescope-rank next to build/pipescope).
std::string sibling_exe(const std::string& name);
// Runs argv (PATH lookup) and returns its exit status, 128 + signal when killed.
int launch(const std::vector<std::string>& argv);

// A private temporary directory (under $TMPDIR or /tmp), removed with its files.
struct TempDir {
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

}  // namespace pipescope::cli
