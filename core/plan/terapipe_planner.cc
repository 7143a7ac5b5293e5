#include "core/plan/terapipe_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/ring_collective.h"
#include "core/cost/scenario_cost.h"

namespace pipescope {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Reused DP buffers: the exact search runs hundreds of DPs of the same size.
struct DpWork {
  std::vector<double> S;
  std::vector<int> q;
};

// Algorithm 1 with the cap; fills w and returns S[L] (+inf when infeasible).
double run_dp(const SliceTimeTable& t, double t_max, DpWork& w) {
  const int U = t.units();
  w.S.assign(static_cast<std::size_t>(U) + 1, kInf);
  w.q.assign(static_cast<std::size_t>(U) + 1, 0);
  double* S = w.S.data();
  S[0] = 0;
  for (int i = 1; i <= U; i++) {
    const double* row = t.row(i);  // row[k - 1] = t(k, i - k)
    double best = kInf;
    int bk = 0;
    for (int k = 1; k <= i; k++) {
      const double x = row[k - 1];
      if (x <= t_max) {
        const double v = S[i - k] + x;
        if (v < best) best = v, bk = k;
      }
    }
    S[i] = best;
    w.q[i] = bk;
  }
  return S[U];
}

CappedSlicing backtrack(const SliceTimeTable& t, const DpWork& w) {
  CappedSlicing r;
  const int U = t.units();
  if (!std::isfinite(w.S[U])) return r;
  r.sum_s = w.S[U];
  for (int i = U; i > 0; i -= w.q[i]) {
    const int k = w.q[i];
    r.slices.push_back(k);
    r.max_s = std::max(r.max_s, t.at(k, i - k));
  }
  std::reverse(r.slices.begin(), r.slices.end());
  return r;
}

// One evaluation of the joint problem under a cap: token DP per micro-batch size, then the unbounded
// knapsack over sizes (docs/papers.md#terapipe).
struct CapResult {
  double sum_s = kInf, max_s = 0;
  std::vector<int> count;               // per size b (index b - 1): micro-batches of that size
  std::vector<CappedSlicing> per_size;  // token slicing of each size
  double score(int K, double fixed) const { return sum_s + (K - 1) * max_s + fixed; }
};

CapResult evaluate_cap(const std::vector<SliceTimeTable>& tables, int batch, double cap, DpWork& w) {
  const int bmax = static_cast<int>(tables.size());
  CapResult r;
  r.per_size.resize(bmax);
  std::vector<double> F(bmax, kInf);
  for (int b = 1; b <= bmax && b <= batch; b++) {
    run_dp(tables[b - 1], cap, w);
    r.per_size[b - 1] = backtrack(tables[b - 1], w);
    if (r.per_size[b - 1].feasible()) F[b - 1] = r.per_size[b - 1].sum_s;
  }
  std::vector<double> g(static_cast<std::size_t>(batch) + 1, kInf);
  std::vector<int> choice(static_cast<std::size_t>(batch) + 1, 0);
  g[0] = 0;
  for (int a = 1; a <= batch; a++)
    for (int b = 1; b <= std::min(a, bmax); b++)
      if (std::isfinite(F[b - 1]) && g[a - b] + F[b - 1] < g[a]) g[a] = g[a - b] + F[b - 1], choice[a] = b;
  if (!std::isfinite(g[batch])) return r;
  r.sum_s = g[batch];
  r.count.assign(bmax, 0);
  for (int a = batch; a > 0; a -= choice[a]) r.count[choice[a] - 1]++;
  for (int b = 1; b <= bmax; b++)
    if (r.count[b - 1] > 0) r.max_s = std::max(r.max_s, r.per_size[b - 1].max_s);
  return r;
}

SlicingPlan to_plan(const CapResult& c, int K, double fixed, int grain) {
  SlicingPlan p;
  // Larger micro-batches first; within a size all micro-batches share one slicing.
  for (int b = static_cast<int>(c.count.size()); b >= 1; b--) {
    if (c.count[b - 1] == 0) continue;
    MicroBatchGroup g;
    g.b = b;
    g.count = c.count[b - 1];
    for (int u : c.per_size[b - 1].slices) g.slice_tokens.push_back(u * grain);
    p.groups.push_back(std::move(g));
  }
  p.sum_s = c.sum_s;
  p.max_s = c.max_s;
  p.fixed_s = fixed;
  p.total_s = c.score(K, fixed);
  return p;
}

}  // namespace

SliceTimeTable::SliceTimeTable(int units, const std::function<double(int l, int c)>& t_units) : units_(units) {
  if (units < 1) throw std::invalid_argument("SliceTimeTable: need at least one unit, got " + std::to_string(units));
  v_.resize(offset(units + 1));
  for (int e = 1; e <= units; e++)
    for (int l = 1; l <= e; l++) {
      const double x = t_units(l, e - l);
      if (!std::isfinite(x) || x < 0)
        throw std::invalid_argument("SliceTimeTable: t(" + std::to_string(l) + ", " + std::to_string(e - l) +
                                    ") = " + std::to_string(x) + " is not a finite non-negative time");
      v_[offset(e) + l - 1] = x;
    }
}

