#include "sim/run_result.h"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace pipescope::sim {

const std::vector<ResultField>& result_fields() {
  using R = RunResult;
  static const std::vector<ResultField> fields = [] {
    std::vector<ResultField> f = {
        {"scenario", &R::scenario, "scenario", 1, "", "scenario name"},
        {"schedule", &R::schedule, "schedule", 1, "", "schedule"},
        {"gpus", &R::gpus, "gpus", 1, "", "GPUs"},
        {"dp", &R::dp, "dp", 1, "", "data-parallel replicas"},
        {"pp", &R::pp, "pp", 1, "", "pipeline stages"},
        {"tp", &R::tp, "tp", 1, "", "tensor-parallel degree"},
        {"v", &R::v, "v", 1, "", "model chunks per rank"},
        {"m", &R::m, "m", 1, "", "micro-batches per replica"},
        {"micro_batch_size", &R::micro_batch_size, "micro_batch_size", 1, "sequences", "micro-batch size"},
        {"global_batch", &R::global_batch, "global_batch", 1, "sequences", "global batch"},
        {"seq_len", &R::seq_len, "seq_len", 1, "tokens", "sequence length"},
        {"slices", &R::slices, "slices", 1, "", "most token slices of a micro-batch"},
        {"slice_tokens", &R::slice_tokens, "slice_tokens", 1, "tokens", "micro-batch 0's slice lengths"},
        {"iteration_s", &R::iteration_s, "iteration_s", 1, "s", "iteration time"},
        {"pipeline_end_s", &R::pipeline_end_s, "pipeline_end_s", 1, "s", "end of the last forward / backward op"},
        {"bubble_fraction", &R::bubble_fraction, "bubble_fraction", 1, "",
         "pipeline bubble / iteration time (mean over workers)"},
        {"idle_fraction", &R::idle_fraction, "idle_fraction", 1, "",
         "mean worker idle / pipeline end (bubble and exposed communication)"},
        {"idle_ratio", &R::idle_ratio, "idle_ratio", 1, "", "mean worker idle / busy before the pipeline end"},
        {"tflops_per_gpu", &R::tflops_per_gpu, "tflops_per_gpu", 1, "TFLOP/s", "throughput per GPU"},
        {"model_tflops_per_gpu", &R::model_tflops_per_gpu, "model_tflops_per_gpu", 1, "TFLOP/s",
         "model FLOPs per GPU (causal attention, no recomputation: Megatron-Core's count)"},
        {"mfu", &R::mfu, "mfu", 1, "", "model FLOPs utilisation (of the 16-bit dense peak)"},
        {"tokens_per_s", &R::tokens_per_s, "tokens_per_s", 1, "tokens/s", "training throughput"},
        {"peak_memory_bytes", &R::peak_memory_bytes, "peak_memory_GB", 1e9, "GB", "worst rank's memory peak"},
        {"oom", &R::oom, "oom", 1, "", "some rank exceeds the device memory"},
    };
    for (const TimePart& p : time_parts()) f.push_back({p.key, p.member, p.key, 1, "s", p.title});
    const std::vector<ResultField> run_only = {
        {"report_json", &R::report_json, nullptr, 1, "", "the report as JSON (simulate --compare --json)"},
        {"trace_json", &R::trace_json, nullptr, 1, "", "the trace (simulate --compare --trace)"},
        {"wall_s", &R::wall_s, nullptr, 1, "s", "the run's wall time"},
        {"sim_wall_s", &R::sim_wall_s, nullptr, 1, "s", "the engine's wall time"},
        {"activities", &R::activities, nullptr, 1, "", "SimGrid activities"},
        {"dag_nodes", &R::dag_nodes, nullptr, 1, "", "DAG nodes"},
        {"peak_rss_kb", &R::peak_rss_kb, nullptr, 1, "kB", "the child's peak resident memory"},
    };
    f.insert(f.end(), run_only.begin(), run_only.end());
    return f;
  }();
  return fields;
}

