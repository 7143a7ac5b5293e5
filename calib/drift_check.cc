#include "calib/drift_check.h"

#include <nlohmann/json.hpp>

#include "core/model/profile.h"

namespace pipescope::calib {

DriftCheck drift_before(const std::string& profile_path, const std::string& backend, bool skip) {
  DriftCheck d;
  d.why = skip ? "--no-drift-check" : "no profile";
  if (!skip && !profile_path.empty()) d.probe = drift_probe_of(load_profile(profile_path), backend, d.why);
  if (d.probe) d.before = retime_probe(*d.probe, backend);
  return d;
}

void drift_after(DriftCheck& d, const std::string& backend) {
  if (d.probe) d.after = retime_probe(*d.probe, backend);
}

void print_drift(std::FILE* out, const DriftCheck& d) {
  if (!d.probe) return;
  const double prof = d.probe->profile_fwd_s + d.probe->profile_bwd_s;
  std::fprintf(
      out,
      "device drift since the profile (%s, forward + backward %.3f ms in the profile): %.3f ms before the run "
      "(%+.1f%%), %.3f ms after (%+.1f%%); simulated-vs-measured errors of this size are the machine's, not the "
      "model's\n",
      d.probe->describe().c_str(), prof * 1e3, (d.before.fwd_s + d.before.bwd_s) * 1e3,
      100 * drift_change(*d.probe, d.before), (d.after.fwd_s + d.after.bwd_s) * 1e3,
      100 * drift_change(*d.probe, d.after));
}

std::string drift_json(const DriftCheck& d) {
  if (!d.probe) return nlohmann::ordered_json{{"checked", false}, {"why", d.why}}.dump();
  auto reading = [&](const DriftReading& r) {
    return nlohmann::ordered_json{
        {"forward_s", r.fwd_s}, {"backward_s", r.bwd_s}, {"change", drift_change(*d.probe, r)}};
  };
  return nlohmann::ordered_json{
      {"checked", true},
      {"point", d.probe->describe()},
      {"profile", {{"forward_s", d.probe->profile_fwd_s}, {"backward_s", d.probe->profile_bwd_s}}},
      {"before", reading(d.before)},
      {"after", reading(d.after)}}
      .dump();
}

}  // namespace pipescope::calib
