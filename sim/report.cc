#include "sim/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <stdexcept>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/gpu_variation.h"
#include "core/cost/scenario_cost.h"
#include "core/lower/dag.h"
#include "core/memory/memory_model.h"
#include "core/util/json_text.h"

namespace pipescope::sim {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// The breakdown of a simulated run, recomputation as the scenario's cost model prices it.
RunBreakdown breakdown_of(const Scenario& s, const CheckedSchedule& cs, const SimResult& r) {
  std::vector<double> start(r.timing.size()), end(r.timing.size());
  for (std::size_t i = 0; i < r.timing.size(); i++) start[i] = r.timing[i].start, end[i] = r.timing[i].end;
  std::unique_ptr<CostModel> cost;
  if (s.schedule.recompute != Recompute::None || s.parallel.cp > 1) cost = make_cost_model(s);
  OpShares shares;
  if (cost) {
    shares.recompute_s = [&](const Op& op, int seqs) { return cost->recompute_seconds(op, seqs); };
    shares.cp_wait_s = [&](const Op& op, int seqs) { return cost->cp_wait_seconds(op, seqs); };
  }
  return time_breakdown(cs.dag(), cs.schedule(), start, end, r.iteration_s, shares);
}

}  // namespace

Report make_report(const Scenario& s, const CheckedSchedule& cs, const SimResult& r, AllocatorReplay replay) {
  const LoweredSchedule& ls = cs.schedule();
  const Dag& dag = cs.dag();
  Report rep;
  rep.scenario = s.name;
  rep.schedule = ls.schedule.name;
  rep.dp = ls.dp;
  rep.pp = ls.p;
  rep.tp = ls.tp;
  rep.cp = ls.cp;
  rep.v = ls.schedule.v;
  rep.m = ls.schedule.m;
  rep.gpus = ls.dp * ls.p * ls.tp * ls.cp;
  rep.global_batch = s.parallel.global_batch;
  rep.micro_batch_size = s.parallel.micro_batch_size;
  rep.seq_len = s.model.seq_len;
  rep.seq_slices = s.schedule.seq_slices;
  rep.iteration_s = r.iteration_s;
  if (r.iteration_s > 0) rep.tokens_per_s = static_cast<double>(rep.global_batch) * rep.seq_len / r.iteration_s;
  rep.pipeline_end_s = r.pipeline_end_s;

  // Idle time over the pipeline part only (before gradient sync and optimizer): with B the mean busy time of a
  // worker's pipeline compute ops and T the pipeline end, (T - B) / T and (T - B) / B. It counts exposed
  // communication as well as the bubble; the breakdown below tells them apart.
  const int workers = ls.workers();
  std::vector<double> pipe_busy(static_cast<std::size_t>(workers), 0.0);
  for (std::uint32_t i = 0; i < dag.size() && i < r.timing.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind != DagKind::Compute || n.worker < 0 || n.index < 0) continue;
    if (ls.per_worker[n.worker][n.index].kind != LOpKind::Compute) continue;
    pipe_busy[n.worker] += r.timing[i].end - r.timing[i].start;
  }
  double mean_busy = 0;
  for (double b : pipe_busy) mean_busy += b;
  if (workers > 0) mean_busy /= workers;
  const double T = r.pipeline_end_s;
  // Busy time is summed op by op: a rank busy the whole time can come out a rounding error above T.
  rep.idle_fraction = T > 0 ? std::max(0.0, (T - mean_busy) / T) : 0.0;
  rep.idle_ratio = mean_busy > 0 ? std::max(0.0, (T - mean_busy) / mean_busy) : 0.0;
  rep.breakdown = breakdown_of(s, cs, r);
  if (r.iteration_s > 0) rep.bubble_fraction = rep.breakdown.mean.bubble_s / r.iteration_s;

  // Megatron Eq. 3: F / (T * n), whose attention term counts the whole s x s square, and the recomputed forward when
  // the schedule recomputes. Model FLOPs (MFU's) are the useful ones: causal attention, no recomputation
  // (Megatron-Core's count), so that a long-context run's MFU stays below what the tensor cores can do.
  if (r.iteration_s > 0 && rep.gpus > 0) {
    const double denom = r.iteration_s * rep.gpus * 1e12;
    rep.tflops_per_gpu = megatron_flops_per_iteration(s.model, s.parallel.global_batch, s.schedule.recompute) / denom;
    rep.model_tflops_per_gpu = megatron_core_flops_per_iteration(s.model, s.parallel.global_batch) / denom;
    const double peak = dtype_peak_flops(s.cluster.device, s.training.dtype);
    if (peak > 0) rep.mfu = rep.model_tflops_per_gpu * 1e12 / peak;
  }
  rep.worker_busy_s = r.worker_busy_s;
  rep.worker_busy_s.resize(static_cast<std::size_t>(workers), 0.0);
  for (double b : rep.worker_busy_s) rep.worker_idle_s.push_back(r.iteration_s - b);
  rep.memory = memory_report(s, ls.schedule, replay);
  rep.profile = profile_stamp(s.sim.profile);
  rep.device = shipped_device(s.cluster.device);
  rep.fidelity = device_fidelity(s.cluster.device);
  rep.fidelity_line = describe_fidelity(s.cluster.device);
  rep.variation_line = describe_variation(s);
  return rep;
}

