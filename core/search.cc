#include "core/search.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "core/dag.h"
#include "core/lowering.h"
#include "core/memory_model.h"
#include "core/pipeline.h"
#include "core/placement.h"
#include "core/scenario.h"
#include "core/schedule_registry.h"

namespace pipescope {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; i++)
    if (n % i == 0) d.push_back(i);
  return d;
}

// The values of `all` that `only` allows (all of them when `only` is empty).
std::vector<int> allowed(const std::vector<int>& all, const std::vector<int>& only) {
  if (only.empty()) return all;
  std::vector<int> out;
  for (int x : all)
    if (std::find(only.begin(), only.end(), x) != only.end()) out.push_back(x);
  return out;
}

// A rejection message as a group: without the scenario's name and with every number as N, so that the same
// rule broken by different layouts counts once.
std::string reason_of(const std::string& what, const std::string& source) {
  std::string msg = what.rfind(source + ": ", 0) == 0 ? what.substr(source.size() + 2) : what;
  std::string out;
  for (std::size_t i = 0; i < msg.size(); i++) {
    if (std::isdigit(static_cast<unsigned char>(msg[i]))) {
      while (i + 1 < msg.size() && (std::isdigit(static_cast<unsigned char>(msg[i + 1])) || msg[i + 1] == '.')) i++;
      out += 'N';
    } else {
      out += msg[i];
    }
  }
  return out;
}

std::vector<const ScheduleEntry*> kinds_of(const SearchSpace& space) {
  std::vector<const ScheduleEntry*> out;
  if (space.schedules.empty()) {
    for (const ScheduleEntry& e : schedule_registry())
      if (!e.traits.from_file) out.push_back(&e);
    return out;
  }
  for (const std::string& name : space.schedules) {
    const ScheduleEntry* e = find_schedule(name);
    if (!e)
      throw std::invalid_argument("--schedules: unknown schedule '" + name + "' (valid: " + schedule_names() + ")");
    if (e->traits.from_file)
      throw std::invalid_argument("--schedules: '" + name + "' reads a file; search generates its schedules");
    out.push_back(e);
  }
  return out;
}

// The candidate scenario: the base with this layout, schedule and slicing (the planners' optimum).
Scenario make_point(const Scenario& base, int dp, int pp, int tp, int v, int b, const ScheduleEntry& e, bool rc,
                    int segments) {
  Scenario s = base;
  s.parallel.dp = dp, s.parallel.pp = pp, s.parallel.tp = tp, s.parallel.v = v;
  s.parallel.micro_batch_size = b;
  s.parallel.stage_layers.clear();
  s.schedule.kind = e.kind;
  s.schedule.recompute = rc;
  s.schedule.slice_tokens.clear();
  s.schedule.seq_slices = 1;
  s.schedule.slicing = "uniform";
  switch (e.traits.slicing) {
    case SlicePlan::Whole:
      break;
    case SlicePlan::TeraPipe:
      s.schedule.slicing = "dp";  // TeraPipe's dynamic-programming planner
      break;
    case SlicePlan::Seq1F1B:
      s.schedule.slicing = "cwp";  // equal causal FLOPs per segment
      s.schedule.seq_slices = segments;
      break;
  }
  s.name = base.name + "/" + candidate_label(s);
  return s;
}

// Ring all-reduce of `bytes` over `n` GPUs at bandwidth bw and latency lat per step.
double ring_allreduce_s(double bytes, int n, double bw_Bps, double lat_s) {
  if (n < 2 || bytes <= 0) return 0;
  return 2.0 * (n - 1) / n * bytes / bw_Bps + 2.0 * (n - 1) * lat_s;
}

bool crosses_nodes(const std::vector<std::int32_t>& gpus, int per_node) {
  for (std::int32_t g : gpus)
    if (g / per_node != gpus.front() / per_node) return true;
  return false;
}

}  // namespace

std::string candidate_label(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  std::string l = std::string(to_string(s.schedule.kind)) + " dp" + std::to_string(p.dp) + " pp" +
                  std::to_string(p.pp) + " tp" + std::to_string(p.tp) + " v" + std::to_string(p.v) + " b" +
                  std::to_string(p.micro_batch_size);
  if (s.schedule.seq_slices > 1) l += " k" + std::to_string(s.schedule.seq_slices);
  return l + (s.schedule.recompute ? " rc1" : " rc0");
}

