#include "calib/driver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <stdexcept>
#include <vector>

namespace pipescope::calib {
namespace {

using Clock = std::chrono::steady_clock;

class SteadyTimer final : public Timer {
 public:
  explicit SteadyTimer(std::function<void()> sync) : sync_(std::move(sync)) {}
  void start() override {
    if (sync_) sync_();
    t0_ = Clock::now();
  }
  double stop() override {
    if (sync_) sync_();
    return std::chrono::duration<double>(Clock::now() - t0_).count();
  }

 private:
  std::function<void()> sync_;
  Clock::time_point t0_;
};

class ThreadCpuTimer final : public Timer {
 public:
  void start() override { t0_ = now(); }
  double stop() override { return now() - t0_; }

 private:
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  double t0_ = 0;
};

}  // namespace

std::unique_ptr<Timer> thread_cpu_timer() { return std::make_unique<ThreadCpuTimer>(); }

std::string TimingPolicy::describe() const {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "warm-up >= %d calls and >= %g ms; >= %d samples and >= %g ms, then until the median's 95%% "
                "confidence interval (order statistics) is within %g%% of it (at most %d samples or %g s); outliers "
                "beyond median +- 3 IQR measured again; a point still wider than %g%% sampled further, up to %d times "
                "as many samples, pooled; calls under %g ms timed as a back-to-back batch; median with "
                "p10/p90; ",
                warmup_calls, warmup_s * 1e3, min_samples, min_time_s * 1e3, 100 * target_rel_spread, max_samples,
                max_time_s, 100 * retry_spread, 1 + retries, min_sample_s * 1e3);
  std::string d =
      buf + std::string(cold ? "cold cache (256 MiB written before every sample, one call per sample)" : "hot cache");
  if (reference)
    d += "; tables timed sample by sample in alternation with a reference (" + reference_name +
         ") and expressed at one reference time for the whole run (the median of the reference samples when the "
         "first table was read)";
  return d;
}

TimingPolicy quick_policy() {
  TimingPolicy p;
  p.warmup_calls = 1;
  p.warmup_s = 0.005;
  p.min_samples = 5;
  p.min_time_s = 0.02;
  p.max_time_s = 0.4;
  p.target_rel_spread = 0.10;
  return p;
}

std::unique_ptr<Timer> steady_timer(std::function<void()> sync) {
  return std::make_unique<SteadyTimer>(std::move(sync));
}

namespace {

class NoisyTimer final : public Timer {
 public:
  NoisyTimer(std::unique_ptr<Timer> inner, double sigma, unsigned seed)
      : inner_(std::move(inner)), gen_(seed), noise_(0.0, sigma) {}
  void start() override { inner_->start(); }
  double stop() override { return inner_->stop() * std::exp(noise_(gen_)); }

 private:
  std::unique_ptr<Timer> inner_;
  std::mt19937_64 gen_;
  std::normal_distribution<double> noise_;
};

double quantile(const std::vector<double>& sorted, double f) {
  const auto i = static_cast<std::size_t>(std::lround(f * (sorted.size() - 1)));
  return sorted[i];
}

}  // namespace

std::unique_ptr<Timer> noisy_timer(std::unique_ptr<Timer> inner, double sigma, unsigned seed) {
  return std::make_unique<NoisyTimer>(std::move(inner), sigma, seed);
}

TimeStats stats_of(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("stats_of: no samples");
  TimeStats t;
  t.samples_s = samples;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  t.median_s = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.p10_s = quantile(samples, 0.1);
  t.p90_s = quantile(samples, 0.9);
  return t;
}

namespace {

// Warm-up; returns the cost of one call.
double warm_up_s(const std::function<void()>& call, Timer& timer, const TimingPolicy& p) {
  int calls = 0;
  double spent = 0;
  while (calls < std::max(1, p.warmup_calls) || spent < p.warmup_s) {
    timer.start();
    call();
    spent += timer.stop();
    calls++;
    if (calls > 100000) break;
  }
  return spent / calls;
}

// Back-to-back calls of `per_call` seconds one sample times so that it lasts at least `sample_s`.
int batch_for(double per_call, double sample_s) {
  return per_call >= sample_s ? 1 : static_cast<int>(std::ceil(sample_s / std::max(per_call, 1e-9)));
}

// Warm-up, which also estimates the cost of one call: the number of back-to-back calls one sample times.
int warm_up(const std::function<void()>& call, Timer& timer, const TimingPolicy& p) {
  const double per_call = warm_up_s(call, timer, p);
  return p.cold ? 1 : batch_for(per_call, p.min_sample_s);
}

// The sampling rule of a point: `take` adds one sample and returns the seconds it cost, `spread` is the current
// median's confidence interval / median. At least min_samples covering min_time_s, then until the spread is within
// target_rel_spread or a cap is hit. A point still wider than retry_spread then takes more samples, up to
// (1 + retries) times as many, pooled: the median's interval narrows as 1 / sqrt(n) and stops as soon as it is
// within retry_spread (a 1 s call on this VM spreads over 30-50% in 5 samples: the readings of one call straddle the
// machine's speed switches).
template <class Take, class Spread>
void sample_point(const TimingPolicy& p, Take take, Spread spread) {
  double total = 0;
  int n = 0;
  const int min_samples = std::max(1, p.min_samples);
  while (n < p.max_samples) {
    total += take();
    n++;
    if (n < min_samples || total < p.min_time_s) continue;
    if (total >= p.max_time_s || spread() <= p.target_rel_spread) break;
  }
  for (const int cap = (1 + std::max(0, p.retries)) * n; n < cap && spread() > p.retry_spread; n++) take();
}

}  // namespace

