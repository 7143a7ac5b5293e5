#pragma once
// The one fork implementation. fork_child() is the only place the project forks: programs started by a launcher
// (the MPI relay, mpirun through cli's guard) and computations in a child alike. SimGrid allows one Engine per
// process, so every simulation that a command runs more than once (compare, sweep, repro, plan --simulate, search,
// the benchmarks, the engine's folded trial run) goes into a forked child that answers with a string through a pipe.
// run_children() keeps up to `jobs` such children busy at once and hands the answers back in task order, so a
// pool's output never depends on `jobs`.

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace pipescope::sim {

// Flushes stdio (so no buffered output is written twice), forks, and runs `child` in the new process, which ends
// there: `child` ends it itself (exec, _exit) or, if it returns or throws, the process exits with status 127, so a
// child never runs its parent's code on return. Returns the child's pid; throws std::runtime_error "<what>: fork()
// failed: <reason>" when no process could be made.
pid_t fork_child(const std::function<void()>& child, const std::string& what);

struct ChildOptions {
  double cap_GB = 0;  // > 0: the child's address-space cap, so a case too big fails instead of exhausting the machine
};

// Runs `child` in a forked process and returns the string it produced. An exception in the child comes back
// as std::runtime_error with its message; a child that dies without answering (abort, signal, cap) likewise.
std::string run_in_child(const std::function<std::string()>& child, const ChildOptions& o = {});

// One child's answer: its string, or the error that stopped it.
struct ChildAnswer {
  bool ok = false;
  std::string text;  // the answer (ok) or the error message
};

// Runs task(0) .. task(n - 1), each in its own forked child, at most `jobs` (>= 1) at a time. `done(i, answer)`
// is called in the parent as each child finishes (completion order: progress only); the result is in task order.
// Once `stop()` is true no further child starts (the running ones finish); the tasks not run answer
// {false, kNotRun}.
inline constexpr const char* kNotRun = "not run (interrupted)";
std::vector<ChildAnswer> run_children(std::size_t n, const std::function<std::string(std::size_t)>& task, int jobs,
                                      const std::function<void(std::size_t, const ChildAnswer&)>& done = {},
                                      const ChildOptions& o = {}, const std::function<bool()>& stop = {});

}  // namespace pipescope::sim
