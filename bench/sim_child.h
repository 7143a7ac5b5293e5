#pragma once
// What the simulator benchmarks share: one simulation's figures, `pipescope simulate` of a scenario in process,
// and a forked child to run it in (SimGrid allows one Engine per process), optionally under an address-space cap.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "core/checks.h"
#include "core/pipeline.h"
#include "core/scenario.h"
#include "sim/engine.h"
#include "sim/report.h"

namespace pipescope::bench {

// Plain data: it crosses the pipe from the child byte for byte.
struct Figures {
  double wall_s = 0;      // the child, end to end (scenario to report)
  double sim_wall_s = 0;  // SimResult::wall_s: releasing the DAG through SimGrid
  double iteration_s = 0, activities = 0, dag_nodes = 0, peak_rss_kb = 0;
  char error[256] = {0};
};

// The simulation's own figures, with the wall time since t0 and this process's peak RSS.
inline Figures figures_of(const sim::SimResult& r, double iteration_s, std::chrono::steady_clock::time_point t0) {
  Figures f;
  f.sim_wall_s = r.wall_s;
  f.iteration_s = iteration_s;
  f.activities = static_cast<double>(r.activities);
  f.dag_nodes = static_cast<double>(r.total);
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  f.peak_rss_kb = static_cast<double>(ru.ru_maxrss);
  return f;
}

// `pipescope simulate` of a loaded scenario: schedule, lowering, checks, simulation, report.
inline Figures simulate_scenario(const Scenario& s, std::chrono::steady_clock::time_point t0) {
  auto prep = prepare(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  sim::EngineOptions o;
  o.collectives = s.sim.collectives;
  const sim::SimResult r = sim::simulate(s.cluster, cs, o);
  return figures_of(r, sim::make_report(s, cs, r).iteration_s, t0);
}

// run() in a forked child; its Figures come back through a pipe. cap_GB > 0 caps the child's address space, so
// that a case that would not fit fails instead of exhausting the machine.
template <class Run>
Figures in_child(Run run, double cap_GB = 0) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork() failed");
  if (pid == 0) {
    close(fd[0]);
    if (cap_GB > 0) {
      const auto cap = static_cast<rlim_t>(cap_GB * (1ull << 30));
      const rlimit lim{cap, cap};
      setrlimit(RLIMIT_AS, &lim);
    }
    Figures f;
    try {
      f = run();
    } catch (const std::exception& e) {
      std::snprintf(f.error, sizeof f.error, "%s", e.what());
    }
    const ssize_t n = write(fd[1], &f, sizeof f);
    _exit(n == static_cast<ssize_t>(sizeof f) ? 0 : 1);
  }
  close(fd[1]);
  Figures f;
  std::size_t got = 0;
  ssize_t n;
  while (got < sizeof f && (n = read(fd[0], reinterpret_cast<char*>(&f) + got, sizeof f - got)) > 0) got += n;
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof f) {
    if (cap_GB > 0)
      std::snprintf(f.error, sizeof f.error, "child died (status %d; over the %.0f GB address-space cap?)", status,
                    cap_GB);
    else
      std::snprintf(f.error, sizeof f.error, "child died (status %d)", status);
  }
  return f;
}

}  // namespace pipescope::bench
