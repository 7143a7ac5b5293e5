#pragma once
// The MPI programs (pipescope-rank, pipescope-linkbench) exit when their launcher dies: a rank whose mpirun /
// prted was killed is re-parented and would otherwise run on at full CPU. A thread checks the parent pid once a
// second; no PR_SET_PDEATHSIG, which fires when the parent's forking *thread* ends, not the parent process.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/util/exit_codes.h"

namespace pipescope::runtime {

inline void exit_with_parent() {
  const pid_t parent = getppid();
  std::thread([parent] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      if (getppid() != parent) {
        std::fprintf(stderr, "pid %d: the launcher (pid %d) is gone; exiting\n", static_cast<int>(getpid()),
                     static_cast<int>(parent));
        _exit(kExitEnvironment);
      }
    }
  }).detach();
}

}  // namespace pipescope::runtime
