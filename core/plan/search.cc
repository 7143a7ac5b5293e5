#include "core/plan/search.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "core/cost/scenario_cost.h"
#include "core/lower/checks.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/model/schedule_registry.h"
#include "core/plan/pipeline.h"
#include "core/plan/terapipe_planner.h"

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
  auto in_framework = [&](const ScheduleEntry& e) { return !space.one_framework || e.traits.runs_in(space.framework); };
  if (space.schedules.empty()) {
    for (const ScheduleEntry& e : schedule_registry())
      if (!e.traits.from_file && in_framework(e)) out.push_back(&e);
    return out;
  }
  for (const std::string& name : space.schedules) {
    const ScheduleEntry* e = find_schedule(name);
    if (!e)
      throw std::invalid_argument("--schedules: unknown schedule '" + name + "' (valid: " + schedule_names() + ")");
    if (e->traits.from_file)
      throw std::invalid_argument("--schedules: '" + name + "' reads a file; search generates its schedules");
    if (!in_framework(*e))
      throw std::invalid_argument("--schedules: '" + name + "' is not a schedule of " + to_string(space.framework) +
                                  " (--framework; simulate --list-schedules shows who runs what)");
    out.push_back(e);
  }
  return out;
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

// The expert layouts (ep, etp) of a layout: (1, 1) for a dense model; for an MoE model the divisors of its experts
// (those --ep allows) and the expert-tensor-parallel degrees --etp allows (default 1 and tp, Megatron-Core's default;
// dividing the expert's inner size) that Megatron-Core's folding takes: the group of etp * ep GPUs dividing the tp x dp
// GPUs of a stage (dp here counts the context-parallel ranks too), and a divisor or a multiple of tp
// (core/model/scenario.cc check_expert_parallel says why).
std::vector<std::pair<int, int>> expert_layouts(const Scenario& base, const SearchSpace& space, int tp, int dp) {
  if (!base.model.moe()) return {{1, 1}};
  std::vector<int> etps = space.etp;
  if (etps.empty()) etps = tp == 1 ? std::vector<int>{1} : std::vector<int>{1, tp};
  std::vector<std::pair<int, int>> out;
  for (int ep : allowed(divisors(base.model.moe_experts), space.ep))
    for (int etp : etps) {
      const int group = ep * etp;
      if (base.model.moe_ffn_hidden % etp == 0 && (tp * dp) % group == 0 && (tp % group == 0 || group % tp == 0))
        out.emplace_back(ep, etp);
    }
  return out;
}

// Context-parallel degrees: the space's, or 1 and the powers of two that keep kMinTokensPerCpRank tokens per rank.
std::vector<int> cp_degrees(const SearchSpace& space, int seq_len) {
  if (!space.cp.empty()) return space.cp;
  std::vector<int> out = {1};
  for (int c = 2; seq_len / c >= kMinTokensPerCpRank; c *= 2) out.push_back(c);
  return out;
}

// How a cp-way group communicates: the space's types (a2a+p2p once per all-to-all level dividing cp, 2 .. cp / 2),
// or the scenario's own; the scenario's alone at cp = 1, where there is no group.
std::vector<std::pair<CpCommType, int>> cp_comm_layouts(const Scenario& base, const SearchSpace& space, int cp) {
  const ParallelSpec& p = base.parallel;
  if (cp == 1 || space.cp_comm_types.empty()) return {{p.cp_comm_type, p.cp_a2a}};
  std::vector<std::pair<CpCommType, int>> out;
  for (CpCommType t : space.cp_comm_types) {
    if (t != CpCommType::A2AP2P) {
      out.emplace_back(t, 1);
      continue;
    }
    for (int a = 2; a <= cp / 2; a++)
      if (cp % a == 0) out.emplace_back(t, a);
  }
  return out;
}

// Chunks per rank for an interleaved schedule without a fixed v: the space's, or every v > 1 dividing the layers of a
// pipeline rank (when the layers do not split evenly over the ranks, v 2 alone: the checks refuse it with their
// reason).
std::vector<int> chunk_counts(const SearchSpace& space, int layers, int pp) {
  if (!space.v.empty()) return space.v;
  std::vector<int> out;
  if (layers % pp != 0) return {2};  // refused by the checks with their own message
  for (int v : divisors(layers / pp))
    if (v > 1) out.push_back(v);
  return out;
}