std::string profile_json(const ProfileStamp& p) {
  nlohmann::ordered_json j;
  if (p.path.empty()) {
    j["kind"] = "analytic (no profile)";
    return j.dump();
  }
  j["path"] = p.path;
  j["kind"] = p.kind;
  j["name"] = p.name;
  j["device"] = p.device;
  j["backend"] = p.backend;
  j["dtype"] = p.dtype;
  j["date"] = p.date;
  j["fnv1a64"] = p.hash;
  j["gate_failures"] = p.gate_failures;
  return j.dump();
}

namespace {

nlohmann::ordered_json breakdown_json(const TimeBreakdown& b) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const TimePart& p : time_parts()) j[p.key] = b.*p.member;
  return j;
}

// The mean breakdown with each part's share of the iteration, then per pipeline rank (mean over its replicas).
void print_breakdown(std::ostream& os, const Report& r) {
  const auto& parts = time_parts();
  const std::size_t workers = r.breakdown.per_worker.size();
  char buf[160];
  std::snprintf(buf, sizeof buf, "\ntime breakdown (mean over %zu workers)      seconds    share\n", workers);
  os << buf;
  for (const TimePart& p : parts) {
    const double x = r.breakdown.mean.*p.member;
    std::snprintf(buf, sizeof buf, "  %-42s %12.6f  %6.2f%%\n", p.title, x,
                  r.iteration_s > 0 ? 100 * x / r.iteration_s : 0.0);
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "  %-42s %12.6f  (iteration time %.6f)\n", "sum", r.breakdown.mean.total_s(),
                r.iteration_s);
  os << buf;
  if (r.pp < 1 || workers == 0) return;
  os << "\n  rank";
  for (const TimePart& p : parts) {
    const std::string key(p.key);
    std::snprintf(buf, sizeof buf, " %11s", key.substr(0, key.size() - 2).c_str());  // without "_s"
    os << buf;
  }
  os << '\n';
  for (int rank = 0; rank < r.pp; rank++) {
    std::snprintf(buf, sizeof buf, "  %4d", rank);
    os << buf;
    for (const TimePart& p : parts) {
      double sum = 0;
      int n = 0;
      for (std::size_t w = static_cast<std::size_t>(rank); w < workers; w += static_cast<std::size_t>(r.pp))
        sum += r.breakdown.per_worker[w].*p.member, n++;
      std::snprintf(buf, sizeof buf, " %11.6f", n > 0 ? sum / n : 0.0);
      os << buf;
    }
    os << '\n';
  }
}

}  // namespace

