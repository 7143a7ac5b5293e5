#pragma once
// Checks a Chrome / Perfetto trace-event document (what `simulate --trace` and `validate --trace` write) for
// what Perfetto needs to show it faithfully: complete ("X") events on one track (pid, tid) that do not overlap
// (touching is fine), and flow events whose every id has one start ("s") and one finish ("f"), each inside an
// X event of its track. Times compared on the integer nanosecond clock the writers use (core/lower/trace_json.h).

#include <string>
#include <vector>

namespace pipescope {

struct TraceCheck {
  std::size_t events = 0, tracks = 0, flows = 0;
  std::vector<std::string> problems;  // empty: the trace is sound (at most the first 20 are kept)
};

// Throws std::invalid_argument when `json_text` is not a trace-event document.
TraceCheck check_trace(const std::string& json_text);

}  // namespace pipescope
