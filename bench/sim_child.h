#pragma once
// What the simulator benchmarks share: one simulation's figures, `pipescope simulate` of a scenario in process
// (sim::run_scenario, the one call every command uses), and a forked child to run it in (sim::run_in_child: SimGrid
// allows one Engine per process), optionally under an address-space cap.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/config.h"
#include "sim/child_process.h"
#include "sim/report.h"
#include "sim/run_scenario.h"

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

// `pipescope simulate` of a loaded scenario (sim::run_scenario); t0 is when the benchmark started timing it.
inline Figures simulate_scenario(const Scenario& s, std::chrono::steady_clock::time_point t0) {
  const sim::RunResult r = sim::run_scenario(s);
  Figures f;
  f.sim_wall_s = r.sim_wall_s;
  f.iteration_s = r.iteration_s;
  f.activities = r.activities;
  f.dag_nodes = r.dag_nodes;
  f.peak_rss_kb = r.peak_rss_kb;
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

// run() in a forked child (sim::run_in_child); an error comes back in Figures::error. cap_GB > 0 caps the child's
// address space, so that a case that would not fit fails instead of exhausting the machine.
template <class Run>
Figures in_child(Run run, double cap_GB = 0) {
  Figures f;
  try {
    const std::string got = sim::run_in_child(
        [&] {
          const Figures r = run();
          return std::string(reinterpret_cast<const char*>(&r), sizeof r);
        },
        sim::ChildOptions{cap_GB});
    if (got.size() != sizeof f) throw std::runtime_error("truncated answer from the benchmark child");
    std::memcpy(&f, got.data(), sizeof f);
  } catch (const std::exception& e) {
    std::snprintf(f.error, sizeof f.error, "%s", e.what());
  }
  return f;
}

}  // namespace pipescope::bench
