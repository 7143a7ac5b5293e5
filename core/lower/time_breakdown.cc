#include "core/lower/time_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

namespace pipescope {

double TimeBreakdown::total_s() const {
  double t = 0;
  for (const TimePart& p : time_parts()) t += this->*p.member;
  return t;
}

const std::vector<TimePart>& time_parts() {
  using B = TimeBreakdown;
  static const std::vector<TimePart> parts = {
      {"forward_s", &B::forward_s, "forward compute", "forward"},
      {"backward_s", &B::backward_s, "backward compute (less recomputation)", "backward"},
      {"recompute_s", &B::recompute_s, "recomputed forward", "recompute"},
      {"optimizer_s", &B::optimizer_s, "optimizer step", "optimizer"},
      {"tp_comm_s", &B::tp_comm_s, "exposed tensor-parallel communication", "TP"},
      {"cp_comm_s", &B::cp_comm_s, "exposed context-parallel communication", "CP"},
      {"ep_comm_s", &B::ep_comm_s, "exposed expert-parallel all-to-all", "EP a2a"},
      {"dp_comm_s", &B::dp_comm_s, "exposed data-parallel communication", "DP"},
      {"p2p_s", &B::p2p_s, "exposed pipeline p2p", "p2p"},
      {"bubble_s", &B::bubble_s, "pipeline bubble (waiting on another stage)", "bubble"},
  };
  return parts;
}

std::string breakdown_line(const TimeBreakdown& b) {
  const double total = b.total_s();
  std::string out = "time (mean over workers):";
  const char* sep = " ";
  for (const TimePart& p : time_parts()) {
    const double x = b.*p.member;
    if (!(total > 0) || !(1000 * x >= total)) continue;  // under 0.1%: it would print as noise
    char pct[32];
    std::snprintf(pct, sizeof pct, " %.1f%%", 100 * x / total);
    out += sep + std::string(p.title) + pct;
    sep = ", ";
  }
  return out;
}

namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// What a collective's exposed time counts as.
double TimeBreakdown::*collective_part(CollTag tag) {
  switch (tag) {
    case CollTag::TensorParallel:
      return &TimeBreakdown::tp_comm_s;
    case CollTag::ContextParallel:
      return &TimeBreakdown::cp_comm_s;
    case CollTag::ExpertParallel:
      return &TimeBreakdown::ep_comm_s;
    case CollTag::ScatterGather:  // the rest of a pipeline message, gathered on arrival
      return &TimeBreakdown::p2p_s;
    case CollTag::None:
    case CollTag::DataParallel:
    case CollTag::ParamGather:
    case CollTag::Embedding:
    case CollTag::ExpertData:  // the experts' gradients: data-parallel communication of their own group
      return &TimeBreakdown::dp_comm_s;
  }
  return &TimeBreakdown::dp_comm_s;
}

class Blame {
 public:
  Blame(const Dag& dag, const LoweredSchedule& ls, const std::vector<double>& start, const std::vector<double>& end)
      : dag_(dag), ls_(ls), start_(start), last_pred_(dag.size(), kNone) {
    for (std::uint32_t u = 0; u < dag.size(); u++)
      for (std::uint32_t k = dag.succ_begin[u]; k < dag.succ_begin[u + 1]; k++) {
        const std::uint32_t v = dag.succ[k];
        if (last_pred_[v] == kNone || end[u] > end[last_pred_[v]]) last_pred_[v] = u;
      }
  }
  std::uint32_t last_pred(std::uint32_t u) const { return last_pred_[u]; }

  // Charges [a, b) of worker w's time to what node x (finishing at about b) and its chain waited for.
  void charge(int w, double a, double b, std::uint32_t x, TimeBreakdown& out) const {
    while (b > a && x != kNone) {
      const DagNode& n = dag_.nodes[x];
      double TimeBreakdown::*part = nullptr;
      switch (n.kind) {
        case DagKind::Compute:
          if (n.worker != w) {
            out.bubble_s += b - a;
            return;
          }
          break;  // its own op (the tail's chain): not a wait
        case DagKind::Transfer:
          part = &TimeBreakdown::p2p_s;
          break;
        case DagKind::Collective:
          part = collective_part(op_of(n).tag);
          break;
        case DagKind::Join:
          break;
      }
      const double s = std::max(a, start_[x]);
      if (part && b > s) out.*part += b - s;
      b = std::min(b, s);
      x = last_pred_[x];
    }
    if (b > a) out.bubble_s += b - a;  // nothing before it: the iteration's start
  }

