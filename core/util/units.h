#pragma once
// Unit conversions at the boundaries. Inside pipescope everything is SI: s, B, B/s, FLOP, FLOP/s.
// YAML keys and CLI flags carry their unit in the name (bw_GBps, latency_us, memory_GB, peak_tflops)
// and are converted exactly once, here.

namespace pipescope::units {

inline constexpr double kUs = 1e-6;  // microsecond -> s
inline constexpr double kMs = 1e-3;  // millisecond -> s
inline constexpr double kKB = 1e3;   // decimal kilobyte -> B
inline constexpr double kMB = 1e6;
inline constexpr double kGB = 1e9;  // decimal gigabyte -> B (memory_GB, bw_GBps)
inline constexpr double kGiB = 1073741824.0;
inline constexpr double kGbps = 1e9 / 8;  // gigabit per second -> B/s (network rates are quoted in bits)
inline constexpr double kGBps = 1e9;      // gigabyte per second -> B/s
inline constexpr double kTflops = 1e12;   // TFLOP/s -> FLOP/s
inline constexpr double kGflop = 1e9;     // GFLOP -> FLOP

}  // namespace pipescope::units
