#pragma once
// The shared driver of the calibration benchmarks (the nccl-tests shape: one small file per benchmark, this one
// driver). Timing policy (spec/calibration.md 3): warm-up of >= warmup_calls calls and >= warmup_s, then samples
// until >= min_samples and >= min_time_s (at most max_samples); calls shorter than min_sample_s are timed as a
// batch of back-to-back calls and divided. Hot cache (operands stay resident), recorded in the provenance.
// A Timer abstracts the clock: steady clock + device synchronisation on the CPU, CUDA events on a GPU.

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/profile.h"

namespace pipescope::calib {

struct TimingPolicy {
  int warmup_calls = 3;
  double warmup_s = 0.02;
  int min_samples = 10;
  double min_time_s = 0.1;
  int max_samples = 200;
  double min_sample_s = 1e-3;
  // Cold cache: before every sample, write a buffer larger than the CPU's last-level cache (256 MiB) so the
  // operands come from DRAM; each sample is then one call (no batching).
  bool cold = false;
  std::string describe() const;  // for the provenance
};

// Starts and stops one measurement; stop() returns seconds and waits for the device.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start() = 0;
  virtual double stop() = 0;
};
// Steady clock; `sync` (may be empty) waits for outstanding work before each reading.
std::unique_ptr<Timer> steady_timer(std::function<void()> sync);

TimeStats time_calls(const std::function<void()>& call, Timer& timer, const TimingPolicy& p);
// Median, p10 and p90 of samples (nearest rank), keeping the samples in order.
TimeStats stats_of(std::vector<double> samples);

// One progress line per step on stderr ("calibrate: layer t(l, 0) [12/40] l = 96"), at most every 0.5 s
// unless it is the last step; silent when disabled.
class Progress {
 public:
  Progress(std::string what, int total, bool enabled);
  void step(const std::string& detail);

 private:
  std::string what_;
  int total_, done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point last_;
};

// nccl-tests sizes: "8", "64K", "128M", "1G" (binary suffixes). Throws std::invalid_argument.
double parse_size(const std::string& s);

}  // namespace pipescope::calib
