#pragma once
// Text inside SVG elements and attributes: the XML specials escaped (scenario names are free text). Shared by the
// timelines and the charts.
#include <string>

namespace pipescope {

inline std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

}  // namespace pipescope
