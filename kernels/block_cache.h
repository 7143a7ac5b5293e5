#pragma once
// BlockCache: device memory that a backend's buffers give back is kept for reuse instead of being freed.
// The CUDA backend needs it because cudaFree synchronises the whole device, NCCL streams included: a rank freeing
// a buffer while one of its sends waits for the receiver would wait too (a deadlock when the receiver does the
// same), and every record released after a backward would stall the pipeline. Reuse is safe when every user of
// the cache runs its device work on one stream (stream order); see kernels/README.md.
// Independent of CUDA (the allocator is a parameter), so its policy is tested on the CPU.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipescope::kernels {

struct DeviceAllocator {
  std::function<void*(std::size_t)> allocate;  // nullptr when the device is out of memory; throws on other errors
  std::function<void(void*)> free;             // may synchronise the device
  std::function<void()> synchronize;           // waits for all queued device work
};

class BlockCache {
 public:
  static constexpr std::size_t kAlign = 512;  // request granularity; coarser bins reuse better

  explicit BlockCache(DeviceAllocator a) : a_(std::move(a)) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() { trim(); }

  // A block of at least `bytes`: the smallest cached block of at most twice the rounded size, else a new one.
  // Out of memory with blocks cached: waits for the device, frees them all, and tries once more. That wait
  // includes pending NCCL operations, so at the memory limit a rank may stall until its peers progress (the
  // watchdog reports it if they never do); below the limit nothing is freed while a backend lives.
  void* take(std::size_t bytes, std::size_t* got) {
    bytes = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= 2 * bytes) {
      *got = it->first;
      void* p = it->second;
      cached_bytes_ -= it->first;
      free_.erase(it);
      hits_++;
      return p;
    }
    void* p = a_.allocate(bytes);
    if (!p && !free_.empty()) {
      a_.synchronize();
      trim();
      p = a_.allocate(bytes);
    }
    if (!p)
      throw std::runtime_error("device out of memory allocating " + std::to_string(bytes) + " bytes (" +
                               std::to_string(live_bytes_) + " bytes in use by this backend)");
    allocations_++;
    live_bytes_ += bytes;
    *got = bytes;
    return p;
  }
  void give(void* p, std::size_t bytes) {
    free_.emplace(bytes, p);
    cached_bytes_ += bytes;
  }
  // Frees every cached block (the caller makes sure no queued device work still uses them).
  void trim() {
    for (auto& [bytes, p] : free_) {
      a_.free(p);
      live_bytes_ -= bytes;
    }
    free_.clear();
    cached_bytes_ = 0;
  }

  std::size_t cached_bytes() const { return cached_bytes_; }  // given back, kept for reuse
  std::size_t device_bytes() const { return live_bytes_; }    // allocated from the device and not yet freed
  long allocations() const { return allocations_; }
  long hits() const { return hits_; }

 private:
  DeviceAllocator a_;
  std::multimap<std::size_t, void*> free_;  // size -> block, for best fit
  std::size_t cached_bytes_ = 0, live_bytes_ = 0;
  long allocations_ = 0, hits_ = 0;
};

}  // namespace pipescope::kernels
