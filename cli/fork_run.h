#pragma once
// SimGrid allows one Engine per process: every simulation a command runs more than once goes into a forked
// child that sends a text answer back through a pipe.

#include <functional>
#include <string>

namespace pipescope::cli {

// Runs `child` in a forked process and returns the string it produced. An exception in the child comes back
// as std::runtime_error with its message; a child that dies without answering (abort, signal) likewise.
std::string run_in_child(const std::function<std::string()>& child);

}  // namespace pipescope::cli
