#pragma once
// In-process transport: one thread per worker, messages copied through shared mailboxes (eager sends),
// all-reduces summed in member order. Lets the in-process tests run whole pipelined schedules without
// mpirun, and the overhead benchmark time the executor without MPI in the way.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/lowering.h"
#include "runtime/transport.h"

namespace pipescope::runtime {

// State shared by the workers of one run.
class LocalFabric {
 public:
  LocalFabric(int workers, std::vector<CollGroup> groups);
  int workers() const { return workers_; }
  // Cancels the run: every wait and control call of every worker throws RuntimeError from now on.
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  friend class LocalTransport;
  struct Call {  // one all-reduce call of a group
    std::vector<std::vector<char>> contrib;
    int arrived = 0, taken = 0;
    std::vector<char> result;
  };
  int workers_;
  std::vector<CollGroup> groups_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::vector<std::vector<char>>> mail_;  // (src, dst, tag) -> FIFO
  std::vector<std::map<std::int64_t, Call>> calls_;                           // per group: call number -> call
  // Control plane: a generation-counted exchange.
  int gen_ = 0, arrived_ = 0;
  std::vector<std::vector<double>> deposit_, result_;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(LocalFabric& fabric, int worker);
  std::string name() const override { return "local"; }
  int worker() const override { return worker_; }
  int workers() const override { return fabric_.workers(); }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) override;
  void barrier() override;
  std::vector<std::vector<double>> gather(const std::vector<double>& mine) override;
  bool cancelled() const override { return fabric_.cancelled(); }

 private:
  std::vector<std::vector<double>> exchange(const std::vector<double>& mine);
  LocalFabric& fabric_;
  int worker_;
  std::vector<std::int64_t> next_call_;  // per group: this worker's next call number
};

}  // namespace pipescope::runtime
