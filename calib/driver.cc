#include "calib/driver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

}  // namespace

std::string TimingPolicy::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "warm-up >= %d calls and >= %g ms; >= %d samples and >= %g ms (at most %d); calls under %g ms timed "
                "as a back-to-back batch; median with p10/p90; %s",
                warmup_calls, warmup_s * 1e3, min_samples, min_time_s * 1e3, max_samples, min_sample_s * 1e3,
                cold ? "cold cache (256 MiB written before every sample, one call per sample)" : "hot cache");
  return buf;
}

std::unique_ptr<Timer> steady_timer(std::function<void()> sync) {
  return std::make_unique<SteadyTimer>(std::move(sync));
}

TimeStats stats_of(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("stats_of: no samples");
  TimeStats t;
  t.samples_s = samples;
  std::sort(samples.begin(), samples.end());
  auto q = [&](double f) {
    const auto i = static_cast<std::size_t>(std::lround(f * (samples.size() - 1)));
    return samples[i];
  };
  const std::size_t n = samples.size();
  t.median_s = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.p10_s = q(0.1);
  t.p90_s = q(0.9);
  return t;
}

TimeStats time_calls(const std::function<void()>& call, Timer& timer, const TimingPolicy& p) {
  // Warm-up, which also estimates the cost of one call.
  int calls = 0;
  double spent = 0;
  while (calls < p.warmup_calls || spent < p.warmup_s) {
    timer.start();
    call();
    spent += timer.stop();
    calls++;
    if (calls > 100000) break;
  }
  const double per_call = spent / calls;
  const int batch =
      per_call >= p.min_sample_s || p.cold ? 1 : static_cast<int>(std::ceil(p.min_sample_s / std::max(per_call, 1e-9)));
  static std::vector<char> flush;
  if (p.cold && flush.empty()) flush.resize(256u << 20);
  std::vector<double> samples;
  double total = 0;
  while ((static_cast<int>(samples.size()) < p.min_samples || total < p.min_time_s) &&
         static_cast<int>(samples.size()) < p.max_samples) {
    if (p.cold) std::memset(flush.data(), static_cast<int>(samples.size() & 0xff), flush.size());
    timer.start();
    for (int i = 0; i < batch; i++) call();
    const double t = timer.stop();
    total += t;
    samples.push_back(t / batch);
  }
  return stats_of(std::move(samples));
}

Progress::Progress(std::string what, int total, bool enabled)
    : what_(std::move(what)), total_(total), enabled_(enabled), last_(Clock::now() - std::chrono::seconds(1)) {}

void Progress::step(const std::string& detail) {
  done_++;
  if (!enabled_) return;
  const auto now = Clock::now();
  if (done_ < total_ && now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  std::fprintf(stderr, "calibrate: %s [%d/%d] %s\n", what_.c_str(), done_, total_, detail.c_str());
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
