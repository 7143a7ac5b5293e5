#include "core/work_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/schedule_registry.h"

namespace pipescope {
namespace {

// Measured on this project's default 1F1B family, pp 64..1024 with m = pp (release build): about 300 B and
// 5 us per lowered op, above a fixed ~250 MB for the executable and its libraries. Rounded up.
constexpr double kBytesPerOp = 400;
constexpr double kSecondsPerOp = 6e-6;
constexpr double kBaseBytes = 300e6;
// TeraPipe's planner: measured with `plan --grain 1` on scenarios/terapipe/setting-1.yaml, 19e6 cells in 36 s and
// 480 MB (building the tables is most of it).
constexpr double kBytesPerCell = 32;
constexpr double kSecondsPerCell = 1.5e-6;

bool g_allow_large = false;

std::string g3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

}  // namespace

std::string WorkEstimate::text() const {
  std::string t = g3(ops) + " schedule ops";
  if (planner_cells > 0) t += " and " + g3(planner_cells) + " planner table cells";
  return t + ", about " + g3(seconds) + " s and " + g3(bytes / 1e9) + " GB";
}

void set_allow_large(bool allow) { g_allow_large = allow; }
bool allow_large() { return g_allow_large; }

WorkEstimate estimate_work(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const ScheduleTraits& t = schedule_entry(s.schedule.kind).traits;
  // Per (stage chunk, micro-batch, slice): forward and backward (or I + W), a send and a receive each way.
  const double per_unit = t.split_backward ? 7 : 6;
  const double m = std::max(1, p.global_batch / std::max(1, p.micro_batch_size * p.dp));
  const double k = std::max(1, s.schedule.seq_slices);
  WorkEstimate w;
  w.ops = static_cast<double>(p.dp) * p.pp * p.v * m * k * per_unit * std::max(1.0, std::min<double>(p.tp, 2));
  w.ops += static_cast<double>(p.dp) * p.pp * p.tp * (p.v + 2);               // collectives and optimizer per worker
  if (p.cp > 1) w.ops += static_cast<double>(p.dp) * p.pp * p.v * m * k * 2;  // the K/V ring of every F and B
  // The data-parallel gradient all-reduce as a ring: 2 (dp - 1) steps per member and stage chunk. The simulator
  // folds replicas that occupy whole nodes (sim/engine.cc) and then runs one member's ring; otherwise all dp
  // members' (pp 1, dp 1024 on 8-GPU nodes: 9 s, the same cost per step as a schedule op).
  const int gpn = s.cluster.gpus_per_node;
  const bool folds = gpn > 0 && (static_cast<long long>(p.pp) * p.tp * p.cp) % gpn == 0;
  w.ops += static_cast<double>(p.pp) * p.v * 2.0 * (p.dp - 1) * (folds ? 1.0 : p.dp);
  if (t.slicing == SlicePlan::TeraPipe && s.schedule.slicing == "dp") {
    const double units = s.model.seq_len / 8.0;
    w.planner_cells = units * units / 2;
  }
  w.seconds = w.ops * kSecondsPerOp + w.planner_cells * kSecondsPerCell;
  w.bytes = kBaseBytes + w.ops * kBytesPerOp + w.planner_cells * kBytesPerCell;
  return w;
}

double available_memory_bytes() {
  double avail = 0;
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") {
      avail = kb * 1024;
      break;
    }
  // An address-space limit (ulimit -v) caps what this process may allocate, whatever the machine has free.
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const double as = static_cast<double>(rl.rlim_cur);
    avail = avail > 0 ? std::min(avail, as) : as;
  }
  return avail;
}

void check_work(const Scenario& s, double runs) {
  const WorkEstimate w = estimate_work(s);
  const std::string what =
      s.source + ": the scenario's work estimate: " + w.text() + (runs > 1 ? " per run, " + g3(runs) + " runs" : "");
  const double avail = available_memory_bytes();
  if (avail > 0 && w.bytes > avail)
    throw WorkTooLarge(
        what + "; more than the " + g3(avail / 1e9) +
        " GB of memory available to this process (free memory, ulimit -v; refused even with --allow-large)");
  if (allow_large()) return;
  if (w.ops > kMaxOps || w.planner_cells > kMaxPlannerCells)
    throw WorkTooLarge(what + "; over the limit of " + g3(kMaxOps) + " ops / " + g3(kMaxPlannerCells) +
                       " planner cells per run (docs/limits.md). Reduce parallel.pp / dp / v, the micro-batch count "
                       "(global_batch / (micro_batch_size * dp)) or schedule.seq_slices, or pass --allow-large");
}

void check_run_count(double runs, double seconds_each, const std::string& what) {
  if (allow_large() || runs <= kMaxRuns) return;
  throw WorkTooLarge(what + ": " + g3(runs) + " runs, about " + g3(runs * seconds_each / 3600) +
                     " hours; over the limit of " + g3(kMaxRuns) + " runs (docs/limits.md); pass --allow-large");
}

}  // namespace pipescope
