// Scenario YAML (core/model/scenario.h parse_scenario). Any input must either be rejected with a ScenarioError
// that names a position and a key, or be accepted; an accepted scenario must pass validate_scenario again
// and, when small enough to lower quickly, turn into a schedule that the static checker accepts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/lower/checks.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

using namespace pipescope;

namespace {
[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_scenario: %s\n", what.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Scenario s;
  try {
    s = parse_scenario(text, "fuzz.yaml");
  } catch (const ScenarioError& e) {
    // Rejections must point somewhere: "fuzz.yaml:<line>:<col>: <key>: <message>".
    const std::string msg = e.what();
    if (msg.rfind("fuzz.yaml:", 0) != 0 || msg.find(": ", 10) == std::string::npos) die("unlocated error: " + msg);
    return 0;
  }
  try {
    validate_scenario(s);
  } catch (const ScenarioError& e) {
    die(std::string("accepted by parse_scenario but not by validate_scenario: ") + e.what());
  }
  // Lower and check only small grids: the fuzzer wants many executions per second, not big schedules.
  const auto& p = s.parallel;
  const double ops = 2.0 * p.dp * p.pp * p.v * p.micro_batches() * s.schedule.seq_slices;
  if (ops > 4096 || p.tp * p.dp * p.pp > 512) return 0;
  // The slicing planners search over token counts (seconds per call at seq_len 8192 under ASan).
  if (s.schedule.slicing != "uniform" && s.schedule.slicing != "explicit" && s.model.seq_len > 256) return 0;
  std::unique_ptr<Prepared> prep;
  try {
    prep = prepare(s);
  } catch (const std::invalid_argument& e) {
    // Requests a generator cannot serve (e.g. a planner not written yet) are named errors, not crashes.
    return 0;
  }
  try {
    check(prep->lowered, prep->placement);
  } catch (const CheckError& e) {
    die(std::string("a validated scenario lowered to a schedule the checker rejects: ") + e.what());
  }
  return 0;
}
