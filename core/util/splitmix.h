#pragma once
// SplitMix64 (Steele, Lea and Flood, 2014): a counter-based 64-bit mixer. The same value on every platform and
// compiler, so draws made from it (the runtime's test data, the GPU speed spread) are reproducible anywhere.

#include <cstdint>

namespace pipescope {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace pipescope
