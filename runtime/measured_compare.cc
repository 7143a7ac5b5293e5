#include "runtime/measured_compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace pipescope::runtime {
namespace {

const char* const kRowNames[kOpKindRows] = {"F", "B", "I", "W", "p2p", "allreduce", "alltoall", "optimizer"};

// Collectives measured as calls (last member's arrival to last completion). The MoE all-to-alls are not: the layer
// kernels of the compute op before each marker made them, and the marker holds their time on its worker.
bool is_collective_call(LOpKind k) {
  return k == LOpKind::AllReduce || k == LOpKind::AllGather || k == LOpKind::ReduceScatter;
}

// A transfer's identity on both ends: (sender, receiver, op kind, stage, micro-batch, slice).
using TransferKey = std::tuple<int, int, int, int, int, int>;
using OpRef = std::pair<int, int>;  // (worker, op index)

TransferKey transfer_key(int from, int to, const LoweredOp& l) {
  return {from, to, static_cast<int>(l.op.kind), l.op.stage, l.op.microbatch, l.op.slice};
}

void add_simulated(Comparison& c, const CheckedSchedule& cs, const std::vector<double>& node_s) {
  const LoweredSchedule& ls = cs.schedule();
  const Dag& dag = cs.dag();
  for (std::uint32_t n = 0; n < dag.size(); n++) {
    const DagNode& d = dag.nodes[n];
    if (d.worker < 0 || d.index < 0 || n >= node_s.size()) continue;
    const LoweredOp& l = ls.per_worker[d.worker][d.index];
    if (l.kind == LOpKind::Recv) continue;  // a join; the transfer is on the send's node
    c.kinds[op_kind_row(l)].simulated_each.push_back(node_s[n]);
  }
}

// The measured side's lookups: every send by its transfer, every collective call's members by (group, call).
struct MeasuredIndex {
  std::map<TransferKey, OpRef> sends;
  std::map<std::pair<int, int>, std::vector<OpRef>> calls;
};

MeasuredIndex index_schedule(const LoweredSchedule& ls) {
  MeasuredIndex x;
  for (int w = 0; w < ls.workers(); w++) {
    std::map<int, int> seen;
    const auto& prog = ls.per_worker[w];
    for (std::size_t i = 0; i < prog.size(); i++) {
      const LoweredOp& l = prog[i];
      if (l.kind == LOpKind::Send) x.sends[transfer_key(w, l.peer, l)] = {w, static_cast<int>(i)};
      if (is_collective_call(l.kind)) x.calls[{l.group, seen[l.group]++}].push_back({w, static_cast<int>(i)});
    }
  }
  return x;
}

// TP rank 0 of each worker; throws when a process is missing.
std::map<int, const WorkerResult*> first_tp_ranks(const LoweredSchedule& ls, const JobResult& mr) {
  std::map<int, const WorkerResult*> by_worker;
  for (const auto& w : mr.workers)
    if (w.tp_rank == 0) by_worker[w.worker] = &w;
  if (static_cast<int>(by_worker.size()) != ls.workers() ||
      mr.workers.size() != static_cast<std::size_t>(ls.workers()) * ls.tp)
    throw std::runtime_error("measured results are incomplete");
  return by_worker;
}

// One timed iteration `it` of the measured run into `c`.
void add_measured_iteration(Comparison& c, const LoweredSchedule& ls, const MeasuredIndex& x,
                            const std::map<int, const WorkerResult*>& by_worker, const JobResult& mr, std::size_t it) {
  auto timing = [&](int w, int i) -> const OpTiming& { return by_worker.at(w)->iterations.at(it).ops.at(i); };
  double end = 0;
  for (const auto& wr : mr.workers) {  // iteration end and time accounting: every process
    const IterationStats& st = wr.iterations.at(it);
    end = std::max(end, st.end_s);
    c.kernel_s += st.kernel_s;
    c.comm_s += st.comm_s;
    c.overhead_s += st.overhead_s;
    c.ops += st.ops.size();
  }
  for (const auto& [w, wr] : by_worker) {
    const IterationStats& st = wr->iterations.at(it);
    const auto& prog = ls.per_worker[w];
    for (std::size_t i = 0; i < prog.size(); i++) {
      const LoweredOp& l = prog[i];
      const OpTiming& t = st.ops.at(i);
      if (l.kind == LOpKind::Compute || l.kind == LOpKind::Optimizer || l.kind == LOpKind::AllToAll) {
        c.kinds[op_kind_row(l)].measured_each.push_back(t.end - t.start);
      } else if (l.kind == LOpKind::Recv) {
        const auto s = x.sends.find(transfer_key(l.peer, w, l));
        if (s == x.sends.end()) continue;
        const OpTiming& ts = timing(s->second.first, s->second.second);
        if (t.end < ts.start - 1e-6) c.acausal++;
        c.kinds[kRowP2P].measured_each.push_back(std::max(0.0, t.end - std::max(t.start, ts.start)));
      }
    }
  }
  for (const auto& [key, members] : x.calls) {
    double start = 0, stop = 0;
    for (const auto& [w, i] : members) {
      start = std::max(start, timing(w, i).start);
      stop = std::max(stop, timing(w, i).end);
    }
    c.kinds[kRowAllReduce].measured_each.push_back(std::max(0.0, stop - start));
  }
  c.measured_iteration_s += end;
  c.measured_iterations_s.push_back(end);
}

nlohmann::ordered_json spread_object(const Spread& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (s.n == 0) return j;
  j["n"] = s.n;
  j["min"] = s.min_s;
  j["median"] = s.median_s;
  j["max"] = s.max_s;
  j["mean"] = s.mean_s;
  j["stddev"] = s.stddev_s;
  return j;
}

}  // namespace

