#include "sim/device_fidelity.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "core/model/presets.h"
#include "core/util/data_path.h"

namespace pipescope::sim {

namespace {

constexpr const char* kBaseline = "scenarios/fidelity/baseline.json";

// Per device name, its sets; read once per process (a search reports thousands of runs).
const std::map<std::string, std::vector<DeviceFidelity>>& by_device() {
  static const std::map<std::string, std::vector<DeviceFidelity>> table = [] {
    std::map<std::string, std::vector<DeviceFidelity>> t;
    std::ifstream in;
    try {
      in.open(data_path(kBaseline));
    } catch (const std::invalid_argument&) {
      return t;  // not installed: every device reads as unchecked
    }
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object() || !j.contains("sets") || !j["sets"].is_array()) return t;
    for (const nlohmann::json& set : j["sets"]) {
      if (!set.value("modelled", false) || set.value("rows_run", 0) <= 0) continue;
      const auto cluster = cluster_preset(set.value("cluster", std::string()));
      if (!cluster) continue;
      t[cluster->device.name].push_back(
          {set.value("name", std::string()), set.value("rows_run", 0), set.value("mape", 0.0)});
    }
    return t;
  }();
  return table;
}

}  // namespace

std::string shipped_device(const DeviceSpec& d) {
  for (const std::string& name : device_preset_names()) {
    std::optional<DeviceSpec> p = device_preset(name);
    if (!p) continue;
    if (same_figures(d, *p)) return p->name;
  }
  return {};
}

std::vector<DeviceFidelity> device_fidelity(const DeviceSpec& d) {
  const auto& t = by_device();
  const auto it = t.find(shipped_device(d));
  return it == t.end() ? std::vector<DeviceFidelity>{} : it->second;
}

std::string describe_fidelity(const DeviceSpec& d) {
  const std::string shipped = shipped_device(d);
  if (shipped.empty()) return d.name + ": not a shipped device description; no measured set checks it";
  const std::vector<DeviceFidelity> sets = device_fidelity(d);
  if (sets.empty()) return shipped + ": no measured set checks this description (trust its figures less)";
  std::string out = shipped + ": ";
  for (std::size_t i = 0; i < sets.size(); i++) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%s %d runs, MAPE %.1f%%", i > 0 ? "; " : "", sets[i].set.c_str(), sets[i].runs,
                  100 * sets[i].mape);
    out += buf;
  }
  return out + " (pipescope fidelity)";
}

}  // namespace pipescope::sim
