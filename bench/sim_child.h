#pragma once
// What the simulator benchmarks share: one simulation's figures, `pipescope simulate` of a scenario in process
// (sim::run_scenario, the one call every command uses), and a forked child to run it in (sim::run_in_child: SimGrid
// allows one Engine per process), optionally under an address-space cap.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/model/config.h"
#include "sim/child_process.h"
#include "sim/report.h"
#include "sim/run_scenario.h"

namespace pipescope::bench {

// A simulation's figures are the run-result record's (sim/run_result.h): they cross the pipe from the child in its
// one encoding. `error` is set in the parent when the child failed.
struct Figures : sim::RunResult {
  std::string error;
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
  Figures f;
  static_cast<sim::RunResult&>(f) = sim::run_scenario(s);
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

// run() in a forked child (sim::run_in_child); an error comes back in Figures::error. cap_GB > 0 caps the child's
// address space, so that a case that would not fit fails instead of exhausting the machine.
template <class Run>
Figures in_child(Run run, double cap_GB = 0) {
  Figures f;
  try {
    const std::string got = sim::run_in_child([&] { return sim::encode(run()); }, sim::ChildOptions{cap_GB});
    static_cast<sim::RunResult&>(f) = sim::decode(got);
  } catch (const std::exception& e) {
    f.error = e.what();
  }
  return f;
}

}  // namespace pipescope::bench