void print_table(std::ostream& os, const Report& r) {
  auto line = [&](const std::string& k, const std::string& v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%-24s", k.c_str());
    os << buf << v << '\n';
  };
  line("scenario", r.scenario);
  line("schedule", r.schedule + " (p " + std::to_string(r.pp) + ", v " + std::to_string(r.v) + ", m " +
                       std::to_string(r.m) + "; dp " + std::to_string(r.dp) + ", tp " + std::to_string(r.tp) +
                       (r.cp > 1 ? ", cp " + std::to_string(r.cp) : std::string()) + "; " + std::to_string(r.gpus) +
                       " GPUs)");
  line("profile", describe_stamp(r.profile));
  for (const std::string& g : r.profile.gate_failures) line("", "failed gate: " + g);
  line("fidelity", r.fidelity_line);
  if (!r.variation_line.empty()) line("GPU variation", r.variation_line);
  line("iteration time", fmt("%.9f s", r.iteration_s));
  line("pipeline end", fmt("%.9f s", r.pipeline_end_s) + " (last forward/backward op)");
  line("exposed tail", fmt("%.9f s", r.iteration_s - r.pipeline_end_s) +
                           " (after it: gradient sync that overlap did not hide, optimizer, parameter all-gather)");
  line("pipeline bubble", fmt("%.6f", r.bubble_fraction) + " of the iteration (waiting on another stage)");
  line("idle fraction", fmt("%.6f", r.idle_fraction) + " (mean worker idle / pipeline end: bubble and exposed comm)");
  line("throughput", fmt("%.3f TFLOP/s per GPU", r.tflops_per_gpu) +
                         fmt(" (Megatron Eq. 3 F/(T n)); model FLOPs %.3f TFLOP/s (causal)", r.model_tflops_per_gpu));
  line("MFU", fmt("%.2f%%", 100 * r.mfu) + " (model FLOPs / the 16-bit dense peak)");
  line("tokens", fmt("%.0f tokens/s", r.tokens_per_s) + " (global batch " + std::to_string(r.global_batch) +
                     " x seq_len " + std::to_string(r.seq_len) + " per iteration)");

  print_breakdown(os, r);

  // Per pipeline rank: busy time over the data-parallel replicas and memory.
  os << "\n  rank   busy_min_s    busy_max_s    idle_max_s    peak_mem_GB  activations_GB  reserved_GB  in_flight  "
        "oom\n";
  for (int rank = 0; rank < r.pp; rank++) {
    double bmin = 0, bmax = 0, imax = 0;
    bool first = true;
    for (int d = 0; d < r.dp; d++) {
      const std::size_t w = static_cast<std::size_t>(d) * r.pp + rank;
      if (w >= r.worker_busy_s.size()) continue;
      const double b = r.worker_busy_s[w], idle = r.worker_idle_s[w];
      bmin = first ? b : std::min(bmin, b);
      bmax = first ? b : std::max(bmax, b);
      imax = first ? idle : std::max(imax, idle);
      first = false;
    }
    char buf[200];
    if (static_cast<std::size_t>(rank) < r.memory.ranks.size()) {
      const RankMemory& m = r.memory.ranks[rank];
      char reserved[32] = "-";  // a report made without the allocator replay has none
      if (r.memory.allocator_replayed) std::snprintf(reserved, sizeof reserved, "%.3f", m.reserved_peak_bytes / 1e9);
      std::snprintf(buf, sizeof buf, "  %4d  %12.6f  %12.6f  %12.6f  %13.3f  %14.3f  %11s  %9.2f  %s\n", rank, bmin,
                    bmax, imax, m.peak_bytes / 1e9, m.activation_peak_bytes / 1e9, reserved, m.peak_in_flight,
                    m.oom ? "OOM" : (m.allocator_failed ? "FRAG" : "-"));
    } else {
      std::snprintf(buf, sizeof buf, "  %4d  %12.6f  %12.6f  %12.6f\n", rank, bmin, bmax, imax);
    }
    os << buf;
  }
  bool oom = false, frag = false;
  for (const RankMemory& m : r.memory.ranks) oom = oom || m.oom, frag = frag || m.allocator_failed;
  os << '\n';
  line("device memory",
       fmt("%.3f GB", r.memory.device_bytes / 1e9) +
           (oom    ? "  OUT OF MEMORY on at least one rank"
            : frag ? "  live bytes fit, but PyTorch's caching allocator runs out (FRAG: a fragmented cache)"
                   : "  fits on every rank"));
}

