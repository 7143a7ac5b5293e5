#pragma once
// The run-result record: what one simulation comes to, as every command that runs many of them reports it (sweep's
// CSV and JSON, search's table, simulate --compare) and as it crosses the pipe from the forked child that ran it.
// Its fields are described once, in result_fields() (sim/run_result.cc): name, unit, column, title. Every view below
// (the table columns as CSV or JSON, the encoding between processes) is made from that one list, so adding a field
// is one row there and its member here (docs/recipes.md "Add a result field").

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "core/lower/time_breakdown.h"

namespace pipescope::sim {

// What was run and the figures it came to: the part that the simulate report (sim/report.h Report, its text and
// JSON) and the run-result record share, declared once here. Their fields are in result_fields() like the others.
struct RunFigures {
  std::string scenario, schedule;
  double iteration_s = 0;           // makespan
  double pipeline_end_s = 0;        // last forward / backward op
  double idle_fraction = 0;         // mean over workers of idle / pipeline end (bubble and exposed communication)
  double idle_ratio = 0;            // mean idle / mean busy before the pipeline end
  double bubble_fraction = 0;       // the pipeline bubble (mean over workers) / iteration time
  double tflops_per_gpu = 0;        // Megatron Eq. 3 F / (T * n)
  double model_tflops_per_gpu = 0;  // without recomputation
  double mfu = 0;                   // model FLOPs / (T * n * the dtype's 16-bit dense peak)
  double tokens_per_s = 0;          // global_batch * seq_len / iteration_s
  // The ints last: RunResult's first member fills the tail padding (checked in tests/test_run_result.cc).
  int gpus = 0, dp = 1, pp = 1, tp = 1, v = 1, m = 0;
  int micro_batch_size = 1, global_batch = 1, seq_len = 0;
};

struct RunResult : RunFigures {
  int slices = 0;                // most token slices of any micro-batch
  std::string slice_tokens;      // micro-batch 0's slice lengths, space-separated
  double peak_memory_bytes = 0;  // the worst rank's modelled peak
  bool oom = false;              // some rank exceeds the device memory
  TimeBreakdown breakdown;       // mean over workers (core/lower/time_breakdown.h)
  // The report as JSON and the trace (write_json, write_trace), when RunOptions asked for them (simulate
  // --compare --json / --trace); empty otherwise.
  std::string report_json, trace_json;
  // How the run went (benchmarks; never part of a deterministic output).
  double wall_s = 0, sim_wall_s = 0, activities = 0, dag_nodes = 0, peak_rss_kb = 0;
};

struct ResultField {
  using Member = std::variant<std::string RunResult::*, int RunResult::*, double RunResult::*, bool RunResult::*,
                              double TimeBreakdown::*>;  // the last: a part of RunResult::breakdown
  const char* name;  // the member's name: the key between processes (the exact value)
  Member member;
  const char* column;  // the tables' CSV column and JSON key; nullptr: carried between processes only
  double per_unit;     // column value = member / per_unit (bytes -> GB: 1e9)
  const char* unit;    // of the column value ("" for counts and names)
  const char* title;   // what the value is, for a table's header or a help text
};

// The communication a run left exposed (tensor-, context-, data-parallel and pipeline p2p) over its iteration time.
double exposed_comm_fraction(const RunResult& r);

// The value a field's member names in r (ResultField::Member's alternatives, for std::visit).
template <class T>
const T& field_ref(const RunResult& r, T RunResult::*m) {
  return r.*m;
}
inline const double& field_ref(const RunResult& r, double TimeBreakdown::*m) { return r.breakdown.*m; }
template <class T>
T& field_ref(RunResult& r, T RunResult::*m) {
  return r.*m;
}
inline double& field_ref(RunResult& r, double TimeBreakdown::*m) { return r.breakdown.*m; }

// Every field of RunResult, in the tables' column order (the run-only fields last).
const std::vector<ResultField>& result_fields();
// The field of a table column; std::logic_error for a column that is not one (a program error).
const ResultField& result_field(const std::string& column);

// The table's columns: the header line, one run's row (CSV-quoted text, %.9g numbers, 1 / 0 flags), the row as a
// JSON object (numbers as numbers), and one field's value in either form.
std::string result_csv_header();
std::string result_csv_row(const RunResult& r);
nlohmann::ordered_json result_json(const RunResult& r);
std::string result_csv_value(const ResultField& f, const RunResult& r);
// The RunFigures fields of result_fields() (in its order) as JSON keys (their columns) with f's values: the simulate
// report's figures (sim/report.cc write_json).
void put_figures(nlohmann::ordered_json& j, const RunFigures& f);
nlohmann::json result_json_value(const ResultField& f, const RunResult& r);
// A text field for a CSV cell: quoted when it holds a comma, a quote or a line break (quotes doubled).
std::string csv_field(const std::string& s);

// The one encoding of a RunResult between processes: every field by name, doubles exactly (JSON).
std::string encode(const RunResult& r);
// Throws std::runtime_error "malformed answer from a simulation process: ..." on text encode did not write.
RunResult decode(const std::string& text);

}  // namespace pipescope::sim
