#pragma once
// Per-worker watchdog: a thread that fires when the worker's program makes no progress (no op starts or
// completes) for `timeout_s`, and hands the handler the op the worker is blocked on. A checked schedule
// cannot deadlock, so a firing watchdog means a broken program, a lost message or a hung device; the run
// must end with a report instead of hanging. The handler decides how: MPI ranks print
// "rank R (worker W): blocked on <op>" and abort the job (runtime/mpi_rank.h mpi_watchdog_handler); in-process
// runs cancel their LocalFabric so every waiting worker throws.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace pipescope::runtime {

class Watchdog {
 public:
  // Op positions passed to enter(): an index into the worker's program, or one of these phases.
  static constexpr std::int64_t kSetup = -1;    // before / between iterations (barriers, allocation)
  static constexpr std::int64_t kDrain = -2;    // waiting for the worker's outstanding sends
  static constexpr std::int64_t kResults = -3;  // gathering results
  // Called once, from the watchdog thread, with the op position and the seconds without progress.
  using Handler = std::function<void(std::int64_t op, double idle_s)>;

  // timeout_s <= 0 disables the watchdog (no thread).
  Watchdog(double timeout_s, Handler handler);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The worker starts op `op` (also counts as progress). Cheap: two relaxed atomic stores.
  void enter(std::int64_t op);
  void progress();
  bool fired() const { return fired_.load(); }
  double timeout_s() const { return timeout_s_; }

 private:
  void loop();
  std::int64_t timeout_ns() const;
  static std::int64_t now_ns();
  double timeout_s_;
  Handler handler_;
  std::atomic<std::int64_t> current_{kSetup};
  std::atomic<std::int64_t> last_ns_;
  std::atomic<bool> fired_{false};
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace pipescope::runtime
