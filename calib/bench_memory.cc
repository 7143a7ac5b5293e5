// Host memory bandwidth: a 64 MiB copy, counted as bytes read + bytes written (the roofline's HBM term on a CPU).
#include <cstring>
#include <vector>

#include "calib/benches.h"

namespace pipescope::calib {

double bench_host_bandwidth(const TimingPolicy& p) {
  const std::size_t n = 64u << 20;
  std::vector<char> a(n, 1), b(n, 2);
  auto timer = thread_cpu_timer();
  const TimeStats t = time_calls([&] { std::memcpy(b.data(), a.data(), n); }, *timer, p);
  return 2.0 * static_cast<double>(n) / t.median_s;
}

}  // namespace pipescope::calib
