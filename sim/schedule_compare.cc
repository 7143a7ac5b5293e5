#include "sim/schedule_compare.h"

#include <sstream>
#include <stdexcept>

#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/model/schedule_registry.h"
#include "core/plan/pipeline.h"
#include "core/plan/work_estimate.h"
#include "sim/report.h"

namespace pipescope::sim {

const ScheduleEntry& schedule_named(const std::string& name, const std::string& flag) {
  if (const ScheduleEntry* e = find_schedule(name)) return *e;
  throw std::invalid_argument(flag + ": unknown schedule '" + name + "' (valid: " + schedule_names() + ")");
}

Scenario schedule_variant(const Scenario& base, const ScheduleEntry& e) {
  Scenario s = with_schedule(base, e.kind);
  s.name = base.name + "/" + e.name;
  validate_scenario(s);
  return s;
}

ScheduleComparison compare_schedules(const Scenario& base, const std::vector<std::string>& names, const RunOptions& o,
                                     const std::function<void(const std::string&)>& warn,
                                     const std::function<void(const Scenario&)>& started) {
  ScheduleComparison c;
  for (const auto& name : names) {
    const ScheduleEntry& e = schedule_named(name, "--compare");
    if (e.traits.sliced() && !e.traits.from_file && base.schedule.seq_slices == 1)  // a file has its own slices
      warn(std::string(e.name) +
           " with one slice per micro-batch (schedule.seq_slices = 1) runs as its unsliced schedule; set "
           "schedule.seq_slices (k) in the scenario to compare slicing");
    c.variants.push_back(schedule_variant(base, e));
  }
  for (const auto& s : c.variants) {  // refused here (bad input), not as a failed row
    check_work(s);
    make_schedule(s);  // a variant the scenario cannot give (slicing, layout)
  }
  for (const auto& s : c.variants) {
    if (started) started(s);
    RunOutcome v;
    try {
      v.result = run_isolated(s, o);
    } catch (const std::exception& e) {
      v.error = e.what();
    }
    c.outcomes.push_back(v);
  }
  return c;
}

void print_comparison(std::FILE* out, const Scenario& base, const ScheduleComparison& c) {
  std::fprintf(out, "scenario %s (%s): %d GPUs, dp %d, pp %d, tp %d, global batch %d\n", base.name.c_str(),
               base.source.c_str(), base.cluster.total_gpus(), base.parallel.dp, base.parallel.pp, base.parallel.tp,
               base.parallel.global_batch);
  std::fprintf(out, "%-14s %3s %14s %14s %10s %10s %10s %12s %12s %s\n", "schedule", "v", "iteration_s", "pipeline_s",
               "bubble", "exp_comm", "idle", "TFLOP/s/GPU", "peak_mem_GB", "");
  for (std::size_t i = 0; i < c.outcomes.size(); i++) {
    const char* name = to_string(c.variants[i].schedule.kind);
    if (!c.outcomes[i].ok()) {
      std::fprintf(out, "%-14s error: %s\n", name, c.outcomes[i].error.c_str());
      continue;
    }
    const RunResult& v = c.outcomes[i].result;
    std::fprintf(out, "%-14s %3d %14.9f %14.9f %10.4f %10.4f %10.4f %12.2f %12.2f %s\n", name, v.v, v.iteration_s,
                 v.pipeline_end_s, v.bubble_fraction, exposed_comm_fraction(v), v.idle_fraction, v.tflops_per_gpu,
                 v.peak_memory_bytes / 1e9, v.oom ? "OOM" : "");
  }
  std::fprintf(out,
               "bubble = pipeline bubble / iteration; exp_comm = exposed communication / iteration; idle = idle / "
               "pipeline end (both); v = chunks per rank\n");
}

std::string comparison_json(const ScheduleComparison& c) {
  std::vector<std::string> reports;
  std::vector<std::pair<std::string, std::string>> failed;
  for (std::size_t i = 0; i < c.outcomes.size(); i++) {
    const char* name = to_string(c.variants[i].schedule.kind);
    if (c.outcomes[i].ok())
      reports.push_back(c.outcomes[i].result.report_json);
    else
      failed.emplace_back(name, c.outcomes[i].error);
  }
  std::ostringstream os;
  write_compare_json(os, reports, failed);
  return os.str();
}

std::string comparison_trace(const ScheduleComparison& c) {
  std::vector<std::pair<std::string, std::string>> traces;
  for (std::size_t i = 0; i < c.outcomes.size(); i++)
    if (c.outcomes[i].ok())
      traces.emplace_back(to_string(c.variants[i].schedule.kind), c.outcomes[i].result.trace_json);
  std::ostringstream os;
  write_merged_traces(os, traces);
  return os.str();
}

}  // namespace pipescope::sim