TimeStats time_calls(const std::function<void()>& call, Timer& timer, const TimingPolicy& p) {
  const int batch = warm_up(call, timer, p);
  static std::vector<char> flush;
  if (p.cold && flush.empty()) flush.resize(256u << 20);
  auto sample = [&](std::size_t i) {
    if (p.cold) std::memset(flush.data(), static_cast<int>(i & 0xff), flush.size());
    timer.start();
    for (int k = 0; k < batch; k++) call();
    return timer.stop();
  };
  std::vector<double> samples;
  sample_point(
      p,
      [&] {
        const double t = sample(samples.size());
        samples.push_back(t / batch);
        return t;
      },
      [&] { return stats_of(samples).rel_spread(); });
  // Outliers (a preemption, a page fault storm): each is measured again once and replaced.
  if (samples.size() >= 4) {
    std::vector<double> sorted = samples;
    std::sort(sorted.begin(), sorted.end());
    const double q1 = quantile(sorted, 0.25), q3 = quantile(sorted, 0.75), med = stats_of(samples).median_s;
    const double lo = med - 3 * (q3 - q1), hi = med + 3 * (q3 - q1);
    for (std::size_t i = 0; i < samples.size(); i++)
      for (int tries = 0; tries < 3 && (samples[i] < lo || samples[i] > hi); tries++) samples[i] = sample(i) / batch;
  }
  return stats_of(std::move(samples));
}

PairedStats time_paired(const std::function<void()>& op, const std::function<void()>& ref, Timer& timer,
                        const TimingPolicy& p) {
  // The reference's sample lasts at least a quarter of the op's: a 1 ms reference beside a 100 ms op would make
  // the ratio as noisy as one short call (the default scenario's layer points then spread over the 25% gate).
  const double op_call_s = warm_up_s(op, timer, p);
  const int op_batch = p.cold ? 1 : batch_for(op_call_s, p.min_sample_s);
  const int ref_batch = batch_for(warm_up_s(ref, timer, p), std::max(p.min_sample_s, 0.25 * op_batch * op_call_s));
  auto sample = [&](const std::function<void()>& call, int batch) {
    timer.start();
    for (int k = 0; k < batch; k++) call();
    return timer.stop() / batch;
  };
  std::vector<double> ops, refs, ratios;
  sample_point(
      p,
      [&] {
        const double t_op = sample(op, op_batch), t_ref = sample(ref, ref_batch);
        ops.push_back(t_op);
        refs.push_back(t_ref);
        ratios.push_back(t_op / std::max(t_ref, 1e-12));
        return t_op * op_batch + t_ref * ref_batch;
      },
      [&] { return stats_of(ratios).rel_spread(); });
  return PairedStats{stats_of(std::move(ops)), stats_of(std::move(refs)), stats_of(std::move(ratios))};
}

std::size_t TablePoints::time(const std::function<void()>& op) {
  if (!policy_.reference) {
    direct_.push_back(time_calls(op, timer_, policy_));
    return direct_.size() - 1;
  }
  PairedStats st = time_paired(op, policy_.reference, timer_, policy_);
  ratio_.push_back(std::move(st.ratio.samples_s));
  ref_s_.insert(ref_s_.end(), st.ref.samples_s.begin(), st.ref.samples_s.end());
  if (policy_.reference_pool)
    policy_.reference_pool->samples_s.insert(policy_.reference_pool->samples_s.end(), st.ref.samples_s.begin(),
                                             st.ref.samples_s.end());
  ref_median_s_ = 0;  // the table grew: its reference median is taken again at the next at()
  return ratio_.size() - 1;
}