double exposed_comm_fraction(const RunResult& r) {
  const TimeBreakdown& b = r.breakdown;
  return r.iteration_s > 0 ? (b.tp_comm_s + b.cp_comm_s + b.ep_comm_s + b.dp_comm_s + b.p2p_s) / r.iteration_s : 0.0;
}

const ResultField& result_field(const std::string& column) {
  for (const ResultField& f : result_fields())
    if (f.column && column == f.column) return f;
  throw std::logic_error("result_field: no result column '" + column + "'");
}

namespace {

std::string num(double x) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

// The field's value as the tables show it (in its unit).
template <class Json>
Json column_json(const ResultField& f, const RunResult& r) {
  return std::visit(
      [&](auto m) -> Json {
        using T = std::decay_t<decltype(field_ref(r, m))>;
        if constexpr (std::is_same_v<T, double>) return field_ref(r, m) / f.per_unit;
        return field_ref(r, m);
      },
      f.member);
}

}  // namespace

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string result_csv_value(const ResultField& f, const RunResult& r) {
  return std::visit(
      [&](auto m) -> std::string {
        using T = std::decay_t<decltype(field_ref(r, m))>;
        if constexpr (std::is_same_v<T, std::string>) return csv_field(field_ref(r, m));
        if constexpr (std::is_same_v<T, int>) return std::to_string(field_ref(r, m));
        if constexpr (std::is_same_v<T, double>) return num(field_ref(r, m) / f.per_unit);
        if constexpr (std::is_same_v<T, bool>) return field_ref(r, m) ? "1" : "0";
      },
      f.member);
}

nlohmann::json result_json_value(const ResultField& f, const RunResult& r) { return column_json<nlohmann::json>(f, r); }

std::string result_csv_header() {
  std::string h;
  for (const ResultField& f : result_fields())
    if (f.column) h += (h.empty() ? "" : ",") + std::string(f.column);
  return h;
}

std::string result_csv_row(const RunResult& r) {
  std::string row;
  bool first = true;
  for (const ResultField& f : result_fields())
    if (f.column) row += (first ? "" : ",") + result_csv_value(f, r), first = false;
  return row;
}

nlohmann::ordered_json result_json(const RunResult& r) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const ResultField& f : result_fields())
    if (f.column) j[f.column] = column_json<nlohmann::ordered_json>(f, r);
  return j;
}

namespace {

// Which fields of result_fields() are RunFigures members: those that assigning the RunFigures part of a record copies
// (every field of `probe` set off its default, copied into a default record), so the list is not spelled twice.
const std::vector<bool>& figure_fields() {
  static const std::vector<bool> is = [] {
    RunResult probe, copy;
    for (const ResultField& f : result_fields())
      std::visit(
          [&](auto m) {
            auto& x = field_ref(probe, m);
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::string>) x = "set";
            if constexpr (std::is_same_v<T, bool>) x = !x;
            if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) x = x + 7;
          },
          f.member);
    static_cast<RunFigures&>(copy) = static_cast<const RunFigures&>(probe);
    std::vector<bool> out;
    for (const ResultField& f : result_fields())
      std::visit([&](auto m) { out.push_back(field_ref(copy, m) == field_ref(probe, m)); }, f.member);
    return out;
  }();
  return is;
}

}  // namespace

void put_figures(nlohmann::ordered_json& j, const RunFigures& f) {
  RunResult r;
  static_cast<RunFigures&>(r) = f;
  const std::vector<ResultField>& fields = result_fields();
  for (std::size_t i = 0; i < fields.size(); i++)
    if (fields[i].column && figure_fields()[i])
      std::visit([&](auto m) { j[fields[i].column] = field_ref(r, m); }, fields[i].member);
}

std::string encode(const RunResult& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const ResultField& f : result_fields()) std::visit([&](auto m) { j[f.name] = field_ref(r, m); }, f.member);
  return j.dump();
}

RunResult decode(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    RunResult r;
    for (const ResultField& f : result_fields())
      std::visit([&](auto m) { j.at(f.name).get_to(field_ref(r, m)); }, f.member);
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed answer from a simulation process: ") + e.what());
  }
}

}  // namespace pipescope::sim
