#include "runtime/watchdog.h"

#include <algorithm>
#include <chrono>

namespace pipescope::runtime {

std::int64_t Watchdog::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Watchdog::Watchdog(double timeout_s, Handler handler)
    : timeout_s_(timeout_s), handler_(std::move(handler)), last_ns_(now_ns()) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::enter(std::int64_t op) {
  current_.store(op, std::memory_order_relaxed);
  last_ns_.store(now_ns(), std::memory_order_relaxed);
}

void Watchdog::progress() { last_ns_.store(now_ns(), std::memory_order_relaxed); }

// The timeout in nanoseconds, saturated: 1e10 s (or inf) overflowed the cast and fired at once.
std::int64_t Watchdog::timeout_ns() const {
  constexpr double kMaxNs = 4e18;  // 127 years, well inside int64_t
  return timeout_s_ * 1e9 < kMaxNs ? static_cast<std::int64_t>(timeout_s_ * 1e9) : static_cast<std::int64_t>(kMaxNs);
}

void Watchdog::loop() {
  const std::int64_t timeout_ns = this->timeout_ns();
  // Poll at a tenth of the timeout (at most 1 s): the report comes at most 10% late.
  const auto period = std::chrono::nanoseconds(std::clamp<std::int64_t>(timeout_ns / 10, 1000000, 1000000000));
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, period);
    if (stop_) break;
    const std::int64_t idle = now_ns() - last_ns_.load(std::memory_order_relaxed);
    if (idle < timeout_ns) continue;
    fired_.store(true);
    l.unlock();
    handler_(current_.load(std::memory_order_relaxed), static_cast<double>(idle) * 1e-9);
    return;
  }
}

}  // namespace pipescope::runtime
