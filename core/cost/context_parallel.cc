#include "core/cost/context_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/model/model_shape.h"
#include "core/model/placement.h"

namespace pipescope {

double cp_step_pairs(int seq_len, int cp, int step) {
  if (cp < 1 || seq_len % (2 * cp) != 0 || step < 0 || step >= cp)
    throw std::invalid_argument("context parallelism: seq_len " + std::to_string(seq_len) + ", cp " +
                                std::to_string(cp) + ", step " + std::to_string(step) +
                                ": needs 2 * cp to divide seq_len and 0 <= step < cp");
  const double c = static_cast<double>(seq_len) / (2.0 * cp);
  return step == 0 ? 2 * c * c + c : 2 * c * c;
}

double cp_kv_step_bytes(const Scenario& s, int b) {
  const double tokens = static_cast<double>(s.model.seq_len) / s.parallel.cp;
  return 2.0 * b * tokens * layer_dims(s.model).kv / s.parallel.tp * s.training.act_bytes_per_elem();
}

double cp_step_comm_seconds(const ClusterSpec& c, const ParallelSpec& p, double bytes) {
  if (1LL * p.tp * p.cp <= c.gpus_per_node) {
    const bool nvlink = c.fabric != IntraNodeFabric::PCIe;
    return (nvlink ? c.nvlink_latency_s : c.pcie_latency_s) + bytes / (nvlink ? c.nvlink_bw_Bps : c.pcie_bw_Bps);
  }
  const double share = std::min(1.0, static_cast<double>(c.nics_per_node) / c.gpus_per_node);
  return c.nic_latency_s + bytes / (c.nic_data_Bps() * share);
}

namespace {

// A pure wait: no bytes, no FLOPs, `s` seconds (a step's exposed transfer; its launch is the p2p call's).
KernelCost wait_kernel(double s) {
  KernelCost k;
  k.wait_s = std::max(0.0, s);
  return k;
}

struct CpDims {
  double T, Th, lse, kvb, e;  // token rows, T * q / t (q: attention width), fp32 log-sum-exp bytes, b * (s/cp) * kv /
                              // t, element bytes
};

CpDims cp_dims(const Scenario& s, int b) {
  const double t = s.parallel.tp, l = static_cast<double>(s.model.seq_len) / s.parallel.cp;
  CpDims d;
  d.T = b * l;
  d.Th = d.T * layer_dims(s.model).q / t;
  d.lse = 4.0 * b * (s.model.heads / t) * l;
  d.kvb = b * l * layer_dims(s.model).kv / t;
  d.e = s.training.act_bytes_per_elem();
  return d;
}

}  // namespace

std::vector<KernelCost> cp_attention_forward_kernels(const KernelTimer& time, const Scenario& s, int b) {
  const int cp = s.parallel.cp;
  const CpDims d = cp_dims(s, b);
  const double comm = cp_step_comm_seconds(s.cluster, s.parallel, cp_kv_step_bytes(s, b));
  std::vector<KernelCost> k;
  for (int i = 0; i < cp; i++) {
    const double pairs = b * cp_step_pairs(s.model.seq_len, cp, i);
    // The flash kernel of the step: reads Q and the step's K, V, writes its partial output and log-sum-exp.
    KernelCost step{4.0 * layer_dims(s.model).q * pairs / s.parallel.tp, d.e * (2 * d.Th + 2 * d.kvb) + d.lse, true};
    step.attention = FusedAttention::Forward;
    double busy = time(step);
    k.push_back(step);
    if (i > 0) {  // merge the step's partial output into the running one (fp32) by the log-sum-exps
      const KernelCost corr{4 * d.Th, (d.e + 8) * d.Th + 3 * d.lse, false};
      busy += time(corr);
      k.push_back(corr);
    }
    if (i + 1 < cp) k.push_back(wait_kernel(comm - busy));  // the next K/V arrives during this step
  }
  return k;
}

std::vector<KernelCost> cp_attention_backward_kernels(const KernelTimer& time, const Scenario& s, int b) {
  const int cp = s.parallel.cp;
  const CpDims d = cp_dims(s, b);
  // K/V on to the next rank and the dK/dV partial sums back: two transfers per step on the same ring.
  const double comm = 2 * cp_step_comm_seconds(s.cluster, s.parallel, cp_kv_step_bytes(s, b));
  std::vector<KernelCost> k;
  k.push_back({2 * d.Th, 2 * d.e * d.Th + d.lse, false});  // D = rowsum(dO * O)
  for (int i = 0; i < cp; i++) {
    const double pairs = b * cp_step_pairs(s.model.seq_len, cp, i);
    // Recomputes the scores (5 matmuls over the pairs); reads Q, K, V, O, dO, writes dK, dV, accumulates dQ.
    KernelCost step{10.0 * layer_dims(s.model).q * pairs / s.parallel.tp,
                    d.e * (3 * d.Th + 4 * d.kvb) + 8 * d.Th + 2 * d.lse, true};
    step.attention = FusedAttention::Backward;
    double busy = time(step);
    k.push_back(step);
    if (i > 0) {  // add this step's dK/dV into the partial sums received
      const KernelCost acc{2 * d.kvb, 6 * d.e * d.kvb, false};
      busy += time(acc);
      k.push_back(acc);
    }
    if (i + 1 < cp) k.push_back(wait_kernel(comm - busy));
  }
  k.push_back({0, (4 + d.e) * d.Th, false});  // dQ fp32 -> 16 bit
  return k;
}

LoweredSchedule add_cp_exchange(LoweredSchedule out, const Scenario& s) {
  const int cp = s.parallel.cp;
  if (cp <= 1) return out;
  out.cp = cp;
  const int recompute_passes = s.schedule.recompute == Recompute::Full ? 1 : 0;  // flash: selective adds none
  for (std::size_t w = 0; w < out.per_worker.size(); w++) {
    out.groups.push_back(CollGroup{CollTag::ContextParallel, {static_cast<std::int32_t>(w)}});
    const auto g = static_cast<std::int32_t>(out.groups.size() - 1);
    const std::vector<LoweredOp> prog = std::move(out.per_worker[w]);
    std::vector<LoweredOp> next;
    next.reserve(prog.size() * 2 + 4);
    for (const LoweredOp& l : prog) {
      if (l.kind == LOpKind::Compute && l.op.kind != OpKind::BackwardWeight) {
        const int layers = stage_layer_range(s, l.op.stage).count;
        const int b = out.schedule.microbatches.at(static_cast<std::size_t>(l.op.microbatch)).seq_count;
        const int passes = l.op.kind == OpKind::Forward ? 1 : 2 + recompute_passes;
        LoweredOp x;
        x.kind = LOpKind::AllGather;
        x.tag = CollTag::ContextParallel;
        x.op = l.op;
        x.group = g;
        x.count = passes * layers;
        x.bytes = cp * cp_kv_step_bytes(s, b);
        x.async = true;
        next.push_back(x);
      }
      next.push_back(l);
    }
    out.per_worker[w] = std::move(next);
  }
  return out;
}

}  // namespace pipescope
