#pragma once
// A memo of doubles keyed by two 64-bit words: open addressing, linear probing, grown at half full. The cost models'
// answers are asked millions of times in a search or a planner, a few distinct questions many times each, and most
// questions of a planner once: a lookup and an insert must both cost a few instructions (no node per entry).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pipescope {

class MemoTable {
 public:
  // The value for (a, b); ask() computes it the first time.
  template <class F>
  double get(std::uint64_t a, std::uint64_t b, const F& ask) {
    if (2 * (used_ + 1) > slots_.size()) grow();
    for (std::size_t h = slot_of(a, b);; h = (h + 1) & (slots_.size() - 1)) {
      Slot& x = slots_[h];
      if (x.full && x.a == a && x.b == b) return x.v;
      if (!x.full) {
        const double v = ask();
        // Placed after ask() returns: an ask() that used this table may have moved the slots.
        return insert(a, b, v);
      }
    }
  }

 private:
  struct Slot {
    std::uint64_t a = 0, b = 0;
    double v = 0;
    bool full = false;
  };
  std::size_t slot_of(std::uint64_t a, std::uint64_t b) const {
    const std::uint64_t h = (a ^ b * 0x9E3779B97F4A7C15ull) * 0xff51afd7ed558ccdull;
    return static_cast<std::size_t>(h ^ h >> 32) & (slots_.size() - 1);
  }
  // (a, b) with v, unless an ask() that used this table put it there already (then that value stays: one entry).
  double insert(std::uint64_t a, std::uint64_t b, double v) {
    if (2 * (used_ + 1) > slots_.size()) grow();
    std::size_t h = slot_of(a, b);
    for (; slots_[h].full; h = (h + 1) & (slots_.size() - 1))
      if (slots_[h].a == a && slots_[h].b == b) return slots_[h].v;
    slots_[h] = Slot{a, b, v, true};
    used_++;
    return v;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
    for (const Slot& x : old)
      if (x.full) {
        std::size_t h = slot_of(x.a, x.b);
        while (slots_[h].full) h = (h + 1) & (slots_.size() - 1);
        slots_[h] = x;
      }
  }
  std::vector<Slot> slots_;
  std::size_t used_ = 0;
};

}  // namespace pipescope
