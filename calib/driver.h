#pragma once
// The shared driver of the calibration benchmarks (the nccl-tests shape: one small file per benchmark, this one
// driver). Timing policy: a warm-up of >= warmup_calls calls and >= warmup_s; then samples until there are
// >= min_samples covering >= min_time_s AND the median's 95% confidence interval / median (order statistics,
// TimeStats::rel_spread) is <= target_rel_spread, or a cap is hit (max_samples, max_time_s); calls shorter than
// min_sample_s are timed as a batch of back-to-back calls and divided. A point still wider than retry_spread takes
// more samples, pooled (up to 1 + retries times as many). Outliers (samples beyond median +- 3 x the interquartile
// range) are measured again once each. Hot cache (operands stay resident), recorded in the provenance. A Timer
// abstracts the clock: steady clock + device synchronisation on the CPU, CUDA events on a GPU.

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/profile.h"

namespace pipescope::calib {

struct TimingPolicy {
  int warmup_calls = 3;
  double warmup_s = 0.02;
  int min_samples = 10;
  double min_time_s = 0.1;
  int max_samples = 200;
  double max_time_s = 3.0;          // sampling stops here even when the spread is still above the target
  double target_rel_spread = 0.05;  // the median's interval / median (TimeStats::rel_spread) to stop at
  double min_sample_s = 1e-3;
  // A point whose spread is still above retry_spread when it would stop takes more samples, up to (1 + retries)
  // times as many, pooled, until its median's interval is within retry_spread: a shared machine switches speed
  // (calib/README.md "Drift"), and the readings of long calls straddle the switches.
  double retry_spread = 0.25;
  int retries = 2;
  // Cold cache: before every sample, write a buffer larger than the CPU's last-level cache (256 MiB) so the
  // operands come from DRAM; each sample is then one call (no batching).
  bool cold = false;
  // A reference call that TablePoints pairs every sample with (CPU backends: a GEMM of the kernel fits' spread);
  // none on a GPU, whose clock does not wander with the host's.
  std::function<void()> reference;
  std::string reference_name;  // for the provenance ("Eigen GEMM 64 x 64 by 64 x 128")
  // The run's reference samples and the one reference time every table of the run is expressed at (shared by the
  // copies of the policy). A 4 s table (the GEMM spread, one attention head dimension) sees one or two of the
  // machine's phases, and a kernel model fitted at a fast phase predicted layers 27-30% below what the layer table,
  // measured over minutes, says. So a table is expressed at the run's reference time, not its own:
  // the median of the pool when the run's first table is read (the layer table, the longest), then fixed. A median
  // taken again at each table's reading moved with the pool, and the tables of one profile disagreed by the
  // machine's drift in between: the kernel model at the layer table's own shape came out 23% below the table in a
  // calibration during which the machine sped up by 17% (2026-11-29).
  struct ReferencePool {
    std::vector<double> samples_s;
    double scale_s = 0;  // the run's reference time; 0 until the first table is read
  };
  std::shared_ptr<ReferencePool> reference_pool;
  std::string describe() const;  // for the provenance
};

// The policy of `calibrate --quick`: fewer samples and a shorter cap per point.
TimingPolicy quick_policy();

// Starts and stops one measurement; stop() returns seconds and waits for the device.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start() = 0;
  virtual double stop() = 0;
};
// Steady clock; `sync` (may be empty) waits for outstanding work before each reading.
std::unique_ptr<Timer> steady_timer(std::function<void()> sync);
// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID): what the CPU backends' single-threaded kernels
// cost on a core they have to themselves, without the time the thread waits while other processes run (this
// machine is shared; the wall clock would time the neighbours' load as well).
std::unique_ptr<Timer> thread_cpu_timer();
// A test hook: multiplies every reading of `inner` by exp(N(0, sigma)) (seeded, deterministic), so that the
// calibration gates can be shown to refuse a noisy measurement. Never used unless asked for.
std::unique_ptr<Timer> noisy_timer(std::unique_ptr<Timer> inner, double sigma, unsigned seed = 1);

