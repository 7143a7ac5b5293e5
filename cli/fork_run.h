#pragma once
// The CLI's names for child processes: simulations in forked children (sim/child_process.h, the one fork) and
// launched programs, MPI jobs and helper programs alike (sim/launch.h: process groups, signals, temporary dirs).

#include "sim/child_process.h"
#include "sim/launch.h"

namespace pipescope::cli {

using sim::launch;
using sim::launch_mpi;
using sim::launcher_argv;
using sim::require_program;
using sim::run_in_child;
using sim::run_sibling;
using sim::sibling_exe;
using sim::TempDir;

}  // namespace pipescope::cli