void TablePoints::time_again(std::size_t i, const std::function<void()>& op) {
  if (!policy_.reference) {
    std::vector<double> pooled = direct_.at(i).samples_s;
    const TimeStats more = time_calls(op, timer_, policy_);
    pooled.insert(pooled.end(), more.samples_s.begin(), more.samples_s.end());
    direct_[i] = stats_of(std::move(pooled));
    return;
  }
  ratio_.at(i);  // range check before timing
  const std::size_t j = time(op);
  ratio_[i].insert(ratio_[i].end(), ratio_[j].begin(), ratio_[j].end());
  ratio_.pop_back();  // the new samples now belong to point i; the reference samples stay in the table's pool
}

TimeStats TablePoints::at(std::size_t i) const {
  if (!policy_.reference) return direct_.at(i);
  if (ref_median_s_ == 0) {
    const auto& pool = policy_.reference_pool;
    if (!pool) {
      ref_median_s_ = stats_of(ref_s_).median_s;
    } else {
      // The first table read fixes the run's reference time; every later table is expressed at it too.
      if (pool->scale_s == 0) pool->scale_s = stats_of(pool->samples_s.empty() ? ref_s_ : pool->samples_s).median_s;
      ref_median_s_ = pool->scale_s;
    }
  }
  const double r = ref_median_s_;
  std::vector<double> s = ratio_.at(i);
  for (double& v : s) v *= r;
  return stats_of(std::move(s));
}

double estimated_point_s(double call_s, const TimingPolicy& p) {
  const double warm = std::max(std::max(1, p.warmup_calls) * call_s, p.warmup_s);
  const double meas = std::min(std::max(std::max(1, p.min_samples) * call_s, p.min_time_s),
                               std::max(p.max_time_s, std::max(1, p.min_samples) * call_s));
  // TablePoints pairs every sample with the reference, whose sample lasts at least a quarter of the op's.
  return warm + meas * (p.reference ? 1.25 : 1.0);
}

namespace {
struct WorkPlan {
  double planned_s = 0, done_s = 0;
  Clock::time_point start = Clock::now();
};
WorkPlan& work_plan() {
  static WorkPlan w;
  return w;
}
}  // namespace

void plan_work(double est_s) {
  if (work_plan().planned_s == 0) work_plan().start = Clock::now();
  work_plan().planned_s += est_s;
}
void reset_work_plan() { work_plan() = WorkPlan{}; }
double planned_work() { return work_plan().planned_s; }

double time_left_s(double planned_s, double done_s, double elapsed_s) {
  if (!(planned_s > 0) || !(done_s > 0)) return 0;
  const double left = std::max(0.0, planned_s - done_s);
  const double share = std::min(1.0, done_s / planned_s);
  const double pace = elapsed_s / done_s;
  return left * ((1 - share) + share * pace);
}

Progress::Progress(std::string what, int total, bool enabled, double phase_est_s)
    : what_(std::move(what)),
      total_(total),
      enabled_(enabled),
      phase_est_s_(phase_est_s),
      start_(Clock::now()),
      last_(Clock::now() - std::chrono::seconds(1)) {}

void Progress::step(const std::string& detail, double est_s) {
  done_++;
  WorkPlan& w = work_plan();
  w.done_s += est_s >= 0 ? est_s : phase_est_s_ / std::max(1, total_);
  if (!enabled_) return;
  const auto now = Clock::now();
  if (done_ < total_ && now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  // Time left: the whole plan when there is one, this phase otherwise (scaled by the speed seen so far).
  double left = 0;
  if (w.planned_s > 0 && w.done_s > 0) {
    left = time_left_s(w.planned_s, w.done_s, std::chrono::duration<double>(now - w.start).count());
  } else {
    const double el = std::chrono::duration<double>(now - start_).count();
    left = el * (total_ - done_) / done_;
  }
  std::fprintf(stderr, "calibrate: %s [%d/%d] %s, ~%.0f s left\n", what_.c_str(), done_, total_, detail.c_str(), left);
}

double parse_size(const std::string& s) {
  if (s.empty()) throw std::invalid_argument("empty size");
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + s + "' is not a size (e.g. 8, 64K, 128M, 1G)");
  }
  const std::string suffix = s.substr(used);
  double mult = 1;
  if (suffix == "K" || suffix == "k")
    mult = 1024.0;
  else if (suffix == "M" || suffix == "m")
    mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    throw std::invalid_argument("'" + s + "': unknown size suffix '" + suffix + "' (K, M or G, binary)");
  if (!(v > 0) || !std::isfinite(v)) throw std::invalid_argument("'" + s + "': size must be > 0");
  return std::floor(v * mult);
}

}  // namespace pipescope::calib
