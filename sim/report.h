#pragma once
// Simulation results: per-op times, per-GPU busy/idle, bubble, TFLOP/s, memory; printed as a table,
// JSON (--json) and a Chrome/Perfetto trace (--trace). Deterministic formatting.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "core/lower/checks.h"
#include "core/lower/time_breakdown.h"
#include "core/lower/trace_json.h"
#include "core/memory/memory_model.h"
#include "core/model/config.h"
#include "core/model/profile.h"
#include "core/util/atomic_file.h"
#include "sim/device_fidelity.h"
#include "sim/run_result.h"

namespace pipescope::sim {

struct NodeTiming {
  double start = -1, end = -1;
};

struct SimResult {
  double iteration_s = 0;                // makespan
  double pipeline_end_s = 0;             // last compute op of the pipeline (before grad sync / optimizer)
  std::vector<NodeTiming> timing;        // per DAG node
  std::vector<double> worker_busy_s;     // per worker: compute + optimizer time
  std::size_t activities = 0;            // SimGrid activities created (incl. collective steps)
  std::size_t completed = 0, total = 0;  // DAG nodes
  double wall_s = 0;                     // not printed in deterministic outputs
};

// Version of the --json layout (docs/schemas/simulate.schema.json); bumped when a key changes meaning or goes.
inline constexpr const char* kReportSchema = "pipescope.simulate/2";

// The figures (what was run, iteration time, throughput: RunFigures, sim/run_result.h) and what only the report
// shows.
struct Report : RunFigures {
  int cp = 1;              // context-parallel degree (printed when > 1; not in the JSON layout)
  int seq_slices = 1;      // token slices per micro-batch
  RunBreakdown breakdown;  // where each worker's iteration goes (core/lower/time_breakdown.h)
  std::vector<double> worker_busy_s, worker_idle_s;
  MemoryReport memory;
  ProfileStamp profile;  // the calibration profile that timed the run (sim.profile); empty path: analytic
  std::string device;    // the device preset the description is ("": none), the measured sets that check it and
  std::vector<DeviceFidelity> fidelity;  // the report's line on them (sim/device_fidelity.h)
  std::string fidelity_line;
  // The GPU speed spread the compute times include (cluster.gpu_speed_sigma_pct); "" without one.
  std::string variation_line;
};

// `replay`: whether memory.ranks carry the caching allocator's reserved bytes (core/memory/memory_model.h); callers
// that keep only the live peak (the search's re-simulated candidates) leave it off.
Report make_report(const Scenario& s, const CheckedSchedule& cs, const SimResult& r,
                   AllocatorReplay replay = AllocatorReplay::On);
void print_table(std::ostream& os, const Report& r);
void write_json(std::ostream& os, const Report& r);
// `pipescope simulate --compare --json`: {"schema": "pipescope.compare/1", "variants": [each variant's
// write_json object], "failed": [{"schedule", "error"} of the variants whose run failed]}; `reports_json` are
// write_json outputs in order.
void write_compare_json(std::ostream& os, const std::vector<std::string>& reports_json,
                        const std::vector<std::pair<std::string, std::string>>& failed = {});
// `pipescope simulate --compare --trace`: variant i's trace is written (write_trace, to a file of its own) with
// this layout: its processes at pid stride * i + node (stride: 1000, or the power of ten above the largest node id
// of `nodes` nodes) named "<name> node<N>", its flow ids from i << 40.
TraceLayout compare_trace_layout(std::size_t i, int nodes, const std::string& name);
// The variants' trace files in one: every event in variant order, then "otherData" with each variant's under its
// name. Streamed: a trace is never held whole in memory. Throws std::runtime_error on a file write_trace did not
// write.
void merge_trace_files(AtomicFileWriter& out, const std::vector<std::pair<std::string, std::string>>& name_and_path);
// The part of a large run a trace keeps (--trace-ranks, --trace-replicas): the GPUs of pipeline ranks
// first_rank..last_rank of data-parallel replicas first_replica..last_replica (last -1: to the last). An event
// is kept when it runs on a kept GPU; a transfer's flow arrow when both of its ends are kept.
struct TraceSubset {
  int first_rank = 0, last_rank = -1;
  int first_replica = 0, last_replica = -1;
};
// Chrome trace-event JSON: one track per GPU (compute), comm tracks per GPU, ops named by canonical text.
// `profile` names the calibration profile in the trace's metadata (otherData.profile). Throws
// std::invalid_argument when `subset` names ranks or replicas the run does not have.
void write_trace(std::ostream& os, const CheckedSchedule& cs, const SimResult& r, const ProfileStamp& profile = {},
                 const TraceSubset& subset = {}, const TraceLayout& layout = {});
// The profile as a JSON object: {"kind": "analytic (no profile)"} or path, kind, device, backend, dtype, date,
// fnv1a64 and gate_failures.
std::string profile_json(const ProfileStamp& p);

}  // namespace pipescope::sim
