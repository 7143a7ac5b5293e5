#include "sim/search_run.h"

#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <stdexcept>

#include "core/memory/memory_model.h"
#include "core/model/schedule_registry.h"
#include "core/plan/pipeline.h"
#include "core/plan/search_bound.h"
#include "core/plan/search_estimate.h"
#include "core/plan/work_estimate.h"
#include "sim/child_process.h"
#include "sim/device_fidelity.h"
#include "sim/plot.h"

namespace pipescope::sim {
namespace {

using Clock = std::chrono::steady_clock;

// Ctrl-C: the first one stops the search where it is (no new estimate or simulation starts; those running finish)
// and the best found so far is reported; a second one ends the process. Forked workers inherit the handler, so
// they finish their share instead of dying.
std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  if (g_interrupted.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

bool interrupted() { return g_interrupted.load(); }

// Installs on_sigint for the search's lifetime (not under MPI: mpirun handles Ctrl-C for its ranks).
struct SigintGuard {
  explicit SigintGuard(bool on) : on_(on) {
    if (!on_) return;
    g_interrupted = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintGuard() {
    if (on_) sigaction(SIGINT, &old_, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;
  bool on_;
  struct sigaction old_ {};
};

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void progress_line(bool on, const char* stage, std::size_t done, std::size_t total, Clock::time_point t0) {
  if (!on) return;
  const double el = since(t0);
  const double left = done > 0 ? el / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  std::fprintf(stderr, "search: %s %zu/%zu, %.1f s elapsed, about %.1f s left\n", stage, done, total, el, left);
}

// Stage 2 over candidates idx[lo, hi): in process (jobs 1) or in `jobs` children each taking a share; the estimates
// are the same either way. Each is {"s": seconds} or {"error": why} (its DAG does not build).
nlohmann::json estimate_range(const std::vector<Candidate>& c, const std::vector<std::size_t>& idx, std::size_t lo,
                              std::size_t hi, int jobs, bool progress) {
  const auto t0 = Clock::now();
  const std::size_t n = hi - lo;
  Stage2Estimator estimator;  // each worker process has its own copy (its structure cache)
  auto one = [&](std::size_t i) {
    try {
      return nlohmann::json{{"s", estimator.estimate(c[idx[i]].scenario)}};
    } catch (const std::exception& e) {
      return nlohmann::json{{"error", e.what()}};
    }
  };
  nlohmann::json est = nlohmann::json::array();
  if (jobs <= 1 || n < 2) {
    for (std::size_t i = lo; i < hi; i++) {
      est.push_back(interrupted() ? nlohmann::json{{"error", kNotRun}} : one(i));
      if ((i - lo) % 256 == 255) progress_line(progress, "stage 2 estimated", i - lo + 1, n, t0);
    }
    return est;
  }
  const std::size_t chunks = std::min(n, static_cast<std::size_t>(jobs) * 8);
  auto range = [&](std::size_t k) { return std::make_pair(lo + n * k / chunks, lo + n * (k + 1) / chunks); };
  std::size_t done = 0;
  const auto answers = run_children(
      chunks,
      [&](std::size_t k) {
        nlohmann::json a = nlohmann::json::array();
        for (std::size_t i = range(k).first; i < range(k).second; i++) a.push_back(one(i));
        return a.dump();
      },
      jobs,
      [&](std::size_t k, const ChildAnswer&) {
        done += range(k).second - range(k).first;
        progress_line(progress, "stage 2 estimated", done, n, t0);
      },
      {}, interrupted);
  for (std::size_t k = 0; k < chunks; k++) {
    if (!answers[k].ok && answers[k].text == kNotRun) {
      for (std::size_t i = range(k).first; i < range(k).second; i++) est.push_back({{"error", kNotRun}});
      continue;
    }
    if (!answers[k].ok) throw std::runtime_error("search: a stage-2 worker failed: " + answers[k].text);
    for (auto& x : nlohmann::json::parse(answers[k].text)) est.push_back(std::move(x));
  }
  return est;
}

// This rank's share [lo, hi) of n items, and the concatenation of every rank's JSON array in rank order.
std::pair<std::size_t, std::size_t> share(std::size_t n, const MpiGroup* g) {
  if (!g) return {0, n};
  const auto r = static_cast<std::size_t>(g->rank()), s = static_cast<std::size_t>(g->size());
  return {n * r / s, n * (r + 1) / s};
}

nlohmann::json gather(const nlohmann::json& mine, MpiGroup* g) {
  if (!g) return mine;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& part : g->allgather(mine.dump()))
    for (auto& x : nlohmann::json::parse(part)) all.push_back(std::move(x));
  return all;
}

// Stage 2 over every candidate: rank_stage2 (core/plan/search_bound.h) picks the candidates to estimate, in rounds,
// each spread over this process's share (all of them when alone) and gathered; the rest are bounded out. Failures
// are dropped with their reason. `estimated`: the candidates estimated (the others were bounded out).
void estimate_all(std::vector<Candidate>& c, const SearchOptions& o, std::map<std::string, std::size_t>& rejected,
                  std::size_t& estimated) {
  order_by_structure(c);  // each worker builds a DAG once per structure; the ranking does not depend on the order
  const std::vector<Stage2Value> v = rank_stage2(c, o.keep, [&](const std::vector<std::size_t>& idx) {
    const auto [lo, hi] = share(idx.size(), o.group);
    const nlohmann::json est = gather(estimate_range(c, idx, lo, hi, o.jobs, o.progress), o.group);
    if (est.size() != idx.size()) throw std::runtime_error("search: stage 2 lost estimates");
    std::vector<Stage2Value> out(idx.size());
    for (std::size_t j = 0; j < idx.size(); j++) {
      if (!est[j].contains("error"))
        out[j] = Stage2Value{Stage2Value::How::Estimated, est[j]["s"].get<double>(), {}};
      else if (est[j]["error"].get<std::string>() == kNotRun)
        out[j] = Stage2Value{Stage2Value::How::NotRun, 0, {}};
      else
        out[j] = Stage2Value{Stage2Value::How::Failed, 0, est[j]["error"].get<std::string>()};
    }
    return out;
  });
  std::vector<Candidate> kept;
  estimated = 0;
  for (std::size_t i = 0; i < c.size(); i++) {
    switch (v[i].how) {
      case Stage2Value::How::Estimated:
        estimated++;
        break;
      case Stage2Value::How::Bounded:
        // Ctrl-C: what is reported is what was estimated before it (a bound ranks only against a whole stage 2).
        if (interrupted()) continue;
        break;
      case Stage2Value::How::Failed:
        rejected["estimate: " + v[i].error]++;
        continue;
      case Stage2Value::How::NotRun:
        continue;  // Ctrl-C: not estimated, not a rejection
    }
    c[i].estimate_s = v[i].s;
    kept.push_back(std::move(c[i]));
  }
  c = std::move(kept);
}

// Stage 3's rows per MPI rank (each rank's in row order; all of them on one rank when alone): the largest
// simulation first to the rank with the least work so far, work being the simulator's op count
// (core/plan/work_estimate.h). The rows are in estimate order and neighbours tend to be alike (the best ones often the
// largest DAGs), so contiguous shares left one rank with the heaviest simulations (bench/README.md, the 175B search).
std::vector<std::vector<std::size_t>> stage3_shares(const std::vector<SearchRow>& rows, std::size_t ranks) {
  std::vector<double> work(rows.size(), 0.0);
  for (std::size_t i = 0; i < rows.size(); i++) {
    try {
      work[i] = estimate_work(rows[i].scenario).ops;
    } catch (const std::exception&) {
      // Its simulation reports why; as no work here.
    }
  }
  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return work[a] > work[b]; });
  std::vector<std::vector<std::size_t>> rows_of(ranks);
  std::vector<double> load(ranks, 0.0);
  for (std::size_t i : order) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    rows_of[r].push_back(i);
    load[r] += work[i];
  }
  for (auto& x : rows_of) std::sort(x.begin(), x.end());
  return rows_of;
}

bool same_config(const Scenario& a, const Scenario& b) {
  const ParallelSpec &p = a.parallel, &q = b.parallel;
  const ScheduleSpec &s = a.schedule, &t = b.schedule;
  return p.dp == q.dp && p.pp == q.pp && p.tp == q.tp && p.cp == q.cp && p.cp_comm_type == q.cp_comm_type &&
         p.cp_a2a == q.cp_a2a && p.v == q.v && p.micro_batch_size == q.micro_batch_size && p.ep == q.ep &&
         p.etp == q.etp && p.stage_layers == q.stage_layers && s.kind == t.kind && s.seq_slices == t.seq_slices &&
         s.slicing == t.slicing && s.slice_tokens == t.slice_tokens && s.recompute == t.recompute && s.file == t.file &&
         a.training.distributed_optimizer == b.training.distributed_optimizer && a.training.fsdp == b.training.fsdp &&
         a.training.overlap_param_gather == b.training.overlap_param_gather;
}

void mark_pareto(std::vector<SearchRow>& rows) {
  for (auto& r : rows) {
    if (!r.error.empty()) continue;
    r.pareto = true;
    for (const auto& o : rows) {
      if (&o == &r || !o.error.empty()) continue;
      const bool ge =
          o.result.tokens_per_s >= r.result.tokens_per_s && o.result.peak_memory_bytes <= r.result.peak_memory_bytes;
      const bool gt =
          o.result.tokens_per_s > r.result.tokens_per_s || o.result.peak_memory_bytes < r.result.peak_memory_bytes;
      if (ge && gt) r.pareto = false;
    }
  }
}

std::string format_num(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// The simulated rows within `band` of the best throughput first, least peak memory first (then label); the others
// after them as they were (best throughput first). Failed rows stay last.
void order_ties(std::vector<SearchRow>& rows, double band) {
  if (rows.empty() || !rows.front().error.empty() || !(band > 0)) return;
  const double floor = rows.front().result.tokens_per_s * (1 - band);
  auto end = rows.begin();
  while (end != rows.end() && end->error.empty() && end->result.tokens_per_s >= floor) end->tied = true, ++end;
  if (end - rows.begin() < 2) {
    rows.front().tied = false;  // a band of one row says nothing
    return;
  }
  std::stable_sort(rows.begin(), end, [](const SearchRow& a, const SearchRow& b) {
    if (a.result.peak_memory_bytes != b.result.peak_memory_bytes)
      return a.result.peak_memory_bytes < b.result.peak_memory_bytes;
    return a.label < b.label;
  });
}

}  // namespace

double search_tie_band(const DeviceSpec& d, std::string& basis) {
  const std::vector<DeviceFidelity> sets = device_fidelity(d);
  const DeviceFidelity* best = nullptr;
  for (const DeviceFidelity& f : sets)
    if (best == nullptr || f.mape < best->mape) best = &f;
  if (best == nullptr) {
    basis = "no measured set checks " + d.name + "'s description: 5%";
    return 0.05;
  }
  basis = "the smallest error of " + shipped_device(d) + "'s development sets (" + best->set + ", MAPE " +
          format_num("%.1f%%", 100 * best->mape) + ", pipescope fidelity)";
  return best->mape;
}

std::string why_text(const RunResult& r) {
  const double total = r.breakdown.total_s();
  std::vector<std::pair<double, const TimePart*>> parts;
  for (const TimePart& p : time_parts()) {
    const double x = r.breakdown.*p.member;
    if (p.member == &TimeBreakdown::forward_s || p.member == &TimeBreakdown::backward_s) continue;
    if (total > 0 && x >= 0.01 * total) parts.emplace_back(x, &p);
  }
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (std::size_t i = 0; i < parts.size() && i < 3; i++)
    out += (i ? ", " : "") + std::string(parts[i].second->short_title) +
           format_num(" %.1f%%", 100 * parts[i].first / total);
  return out.empty() ? "compute" : out;
}

SearchResult run_search(const Scenario& base, const SearchOptions& o) {
  if (o.keep < 1) throw std::invalid_argument("--keep must be >= 1");
  if (o.jobs < 1) throw std::invalid_argument("-j must be >= 1");
  const SigintGuard sigint(o.group == nullptr);
  SearchResult res;
  res.scenario = base.name;
  res.source = base.source;
  res.gpus = base.cluster.total_gpus();
  res.memory_limit_bytes = search_memory_limit(base, o.space);
  res.tie_band = o.tie_band >= 0 ? o.tie_band : search_tie_band(base.cluster.device, res.tie_band_basis);
  if (o.tie_band >= 0) res.tie_band_basis = "--tie-band";

  const auto t0 = Clock::now();
  Stage1 s1 = enumerate_candidates(base, o.space);
  res.enumerated = s1.enumerated;
  res.fits = s1.survivors.size();
  res.rejected = s1.rejected;
  if (o.progress)
    std::fprintf(stderr, "search: stage 1: %zu configurations, %zu pass the checks and fit in memory (%.1f s)\n",
                 s1.enumerated, s1.survivors.size(), since(t0));
  if (s1.survivors.empty()) {
    std::string why;
    for (const auto& [reason, n] : s1.rejected) why += "\n  " + std::to_string(n) + " x " + reason;
    throw std::invalid_argument(base.source + ": search: none of the " + std::to_string(s1.enumerated) +
                                " configurations of " + std::to_string(res.gpus) +
                                " GPUs passes the checks and fits in " +
                                format_num("%.2f", res.memory_limit_bytes / 1e9) + " GB per GPU; rejected:" + why);
  }
  std::vector<Candidate>& c = s1.survivors;
  const auto t2 = Clock::now();
  estimate_all(c, o, res.rejected, res.estimated);
  res.ranked = c.size();
  if (o.progress)
    std::fprintf(stderr, "search: stage 2: %zu ranked, %zu of them estimated, the rest bounded out (%.1f s)\n",
                 res.ranked, res.estimated, since(t2));
  rank_by_estimate(c);

  // Stage 3: the best K estimates, and the scenario as written unless it is one of them.
  std::vector<SearchRow> rows;
  for (std::size_t i = 0; i < c.size() && static_cast<int>(i) < o.keep; i++)
    rows.push_back(SearchRow{c[i].label, c[i].scenario, c[i].estimate_s, {}, "", false, false, false});
  bool written_in = false;
  for (auto& r : rows)
    if (same_config(r.scenario, base)) r.as_written = written_in = true;
  if (!written_in && !o.as_written) res.as_written_note = "the scenario as written is not in the top K";
  if (!written_in && o.as_written) {
    double peak = 0;
    try {
      const MemoryReport mem = memory_report(base, make_schedule(base));
      for (const RankMemory& rm : mem.ranks) peak = std::max(peak, rm.peak_bytes);
    } catch (const std::exception& e) {
      res.as_written_note = std::string("the scenario as written cannot be built: ") + e.what();
    }
    if (res.as_written_note.empty() && peak > res.memory_limit_bytes)
      res.as_written_note = "the scenario as written needs " + format_num("%.2f", peak / 1e9) +
                            " GB per GPU, over the " + format_num("%.2f", res.memory_limit_bytes / 1e9) + " GB limit";
    if (res.as_written_note.empty()) {
      SearchRow w{candidate_label(base), base, 0, {}, "", true, false, false};
      try {
        w.estimate_s = estimate_iteration_s(base);
      } catch (const std::exception&) {
        w.estimate_s = std::numeric_limits<double>::quiet_NaN();  // not estimated: "-", no JSON key, empty CSV cell
      }
      rows.push_back(w);
    }
  }
  const std::size_t ranks = o.group ? static_cast<std::size_t>(o.group->size()) : 1;
  const std::vector<std::vector<std::size_t>> by_rank = stage3_shares(rows, ranks);
  std::vector<Scenario> runs;
  for (std::size_t i : by_rank[o.group ? static_cast<std::size_t>(o.group->rank()) : 0])
    runs.push_back(rows[i].scenario);
  const auto t3 = Clock::now();
  std::size_t done = 0;
  const auto out = run_scenarios(
      runs, RunOptions{}, o.jobs,
      [&](std::size_t, const RunOutcome&) { progress_line(o.progress, "stage 3 simulated", ++done, runs.size(), t3); },
      interrupted);
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& x : out)
    mine.push_back(x.ok() ? nlohmann::json{{"result", nlohmann::json::parse(encode(x.result))}}
                          : nlohmann::json{{"error", x.error}});
  const nlohmann::json all = gather(mine, o.group);  // rank 0's rows, then rank 1's, ...
  if (all.size() != rows.size()) throw std::runtime_error("search: stage 3 lost results");
  std::size_t k = 0;
  for (const auto& rank_rows : by_rank)
    for (std::size_t i : rank_rows) {
      if (all[k].contains("error"))
        rows[i].error = all[k]["error"].get<std::string>();
      else
        rows[i].result = decode(all[k]["result"].dump());
      k++;
    }
  std::stable_sort(rows.begin(), rows.end(), [](const SearchRow& a, const SearchRow& b) {
    if (a.error.empty() != b.error.empty()) return a.error.empty();
    if (a.result.tokens_per_s != b.result.tokens_per_s) return a.result.tokens_per_s > b.result.tokens_per_s;
    return a.label < b.label;
  });
  res.interrupted = interrupted();
  if (res.interrupted)  // the rows not simulated are left out: what is reported was found before Ctrl-C
    rows.erase(std::remove_if(rows.begin(), rows.end(), [](const SearchRow& r) { return r.error == kNotRun; }),
               rows.end());
  mark_pareto(rows);
  order_ties(rows, res.tie_band);
  res.rows = std::move(rows);
  if (o.progress) std::fprintf(stderr, "search: done in %.1f s\n", since(t0));
  return res;
}

void print_search_table(std::ostream& os, const SearchResult& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "search %s (%s): %d GPUs; %zu configurations, %zu fit in %.2f GB, %zu ranked (%zu estimated), %zu "
                "simulated\n",
                r.scenario.c_str(), r.source.c_str(), r.gpus, r.enumerated, r.fits, r.memory_limit_bytes / 1e9,
                r.ranked, r.estimated, r.rows.size());
  os << line;
  // The configuration column as wide as its longest label (42 at least: the common layouts' labels line up).
  int width = 42;
  for (const auto& row : r.rows)
    width = std::max(width, static_cast<int>(std::min<std::size_t>(row.label.size(), 200)));
  std::snprintf(line, sizeof line, "%4s  %-*s %12s %12s %8s %8s %9s %11s %6s %11s  %-24s %s\n", "rank", width,
                "configuration", "tokens/s", "iteration_s", "bubble", "exp_comm", "peak_GB", "TFLOP/s/GPU", "MFU",
                "estimate_s", "marks", "why (beside compute)");
  os << line;
  int rank = 0;
  for (const auto& row : r.rows) {
    if (!row.error.empty()) {
      std::snprintf(line, sizeof line, "%4s  %-*s error: ", "-", width, row.label.c_str());
      os << line << row.error << "\n";
      continue;
    }
    const RunResult& x = row.result;
    std::string mark = row.tied ? "tie" : "";
    if (row.pareto) mark += mark.empty() ? "pareto" : ", pareto";
    if (row.as_written) mark += mark.empty() ? "as written" : ", as written";
    const std::string estimate = std::isnan(row.estimate_s) ? "-" : format_num("%.6f", row.estimate_s);
    std::snprintf(line, sizeof line, "%4d  %-*s %12.1f %12.6f %8.4f %8.4f %9.2f %11.2f %6.3f %11s  %-24s ", ++rank,
                  width, row.label.c_str(), x.tokens_per_s, x.iteration_s, x.bubble_fraction, exposed_comm_fraction(x),
                  x.peak_memory_bytes / 1e9, x.tflops_per_gpu, x.mfu, estimate.c_str(), mark.c_str());
    os << line << why_text(x) << "\n";
  }
  if (!r.as_written_note.empty()) os << "note: " << r.as_written_note << "\n";
  if (r.interrupted) os << "interrupted (Ctrl-C): the best found so far\n";
  os << "bubble = pipeline bubble / iteration, exp_comm = exposed communication / iteration (mean over ranks); "
        "estimate_s = stage 2's critical path (no contention); why = the largest parts of the iteration beside "
        "forward and backward compute\n";
  if (r.tie_band > 0)
    os << "tie = within " << format_num("%.1f%%", 100 * r.tie_band)
       << " of the best throughput, equal within the model's error, least memory first; band: " << r.tie_band_basis
       << "\n";
  std::size_t rejected = 0;
  for (const auto& [reason, n] : r.rejected) rejected += n;
  os << "rejected: " << rejected << " configurations\n";
  for (const auto& [reason, n] : r.rejected) {
    std::snprintf(line, sizeof line, "%8zu  ", n);
    os << line << reason << "\n";
  }
}