 private:
  const LoweredOp& op_of(const DagNode& n) const {
    return ls_.per_worker[static_cast<std::size_t>(n.worker)][static_cast<std::size_t>(n.index)];
  }
  const Dag& dag_;
  const LoweredSchedule& ls_;
  const std::vector<double>& start_;
  std::vector<std::uint32_t> last_pred_;
};

// A compute node's seconds by what it runs: its context-parallel waits first, then (backward) its recomputation.
void add_busy(const LoweredSchedule& ls, const DagNode& n, double seconds, const OpShares& shares, TimeBreakdown& out) {
  const LoweredOp& l = ls.per_worker[static_cast<std::size_t>(n.worker)][static_cast<std::size_t>(n.index)];
  if (l.kind == LOpKind::Optimizer) {
    out.optimizer_s += seconds;
    return;
  }
  const int seqs = ls.schedule.microbatches[static_cast<std::size_t>(l.op.microbatch)].seq_count;
  const double cp = std::clamp(shares.cp_wait_s ? shares.cp_wait_s(l.op, seqs) : 0.0, 0.0, seconds);
  out.cp_comm_s += cp;
  seconds -= cp;
  if (l.op.kind == OpKind::Forward) {
    out.forward_s += seconds;
    return;
  }
  const double re = std::clamp(shares.recompute_s ? shares.recompute_s(l.op, seqs) : 0.0, 0.0, seconds);
  out.recompute_s += re;
  out.backward_s += seconds - re;
}

}  // namespace

RunBreakdown time_breakdown(const Dag& dag, const LoweredSchedule& ls, const std::vector<double>& start,
                            const std::vector<double>& end, double iteration_s, const OpShares& shares) {
  if (start.size() < dag.size() || end.size() < dag.size())
    throw std::invalid_argument("time breakdown: timings for " + std::to_string(std::min(start.size(), end.size())) +
                                " of " + std::to_string(dag.size()) + " DAG nodes");
  const Blame blame(dag, ls, start, end);
  const auto workers = static_cast<std::size_t>(ls.workers());
  // Per worker: its compute nodes in start order, and the last-ending node of its program.
  std::vector<std::vector<std::uint32_t>> busy(workers);
  std::vector<std::uint32_t> last(workers, kNone);
  std::uint32_t final_node = kNone;
  for (std::uint32_t u = 0; u < dag.size(); u++) {
    const DagNode& n = dag.nodes[u];
    if (final_node == kNone || end[u] > end[final_node]) final_node = u;
    if (n.kind == DagKind::Compute && n.worker >= 0 && static_cast<std::size_t>(n.worker) < workers)
      busy[static_cast<std::size_t>(n.worker)].push_back(u);
  }
  for (std::size_t w = 0; w < workers && w < dag.node_of.size(); w++)
    for (std::int32_t u : dag.node_of[w])
      if (u >= 0 && (last[w] == kNone || end[static_cast<std::size_t>(u)] > end[last[w]]))
        last[w] = static_cast<std::uint32_t>(u);
  RunBreakdown rb;
  rb.per_worker.resize(workers);
  for (std::size_t w = 0; w < workers; w++) {
    TimeBreakdown& out = rb.per_worker[w];
    auto& mine = busy[w];
    std::sort(mine.begin(), mine.end(),
              [&](std::uint32_t a, std::uint32_t b) { return start[a] != start[b] ? start[a] < start[b] : a < b; });
    const int wi = static_cast<int>(w);
    double t = 0;
    for (std::uint32_t u : mine) {
      if (start[u] > t) blame.charge(wi, t, start[u], blame.last_pred(u), out);
      const double from = std::max(t, start[u]);
      if (end[u] > from) add_busy(ls, dag.nodes[u], end[u] - from, shares, out);
      t = std::max(t, end[u]);
    }
    if (last[w] != kNone && end[last[w]] > t) {
      blame.charge(wi, t, end[last[w]], last[w], out);
      t = end[last[w]];
    }
    if (iteration_s > t && final_node != kNone) blame.charge(wi, t, iteration_s, final_node, out);
  }
  for (const TimePart& p : time_parts()) {
    double sum = 0;
    for (const TimeBreakdown& b : rb.per_worker) sum += b.*p.member;
    rb.mean.*p.member = workers > 0 ? sum / static_cast<double>(workers) : 0.0;
  }
  return rb;
}

}  // namespace pipescope