// Whether selective recomputation reruns nothing in `s` (its modules hold nothing the layer would keep, such as the
// attention core under flash attention): the cost model's recomputation of every stage's backward is then zero, and
// the candidate is its rc-none twin again.
bool selective_reruns_nothing(const Scenario& s) {
  const auto cost = make_cost_model(s);
  Op op;
  op.kind = OpKind::Backward;
  op.tok_end = s.model.seq_len;
  for (op.stage = 0; op.stage < s.parallel.pp * s.parallel.v; op.stage++)
    if (cost->recompute_seconds(op, s.parallel.micro_batch_size) > 0) return false;
  return true;
}

}  // namespace

double search_memory_limit(const Scenario& base, const SearchSpace& space) {
  if (space.max_memory_bytes > 0) return space.max_memory_bytes;  // the user's own limit, taken as it is
  const double device = base.cluster.device.memory_bytes;
  if (!(space.headroom_bytes >= 0) || space.headroom_bytes >= device)
    throw std::invalid_argument("--headroom-GB: " + std::to_string(space.headroom_bytes / 1e9) +
                                " GB leaves nothing of the device's " + std::to_string(device / 1e9) + " GB");
  return device - space.headroom_bytes;
}

std::vector<bool> fsdp_values(const Scenario& base, const SearchSpace& space, int dp) {
  if (space.fsdp.empty()) return {base.training.fsdp};
  if (dp == 1) return {false};
  return space.fsdp;
}

// FSDP shards the optimizer state already: the distributed optimizer is not a dimension then.
std::vector<bool> dist_opts(const SearchSpace& space, int dp, bool fsdp) {
  if (dp == 1 || space.distributed_optimizer.empty() || fsdp) return {false};
  return space.distributed_optimizer;
}

std::string candidate_label(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  std::string l = std::string(to_string(s.schedule.kind)) + " dp" + std::to_string(p.dp) + " pp" +
                  std::to_string(p.pp) + " tp" + std::to_string(p.tp) + " v" + std::to_string(p.v) + " b" +
                  std::to_string(p.micro_batch_size);
  if (s.schedule.seq_slices > 1) l += " k" + std::to_string(s.schedule.seq_slices);
  if (p.cp > 1) l += " cp" + std::to_string(p.cp);
  if (p.cp > 1 && p.cp_comm_type != CpCommType::P2P)
    l += std::string(" ") + to_string(p.cp_comm_type) +
         (p.cp_comm_type == CpCommType::A2AP2P ? std::to_string(p.cp_a2a) : std::string());
  if (s.model.moe()) l += " ep" + std::to_string(p.ep) + (p.etp > 1 ? " etp" + std::to_string(p.etp) : "");
  if (!p.stage_layers.empty()) {  // an uneven layout (the scenario as written: candidates split evenly)
    l += " layers";
    for (std::size_t i = 0; i < p.stage_layers.size(); i++) l += (i ? "," : " ") + std::to_string(p.stage_layers[i]);
  }
  l += std::string(" rc-") + to_string(s.schedule.recompute);
  return s.training.fsdp ? l + " fsdp" : s.training.distributed_optimizer ? l + " do" : l;
}

