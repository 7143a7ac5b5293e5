#pragma once
// A replay of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, native backend, default
// settings: no expandable segments, no max_split_size, no garbage-collection threshold, one stream), so that
// the memory model can predict torch.cuda.max_memory_reserved() from a sequence of tensor allocations and frees:
// the figure training frameworks log, which counts cached blocks the program no longer uses.
//
// The rules replayed (docs/cost-model.md, "Caching allocator"):
//   - a request is rounded up to a multiple of 512 B; up to 1 MiB it is served from the small pool, else the
//     large pool;
//   - the smallest cached free block of the pool that fits is taken (ties: the lowest address);
//   - if none fits, a new segment is reserved (cudaMalloc): 2 MiB for a small request, 20 MiB for a large one
//     under 10 MiB, else the request rounded up to 2 MiB;
//   - a block is split when what is left is at least 512 B (small pool) or more than 1 MiB (large pool); the rest
//     stays cached as a free block of the same segment;
//   - a freed block merges with free neighbours of its own segment; segments never merge;
//   - when a new segment would exceed the capacity, every wholly free segment is released and the reservation
//     retried; if it still does not fit, the allocation fails (PyTorch raises its out-of-memory error there; a
//     fragmented cache can fail a run whose live bytes fit). The replay goes on so that every handle stays valid,
//     but the reserved peak stays what it was at the first failure.
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace pipescope {

class CachingAllocatorModel {
 public:
  // capacity_bytes: what the allocator may reserve in all (the device's memory less what was reserved before).
  explicit CachingAllocatorModel(double capacity_bytes);

  // Returns a handle for free(). A request of 0 bytes gets no block, as in PyTorch (a null pointer). Throws
  // std::invalid_argument for a negative, non-finite or absurd (over 1 EB) size.
  int allocate(double bytes);
  void free(int handle);

  double allocated_bytes() const { return static_cast<double>(allocated_); }          // blocks in use (rounded sizes)
  double reserved_bytes() const { return static_cast<double>(reserved_); }            // segments held
  double peak_reserved_bytes() const { return static_cast<double>(peak_reserved_); }  // up to the first failure
  bool failed() const { return failed_; }  // some allocation found no room even after releasing the cache

  static std::uint64_t round_size(std::uint64_t bytes);
  static std::uint64_t segment_size(std::uint64_t rounded);  // what cudaMalloc reserves for a cache miss

 private:
  struct Block {
    std::uint64_t size = 0;
    int segment = 0;
    bool small = false;
    bool free = true;
  };
  using FreeSet = std::set<std::pair<std::uint64_t, std::uint64_t>>;  // (size, address): best fit, lowest address
  FreeSet& pool(bool small) { return small ? small_free_ : large_free_; }
  std::uint64_t take_block(std::uint64_t size, bool small);
  std::uint64_t new_segment(std::uint64_t size, bool small);
  void release_free_segments();
  void insert_free(std::uint64_t addr);

  std::uint64_t capacity_;
  std::map<std::uint64_t, Block> blocks_;                            // by address; a segment's blocks are adjacent
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> segments_;  // id -> (base address, size)
  // How many segments are one free block (what release_free_segments returns to the device), kept as blocks change:
  // at capacity every cache miss asks for a release, which then scans the segments only when one can go (it scanned
  // every segment on every miss once the device was full: quadratic in the run's allocations).
  std::vector<std::uint64_t> segment_bytes_;  // by segment id (ids count up from 0): its size
  std::vector<char> is_whole_free_;           // by segment id
  std::size_t whole_free_ = 0;                // of is_whole_free_, those set
  FreeSet small_free_, large_free_;
  std::vector<std::uint64_t> handles_;  // handle -> block address (0: freed; kNoBlock: a 0-byte request)
  std::uint64_t next_address_ = 1;
  int next_segment_ = 0;
  std::uint64_t allocated_ = 0, reserved_ = 0, peak_reserved_ = 0;
  bool failed_ = false;
};

}  // namespace pipescope
