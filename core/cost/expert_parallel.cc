#include "core/cost/expert_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/cost/moe_load.h"
#include "core/cost/nccl_model.h"
#include "core/lower/cost_model.h"
#include "core/lower/grad_sync.h"
#include "core/model/placement.h"

namespace pipescope {

int moe_alltoall_calls(const Scenario& s, const Op& op) {
  const int layers = stage_moe_layer_count(s, op.stage);
  // Recomputing the MoE layer (full, or the moe module) reruns its dispatch and combine before its backward.
  const int recomputed = s.schedule.recomputes(RecomputeModule::Moe) ? 2 * layers : 0;
  switch (op.kind) {
    case OpKind::Forward:
      return 2 * layers;
    case OpKind::Backward:
    case OpKind::BackwardInput:  // the token gradients go back through the experts' dgrads
      return 2 * layers + recomputed;
    case OpKind::BackwardWeight:
      return 0;
  }
  return 0;
}

double moe_alltoall_bytes(const Scenario& s, const Op& op, int microbatch_seqs, double overload) {
  const ParallelSpec& p = s.parallel;
  // The GPU's tokens: the op's slice of its micro-batch, / cp (context parallelism), / tp (sequence parallelism).
  const double tokens = static_cast<double>(microbatch_seqs) * op.tokens() / p.cp / p.tp;
  const double e = s.training.act_bytes_per_elem();
  double per_elem = e;  // the mean over the op's calls
  if (s.training.moe_dispatch_fp8) {
    // Forward pairs (a dispatch at 1 B + a 4 B scale per 128 elements, a combine at e B): the forward's, and the
    // recomputed ones of a backward; the backward's own pairs stay at e B.
    const double forward_pair = (1.0 + 4.0 / 128 + e) / 2;
    const int layers = stage_moe_layer_count(s, op.stage), calls = moe_alltoall_calls(s, op);
    const double fwd_calls = op.kind == OpKind::Forward ? calls : calls - 2.0 * layers;
    if (calls > 0) per_elem = (fwd_calls * forward_pair + (calls - fwd_calls) * e) / calls;
  }
  // With expert tensor parallelism each copy goes to the etp GPUs that share its expert (and each returns a partial
  // sum in the combine): Megatron-Core's flex dispatcher sends to them directly, the all-to-all one gathers over them.
  return tokens * s.model.moe_top_k * s.model.hidden * per_elem * overload * p.etp;
}

NodeDedup node_dedup(const Scenario& s) {
  const TrainingSpec& t = s.training;
  return {s.model.moe_experts, s.model.moe_top_k, t.moe_router_groups, t.moe_router_group_topk};
}

double moe_alltoall_estimate_s(const Scenario& s, const Op& op, int microbatch_seqs) {
  const int calls = s.model.moe() ? moe_alltoall_calls(s, op) : 0;
  const int group = s.parallel.expert_group_gpus();
  if (calls == 0 || group == 1) return 0.0;
  const ClusterSpec& c = s.cluster;
  const int per_node = std::min(group, c.gpus_per_node);
  const double intra = c.fabric == IntraNodeFabric::PCIe ? c.pcie_bw_Bps : c.nvlink_bw_Bps;
  NcclGroup g = nccl_group(c, group, (group + per_node - 1) / per_node, per_node, intra);
  if (s.training.moe_dispatcher == "deepep") g.dedup = node_dedup(s);
  const double bytes = moe_alltoall_bytes(s, op, microbatch_seqs, stage_expert_load(s, op.stage).time);
  return calls * nccl_alltoall_seconds(g, bytes);
}

namespace {

// The expert-parallel group of worker w: its index in `groups`, made on first use.
struct EpGroups {
  const LoweredSchedule& ls;
  int span;                            // workers per group (1 when ep divides a worker's GPUs)
  std::vector<std::int32_t> of_block;  // per (replica block, rank): group index or -1
  std::vector<CollGroup>& groups;
  NodeDedup dedup;  // DeepEP: CollGroup::node_dedup
  std::int32_t get(int w) {
    const int d = w / ls.p, r = w % ls.p, block = d / span;
    std::int32_t& g = of_block[static_cast<std::size_t>(block * ls.p + r)];
    if (g < 0) {
      CollGroup cg{CollTag::ExpertParallel, {}};
      cg.node_dedup = dedup;
      for (int i = 0; i < span; i++) cg.workers.push_back(LoweredSchedule::worker(block * span + i, r, ls.p));
      g = static_cast<std::int32_t>(groups.size());
      groups.push_back(std::move(cg));
    }
    return g;
  }
};

void add_alltoalls(LoweredSchedule& out, const Scenario& s) {
  const int width = out.tp * out.cp, group = s.parallel.expert_group_gpus();
  const int span = group > width ? group / width : 1;
  if (out.dp % span != 0)
    throw std::invalid_argument("expert parallelism: etp * ep = " + std::to_string(group) + " spans " +
                                std::to_string(span) + " replicas, which do not divide dp = " + std::to_string(out.dp));
  EpGroups eg{out, span, std::vector<std::int32_t>(static_cast<std::size_t>(out.dp / span * out.p), -1), out.groups,
              s.training.moe_dispatcher == "deepep" ? node_dedup(s) : NodeDedup{}};
  // Uneven expert loads: the busiest GPU of the group receives (and sends back) `overload` times the mean.
  std::vector<double> overload;
  for (int g = 0; g < s.parallel.pp * s.parallel.v; g++) overload.push_back(stage_expert_load(s, g).time);
  for (std::size_t w = 0; w < out.per_worker.size(); w++) {
    const std::vector<LoweredOp>& prog = out.per_worker[w];
    std::vector<LoweredOp> next;
    next.reserve(prog.size() * 2 + 4);
    for (const LoweredOp& l : prog) {
      next.push_back(l);
      if (l.kind != LOpKind::Compute) continue;
      const int calls = moe_alltoall_calls(s, l.op);
      if (calls == 0) continue;
      const int b = out.schedule.microbatches.at(static_cast<std::size_t>(l.op.microbatch)).seq_count;
      LoweredOp x =
          collective_op(LOpKind::AllToAll, CollTag::ExpertParallel, eg.get(static_cast<int>(w)),
                        moe_alltoall_bytes(s, l.op, b, overload.at(static_cast<std::size_t>(l.op.stage))), l.op);
      x.count = calls;
      next.push_back(x);
    }
    out.per_worker[w] = std::move(next);
  }
}

// The experts' gradient reduction before the optimizer step and (distributed optimizer) their parameter gather
// after it, over the expert-data-parallel group of each pipeline rank (all its dp workers).
void add_expert_grad_sync(LoweredSchedule& out, const Scenario& s, const CostModel& cost) {
  const bool copies = out.schedule.style == StageStyle::Dual;  // DualPipe: the pair's copies reduce together
  if (s.parallel.expert_data_gpus() <= 1 && !copies) return;
  const bool dist = s.training.sharded_optimizer();
  const std::vector<std::int32_t> groups = rank_groups(out, CollTag::ExpertData);
  for (int r = 0; r < out.p; r++) {
    const double grads = cost.expert_grad_bytes(r), params = cost.expert_param_bytes(r);
    if (grads <= 0) continue;
    const std::int32_t g = groups[static_cast<std::size_t>(r)];
    for (std::int32_t w : out.groups[static_cast<std::size_t>(g)].workers) {
      if (w % out.p != r) continue;  // the pair's other rank: its own turn
      std::vector<LoweredOp>& prog = out.per_worker[static_cast<std::size_t>(w)];
      std::size_t opt = 0;
      while (opt < prog.size() && prog[opt].kind != LOpKind::Optimizer) opt++;
      if (opt == prog.size())
        throw std::logic_error("expert parallelism: worker " + std::to_string(w) + " has no optimizer step");
      const LOpKind reduce = dist ? LOpKind::ReduceScatter : LOpKind::AllReduce;
      prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(opt),
                  collective_op(reduce, CollTag::ExpertData, g, grads));
      if (dist)
        prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(opt) + 2,
                    collective_op(LOpKind::AllGather, CollTag::ExpertData, g, params));
    }
  }
}

}  // namespace

LoweredSchedule add_expert_parallel(LoweredSchedule out, const Scenario& s, const CostModel& cost) {
  if (!s.model.moe()) return out;
  out.ep = s.parallel.expert_group_gpus();
  add_alltoalls(out, s);
  add_expert_grad_sync(out, s, cost);
  return out;
}

}  // namespace pipescope
