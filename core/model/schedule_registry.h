#pragma once
// The one registry of pipeline schedules: for each ScheduleKind its name (the YAML / CLI spelling), its traits,
// its generator and a line of help. Scenario loading, `simulate --compare`, `validate --schedule`, the runtime's
// scenario fit, sweep, repro and the tests all read this table; nothing else lists schedule names or decides
// "is it interleaved / sliced / split". Adding a schedule: a ScheduleKind value, a generator, a row in
// schedule_registry.cc and its closed form in tests/test_conformance.cc.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/model/config.h"

namespace pipescope {

// How the scenario's micro-batches are cut into token slices before the generator runs.
enum class SlicePlan : std::uint8_t {
  Whole,     // whole sequences (seq_slices must be 1)
  TeraPipe,  // uniform / explicit slices, or TeraPipe's dynamic-programming planner (slicing: dp)
  Seq1F1B,   // Seq1F1B segments: cwp (equal causal FLOPs), uniform or explicit
};

// The training frameworks whose own code runs a schedule (docs/search.md "Frameworks"): Megatron-LM / Megatron-Core
// (pipeline_parallel/schedules.py), TorchTitan over PyTorch's torch.distributed.pipelining (its Schedule classes and
// CSV schedules), DeepSpeed's pipeline engine (deepspeed/runtime/pipe/schedule.py).
enum class Framework : std::uint8_t { Megatron, TorchTitan, DeepSpeed };
constexpr std::uint8_t framework_bit(Framework f) { return static_cast<std::uint8_t>(1u << static_cast<unsigned>(f)); }
const char* to_string(Framework f);
const std::vector<Framework>& all_frameworks();
// Whether `name` is a framework's name (`out` is then that framework).
bool find_framework(const std::string& name, Framework& out);

struct ScheduleTraits {
  bool interleaved = false;  // more than one model chunk per rank (needs parallel.v > 1)
  int fixed_v = 0;           // chunks per rank the generator requires (0: any v >= 2 when interleaved)
  SlicePlan slicing = SlicePlan::Whole;
  bool split_backward = false;   // backward as I + W ops
  bool m_multiple_of_p = false;  // the micro-batch count must be a multiple of pp
  StageStyle style = StageStyle::Loop;
  // Read from schedule.file (kind file), not generated: v, the stage placement and the backward form are the
  // file's (make_schedule reads it; `generate` only throws).
  bool from_file = false;
  // The steady state's forward-backward steps can run as Megatron's combined 1F1B (schedule.overlap_moe_a2a).
  bool combined_1f1b = false;
  // The generator makes overlapped pairs itself (DualPipeV).
  bool overlapped = false;
  // The generator needs m >= min_m_per_rank * pp micro-batches (0: no such bound).
  int min_m_per_rank = 0;
  // The frameworks that implement it (framework_bit of each; 0: only its paper's own code or fork).
  std::uint8_t frameworks = 0;
  bool runs_in(Framework f) const { return (frameworks & framework_bit(f)) != 0; }
  bool sliced() const { return slicing != SlicePlan::Whole; }
  // The chunks per rank a scenario gets when it switches to this schedule from one with `v` chunks.
  int fit_v(int v) const { return from_file ? v : fixed_v > 0 ? fixed_v : interleaved ? std::max(v, 2) : 1; }
};

// A generator: p ranks, v chunks per rank, the micro-batch table, tokens per sequence.
using ScheduleGenerator = Schedule (*)(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len);

struct ScheduleEntry {
  ScheduleKind kind;
  const char* name;
  ScheduleTraits traits;
  ScheduleGenerator generate;
  const char* help;
};

const std::vector<ScheduleEntry>& schedule_registry();
const ScheduleEntry& schedule_entry(ScheduleKind k);
// nullptr when no schedule has this name.
const ScheduleEntry* find_schedule(const std::string& name);
// Every registered name, in registry order, joined by ", " (for error messages and help).
std::string schedule_names();
std::vector<std::string> schedule_name_list();
// The names of the schedules whose traits satisfy `pred`, as "a, b or c" (for error messages).
std::string schedule_names_if(bool (*pred)(const ScheduleTraits&));
// `simulate --list-schedules`: one line per schedule, "<name> <traits> <frameworks> <help>" in columns (scripts read
// the first; frameworks "-" when none runs it).
std::string schedule_list_text();
// Where the scenario's virtual stages sit: the registry's style, or for kind file the file's.
StageStyle scenario_stage_style(const Scenario& s);

}  // namespace pipescope
