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

#include "core/lower/lowering.h"
#include "runtime/transport.h"

namespace pipescope::runtime {

// State shared by the workers of one run: workers x tp threads (one per worker and TP rank).
class LocalFabric {
 public:
  LocalFabric(int workers, std::vector<CollGroup> groups, int tp = 1);
  int workers() const { return workers_; }
  int tp() const { return tp_; }
  int processes() const { return workers_ * tp_; }
  // Cancels the run: every wait and control call of every worker throws RuntimeError from now on.
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  friend class LocalTransport;
  struct Call {  // one all-reduce call of a group
    std::vector<std::vector<char>> contrib;
    int arrived = 0, taken = 0;
    std::vector<char> result;
    std::vector<std::vector<std::size_t>> sizes;  // all-to-all: each member's send_bytes
  };
  using Calls = std::map<std::int64_t, Call>;  // call number -> call
  int workers_, tp_;
  std::vector<CollGroup> groups_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::vector<std::vector<char>>> mail_;  // (src, dst process, tag) -> FIFO
  std::vector<Calls> calls_;     // per (group, TP rank): group * tp + TP rank
  std::vector<Calls> tp_calls_;  // per worker: its TP group's calls (all-reduces and all-gathers, in call order)
  // Control plane: a generation-counted exchange.
  int gen_ = 0, arrived_ = 0;
  std::vector<std::vector<double>> deposit_, result_;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(LocalFabric& fabric, int worker, int tp_rank = 0);
  std::string name() const override { return "local"; }
  int worker() const override { return worker_; }
  int workers() const override { return fabric_.workers(); }
  int tp_rank() const override { return tp_rank_; }
  int tp_size() const override { return fabric_.tp(); }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) override;
  std::unique_ptr<Request> ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                                      const std::vector<std::size_t>& recv_bytes, int group) override;
  std::unique_ptr<Request> tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) override;
  std::unique_ptr<Request> tp_iallgather(void* buf, std::size_t chunk_bytes) override;
  void barrier() override;
  std::vector<std::vector<double>> gather(const std::vector<double>& mine) override;
  bool cancelled() const override { return fabric_.cancelled(); }

 private:
  std::vector<std::vector<double>> exchange(const std::vector<double>& mine);
  // Contributes to call `number` of `calls` (members: n processes, this one at `member`); `what` names the
  // group in errors.
  // gather: concatenate the members' `bytes` in member order instead of summing `count` elements of `type`.
  std::unique_ptr<Request> reduce(LocalFabric::Calls& calls, std::int64_t number, int member, int n, void* buf,
                                  std::size_t count, ElemType type, const std::string& what, bool gather = false);
  int process() const { return worker_ * fabric_.tp() + tp_rank_; }
  LocalFabric& fabric_;
  int worker_, tp_rank_;
  std::vector<std::int64_t> next_call_;  // per group: this process's next call number
  std::int64_t next_tp_call_ = 0;
};

}  // namespace pipescope::runtime
