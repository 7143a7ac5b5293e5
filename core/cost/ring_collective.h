#pragma once
// A ring collective as a closed form: an all-reduce is 2 (n - 1) steps (reduce-scatter then all-gather), an
// all-gather or a reduce-scatter n - 1, each step moving bytes / n over the slowest link at its latency. The
// simulator's ring collectives take the step count (sim/dag_driver.cc); the search's estimate and the TeraPipe
// planner take the time.

namespace pipescope {

inline int ring_steps(int n, bool allgather) { return n <= 1 ? 0 : (allgather ? n - 1 : 2 * (n - 1)); }

// Seconds of one call of `bytes` (each rank's full buffer) over n GPUs at bw_Bps and lat_s per step.
inline double ring_collective_s(double bytes, int n, double bw_Bps, double lat_s, bool allgather = false) {
  if (n < 2 || bytes <= 0) return 0;
  const double steps = ring_steps(n, allgather);
  return steps / n * bytes / bw_Bps + steps * lat_s;
}

}  // namespace pipescope
