#pragma once
// `pipescope simulate --compare a,b,c`: one scenario under several registered schedules side by side. Each
// variant is checked before anything runs (an impossible one is bad input), then simulated in its own forked child
// (SimGrid allows one Engine per process); a variant that fails is a row with its error.

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/schedule_registry.h"
#include "core/util/atomic_file.h"
#include "sim/run_scenario.h"

namespace pipescope::sim {

// The registered schedule `name`; std::invalid_argument naming `flag` and the valid names otherwise.
const ScheduleEntry& schedule_named(const std::string& name, const std::string& flag);
// The scenario with schedule `e` instead of its own (named "<scenario>/<schedule>", validated).
Scenario schedule_variant(const Scenario& base, const ScheduleEntry& e);

// A folder for the variants' trace files, removed with what it holds when the last copy goes.
struct TraceScratch {
  std::string dir;
  std::vector<std::string> files;
  ~TraceScratch();
};

struct ScheduleComparison {
  std::vector<Scenario> variants;
  std::vector<RunOutcome> outcomes;      // per variant
  std::shared_ptr<TraceScratch> traces;  // with RunOptions::trace_json: each variant's trace file (merged at the end)
};

// The variants of `names`, each refused before any runs when its work is over the limits or its schedule cannot be
// made; `warn` gets a line for a sliced schedule run with one slice. Then each run in turn (`started` before each).
ScheduleComparison compare_schedules(const Scenario& base, const std::vector<std::string>& names, const RunOptions& o,
                                     const std::function<void(const std::string&)>& warn,
                                     const std::function<void(const Scenario&)>& started);

// The side-by-side table (a header line, one row per variant, a legend).
void print_comparison(std::FILE* out, const Scenario& base, const ScheduleComparison& c);
// `--json`: the variants' reports (write_compare_json); `--trace`: the traces of those that ran in one file
// (merge_trace_files: streamed, one variant's trace at a time).
std::string comparison_json(const ScheduleComparison& c);
void write_comparison_trace(const ScheduleComparison& c, AtomicFileWriter& out);

}  // namespace pipescope::sim
