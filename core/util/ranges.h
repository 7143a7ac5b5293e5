#pragma once
// Documented plausible ranges of the scenario's quantities (docs/limits.md is the same table in prose). A value
// outside its range is a located input error at load time: 1e-300 GB/s or a 1e14 us latency is a typo, not a
// cluster, and such magnitudes overflow the simulator's clock (SimGrid aborts) or print nonsense.

#include <string>

namespace pipescope {

struct KeyRange {
  const char* key;       // YAML path, e.g. "cluster.intra_node.nvlink_bw_GBps"
  double min, max;       // in the key's own unit (the suffix of its name)
  bool zero_means_none;  // 0 is accepted outside [min, max] (e.g. peak_tflops_bf16: 0 = no bf16 support)
};

// The range of a scenario key path, or nullptr when the key has none (strings, booleans, enums).
const KeyRange* key_range(const std::string& path);
// "" when `value` is acceptable for `path`, else the reason ("1e-300 is outside the plausible range [0.01, 1e+05]").
std::string range_violation(const std::string& path, double value);
// Every range, in table order (docs and tests).
const KeyRange* key_ranges_begin();
const KeyRange* key_ranges_end();

}  // namespace pipescope
