#pragma once
// Test helpers: an in-process sum over the tp shards of a layer, one thread per shard (each call blocks until every
// shard contributed, then every shard gets the sum, added in rank order: deterministic), and the threads.
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pipescope::testing {

template <class T>
class TpSumGroup {
 public:
  explicit TpSumGroup(int n) : n_(n), parts_(static_cast<std::size_t>(n)), calls_(static_cast<std::size_t>(n)) {}
  void all_reduce(int rank, T* data, std::size_t count) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return taken_ == 0 || arrived_ < n_; });  // the previous call is fully consumed
    parts_[rank].assign(data, data + count);
    const long gen = gen_;
    if (++arrived_ == n_) {
      sum_ = parts_[0];
      for (int k = 1; k < n_; ++k)
        for (std::size_t i = 0; i < count; ++i) sum_[i] += parts_[k][i];
      gen_++;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return gen_ != gen; });
    }
    std::copy(sum_.begin(), sum_.end(), data);
    calls_[rank]++;
    if (++taken_ == n_) {
      arrived_ = taken_ = 0;
      cv_.notify_all();
    }
  }
  int calls(int rank) const { return calls_[rank]; }

 private:
  int n_, arrived_ = 0, taken_ = 0;
  long gen_ = 0;
  std::vector<std::vector<T>> parts_;
  std::vector<T> sum_;
  std::vector<int> calls_;
  std::mutex mu_;
  std::condition_variable cv_;
};

// Runs shard(r) for r = 0..n-1 on n threads and joins them; returns each shard's exception message ("" if none).
inline std::vector<std::string> run_shards(int n, const std::function<void(int)>& shard) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        shard(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace pipescope::testing