CappedSlicing token_dp(const SliceTimeTable& t, double t_max) {
  DpWork w;
  run_dp(t, t_max, w);
  return backtrack(t, w);
}

int SlicingPlan::slices_per_sequence() const {
  return groups.empty() ? 0 : static_cast<int>(groups.front().slice_tokens.size());
}

SlicingPlan plan_joint(const std::vector<SliceTimeTable>& tables, int batch, int K, const PlannerOptions& o,
                       double fixed_s) {
  if (tables.empty()) throw std::invalid_argument("plan_joint: no slice-time table");
  if (batch < 1) throw std::invalid_argument("plan_joint: batch must be >= 1, got " + std::to_string(batch));
  if (K < 1) throw std::invalid_argument("plan_joint: K must be >= 1, got " + std::to_string(K));
  if (o.grain < 1) throw std::invalid_argument("plan_joint: grain must be >= 1, got " + std::to_string(o.grain));
  for (const auto& t : tables)
    if (t.units() != tables.front().units()) throw std::invalid_argument("plan_joint: tables of different lengths");
  const int bmax = std::min(static_cast<int>(tables.size()), batch);
  std::vector<double> cand;
  for (int b = 1; b <= bmax; b++) cand.insert(cand.end(), tables[b - 1].values().begin(), tables[b - 1].values().end());
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  const int n = static_cast<int>(cand.size());

  DpWork w;
  int evaluated = 0;
  double best_T = kInf;
  CapResult best;
  auto eval = [&](int i) {
    CapResult r = evaluate_cap(tables, batch, cand[i], w);
    evaluated++;
    if (std::isfinite(r.sum_s) && r.score(K, fixed_s) < best_T) best_T = r.score(K, fixed_s), best = r;
    return r.sum_s;
  };

  if (o.linear_scan) {
    double last = -kInf;
    for (int i = 0; i < n; i++) {
      if (K * cand[i] + fixed_s > best_T) break;  // early stop: every later plan has T >= K * max
      if (evaluated > 0 && cand[i] - last < o.epsilon_s) continue;
      last = cand[i];
      eval(i);
    }
  } else {
    // Exact bisection over candidate caps. An interval [lo, hi] carries S*(cand[hi]); any plan whose slowest
    // slice lies in [cand[lo], cand[hi]] has T >= max(K * cand[lo], S*(cand[hi]) + (K - 1) * cand[lo]).
    struct Interval {
      int lo, hi;
      double s_hi;
    };
    std::vector<Interval> stack{{0, n - 1, eval(n - 1)}};
    while (!stack.empty()) {
      const Interval iv = stack.back();
      stack.pop_back();
      if (iv.lo >= iv.hi) continue;  // a single candidate: cand[hi] has been evaluated
      const double lo_cap = cand[iv.lo];
      const double bound = std::max(K * lo_cap, iv.s_hi + (K - 1) * lo_cap) + fixed_s;
      if (!(bound < best_T)) continue;
      const int mid = iv.lo + (iv.hi - iv.lo) / 2;
      const double s_mid = eval(mid);
      stack.push_back({mid + 1, iv.hi, iv.s_hi});
      if (std::isfinite(s_mid)) stack.push_back({iv.lo, mid, s_mid});  // infeasible at mid: so is everything below
    }
  }
  if (!std::isfinite(best_T)) throw std::logic_error("plan_joint: no feasible slicing (the largest cap admits all)");
  SlicingPlan p = to_plan(best, K, fixed_s, o.grain);
  p.evaluated = evaluated;
  p.candidates = n;
  return p;
}

SlicingPlan plan_tokens(const SliceTimeTable& t, int K, const PlannerOptions& o, double fixed_s) {
  return plan_joint({t}, 1, K, o, fixed_s);
}