const char* op_kind_row_name(int row) { return kRowNames[row]; }

int op_kind_row(const LoweredOp& l) {
  switch (l.kind) {
    case LOpKind::Compute:
      switch (l.op.kind) {
        case OpKind::Forward:
          return kRowF;
        case OpKind::Backward:
          return kRowB;
        case OpKind::BackwardInput:
          return kRowI;
        case OpKind::BackwardWeight:
          return kRowW;
      }
      return kRowB;
    case LOpKind::Send:
    case LOpKind::Recv:
      return kRowP2P;
    case LOpKind::AllReduce:
    case LOpKind::AllGather:
    case LOpKind::ReduceScatter:
      return kRowAllReduce;
    case LOpKind::AllToAll:
      return kRowAllToAll;
    case LOpKind::Optimizer:
      return kRowOptimizer;
  }
  return kRowF;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

Spread spread_of(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.mean_s = mean_of(v);
  double var = 0;
  for (double x : v) var += (x - s.mean_s) * (x - s.mean_s);
  s.min_s = v.front();
  s.median_s = median_of(v);
  s.max_s = v.back();
  s.stddev_s = s.n > 1 ? std::sqrt(var / static_cast<double>(s.n - 1)) : 0.0;
  return s;
}

Comparison compare_runs(const CheckedSchedule& cs, const std::vector<double>& simulated_node_s,
                        double simulated_iteration_s, const JobResult& measured) {
  const LoweredSchedule& ls = cs.schedule();
  Comparison c;
  c.simulated_iteration_s = simulated_iteration_s;
  add_simulated(c, cs, simulated_node_s);
  const MeasuredIndex x = index_schedule(ls);
  const auto by_worker = first_tp_ranks(ls, measured);
  const std::size_t iters = by_worker.begin()->second->iterations.size();
  for (std::size_t it = 0; it < iters; it++) add_measured_iteration(c, ls, x, by_worker, measured, it);
  if (iters) c.measured_iteration_s /= static_cast<double>(iters);
  if (c.ops) c.overhead_s_per_op = c.overhead_s / static_cast<double>(c.ops);
  return c;
}

std::string pct(double simulated, double measured) {
  if (measured <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100.0 * (simulated - measured) / measured);
  return b;
}

void print_comparison(std::FILE* out, const Comparison& c, int iterations) {
  std::fprintf(out, "\n%-12s %8s %16s %16s %10s\n", "", "count", "measured_s", "simulated_s", "error");
  std::fprintf(out, "%-12s %8d %16.9f %16.9f %10s\n", "iteration", iterations, c.measured_iteration_s,
               c.simulated_iteration_s, pct(c.simulated_iteration_s, c.measured_iteration_s).c_str());
  if (c.measured_iterations_s.size() > 1) {
    const Spread sp = spread_of(c.measured_iterations_s);
    std::fprintf(out, "%-12s measured min %.9f / median %.9f / max %.9f s, stddev %.9f s over %zu iterations\n", "",
                 sp.min_s, sp.median_s, sp.max_s, sp.stddev_s, c.measured_iterations_s.size());
  }
  std::fprintf(out, "median duration per op:\n");
  for (int k = 0; k < kOpKindRows; k++) {
    const KindStats& st = c.kinds[k];
    if (!st.measured_n() && !st.simulated_n()) continue;
    std::fprintf(out, "%-12s %8zu %16.9f %16.9f %10s\n", kRowNames[k],
                 st.measured_n() / static_cast<std::size_t>(iterations), st.measured(), st.simulated(),
                 pct(st.simulated(), st.measured()).c_str());
  }
  std::fprintf(out,
               "error = (simulated - measured) / measured. p2p measured = receive completion - later of send / receive "
               "posting; allreduce measured = last member's arrival to last completion.\n");
  if (c.kinds[kRowAllToAll].measured_n())  // MoE runs only: dense runs print what they did
    std::fprintf(out,
                 "alltoall measured = the time its compute op spent in its MoE layers' exchanges (waits included).\n");
  const double total = c.kernel_s + c.comm_s + c.overhead_s;
  std::fprintf(out,
               "runtime overhead (scheduling, bookkeeping): %.2f us per op; of the ranks' time: kernels %.1f%%, "
               "communication and waiting %.1f%%, overhead %.2f%%\n",
               c.overhead_s_per_op * 1e6, 100 * c.kernel_s / total, 100 * c.comm_s / total, 100 * c.overhead_s / total);
}

void print_comparison_warnings(std::FILE* out, const Comparison& c) {
  if (c.acausal)
    std::fprintf(out,
                 "warning: %zu receives completed before their send was posted on the aligned clocks: the ranks' clock "
                 "offsets are wrong, so the measured p2p times are not reliable.\n",
                 c.acausal);
}

std::string spread_json(const Spread& s) { return spread_object(s).dump(); }

std::string comparison_json(const Comparison& c, int iterations) {
  nlohmann::ordered_json j;
  j["iteration_s"] = {{"measured", c.measured_iteration_s},
                      {"simulated", c.simulated_iteration_s},
                      {"measured_per_iteration", c.measured_iterations_s},
                      {"measured_spread", spread_object(spread_of(c.measured_iterations_s))}};
  for (int k = 0; k < kOpKindRows; k++) {
    const KindStats& st = c.kinds[k];
    if (!st.measured_n() && !st.simulated_n()) continue;
    j["per_op_kind"][kRowNames[k]] = {
        {"count", st.measured_n() / static_cast<std::size_t>(iterations)},
        {"measured_s", st.measured()},
        {"simulated_s", st.simulated()},
        {"measured_mean_s", mean_of(st.measured_each)},
        {"simulated_mean_s", mean_of(st.simulated_each)},
        {"rel_error", st.measured() > 0 ? (st.simulated() - st.measured()) / st.measured() : 0.0}};
  }
  j["runtime_overhead_us_per_op"] = c.overhead_s_per_op * 1e6;
  return j.dump();
}

}  // namespace pipescope::runtime