// The simulated figures a search row shows, as run-result columns (sim/run_result.h), in the CSV's order.
// Then the time breakdown's parts (core/lower/time_breakdown.h).
std::vector<const char*> search_figures() {
  std::vector<const char*> c = {"tokens_per_s",   "iteration_s", "bubble_fraction", "idle_fraction", "peak_memory_GB",
                                "tflops_per_gpu", "mfu"};
  for (const TimePart& p : time_parts()) c.push_back(p.key);
  return c;
}

void write_search_json(std::ostream& os, const SearchResult& r) {
  nlohmann::json j;
  j["schema"] = "pipescope.search/2";  // docs/schemas/search.schema.json
  j["scenario"] = r.scenario;
  j["source"] = r.source;
  j["gpus"] = r.gpus;
  j["memory_limit_GB"] = r.memory_limit_bytes / 1e9;
  j["tie_band"] = r.tie_band;
  j["tie_band_basis"] = r.tie_band_basis;
  j["configurations"] = r.enumerated;
  j["fit"] = r.fits;
  j["ranked"] = r.ranked;
  j["estimated"] = r.estimated;
  nlohmann::json rej = nlohmann::json::array();
  for (const auto& [reason, n] : r.rejected) rej.push_back({{"reason", reason}, {"count", n}});
  j["rejected"] = rej;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json x;
    x["configuration"] = row.label;
    if (!std::isnan(row.estimate_s)) x["estimate_s"] = row.estimate_s;
    x["as_written"] = row.as_written;
    if (!row.error.empty()) {
      x["error"] = row.error;
    } else {
      const RunResult& s = row.result;
      x["schedule"] = s.schedule;
      x["dp"] = s.dp, x["pp"] = s.pp, x["tp"] = s.tp, x["v"] = s.v, x["m"] = s.m;
      x["cp"] = row.scenario.parallel.cp;
      x["cp_comm_type"] = to_string(row.scenario.parallel.cp_comm_type);
      x["cp_a2a"] = row.scenario.parallel.cp_a2a;
      x["micro_batch_size"] = s.micro_batch_size;
      x["slices"] = s.slices;
      x["slice_tokens"] = s.slice_tokens;
      x["recompute"] = to_string(row.scenario.schedule.recompute);
      x["distributed_optimizer"] = row.scenario.training.distributed_optimizer;
      x["fsdp"] = row.scenario.training.fsdp;
      for (const char* c : search_figures()) x[c] = result_json_value(result_field(c), s);
      x["pareto"] = row.pareto;
      x["tie"] = row.tied;
      x["why"] = why_text(s);
    }
    rows.push_back(x);
  }
  j["results"] = rows;
  if (!r.as_written_note.empty()) j["as_written_note"] = r.as_written_note;
  if (r.interrupted) j["interrupted"] = true;
  os << j.dump(2) << "\n";
}

