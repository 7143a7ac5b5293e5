#include "core/plan/work_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/ir/schedule.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"

namespace pipescope {
namespace {

// Per lowered op (every replica is lowered and stored) and per simulated op (a folded run simulates one replica's:
// sim/replica_fold.h). Measured 2026-12-07 on `pipescope simulate` of eleven shipped scenarios and the 1F1B family
// pp 64 / 256 / 512 with m = pp (bench/README.md "The work estimate against the runs it estimates"): 1-3 us and
// 150-240 B per op unfolded, about 0.5 us per op lowered but not simulated (the 529.6B and 1T rows). Rounded up.
constexpr double kBytesPerOp = 250;
constexpr double kSecondsPerOp = 0.5e-6;
constexpr double kSecondsPerSimulatedOp = 2e-6;
// TeraPipe's planner: measured with `plan --grain 1` on scenarios/terapipe/setting-1.yaml, 19e6 cells in 36 s and
// 480 MB (building the tables is most of it).
constexpr double kBytesPerCell = 32;
constexpr double kSecondsPerCell = 1.5e-6;
// A collective member pair: measured on `dp` x 1-stage runs of a 64-wide model that do not fold (pp 1 on 8-GPU
// nodes), 2026-12-07: dp 4096 0.43 s and 132 MB, 16384 4.0 s and 1.28 GB, 65536 95 s and 19 GB (15-22 ns and
// 4.4-4.8 B per pair). Rounded up.
constexpr double kBytesPerPair = 6;
constexpr double kSecondsPerPair = 25e-9;

bool g_allow_large = false;

}  // namespace

std::string estimate_figure(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

double WorkEstimate::command_seconds() const { return kStartSeconds + seconds; }

std::string WorkEstimate::text() const {
  std::string t = estimate_figure(ops) + " schedule ops";
  if (planner_cells > 0) t += " and " + estimate_figure(planner_cells) + " planner table cells";
  if (collective_pairs > 0) t += " and " + estimate_figure(collective_pairs) + " collective member pairs";
  return t + ", about " + estimate_figure(command_seconds()) + " s and " + estimate_figure(bytes / 1e9) + " GB";
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
  w.pipeline_ops = static_cast<double>(p.pp) * p.v * m * k * per_unit;
  w.ops = p.dp * w.pipeline_ops * std::max(1.0, std::min<double>(p.tp, 2));
  w.ops += static_cast<double>(p.dp) * p.pp * p.tp * (p.v + 2);               // collectives and optimizer per worker
  if (p.cp > 1) w.ops += static_cast<double>(p.dp) * p.pp * p.v * m * k * 2;  // the K/V ring of every F and B
  if (s.model.moe()) w.ops += static_cast<double>(p.dp) * p.pp * p.v * m * k * 2;  // the all-to-alls of every F and B
  // The data-parallel gradient all-reduce. With explicit collectives (sim.collectives ring) its ring: 2 (dp - 1)
  // steps per member and stage chunk (aggregate: a delay and one comm per member; the NCCL model of auto and analytic:
  // one delay per member, counted above). The simulator folds replicas that occupy whole nodes (sim/replica_fold.cc)
  // and then runs one member's ring; otherwise all dp members', whose collectives also wait on each other: dp^2
  // member pairs per stage chunk.
  const int gpn = s.cluster.gpus_per_node;
  // Expert groups couple replicas in their own rings: an MoE run is never folded.
  const bool folds = !s.model.moe() && gpn > 0 && (static_cast<long long>(p.pp) * p.tp * p.cp) % gpn == 0;
  const std::string& coll = s.sim.collectives;
  const double steps = coll == "ring" ? 2.0 * (p.dp - 1) : coll == "aggregate" ? 2.0 : 0.0;
  w.ops += static_cast<double>(p.pp) * p.v * steps * (folds ? 1.0 : p.dp);
  if (!folds && p.dp > 1) w.collective_pairs = static_cast<double>(p.pp) * p.v * p.dp * p.dp;
  if (t.slicing == SlicePlan::TeraPipe && s.schedule.slicing == "dp") {
    const double units = s.model.seq_len / 8.0;
    w.planner_cells = units * units / 2;
  }
  w.simulated_ops = folds && p.dp > 1 ? w.ops / p.dp : w.ops;
  w.seconds = w.ops * kSecondsPerOp + w.simulated_ops * kSecondsPerSimulatedOp + w.planner_cells * kSecondsPerCell +
              w.collective_pairs * kSecondsPerPair;
  w.bytes = kBaseBytes + w.ops * kBytesPerOp + w.planner_cells * kBytesPerCell + w.collective_pairs * kBytesPerPair;
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
  const std::string what = s.source + ": the scenario's work estimate: " + w.text() +
                           (runs > 1 ? " per run, " + estimate_figure(runs) + " runs" : "");
  const double avail = available_memory_bytes();
  if (avail > 0 && w.bytes > avail)
    throw WorkTooLarge(
        what + "; more than the " + estimate_figure(avail / 1e9) +
        " GB of memory available to this process (free memory, ulimit -v; refused even with --allow-large)");
  if (allow_large()) return;
  if (w.ops > kMaxOps || w.planner_cells > kMaxPlannerCells || w.collective_pairs > kMaxCollectivePairs)
    throw WorkTooLarge(what + "; over the limit of " + estimate_figure(kMaxOps) + " ops / " +
                       estimate_figure(kMaxPlannerCells) + " planner cells / " + estimate_figure(kMaxCollectivePairs) +
                       " collective member pairs per run (docs/limits.md). Reduce parallel.pp / dp / v, the "
                       "micro-batch count (global_batch / (micro_batch_size * dp)) or schedule.seq_slices, or pass "
                       "--allow-large");
}

namespace {

constexpr double kSecondsPerModelOp = 3e-7;

std::string duration_text(double s) {
  if (s < 120) return estimate_figure(s) + " s";
  if (s < 2 * 3600) return estimate_figure(s / 60) + " minutes";
  return estimate_figure(s / 3600) + " hours";
}

}  // namespace

std::string GridEstimate::text() const {
  return estimate_figure(points) + " " + unit + ", about " + duration_text(seconds) +
         (bytes > kBaseBytes ? " and " + estimate_figure(bytes / 1e9) + " GB" : "");
}

GridEstimate estimate_sweep(double points, double seconds_each, int jobs) {
  GridEstimate g;
  g.what = "sweep";
  g.points = points;
  g.max_points = kMaxRuns;
  g.seconds = points * (kSecondsPerRun + seconds_each) / std::max(1, jobs);
  g.hint = "vary fewer keys or values";
  return g;
}

GridEstimate estimate_sweep(const std::vector<Scenario>& runs, int jobs) {
  double seconds = 0;
  std::vector<std::pair<double, std::size_t>> by_bytes;  // (estimated peak, run)
  for (std::size_t i = 0; i < runs.size(); i++) {
    const WorkEstimate w = estimate_work(runs[i]);
    seconds += kSecondsPerRun + w.seconds;
    by_bytes.emplace_back(w.bytes, i);
  }
  GridEstimate g = estimate_sweep(static_cast<double>(runs.size()), 0, jobs);
  g.seconds = seconds / std::max(1, jobs);
  // Up to `jobs` runs at once, each in a process of its own: the largest `jobs` of them together.
  std::sort(by_bytes.begin(), by_bytes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; k < by_bytes.size() && k < static_cast<std::size_t>(std::max(1, jobs)); k++)
    g.bytes += by_bytes[k].first;
  if (!by_bytes.empty()) g.largest = runs[by_bytes.front().second].name;
  if (jobs > 1) g.hint = "vary fewer keys or values, or run fewer at once (-j)";
  return g;
}

GridEstimate estimate_plan(const Scenario& s, int grain, int tables, bool simulate) {
  GridEstimate g;
  g.what = "plan";
  g.unit = "slice-time table cells";
  g.max_points = kMaxPlannerCells;
  g.hint = simulate ? "raise --grain, lower --max-micro-batch or leave out --simulate"
                    : "raise --grain or lower --max-micro-batch";
  const double units = static_cast<double>(s.model.seq_len) / std::max(1, grain);
  g.points = std::max(1, tables) * units * units / 2;
  g.seconds = g.points * kSecondsPerCell;
  g.bytes = kBaseBytes + g.points * kBytesPerCell;
  if (simulate) {  // the uniform slicings 1, 2, 4, ... while slices hold >= 8 tokens, and the DP's scheme (<= L / 8)
    Scenario t = s;
    t.schedule.slice_tokens.clear();
    for (int k = 1; k <= s.model.seq_len; k *= 2) {
      t.schedule.seq_slices = k;
      const WorkEstimate w = estimate_work(t);
      g.seconds += 2 * (kSecondsPerRun + w.seconds);  // this slicing, and at most one DP scheme as fine
      if (w.ops > g.largest_ops) {
        g.largest_ops = w.ops;
        g.largest = std::to_string(k) + " slices: " + w.text();
        g.bytes = std::max(g.bytes, w.bytes);
      }
      if (s.model.seq_len / k < 8) break;
    }
  }
  return g;
}

GridEstimate estimate_max_batch(const Scenario& s, double limit_bytes) {
  GridEstimate g;
  g.what = "plan --max-batch";
  g.unit = "sequences per replica";
  g.hint = "lower --memory-GB";
  const int p = s.parallel.pp, L = s.model.seq_len;
  if (s.parallel.v != 1 || p < 1) return g;  // max_batch_gpipe's own error
  const double limit = limit_bytes > 0 ? limit_bytes : s.cluster.device.memory_bytes;
  auto worst = [&](int batch) {
    double w = 0;
    for (const RankMemory& r : memory_report(s, make_gpipe(p, uniform_microbatches(batch, 1, L, 1), L)).ranks)
      w = std::max(w, r.peak_bytes);
    return w;
  };
  const double one = worst(1), per_sequence = worst(2) - one;
  if (one > limit) return g;
  g.points = per_sequence > 0 ? std::floor((limit - one) / per_sequence) + 1 : 1e300;
  const double ops = 2.0 * p * 2 * std::min(g.points, 1e15);  // the largest schedule: F and B of 2 B sequences
  g.largest_ops = ops;
  g.largest = "a GPipe schedule of " + estimate_figure(2 * g.points) + " sequences on " + std::to_string(p) + " stages";
  g.seconds = ops * (2 + std::log2(std::max(2.0, g.points))) * kSecondsPerModelOp;
  g.bytes = kBaseBytes + ops * kBytesPerModelOp;
  return g;
}

void check_grid(const GridEstimate& g, double available_bytes) {
  const std::string what = g.what + ": work estimate: " + g.text();
  const double avail = available_bytes < 0 ? available_memory_bytes() : available_bytes;
  if (avail > 0 && g.bytes > avail)
    throw WorkTooLarge(what + (g.largest.empty() ? "" : " (the largest point: " + g.largest + ")") +
                       "; more than the " + estimate_figure(avail / 1e9) +
                       " GB of memory available to this process (free memory, ulimit -v; refused even with "
                       "--allow-large). " +
                       std::string(1, static_cast<char>(std::toupper(g.hint[0]))) + g.hint.substr(1));
  if (allow_large()) return;
  std::string over;
  if (g.max_points > 0 && g.points > g.max_points) over = estimate_figure(g.max_points) + " " + g.unit;
  if (g.seconds > kMaxGridSeconds)
    over += (over.empty() ? "" : " and ") + estimate_figure(kMaxGridSeconds / 3600) + " hour";
  if (g.largest_ops > kMaxOps)
    over += (over.empty() ? "" : " and ") + estimate_figure(kMaxOps) +
            " schedule ops per run (the largest: " + g.largest + ")";
  if (over.empty()) return;
  throw WorkTooLarge(what + "; over the limit of " + over + " (docs/limits.md). " +
                     std::string(1, static_cast<char>(std::toupper(g.hint[0]))) + g.hint.substr(1) +
                     ", or pass --allow-large");
}

}  // namespace pipescope
