#pragma once
// The development sets of `pipescope fidelity` (docs/fidelity.md): every set of measured runs the cost model is
// checked against, in one table (name, file, hardware, cluster, what is measured, which rows rank against each
// other), and each set's rows turned into scenarios. Every row ends as exactly one of: a scenario to simulate with
// its measured iteration time; skipped, with why the scenario schema cannot represent it; excluded, with why its
// measured value is no time (a run out of memory). Simulating the scenarios is the caller's (sim/fidelity.h: one
// SimGrid engine per process).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/plan/measured_runs.h"

namespace pipescope {

// How a set's rows become scenarios (dev_sets.cc, one reader each).
enum class DevSetKind : std::uint8_t {
  Vtrain,          // vtrain_scenario() on one cluster preset (core/plan/measured_runs.h)
  Seq1F1B,         // the shipped scenarios/seq1f1b/<model>-s<s>-m<M>-<method>.yaml the row names, checked against it
  TerapipeTable3,  // scenarios/terapipe/setting-N(-gpipe).yaml with the row's token slices
  H100Dense,       // a Megatron-Core / NeMo scenario built from the row on the dgx-h100 preset
  MegatronTable1,  // scenarios/megatron/<row>.yaml, the paper's TFLOP/s per GPU (core/plan/paper_tables.h)
  TerapipeTable2,  // scenarios/terapipe/setting-N(-gpipe).yaml, the paper's latencies (core/plan/paper_tables.h)
  MoeH100,         // a Megatron-Core MoE scenario built from the row on the dgx-h100 preset
  NotModelled,     // counted, never run: the schema lacks what the set measures
};

struct DevSet {
  const char* name;      // "vtrain-a100"
  const char* file;      // the measured data, relative to the data roots (core/util/data_path.h)
  const char* hardware;  // "A100"
  const char* cluster;   // the cluster preset of its scenarios
  DevSetKind kind;
  const char* metric;        // what the file measures and how it becomes an iteration time
  const char* pairs;         // which rows are ranked against each other
  const char* not_modelled;  // kind NotModelled: why
  const char* row_word;      // "line" (a CSV line) or "row" (a paper table's row)
};
// Every set, in the order the table prints them.
const std::vector<DevSet>& dev_sets();
// The set named `name`; std::invalid_argument listing the names otherwise.
const DevSet& dev_set(const std::string& name);

struct DevRow {
  MeasuredRun run;                   // line, model, layout, measured_s: the measured iteration time
  std::string label;                 // what the row is, for the per-row table ("2.7B s16384 m16 seq1f1b-i")
  std::string group;                 // pair-ranking key; empty: ranked against no other row
  std::optional<Scenario> scenario;  // set when the row runs
  std::string skipped;               // why the schema cannot represent the row
  std::string excluded;              // why the measured value is no time (out of memory)
};

// The rows of `set`. Throws std::invalid_argument naming the file, the line and the column of a bad cell, or a row
// that disagrees with the scenario file it names.
std::vector<DevRow> dev_set_rows(const DevSet& set);

// The paper's notation of a slicing scheme, one micro-batch's token slices: "[(1, [120] * 4 + [64])] * 2" is
// {120, 120, 120, 120, 64} (micro-batch size 1 and the count are checked by the caller). std::invalid_argument
// otherwise.
std::vector<int> parse_slicing_scheme(const std::string& text);

}  // namespace pipescope