void write_search_csv(std::ostream& os, const SearchResult& r) {
  os << "rank,configuration,schedule,dp,pp,tp,v,m,micro_batch_size,slices,recompute,distributed_optimizer,fsdp,";
  for (const char* c : search_figures()) os << c << ',';
  os << "estimate_s,pareto,tie,why,as_written,error\n";
  int rank = 0;
  for (const auto& row : r.rows) {
    const RunResult& s = row.result;
    const bool ok = row.error.empty();
    std::string err = row.error;
    for (char& ch : err)
      if (ch == '"' || ch == '\n') ch = '\'';
    os << (ok ? std::to_string(++rank) : "") << ',' << row.label << ',' << to_string(row.scenario.schedule.kind) << ','
       << row.scenario.parallel.dp << ',' << row.scenario.parallel.pp << ',' << row.scenario.parallel.tp << ','
       << row.scenario.parallel.v << ',' << (ok ? std::to_string(s.m) : "") << ','
       << row.scenario.parallel.micro_batch_size << ',' << (ok ? std::to_string(s.slices) : "") << ','
       << to_string(row.scenario.schedule.recompute) << ',' << (row.scenario.training.distributed_optimizer ? 1 : 0)
       << ',' << (row.scenario.training.fsdp ? 1 : 0) << ',';
    for (const char* c : search_figures()) os << (ok ? result_csv_value(result_field(c), s) : "") << ',';
    os << (std::isnan(row.estimate_s) ? "" : format_num("%.9g", row.estimate_s)) << ',' << (row.pareto ? 1 : 0) << ','
       << (row.tied ? 1 : 0) << ',' << (ok ? "\"" + why_text(s) + "\"" : "") << ',' << (row.as_written ? 1 : 0) << ','
       << (err.empty() ? "" : "\"" + err + "\"") << '\n';
  }
}