void write_json(std::ostream& os, const Report& r) {
  nlohmann::ordered_json j;
  j["schema"] = kReportSchema;
  put_figures(j, r);  // scenario ... tokens_per_s: the fields of sim/run_result.h, as its tables name them
  j["seq_slices"] = r.seq_slices;
  j["profile"] = nlohmann::ordered_json::parse(profile_json(r.profile));
  nlohmann::ordered_json fid;
  fid["device"] = r.device;
  fid["sets"] = nlohmann::ordered_json::array();
  for (const DeviceFidelity& f : r.fidelity)
    fid["sets"].push_back({{"set", f.set}, {"runs", f.runs}, {"mape", f.mape}});
  j["fidelity"] = std::move(fid);
  j["definitions"] =
      "bubble_fraction = mean pipeline bubble / T (time_breakdown.bubble_s); "
      "idle_fraction = (T_pipe - mean busy) / T_pipe; idle_ratio = (T_pipe - mean busy) / mean busy";
  j["time_breakdown"] = breakdown_json(r.breakdown.mean);
  auto workers = nlohmann::ordered_json::array();
  for (std::size_t w = 0; w < r.worker_busy_s.size(); w++) {
    nlohmann::ordered_json x;
    x["worker"] = w;
    x["replica"] = r.pp > 0 ? static_cast<int>(w) / r.pp : 0;
    x["rank"] = r.pp > 0 ? static_cast<int>(w) % r.pp : 0;
    x["busy_s"] = r.worker_busy_s[w];
    x["idle_s"] = w < r.worker_idle_s.size() ? r.worker_idle_s[w] : 0.0;
    if (w < r.breakdown.per_worker.size()) x["time_breakdown"] = breakdown_json(r.breakdown.per_worker[w]);
    workers.push_back(std::move(x));
  }
  j["workers"] = std::move(workers);
  nlohmann::ordered_json mem;
  mem["device_bytes"] = r.memory.device_bytes;
  bool oom = false;
  auto ranks = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < r.memory.ranks.size(); i++) {
    const RankMemory& m = r.memory.ranks[i];
    oom = oom || m.oom;
    nlohmann::ordered_json x;
    x["rank"] = i;
    x["weights_bytes"] = m.weights_bytes;
    x["grads_bytes"] = m.grads_bytes;
    x["optimizer_bytes"] = m.optimizer_bytes;
    x["activation_peak_bytes"] = m.activation_peak_bytes;
    x["peak_in_flight"] = m.peak_in_flight;
    x["peak_bytes"] = m.peak_bytes;
    x["reserved_peak_bytes"] = m.reserved_peak_bytes;
    x["oom"] = m.oom;
    x["allocator_failed"] = m.allocator_failed;
    ranks.push_back(std::move(x));
  }
  mem["oom"] = oom;
  mem["allocator_replayed"] = r.memory.allocator_replayed;
  mem["ranks"] = std::move(ranks);
  j["memory"] = std::move(mem);
  os << j.dump(2) << '\n';
}

void write_compare_json(std::ostream& os, const std::vector<std::string>& reports_json,
                        const std::vector<std::pair<std::string, std::string>>& failed) {
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.compare/1";
  auto variants = nlohmann::ordered_json::array();
  for (const auto& r : reports_json) variants.push_back(nlohmann::ordered_json::parse(r));
  j["variants"] = std::move(variants);
  auto f = nlohmann::ordered_json::array();
  for (const auto& [schedule, error] : failed) f.push_back({{"schedule", schedule}, {"error", error}});
  j["failed"] = std::move(f);
  os << j.dump(2) << '\n';
}

TraceLayout compare_trace_layout(std::size_t i, int nodes, const std::string& name) {
  long long stride = 1000;
  while (stride <= nodes - 1) stride *= 10;
  return {stride * static_cast<long long>(i), static_cast<std::uint64_t>(i) << 40, name + " "};
}

void merge_trace_files(AtomicFileWriter& out, const std::vector<std::pair<std::string, std::string>>& name_and_path) {
  // write_trace's layout (core/lower/trace_json.h): a first line holding otherData, one event per line (a comma
  // after each but the last), then "]}".
  const std::string head = "{\"displayTimeUnit\":\"ms\",\"otherData\":", tail = ",\"traceEvents\":[";
  std::string other = "{", chunk = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first_event = true;
  for (const auto& [name, path] : name_and_path) {
    std::ifstream f(path, std::ios::binary);
    std::string line;
    if (!std::getline(f, line) || line.rfind(head, 0) != 0 || line.size() < head.size() + tail.size() ||
        line.compare(line.size() - tail.size(), tail.size(), tail) != 0)
      throw std::runtime_error("trace of " + name + " (" + path + "): not a trace write_trace wrote");
    other += (other.size() > 1 ? "," : "") + std::string("\"") + json_escape(name) +
             "\":" + line.substr(head.size(), line.size() - head.size() - tail.size());
    bool closed = false;
    while (std::getline(f, line)) {
      if (line == "]}") {
        closed = true;
        break;
      }
      if (!line.empty() && line.back() == ',') line.pop_back();
      if (line.empty()) continue;
      chunk += (first_event ? "" : ",\n") + line;
      first_event = false;
      if (chunk.size() >= (1u << 20)) out.append(chunk), chunk.clear();
    }
    if (!closed) throw std::runtime_error("trace of " + name + " (" + path + "): cut short");
  }
  out.append(chunk + "\n],\"otherData\":" + other + "}}\n");
}

}  // namespace pipescope::sim
