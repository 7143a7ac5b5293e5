#pragma once
// JSON string escaping for the hand-written trace writers (sim/ and runtime/ stream large traces without
// building a JSON tree); one copy so the simulated and measured traces escape op names identically.

#include <cstdio>
#include <string>

namespace pipescope {

inline std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o;
}

}  // namespace pipescope