void write_search_svg(std::ostream& os, const SearchResult& r) {
  std::ostringstream j;
  write_search_json(j, r);
  const Plot p = plot_output(j.str(), "search", PlotRequest{});  // the charts `pipescope plot` draws of it
  write_charts_svg(os, p.charts, ChartOptions{1200, "pipescope search " + r.scenario});
}

std::string emit_scenario_yaml(const std::string& base_text, const Scenario& best) {
  YAML::Node root = YAML::Load(base_text);
  if (!root["parallel"] || !root["parallel"].IsMap()) root["parallel"] = YAML::Node(YAML::NodeType::Map);
  if (!root["schedule"] || !root["schedule"].IsMap()) root["schedule"] = YAML::Node(YAML::NodeType::Map);
  YAML::Node par = root["parallel"], sch = root["schedule"];
  const ParallelSpec& p = best.parallel;
  par["dp"] = p.dp, par["pp"] = p.pp, par["tp"] = p.tp, par["v"] = p.v;
  if (p.cp > 1 || par["cp"]) par["cp"] = p.cp;
  // The expert layout is a search dimension of MoE models (and tp > 1 brings sequence parallelism with it).
  if (best.model.moe()) {
    par["ep"] = p.ep, par["etp"] = p.etp;
    if (p.sequence_parallel) par["sequence_parallel"] = true;
  }
  par["micro_batch_size"] = p.micro_batch_size;
  par.remove("stage_layers");
  if (!p.stage_layers.empty()) par["stage_layers"] = p.stage_layers;  // the scenario as written, uneven
  const ScheduleSpec& s = best.schedule;
  sch["kind"] = schedule_entry(s.kind).name;
  sch["seq_slices"] = s.seq_slices;
  sch["slicing"] = s.slicing;
  sch["recompute"] = to_string(s.recompute);
  if (s.recompute != Recompute::Selective) sch.remove("recompute_modules");  // the loader refuses it otherwise
  sch.remove("slice_tokens");
  if (!s.slice_tokens.empty()) sch["slice_tokens"] = s.slice_tokens;  // the planner's slicing (slicing: explicit)
  sch.remove("file");
  // Paths the loader resolved against the scenario's directory, written absolute: the emitted file may live
  // elsewhere.
  if (!s.file.empty()) sch["file"] = std::filesystem::absolute(s.file).string();
  if (!best.sim.profile.empty()) {
    const std::string profile = std::filesystem::absolute(best.sim.profile).string();
    if (root["calibration"])
      root["calibration"] = profile;
    else
      root["sim"]["profile"] = profile;
  }
  // The distributed optimizer is a search dimension; the other training keys stay as written.
  if (!root["training"] || !root["training"].IsMap()) root["training"] = YAML::Node(YAML::NodeType::Map);
  YAML::Node tr = root["training"];
  tr["distributed_optimizer"] = best.training.distributed_optimizer;
  if (!best.training.overlap_param_gather && tr["overlap_param_gather"]) tr["overlap_param_gather"] = false;
  root["name"] = best.name;
  YAML::Emitter out;
  out << root;
  return std::string("# written by pipescope search: the best configuration found\n") + out.c_str() + "\n";
}

}  // namespace pipescope::sim