Stage1 enumerate_candidates(const Scenario& base, const SearchSpace& space) {
  const ClusterSpec& c = base.cluster;
  const int gpus = c.total_gpus();
  if (gpus < 1) throw std::invalid_argument(base.source + ": the cluster has no GPUs");
  const auto kinds = kinds_of(space);
  const double limit = space.max_memory_bytes > 0 ? space.max_memory_bytes : c.device.memory_bytes;
  const std::vector<int> mbs = space.micro_batch_sizes.empty() ? std::vector<int>{1, 2, 4, 8} : space.micro_batch_sizes;
  Stage1 out;
  const auto tps = allowed(divisors(c.gpus_per_node), space.tp);  // tensor parallelism stays inside a node
  if (tps.empty())
    throw std::invalid_argument("--tp: no value divides the " + std::to_string(c.gpus_per_node) + " GPUs of a node");
  for (int tp : tps)
    for (int pp : allowed(divisors(gpus / tp), space.pp)) {
      const int dp = gpus / (tp * pp);
      for (int b : mbs)
        for (const ScheduleEntry* e : kinds) {
          const std::vector<int> vs = e->traits.fixed_v > 0   ? std::vector<int>{e->traits.fixed_v}
                                      : e->traits.interleaved ? space.v
                                                              : std::vector<int>{1};
          for (int v : vs)
            for (bool rc : space.recompute) {
              out.enumerated++;
              const Scenario s = make_point(base, dp, pp, tp, v, b, *e, rc, space.seq1f1b_segments);
              try {
                validate_scenario(s);
                const MemoryReport mem = memory_report(s, make_schedule(s));
                double peak = 0;
                for (const RankMemory& r : mem.ranks) peak = std::max(peak, r.peak_bytes);
                if (peak > limit) {
                  out.rejected["memory: the worst rank's peak exceeds the " +
                               std::string(space.max_memory_bytes > 0 ? "--max-memory-GB limit" : "device memory")]++;
                  continue;
                }
                out.survivors.push_back(Candidate{s, candidate_label(s), peak, 0});
              } catch (const std::exception& ex) {
                out.rejected[reason_of(ex.what(), s.source)]++;
              }
            }
        }
    }
  return out;
}

double estimate_iteration_s(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  const ClusterSpec& c = s.cluster;
  const auto cost = make_cost_model(s);
  const Schedule sch = make_schedule(s);
  // One replica: replica 0's GPUs of the real placement, so its hops cross nodes where the real run's do.
  LoweredSchedule ls = lower(sch, 1, par.tp, *cost, s.schedule.scatter_gather);
  ls.blocking_sends = s.sim.p2p == "blocking";
  const Placement full = make_placement(s.sim.placement, par.dp, par.pp, par.tp, c);
  Placement one = full;
  one.dp = 1;
  one.gpu.assign(full.gpu.begin(), full.gpu.begin() + static_cast<std::ptrdiff_t>(par.pp) * par.tp);
  const Dag dag = build_dag(ls, one);
  const int per_node = std::max(1, c.gpus_per_node);
  auto link = [&](bool inter, double& bw, double& lat) {
    bw = inter ? c.nic_bw_Bps : c.nvlink_bw_Bps;
    lat = inter ? c.nic_latency_s : c.nvlink_latency_s;
  };
  // Longest path in the DAG (Kahn's order): compute takes its seconds, a transfer its bytes over the link, a
  // collective its ring all-reduce; no contention (SimGrid's job in stage 3).
  std::vector<double> finish(dag.size(), 0), start(dag.size(), 0);
  std::vector<std::uint32_t> left(dag.preds.begin(), dag.preds.end());
  std::vector<std::uint32_t> ready;
  for (std::uint32_t u = 0; u < dag.size(); u++)
    if (left[u] == 0) ready.push_back(u);
  double makespan = 0;
  std::size_t done = 0;
  while (!ready.empty()) {
    const std::uint32_t u = ready.back();
    ready.pop_back();
    done++;
    const DagNode& n = dag.nodes[u];
    double d = 0;
    switch (n.kind) {
      case DagKind::Compute:
        d = n.amount;
        break;
      case DagKind::Transfer: {
        double bw, lat;
        link(n.gpu / per_node != n.gpu2 / per_node, bw, lat);
        d = n.gpu == n.gpu2 ? 0 : lat + n.amount / bw;
        break;
      }
      case DagKind::Collective: {
        const auto& rings = dag.rings[static_cast<std::size_t>(n.group)];
        if (!rings.empty() && rings.front().size() > 1) {
          double bw, lat;
          link(crosses_nodes(rings.front(), per_node), bw, lat);
          d = n.count * ring_allreduce_s(n.amount, static_cast<int>(rings.front().size()), bw, lat);
        }
        break;
      }
      case DagKind::Join:
        break;
    }
    finish[u] = start[u] + d;
    makespan = std::max(makespan, finish[u]);
    for (std::uint32_t e = dag.succ_begin[u]; e < dag.succ_begin[u + 1]; e++) {
      const std::uint32_t w = dag.succ[e];
      start[w] = std::max(start[w], finish[u]);
      if (--left[w] == 0) ready.push_back(w);
    }
  }
  if (done != dag.size()) throw std::runtime_error(s.source + ": the lowered schedule's DAG has a cycle");
  // The data-parallel gradient all-reduce, after the pipeline: the slowest rank's, over its dp peers.
  double grad_sync = 0;
  if (par.dp > 1)
    for (int r = 0; r < par.pp; r++) {
      std::vector<std::int32_t> peers;
      for (int d = 0; d < par.dp; d++) peers.push_back(full.gpu_of(d * par.pp + r));
      double bw, lat;
      link(crosses_nodes(peers, per_node), bw, lat);
      grad_sync = std::max(grad_sync, ring_allreduce_s(cost->grad_bytes(r), par.dp, bw, lat));
    }
  return makespan + grad_sync;
}

void rank_by_estimate(std::vector<Candidate>& c) {
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.estimate_s != b.estimate_s ? a.estimate_s < b.estimate_s : a.label < b.label;
  });
}

}  // namespace pipescope