std::string slices_text(const std::vector<int>& s) {
  std::vector<std::pair<int, int>> runs;
  for (int x : s) {
    if (!runs.empty() && runs.back().first == x)
      runs.back().second++;
    else
      runs.push_back({x, 1});
  }
  const bool plain = std::all_of(runs.begin(), runs.end(), [](const auto& r) { return r.second == 1; });
  std::string out;
  if (plain) {
    out = "[";
    for (std::size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  }
  for (std::size_t i = 0; i < runs.size(); i++) {
    out += (i ? " + [" : "[") + std::to_string(runs[i].first) + "]";
    if (runs[i].second > 1) out += " * " + std::to_string(runs[i].second);
  }
  return out;
}

std::string scheme_text(const SlicingPlan& p) {
  std::string out;
  for (std::size_t i = 0; i < p.groups.size(); i++) {
    const auto& g = p.groups[i];
    out += (i ? " + " : "") + std::string("[(") + std::to_string(g.b) + ", " + slices_text(g.slice_tokens) + ")] * " +
           std::to_string(g.count);
  }
  return out;
}

double scheme_seconds(const SliceTimeFn& t, const std::vector<MicroBatchGroup>& groups, int K, double fixed_s,
                      double* sum_out, double* max_out) {
  double sum = 0, mx = 0;
  for (const auto& g : groups) {
    double per = 0;
    int c = 0;
    for (int l : g.slice_tokens) {
      const double x = t(g.b, l, c);
      per += x;
      mx = std::max(mx, x);
      c += l;
    }
    sum += per * g.count;
  }
  if (sum_out) *sum_out = sum;
  if (max_out) *max_out = mx;
  return sum + (K - 1) * mx + fixed_s;
}

// ---------------------------------------------------------------- scenario glue

ScenarioSliceModel scenario_slice_model(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  const std::string src = s.source.empty() ? "" : s.source + ": ";
  if (par.v != 1)
    throw std::invalid_argument(src + "TeraPipe planner: parallel.v must be 1, got " + std::to_string(par.v));
  if (par.dp < 1 || par.global_batch % par.dp != 0)
    throw std::invalid_argument(src + "TeraPipe planner: global_batch must be a multiple of dp");
  std::shared_ptr<const CostModel> cm = make_cost_model(s);  // analytic or calibration profile
  const ClusterSpec& cl = s.cluster;
  const int K = par.pp, tp = par.tp;
  const int stage = K / 2;  // a middle stage: no embedding, no LM head (uniform layers, docs/papers.md#terapipe)
  const int stages_per_node = std::max(1, cl.gpus_per_node / tp);
  const bool cross = K > stages_per_node && cl.nodes > 1;
  const double p2p_bw = cross ? cl.nic_data_Bps() : cl.nvlink_bw_Bps;
  const double p2p_lat = cross ? cl.nic_latency_s : cl.nvlink_latency_s;
  const double nv_bw = cl.nvlink_bw_Bps > 0 ? cl.nvlink_bw_Bps : cl.pcie_bw_Bps;
  const double nv_lat = cl.nvlink_bw_Bps > 0 ? cl.nvlink_latency_s : cl.pcie_latency_s;
  if (!(p2p_bw > 0) || (tp > 1 && !(nv_bw > 0)))
    throw std::invalid_argument(src + "TeraPipe planner: the cluster has no bandwidth for stage-to-stage transfers");
  ScenarioSliceModel m;
  m.K = K;
  m.batch = par.global_batch / par.dp;
  m.seq_len = s.model.seq_len;
  m.t = [cm, stage, tp, p2p_bw, p2p_lat, nv_bw, nv_lat](int b, int l, int c) {
    Op f;
    f.kind = OpKind::Forward;
    f.rank = f.stage = stage;
    f.tok_begin = c;
    f.tok_end = c + l;
    Op bw = f;
    bw.kind = OpKind::Backward;
    double x = cm->compute_seconds(f, b) + cm->compute_seconds(bw, b);
    if (tp > 1) {
      // Ring all-reduce inside the node.
      for (const Op* op : {&f, &bw})
        x += cm->tp_allreduce_calls(*op) * ring_collective_s(cm->tp_allreduce_bytes(*op, b), tp, nv_bw, nv_lat);
    }
    x += 2.0 * (p2p_lat + cm->p2p_bytes(f, b) / p2p_bw);  // activation forward, gradient backward
    return x;
  };
  m.fixed_s = std::max(cm->optimizer_seconds(0), cm->optimizer_seconds(K - 1));
  return m;
}

std::vector<SliceTimeTable> slice_tables(const ScenarioSliceModel& m, int grain, int max_b) {
  if (grain < 1) throw std::invalid_argument("TeraPipe planner: grain must be >= 1, got " + std::to_string(grain));
  if (m.seq_len % grain != 0)
    throw std::invalid_argument("TeraPipe planner: seq_len " + std::to_string(m.seq_len) +
                                " is not a multiple of the grain " + std::to_string(grain));
  std::vector<SliceTimeTable> out;
  for (int b = 1; b <= max_b; b++)
    out.emplace_back(m.seq_len / grain, [&](int l, int c) { return m.t(b, l * grain, c * grain); });
  return out;
}

SlicingPlan plan_scenario(const Scenario& s, const PlannerOptions& o, int max_b) {
  const ScenarioSliceModel m = scenario_slice_model(s);
  const int bmax = std::max(1, std::min(max_b, m.batch));
  return plan_joint(slice_tables(m, o.grain, bmax), m.batch, m.K, o, m.fixed_s);
}

}  // namespace pipescope
