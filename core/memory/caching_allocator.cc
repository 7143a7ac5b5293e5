#include "core/memory/caching_allocator.h"

#include <cmath>
#include <iterator>
#include <stdexcept>
#include <string>

namespace pipescope {

namespace {
// PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp).
constexpr std::uint64_t kMinBlockSize = 512;           // every request is rounded up to a multiple
constexpr std::uint64_t kSmallSize = 1048576;          // largest small-pool request
constexpr std::uint64_t kSmallBuffer = 2097152;        // small-pool segment
constexpr std::uint64_t kLargeBuffer = 20971520;       // segment for a large request under kMinLargeAlloc
constexpr std::uint64_t kMinLargeAlloc = 10485760;     // from here a segment is the request rounded up
constexpr std::uint64_t kRoundLarge = 2097152;         // to this
constexpr double kMaxBytes = 1e18;                     // 1 EB: no device; far from the 64-bit limit
constexpr std::uint64_t kNoBlock = ~std::uint64_t{0};  // the handle of a 0-byte request
}  // namespace

CachingAllocatorModel::CachingAllocatorModel(double capacity_bytes)
    : capacity_(capacity_bytes > kMaxBytes ? static_cast<std::uint64_t>(kMaxBytes)
                : capacity_bytes > 0       ? static_cast<std::uint64_t>(capacity_bytes)
                                           : 0) {}

std::uint64_t CachingAllocatorModel::round_size(std::uint64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

std::uint64_t CachingAllocatorModel::segment_size(std::uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

void CachingAllocatorModel::insert_free(std::uint64_t addr) {
  const Block& b = blocks_.at(addr);
  pool(b.small).emplace(b.size, addr);
}

void CachingAllocatorModel::release_free_segments() {
  if (whole_free_ == 0) return;
  for (auto it = segments_.begin(); it != segments_.end();) {
    const auto [base, size] = it->second;
    const Block& b = blocks_.at(base);
    if (b.free && b.size == size) {
      pool(b.small).erase({b.size, base});
      blocks_.erase(base);
      reserved_ -= size;
      is_whole_free_[static_cast<std::size_t>(it->first)] = 0;
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
  whole_free_ = 0;
}

std::uint64_t CachingAllocatorModel::new_segment(std::uint64_t size, bool small) {
  const std::uint64_t seg = segment_size(size);
  if (reserved_ + seg > capacity_) {
    release_free_segments();                          // cudaMalloc failed: free the cache and retry
    if (reserved_ + seg > capacity_) failed_ = true;  // PyTorch's out-of-memory error
  }
  const std::uint64_t base = next_address_;
  next_address_ += seg + kMinBlockSize;  // a gap: blocks of different segments are never neighbours
  segments_[next_segment_] = {base, seg};
  segment_bytes_.push_back(seg);
  is_whole_free_.push_back(0);
  blocks_[base] = Block{seg, next_segment_, small, true};  // taken at once by take_block: not whole_free_
  next_segment_++;
  reserved_ += seg;
  if (!failed_ && reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  return base;
}

std::uint64_t CachingAllocatorModel::take_block(std::uint64_t size, bool small) {
  FreeSet& free_set = pool(small);
  std::uint64_t addr = 0;
  auto it = free_set.lower_bound({size, 0});
  if (it != free_set.end()) {
    addr = it->second;
    free_set.erase(it);
  } else {
    addr = new_segment(size, small);
  }
  Block& b = blocks_.at(addr);
  if (is_whole_free_[static_cast<std::size_t>(b.segment)]) {  // about to be (part) allocated
    is_whole_free_[static_cast<std::size_t>(b.segment)] = 0;
    whole_free_--;
  }
  const std::uint64_t rest = b.size - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    b.size = size;
    blocks_[addr + size] = Block{rest, b.segment, small, true};
    free_set.emplace(rest, addr + size);
  }
  return addr;
}

int CachingAllocatorModel::allocate(double bytes) {
  if (!(bytes >= 0) || !(bytes <= kMaxBytes))
    throw std::invalid_argument("caching allocator: cannot allocate " + std::to_string(bytes) + " bytes");
  if (bytes == 0) {
    handles_.push_back(kNoBlock);
    return static_cast<int>(handles_.size()) - 1;
  }
  const std::uint64_t size = round_size(static_cast<std::uint64_t>(std::ceil(bytes)));
  const std::uint64_t addr = take_block(size, size <= kSmallSize);
  Block& b = blocks_.at(addr);
  b.free = false;
  allocated_ += b.size;
  handles_.push_back(addr);
  return static_cast<int>(handles_.size()) - 1;
}

void CachingAllocatorModel::free(int handle) {
  if (handle < 0 || handle >= static_cast<int>(handles_.size()) || handles_[handle] == 0)
    throw std::logic_error("caching allocator: handle " + std::to_string(handle) + " is not allocated");
  const std::uint64_t addr = handles_[handle];
  handles_[handle] = 0;
  if (addr == kNoBlock) return;
  auto it = blocks_.find(addr);
  it->second.free = true;
  allocated_ -= it->second.size;
  // Merge with the next block, then with the previous one, when they are free blocks of the same segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    pool(next->second.small).erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      pool(prev->second.small).erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  const auto seg = static_cast<std::size_t>(it->second.segment);
  if (it->second.size == segment_bytes_[seg] && !is_whole_free_[seg]) is_whole_free_[seg] = 1, whole_free_++;
  insert_free(it->first);
}

}  // namespace pipescope
