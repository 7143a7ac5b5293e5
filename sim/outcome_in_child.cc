// outcome_in_child (outcome_in_child.h) and the DriverOutcome's encoding across the pipe: five header words, the
// wall time, then the timings as raw bytes (parent and child are the same build on the same machine).
#include "sim/outcome_in_child.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "sim/child_process.h"

namespace pipescope::sim {

namespace {

std::string encode_outcome(const DriverOutcome& o) {
  const std::uint64_t head[5] = {o.timing.size(), o.activities, o.completed,
                                 (std::uint64_t{o.overlap_a} << 32) | o.overlap_b, o.temporal_ok ? 1u : 0u};
  std::string s(reinterpret_cast<const char*>(head), sizeof head);
  s.append(reinterpret_cast<const char*>(&o.wall_s), sizeof o.wall_s);
  s.append(reinterpret_cast<const char*>(o.timing.data()), o.timing.size() * sizeof(NodeTiming));
  return s;
}

// Nothing when the bytes are not a whole encoding.
std::optional<DriverOutcome> decode_outcome(const std::string& got) {
  std::uint64_t head[5];
  DriverOutcome o;
  if (got.size() < sizeof head + sizeof o.wall_s) return std::nullopt;
  std::memcpy(head, got.data(), sizeof head);
  std::memcpy(&o.wall_s, got.data() + sizeof head, sizeof o.wall_s);
  const std::size_t at = sizeof head + sizeof o.wall_s;
  if (got.size() != at + head[0] * sizeof(NodeTiming)) return std::nullopt;
  o.timing.resize(head[0]);
  std::memcpy(o.timing.data(), got.data() + at, got.size() - at);
  o.activities = head[1];
  o.completed = head[2];
  o.overlap_a = static_cast<std::uint32_t>(head[3] >> 32);
  o.overlap_b = static_cast<std::uint32_t>(head[3]);
  o.temporal_ok = head[4] != 0;
  return o;
}

}  // namespace

std::optional<DriverOutcome> outcome_in_child(const std::function<DriverOutcome()>& fn) {
  std::string got;
  try {
    got = run_in_child([&] { return encode_outcome(fn()); });
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return decode_outcome(got);
}

}  // namespace pipescope::sim
