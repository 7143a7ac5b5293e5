#pragma once
// CLI11 validators for numeric flags. CLI::Range lets NaN through (every comparison with NaN is false), so
// floating-point flags use finite_range. A failed check is CLI11's ValidationError: bad input, exit 1 (main.cc).

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace pipescope::cli {

inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v)) return "expected a finite number, got '" + s + "'";
        if (v < lo || v > hi)
          return "value " + s + " not in range [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) +
                 "]";
        return std::string();
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

}  // namespace pipescope::cli
