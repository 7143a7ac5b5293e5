#include "kernels/backend.h"

#include <chrono>

namespace pipescope::kernels {

namespace {

class HostOpTimer final : public OpTimer {
 public:
  bool on_device() const override { return false; }
  void begin() override {
    t0_ = Clock::now();
    marks_.clear();
  }
  int mark() override {
    marks_.push_back(Clock::now());
    return static_cast<int>(marks_.size()) - 1;
  }
  std::vector<double> resolve() override {
    std::vector<double> s;
    s.reserve(marks_.size());
    for (const auto& m : marks_) s.push_back(std::chrono::duration<double>(m - t0_).count());
    return s;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0_ = Clock::now();
  std::vector<Clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<OpTimer> make_host_op_timer() { return std::make_unique<HostOpTimer>(); }

}  // namespace pipescope::kernels