Scenario make_point(const Scenario& base, const SearchPoint& p, int segments) {
  const ScheduleEntry& e = *p.kind;
  Scenario s = with_schedule(base, e.kind);  // a kind-file scenario's file goes with its kind
  s.training.distributed_optimizer = p.distributed_optimizer;
  s.training.fsdp = p.fsdp;
  s.training.fsdp_reshard_after_forward = p.fsdp && base.training.fsdp_reshard_after_forward;
  // It overlaps the optimizer's gather; FSDP runs its own overlaps (training.fsdp).
  if (!p.distributed_optimizer) s.training.overlap_param_gather = false;
  s.parallel.dp = p.dp, s.parallel.pp = p.pp, s.parallel.tp = p.tp, s.parallel.v = p.v, s.parallel.cp = p.cp;
  s.parallel.cp_comm_type = p.cp_comm_type, s.parallel.cp_a2a = p.cp_a2a;
  if (base.model.moe()) {
    s.parallel.ep = p.ep, s.parallel.etp = p.etp;
    if (p.tp > 1) s.parallel.sequence_parallel = true;  // Megatron-Core requires it for MoE with tp > 1
  }
  // The userbuffers overlap where a candidate has something to overlap (Megatron-LM turns it off at tp 1).
  s.training.tp_comm_overlap = base.training.tp_comm_overlap && p.tp > 1 && s.parallel.sequence_parallel;
  s.parallel.micro_batch_size = p.micro_batch_size;
  s.parallel.stage_layers.clear();
  s.schedule.recompute = p.recompute;
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

void for_each_point(const Scenario& base, const SearchSpace& space, const std::function<void(const SearchPoint&)>& f) {
  const ClusterSpec& c = base.cluster;
  const int gpus = c.total_gpus();
  if (gpus < 1) throw std::invalid_argument(base.source + ": the cluster has no GPUs");
  const auto kinds = kinds_of(space);
  const std::vector<int> mbs = space.micro_batch_sizes.empty() ? std::vector<int>{1, 2, 4, 8} : space.micro_batch_sizes;
  const auto tps = allowed(divisors(c.gpus_per_node), space.tp);  // tensor parallelism stays inside a node
  if (tps.empty())
    throw std::invalid_argument("--tp: no value divides the " + std::to_string(c.gpus_per_node) + " GPUs of a node");
  if (!base.model.moe() && !space.ep.empty())
    throw std::invalid_argument("--ep: the model has no experts (model.num_experts)");
  if (!base.model.moe() && !space.etp.empty())
    throw std::invalid_argument("--etp: the model has no experts (model.num_experts)");
  const std::vector<int> cps = cp_degrees(space, base.model.seq_len);
  for (int tp : tps)
    for (int pp : allowed(divisors(gpus / tp), space.pp))
      for (int cp : cps) {
        if ((gpus / (tp * pp)) % cp != 0) continue;  // no layout: cp does not divide what tp x pp leave
        const int dp = gpus / (tp * pp * cp);
        for (const auto& [ep, etp] : expert_layouts(base, space, tp, dp * cp)) {
          for (int b : mbs)
            for (const ScheduleEntry* e : kinds) {
              // Several chunks on a one-rank pipeline are no pipeline: the frameworks run them with pp > 1 only.
              if (pp == 1 && (e->traits.interleaved || e->traits.fixed_v > 1)) continue;
              const std::vector<int> vs = e->traits.fixed_v > 0   ? std::vector<int>{e->traits.fixed_v}
                                          : e->traits.interleaved ? chunk_counts(space, base.model.layers, pp)
                                                                  : std::vector<int>{1};
              for (int v : vs)
                for (Recompute rc : space.recompute)
                  for (bool fsdp : fsdp_values(base, space, dp))
                    for (bool dist_opt : dist_opts(space, dp, fsdp))
                      for (const auto& [comm, a2a] : cp_comm_layouts(base, space, cp)) {
                        if (e->traits.slicing == SlicePlan::TeraPipe && b != 1) continue;  // see terapipe_slices
                        f(SearchPoint{dp, pp, tp, v, b, ep, etp, cp, e, rc, dist_opt, fsdp, comm, a2a});
                      }
            }
        }
      }
}

Stage1 enumerate_candidates(const Scenario& base, const SearchSpace& space) {
  const double limit = search_memory_limit(base, space);
  Stage1 out;
  for_each_point(base, space, [&](const SearchPoint& pt) {
    out.enumerated++;
    Scenario s = make_point(base, pt, space.seq1f1b_segments);
    try {
      validate_scenario(s);
      if (pt.recompute == Recompute::Selective && selective_reruns_nothing(s)) {
        out.rejected
            ["selective recomputation reruns nothing here (e.g. the attention core with flash attention): the "
             "rc-none configuration stands for it"]++;
        return;
      }
      if (pt.kind->traits.slicing == SlicePlan::TeraPipe) terapipe_slices(s), validate_scenario(s);
      const MemoryReport mem = memory_report(s, make_schedule(s));
      double peak = 0;
      for (const RankMemory& r : mem.ranks) peak = std::max(peak, r.peak_bytes);
      if (peak > limit) {
        out.rejected["memory: the worst rank's peak exceeds the " +
                     std::string(space.max_memory_bytes > 0 ? "--max-memory-GB limit"
                                 : space.headroom_bytes > 0 ? "device memory less the headroom"
                                                            : "device memory")]++;
        return;
      }
      out.survivors.push_back(Candidate{s, candidate_label(s), peak, 0});
    } catch (const std::exception& ex) {
      out.rejected[reason_of(ex.what(), s.source)]++;
    }
  });
  return out;
}

void rank_by_estimate(std::vector<Candidate>& c) {
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.estimate_s != b.estimate_s ? a.estimate_s < b.estimate_s : a.label < b.label;
  });
}

}  // namespace pipescope
