#include "sim/schedule_compare.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

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

namespace {

// SIGINT / SIGTERM / SIGHUP while a scratch folder exists: its files and the folder are removed (unlink and rmdir
// are async-signal-safe; the paths were built before the handler went in), then the default action ends the process
// with its 128 + N status, so a stopped comparison leaves nothing in TMPDIR.
const TraceScratch* g_scratch = nullptr;
struct sigaction g_old[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_scratch_and_die(int sig) {
  if (const TraceScratch* t = g_scratch) {
    for (const std::string& f : t->files) unlink(f.c_str());
    rmdir(t->dir.c_str());
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void guard(const TraceScratch* t) {
  if (t != nullptr) {
    g_scratch = t;
    struct sigaction sa {};
    sa.sa_handler = remove_scratch_and_die;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < 3; k++) sigaction(kSignals[k], &sa, &g_old[k]);
  } else {
    for (int k = 0; k < 3; k++) sigaction(kSignals[k], &g_old[k], nullptr);
    g_scratch = nullptr;
  }
}

}  // namespace

TraceScratch::~TraceScratch() {
  if (g_scratch == this) guard(nullptr);
  for (const std::string& f : files) unlink(f.c_str());
  if (!dir.empty()) rmdir(dir.c_str());
}

namespace {

std::shared_ptr<TraceScratch> make_trace_scratch(std::size_t n) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/pipescope-compare-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (mkdtemp(name.data()) == nullptr)
    throw std::runtime_error("--trace: cannot make a temporary folder " + tmpl + ": " + std::strerror(errno));
  auto t = std::make_shared<TraceScratch>();
  t->dir = name.data();
  for (std::size_t i = 0; i < n; i++) t->files.push_back(t->dir + "/variant-" + std::to_string(i) + ".json");
  guard(t.get());
  return t;
}

}  // namespace

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
  GridEstimate all = estimate_sweep(c.variants, 1);  // the list, one after the other
  all.what = "simulate --compare";
  all.hint = "compare fewer schedules";
  check_grid(all);
  // Each variant's trace goes to a file of its own, laid out for the merged file, so that the parent never holds
  // them all (ten variants of TeraPipe setting 9: 1.6 GB and 16 s in the parent before, 59 MB and 2.4 s after).
  if (o.trace_json) c.traces = make_trace_scratch(c.variants.size());
  for (std::size_t i = 0; i < c.variants.size(); i++) {
    const Scenario& s = c.variants[i];
    if (started) started(s);
    RunOptions vo = o;
    if (c.traces) {
      vo.trace_file = c.traces->files[i];
      vo.trace_layout = compare_trace_layout(i, base.cluster.nodes, to_string(s.schedule.kind));
    }
    RunOutcome v;
    try {
      v.result = run_isolated(s, vo);
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

void write_comparison_trace(const ScheduleComparison& c, AtomicFileWriter& out) {
  std::vector<std::pair<std::string, std::string>> traces;
  for (std::size_t i = 0; i < c.outcomes.size(); i++)
    if (c.outcomes[i].ok() && c.traces) traces.emplace_back(to_string(c.variants[i].schedule.kind), c.traces->files[i]);
  merge_trace_files(out, traces);
}

}  // namespace pipescope::sim
