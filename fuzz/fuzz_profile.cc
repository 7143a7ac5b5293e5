// Device profiles (core/model/profile.h parse_profile), as `calibration:` / `--profile` read them. Any input must
// either be rejected with a ProfileError that names the file (and, for YAML content, a position and a key), or
// be accepted; an accepted profile must write back to text that reads back to the same text (round trip), and
// its cost model must give finite, non-negative op times on a small scenario.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/cost/profile_cost.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"

using namespace pipescope;

namespace {
[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_profile: %s\n", what.c_str());
  std::abort();
}

std::string text_of(const DeviceProfile& p) {
  std::ostringstream os;
  write_profile(p, os);
  return os.str();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  DeviceProfile p;
  try {
    p = parse_profile(text, "fuzz.yaml");
  } catch (const ProfileError& e) {
    const std::string msg = e.what();
    if (msg.rfind("fuzz.yaml", 0) != 0 || msg.find(": ") == std::string::npos) die("unlocated error: " + msg);
    return 0;
  }
  const std::string once = text_of(p);
  DeviceProfile q;
  try {
    q = parse_profile(once, "fuzz.yaml");
  } catch (const ProfileError& e) {
    die(std::string("an accepted profile does not read back: ") + e.what());
  }
  if (text_of(q) != once) die("write -> read -> write is not stable");
  // Link models (piecewise tables or alpha-beta lines) give finite, non-negative times at every size; spreads
  // and the profile's dtype are defined.
  for (const auto& [cls, l] : p.links)
    for (double bytes : {0.0, 1.0, 4096.0, 1e6, 1e12}) {
      const double t = l.seconds(bytes);
      if (!std::isfinite(t) || t < 0)
        die("link " + cls + ": time " + std::to_string(t) + " at " + std::to_string(bytes));
    }
  for (const auto& c : p.collectives)
    if (c.model == "piecewise" && !std::isfinite(c.seconds(1e6))) die("collective " + c.op + ": non-finite time");
  for (const auto& t : p.layers)
    for (const auto& sp : t.slices)
      if (!std::isfinite(sp.fwd.rel_spread()) || !std::isfinite(sp.bwd.rel_spread())) die("non-finite spread");
  (void)profile_dtype(p);
  // Costs on a small scenario of the profile's first layer shape (or a fixed one).
  Scenario s = default_scenario();
  s.parallel = ParallelSpec{};
  s.parallel.pp = 2;
  s.parallel.global_batch = 2;
  s.schedule.kind = ScheduleKind::GPipe;
  s.model.layers = 2;
  if (!p.layers.empty()) {
    const LayerTable& t = p.layers.front();
    if (t.hidden > 4096 || t.heads > 64 || t.ffn > 16384 || t.seq_len > 8192 || t.hidden % t.heads) return 0;
    s.model.hidden = t.hidden;
    s.model.heads = t.heads;
    s.model.ffn_hidden = t.ffn;
    s.model.seq_len = t.seq_len;
    s.model.vocab = t.vocab > 0 ? t.vocab : 64;
    s.training.dtype = t.dtype;
  }
  s.cluster.device.name = "custom";  // a scenario that describes its own device takes any device class
  try {
    try {
      check_profile_serves(p, s);
    } catch (const ProfileError& e) {  // a dtype the profile cannot serve: refused, naming the profile
      if (std::string(e.what()).rfind("fuzz.yaml", 0) != 0) die(std::string("unlocated refusal: ") + e.what());
      return 0;
    }
    s = apply_profile(s, p, "fuzz.yaml");
    validate_scenario(s);
    const ProfileCostModel m(s, p);
    for (OpKind k : {OpKind::Forward, OpKind::Backward, OpKind::BackwardInput, OpKind::BackwardWeight})
      for (int stage : {0, 1}) {
        Op op;
        op.kind = k;
        op.stage = op.rank = stage;
        op.tok_begin = s.model.seq_len / 2;
        op.tok_end = s.model.seq_len;
        const double t = m.compute_seconds(op, 1);
        if (!std::isfinite(t) || t < 0) die("non-finite or negative op time " + std::to_string(t));
      }
  } catch (const ScenarioError&) {
  } catch (const std::invalid_argument&) {  // e.g. a table that does not cover the slice: a clear error
  }
  return 0;
}
