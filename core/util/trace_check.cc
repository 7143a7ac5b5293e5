#include "core/util/trace_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <tuple>

namespace pipescope {

namespace {

using Json = nlohmann::json;
using Track = std::pair<std::int64_t, std::int64_t>;  // pid, tid

struct Span {
  std::int64_t begin, end;  // ns
  std::string name;
};

std::int64_t ns(const Json& us) { return static_cast<std::int64_t>(std::llround(us.get<double>() * 1000.0)); }

std::string where(const Track& t) { return "pid " + std::to_string(t.first) + " tid " + std::to_string(t.second); }

}  // namespace

TraceCheck check_trace(const std::string& json_text) {
  const Json doc = Json::parse(json_text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw std::invalid_argument("not a trace-event JSON document (an object with a traceEvents array)");
  TraceCheck out;
  auto problem = [&](const std::string& p) {
    if (out.problems.size() < 20) out.problems.push_back(p);
  };
  std::map<Track, std::vector<Span>> spans;
  struct FlowEnd {
    Track track;
    std::int64_t at;
  };
  std::map<std::string, std::vector<FlowEnd>> starts, finishes;
  for (const Json& e : doc["traceEvents"]) {
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    if (ph != "X" && ph != "s" && ph != "f") continue;
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("pid") || !e.contains("tid")) {
      problem("an event without numeric ts / pid / tid: " + e.dump());
      continue;
    }
    const Track track{e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()};
    if (ph == "X") {
      const std::int64_t dur = e.contains("dur") && e["dur"].is_number() ? ns(e["dur"]) : -1;
      if (dur < 0) problem("X event without a non-negative dur: " + e.dump());
      spans[track].push_back({ns(e["ts"]), ns(e["ts"]) + std::max<std::int64_t>(dur, 0), e.value("name", "")});
      out.events++;
    } else {
      const std::string id = e.contains("id") ? e["id"].dump() : "";
      (ph == "s" ? starts : finishes)[id].push_back({track, ns(e["ts"])});
    }
  }
  out.tracks = spans.size();
  for (auto& [track, v] : spans) {
    std::sort(v.begin(), v.end(),
              [](const Span& a, const Span& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
    for (std::size_t i = 1; i < v.size(); i++)
      if (v[i].begin < v[i - 1].end)
        problem(where(track) + ": " + v[i - 1].name + " [" + std::to_string(v[i - 1].begin) + ", " +
                std::to_string(v[i - 1].end) + ") ns overlaps " + v[i].name + " starting at " +
                std::to_string(v[i].begin) + " ns");
  }
  // A flow end must lie inside an X event of its own track.
  auto inside = [&](const FlowEnd& f) {
    const auto it = spans.find(f.track);
    if (it == spans.end()) return false;
    const auto& v = it->second;
    auto k = std::upper_bound(v.begin(), v.end(), f.at, [](std::int64_t t, const Span& s) { return t < s.begin; });
    return k != v.begin() && std::prev(k)->end >= f.at;
  };
  for (const auto& [id, s] : starts) {
    out.flows++;
    const auto f = finishes.find(id);
    if (s.size() != 1 || f == finishes.end() || f->second.size() != 1) {
      problem("flow " + id + ": " + std::to_string(s.size()) + " start(s), " +
              std::to_string(f == finishes.end() ? 0 : f->second.size()) + " finish(es); want one each");
      continue;
    }
    if (!inside(s[0])) problem("flow " + id + ": start outside every event of " + where(s[0].track));
    if (!inside(f->second[0])) problem("flow " + id + ": finish outside every event of " + where(f->second[0].track));
  }
  for (const auto& [id, f] : finishes)
    if (!starts.count(id)) problem("flow " + id + ": a finish without a start");
  return out;
}

}  // namespace pipescope
