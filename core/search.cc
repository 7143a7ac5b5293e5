#include "core/search.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "core/checks.h"
#include "core/dag.h"
#include "core/lowering.h"
#include "core/megatron_p2p.h"
#include "core/memory_model.h"
#include "core/nccl_model.h"
#include "core/pipeline.h"
#include "core/placement.h"
#include "core/scenario.h"
#include "core/schedule_registry.h"
#include "core/terapipe_planner.h"

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
  auto alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  for (std::size_t i = 0; i < msg.size();) {
    if (!std::isdigit(static_cast<unsigned char>(msg[i]))) {
      out += msg[i++];
      continue;
    }
    std::size_t j = i;
    while (j < msg.size() && (std::isdigit(static_cast<unsigned char>(msg[j])) || msg[j] == '.')) j++;
    while (j > i + 1 && msg[j - 1] == '.') j--;  // a sentence's full stop is not part of the number
    const bool in_word = (i > 0 && alpha(msg[i - 1])) || (j < msg.size() && alpha(msg[j]));
    out += in_word ? msg.substr(i, j - i) : "N";  // "1f1b" stays, "pp = 4" becomes "pp = N"
    i = j;
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
Scenario make_point(const Scenario& base, int dp, int pp, int tp, int v, int b, const ScheduleEntry& e, Recompute rc,
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
      s.schedule.slicing = "dp";  // TeraPipe's planner; made explicit in stage 1 (terapipe_slices)
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

struct Link {
  double bw_Bps = 0, latency_s = 0;
  bool bridged = false;  // through the node's one shared PCIe host bridge (cube-mesh "SYS" pairs, PCIe nodes)
};

// The path between two GPUs as the platform builds it (sim/platform.h): the NICs across nodes; inside a node
// NVSwitch's per-GPU port, a cube mesh's NVLinks (one or two) or its PCIe host path, or the PCIe bridge.
Link link_between(const ClusterSpec& c, int a, int b) {
  const int n = std::max(1, c.gpus_per_node);
  if (a / n != b / n) return {c.nic_data_Bps(), c.nic_latency_s, false};
  switch (c.fabric) {
    case IntraNodeFabric::NVSwitch:
      return {c.nvlink_bw_Bps, c.nvlink_latency_s, false};
    case IntraNodeFabric::CubeMesh: {
      const int k = n <= 8 ? cube_mesh_nvlinks(a % n, b % n) : 0;
      if (k > 0) return {k * c.nvlink_bw_Bps, c.nvlink_latency_s, false};
      return {c.pcie_bw_Bps, c.pcie_latency_s, true};
    }
    case IntraNodeFabric::PCIe:
      return {c.pcie_bw_Bps, c.pcie_latency_s, true};
  }
  return {c.nvlink_bw_Bps, c.nvlink_latency_s, false};
}

// What paces concurrent ring all-reduces (a collective group's rings run at once): the slowest hop, where the
// hops through a node's host bridge share it (one link for both directions).
Link rings_link(const ClusterSpec& c, const std::vector<std::vector<std::int32_t>>& rings) {
  Link slow{0, 0, false};
  int bridged = 0;
  for (const auto& ring : rings)
    for (std::size_t i = 0; i < ring.size(); i++)
      bridged += link_between(c, ring[i], ring[(i + 1) % ring.size()]).bridged;
  for (const auto& ring : rings)
    for (std::size_t i = 0; i < ring.size(); i++) {
      Link l = link_between(c, ring[i], ring[(i + 1) % ring.size()]);
      if (l.bridged) l.bw_Bps /= std::max(1, bridged);
      if (slow.bw_Bps == 0 || l.bw_Bps < slow.bw_Bps) slow.bw_Bps = l.bw_Bps;
      slow.latency_s = std::max(slow.latency_s, l.latency_s);
    }
  return slow;
}

// A collective call as the simulator's analytic collectives time it (NCCL's algorithm and protocol choice over
// the group's bandwidths, core/nccl_model.h): the slowest of the group's rings.
double nccl_rings_s(const ClusterSpec& c, const std::vector<std::vector<std::int32_t>>& rings, double bytes) {
  double t = 0;
  for (const auto& ring : rings)
    if (ring.size() > 1 && bytes > 0)
      t = std::max(t, nccl_collective_seconds(
                          nccl_ring_group(c, ring, [&](int a, int b) { return link_between(c, a, b).bw_Bps; }), bytes));
  return t;
}

// TeraPipe's planner at a search grain (about 64 units per sequence instead of 8 tokens, so that a plan costs
// milliseconds), written out as explicit slices: stage 2, stage 3 and --emit then run the same slicing without
// planning again. Micro-batches of one sequence (the joint batch split is `pipescope plan`'s).
void terapipe_slices(Scenario& s) {
  const int L = s.model.seq_len;
  int grain = std::max(1, L / 64);
  while (L % grain != 0) grain--;
  PlannerOptions po;
  po.grain = grain;
  const SlicingPlan plan = plan_scenario(s, po, 1);
  if (plan.groups.empty()) throw std::invalid_argument("terapipe: the planner found no slicing");
  for (const MicroBatchGroup& g : plan.groups)
    if (g.slice_tokens != plan.groups.front().slice_tokens)
      return;  // sequences sliced differently: leave it to the planner in make_schedule (slicing: dp)
  s.schedule.slicing = "explicit";
  s.schedule.slice_tokens = plan.groups.front().slice_tokens;
  s.schedule.seq_slices = static_cast<int>(s.schedule.slice_tokens.size());
}

}  // namespace

std::string candidate_label(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  std::string l = std::string(to_string(s.schedule.kind)) + " dp" + std::to_string(p.dp) + " pp" +
                  std::to_string(p.pp) + " tp" + std::to_string(p.tp) + " v" + std::to_string(p.v) + " b" +
                  std::to_string(p.micro_batch_size);
  if (s.schedule.seq_slices > 1) l += " k" + std::to_string(s.schedule.seq_slices);
  return l + " rc-" + to_string(s.schedule.recompute);
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
            for (Recompute rc : space.recompute) {
              if (e->traits.slicing == SlicePlan::TeraPipe && b != 1) continue;  // see terapipe_slices
              out.enumerated++;
              Scenario s = make_point(base, dp, pp, tp, v, b, *e, rc, space.seq1f1b_segments);
              try {
                validate_scenario(s);
                if (e->traits.slicing == SlicePlan::TeraPipe) terapipe_slices(s), validate_scenario(s);
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
  const LoweredSchedule ls = with_p2p_mode(lower(sch, 1, par.tp, *cost, uses_scatter_gather(s)), s);
  const Placement full = make_placement(s.sim.placement, par.dp, par.pp, par.tp, c);
  Placement one = full;
  one.dp = 1;
  one.gpu.assign(full.gpu.begin(), full.gpu.begin() + static_cast<std::ptrdiff_t>(par.pp) * par.tp);
  const Dag dag = build_dag(ls, one);
  // The simulator's `analytic` and `auto` collectives follow NCCL's cost model; `ring` and `aggregate` are flows
  // over the links (sim/collectives.h), estimated here by a ring all-reduce at the slowest hop.
  const bool nccl = s.sim.collectives == "analytic" || s.sim.collectives == "auto";
  std::vector<Link> group_link(dag.rings.size());  // per collective group, computed once
  for (std::size_t g = 0; g < dag.rings.size(); g++)
    if (!dag.rings[g].empty()) group_link[g] = rings_link(c, dag.rings[g]);
  // Longest path in the DAG: compute takes its seconds, a transfer its bytes over the link, a collective as the
  // simulator's collective model times it; no contention (SimGrid's job in stage 3).
  const auto duration_s = [&](std::uint32_t u) {
    const DagNode& n = dag.nodes[u];
    switch (n.kind) {
      case DagKind::Compute:
        return n.amount;
      case DagKind::Transfer: {
        // tp lanes run at once (one per TP rank); through a host bridge they share it.
        const Link l = link_between(c, n.gpu, n.gpu2);
        const double bw = l.bridged ? l.bw_Bps / std::max(1, par.tp) : l.bw_Bps;
        return n.gpu == n.gpu2 ? 0.0 : l.latency_s + n.amount / bw;
      }
      case DagKind::Collective: {
        const auto& rings = dag.rings[static_cast<std::size_t>(n.group)];
        if (rings.empty() || rings.front().size() < 2) return 0.0;
        const Link& l = group_link[static_cast<std::size_t>(n.group)];
        return n.count *
               (nccl ? nccl_rings_s(c, rings, n.amount)
                     : ring_allreduce_s(n.amount, static_cast<int>(rings.front().size()), l.bw_Bps, l.latency_s));
      }
      case DagKind::Join:
        return 0.0;
    }
    return 0.0;
  };
  double makespan = 0;
  try {
    for (double f : earliest_finish(dag, duration_s)) makespan = std::max(makespan, f);
  } catch (const CheckError&) {
    throw std::runtime_error(s.source + ": the lowered schedule's DAG has a cycle");
  }
  // The data-parallel gradient all-reduce, after the pipeline: the slowest rank's, over its dp peers.
  double grad_sync = 0;
  if (par.dp > 1)
    for (int r = 0; r < par.pp; r++) {
      std::vector<std::int32_t> peers;
      for (int d = 0; d < par.dp; d++) peers.push_back(full.gpu_of(d * par.pp + r));
      const Link l = rings_link(c, {peers});
      grad_sync = std::max(grad_sync, nccl ? nccl_rings_s(c, {peers}, cost->grad_bytes(r))
                                           : ring_allreduce_s(cost->grad_bytes(r), par.dp, l.bw_Bps, l.latency_s));
    }
  return makespan + grad_sync;
}

void rank_by_estimate(std::vector<Candidate>& c) {
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.estimate_s != b.estimate_s ? a.estimate_s < b.estimate_s : a.label < b.label;
  });
}

}  // namespace pipescope