TimeStats time_calls(const std::function<void()>& call, Timer& timer, const TimingPolicy& p);
// Two calls timed in alternation, one sample of each after the other (same warm-up, stopping and retry rules, the
// spread being that of the per-pair ratio): `ref` is a reference whose time at another moment is known, so that
// ratio * that time is what `op` would have taken then. A shared machine changes speed within a second by tens of
// per cent (calib/README.md "Drift"); the ratio of calls timed milliseconds apart does not.
struct PairedStats {
  TimeStats op, ref;
  TimeStats ratio;  // the per-pair op / ref (its median is the answer; its spread decides when sampling stops)
};
PairedStats time_paired(const std::function<void()>& op, const std::function<void()>& ref, Timer& timer,
                        const TimingPolicy& p);
// The points of one table (layer t(l, c), the head's, the layer GEMM shapes), timed as a set. With a reference in the
// policy, every sample is paired with one of the reference (time_paired) and each point is expressed at the
// run's reference speed: its per-pair ratios times the run's reference time (the policy's reference_pool: the
// median of its samples when the run's first table was read; without a pool, the median of the table's own). A shared
// machine switches speed by up to 1.5x within a second (calib/README.md "Drift"), while the ratio of two calls timed a
// millisecond apart moves by a few per cent, so the table keeps its shape (increasing in l, smooth in c) whatever the
// machine did meanwhile. Without a reference, each point is time_calls.
class TablePoints {
 public:
  TablePoints(Timer& timer, const TimingPolicy& p) : timer_(timer), policy_(p) {}
  std::size_t time(const std::function<void()>& op);  // the point's index
  // Times point i's op again and pools the new samples with its old ones (a table whose fit failed its gate gets its
  // points measured once more: calib/bench_layer.cc).
  void time_again(std::size_t i, const std::function<void()>& op);
  TimeStats at(std::size_t i) const;  // valid once every point of the table is timed

 private:
  Timer& timer_;
  const TimingPolicy& policy_;
  std::vector<TimeStats> direct_;           // no reference: the points as timed
  std::vector<std::vector<double>> ratio_;  // reference: each point's per-pair ratios
  std::vector<double> ref_s_;               // reference: every reference sample of the table
  mutable double ref_median_s_ = 0;         // the median the table is expressed at, taken once (0: not yet)
};

// Median, p10 and p90 of samples (nearest rank), keeping the samples in order.
TimeStats stats_of(std::vector<double> samples);

// Whole-run progress: calibrate() announces the estimated cost of every phase (plan_work, in estimated
// seconds) before it starts; each Progress step reports its own estimate as done; the time left printed is
// time_left_s below.
void plan_work(double est_s);
void reset_work_plan();
double planned_work();

// Seconds left of a plan of `planned_s` estimated seconds, `done_s` of them done in `elapsed_s`: the work left times
// the pace seen so far (elapsed / done), that pace trusted in proportion to the share of the plan done and the plan's
// own (the rates measured on this machine) for the rest. The pace of the first phase alone misled: the layer table
// (its noisy points re-measured) took about 45 s of its 25 s estimate, and the whole remainder was scaled by it (408 s
// shown with about 108 s left, 2026-11-28).
double time_left_s(double planned_s, double done_s, double elapsed_s);

// One progress line per step on stderr ("calibrate: layer t(l, 0) [12/40] l = 96, ~35 s left"), at most every
// 0.5 s unless it is the last step; silent when disabled.
class Progress {
 public:
  // `phase_est_s`: the phase's share of the announced plan, counted evenly over its steps unless a step says its own.
  Progress(std::string what, int total, bool enabled, double phase_est_s = 0);
  // `est_s`: this step's share of the plan (negative: the phase's estimate / steps; 0: unplanned).
  void step(const std::string& detail, double est_s = -1);

 private:
  std::string what_;
  int total_, done_ = 0;
  bool enabled_;
  double phase_est_s_;
  std::chrono::steady_clock::time_point start_, last_;
};

// Estimated seconds of one time_calls on a call of `call_s` seconds under policy p (for progress and budgets), the
// reference paired with each sample included (it lasts at least a quarter of the sample).
double estimated_point_s(double call_s, const TimingPolicy& p);

// nccl-tests sizes: "8", "64K", "128M", "1G" (binary suffixes). Throws std::invalid_argument.
double parse_size(const std::string& s);

}  // namespace pipescope::calib
