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

double cp_link_seconds(const ClusterSpec& c, long long span_gpus, double bytes) {
  if (span_gpus <= c.gpus_per_node) {
    const bool nvlink = c.fabric != IntraNodeFabric::PCIe;
    return (nvlink ? c.nvlink_latency_s : c.pcie_latency_s) + bytes / (nvlink ? c.nvlink_bw_Bps : c.pcie_bw_Bps);
  }
  const double share = std::min(1.0, static_cast<double>(c.nics_per_node) / c.gpus_per_node);
  return c.nic_latency_s + bytes / (c.nic_data_Bps() * share);
}

double cp_step_comm_seconds(const ClusterSpec& c, const ParallelSpec& p, double bytes) {
  return cp_link_seconds(c, 1LL * p.tp * p.cp, bytes);
}

CpLevels cp_levels(const ParallelSpec& p) {
  switch (p.cp_comm_type) {
    case CpCommType::P2P:
      return {1, p.cp, false};
    case CpCommType::AllGather:
      return {1, p.cp, true};
    case CpCommType::A2A:
      return {p.cp, 1, false};
    case CpCommType::A2AP2P:
      return {p.cp_a2a, p.cp / p.cp_a2a, false};
  }
  return {1, p.cp, false};
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

// Seconds of one all-to-all of a context-parallel rank's `bytes` over its a2a group (each rank keeps 1 / a2a of its
// buffer and sends the rest), over the group's link (NVLink while tp * a2a GPUs fit in a node, else the NIC share).
double cp_a2a_seconds(const Scenario& s, int a2a, double bytes) {
  return cp_link_seconds(s.cluster, 1LL * s.parallel.tp * a2a, bytes * (a2a - 1) / a2a);
}

// The rank's Q, K and V (qkv) or its output (o) of one layer, bytes.
double cp_qkv_bytes(const CpDims& d) { return d.e * (d.Th + 2 * d.kvb); }
double cp_o_bytes(const CpDims& d) { return d.e * d.Th; }

// Causal pairs of one sequence in attention step `step`: the ring's step, or with allgather the rank's two chunks
// against the gathered keys, its whole share in one kernel.
double step_pairs(const Scenario& s, const CpLevels& lv, int step) {
  if (!lv.gather) return cp_step_pairs(s.model.seq_len, lv.ring, step);
  double pairs = 0;
  for (int j = 0; j < lv.ring; j++) pairs += cp_step_pairs(s.model.seq_len, lv.ring, j);
  return pairs;
}

// All-gather of the whole K/V (allgather): each rank receives the cp - 1 others' K/V over the group's link.
double cp_gather_seconds(const Scenario& s, const CpDims& d) {
  return cp_step_comm_seconds(s.cluster, s.parallel, (s.parallel.cp - 1) * 2 * d.e * d.kvb);
}

}  // namespace

std::vector<KernelCost> cp_attention_forward_kernels(const KernelTimer& time, const Scenario& s, int b) {
  const CpLevels lv = cp_levels(s.parallel);
  const CpDims d = cp_dims(s, b);
  const double heads_share = 1.0 / lv.a2a;  // a rank's heads after the all-to-all
  const double comm = cp_step_comm_seconds(s.cluster, s.parallel, cp_kv_step_bytes(s, b));
  std::vector<KernelCost> k;
  if (lv.a2a > 1) k.push_back(wait_kernel(cp_a2a_seconds(s, lv.a2a, cp_qkv_bytes(d))));  // Q, K, V to head shards
  if (lv.gather) k.push_back(wait_kernel(cp_gather_seconds(s, d)));
  const int steps = lv.gather ? 1 : lv.ring;
  for (int i = 0; i < steps; i++) {
    const double pairs = b * step_pairs(s, lv, i);
    // The flash kernel of the step: reads Q and the step's K, V, writes its partial output and log-sum-exp.
    KernelCost step{4.0 * layer_dims(s.model).q * heads_share * pairs / s.parallel.tp,
                    d.e * (2 * d.Th + 2 * d.kvb) + d.lse, true};
    step.attention = FusedAttention::Forward;
    double busy = time(step);
    k.push_back(step);
    if (i > 0) {  // merge the step's partial output into the running one (fp32) by the log-sum-exps
      const KernelCost corr{4 * d.Th, (d.e + 8) * d.Th + 3 * d.lse, false};
      busy += time(corr);
      k.push_back(corr);
    }
    if (i + 1 < steps) k.push_back(wait_kernel(comm - busy));  // the next K/V arrives during this step
  }
  if (lv.a2a > 1) k.push_back(wait_kernel(cp_a2a_seconds(s, lv.a2a, cp_o_bytes(d))));  // output back to sequence shards
  return k;
}

std::vector<KernelCost> cp_attention_backward_kernels(const KernelTimer& time, const Scenario& s, int b) {
  const CpLevels lv = cp_levels(s.parallel);
  const CpDims d = cp_dims(s, b);
  const double heads_share = 1.0 / lv.a2a;
  // K/V on to the next rank and the dK/dV partial sums back: two transfers per step on the same ring.
  const double comm = 2 * cp_step_comm_seconds(s.cluster, s.parallel, cp_kv_step_bytes(s, b));
  std::vector<KernelCost> k;
  if (lv.a2a > 1) k.push_back(wait_kernel(cp_a2a_seconds(s, lv.a2a, cp_o_bytes(d))));  // dO to head shards
  if (lv.gather) k.push_back(wait_kernel(cp_gather_seconds(s, d)));                    // the K/V gathered again
  k.push_back({2 * d.Th, 2 * d.e * d.Th + d.lse, false});                              // D = rowsum(dO * O)
  const int steps = lv.gather ? 1 : lv.ring;
  for (int i = 0; i < steps; i++) {
    const double pairs = b * step_pairs(s, lv, i);
    // Recomputes the scores (5 matmuls over the pairs); reads Q, K, V, O, dO, writes dK, dV, accumulates dQ.
    KernelCost step{10.0 * layer_dims(s.model).q * heads_share * pairs / s.parallel.tp,
                    d.e * (3 * d.Th + 4 * d.kvb) + 8 * d.Th + 2 * d.lse, true};
    step.attention = FusedAttention::Backward;
    double busy = time(step);
    k.push_back(step);
    if (i > 0) {  // add this step's dK/dV into the partial sums received
      const KernelCost acc{2 * d.kvb, 6 * d.e * d.kvb, false};
      busy += time(acc);
      k.push_back(acc);
    }
    if (i + 1 < steps) k.push_back(wait_kernel(comm - busy));
  }
  k.push_back({0, (4 + d.e) * d.Th, false});                         // dQ fp32 -> 16 bit
  if (lv.gather) k.push_back(wait_kernel(cp_gather_seconds(s, d)));  // dK / dV reduce-scattered to their owners
  if (lv.a2a > 1) k.push_back(wait_kernel(cp_a2a_seconds(s, lv.a2a, cp_qkv_bytes(d))));  // dQ, dK, dV back
  return k;
}

namespace {

// One async collective of the context-parallel traffic before compute op `l`: `count` calls of `bytes`.
LoweredOp cp_traffic(const LoweredOp& l, LOpKind kind, std::int32_t group, int count, double bytes) {
  LoweredOp x = collective_op(kind, CollTag::ContextParallel, group, bytes, l.op);
  x.count = count;
  x.async = true;
  return x;
}

}  // namespace

LoweredSchedule add_cp_exchange(LoweredSchedule out, const Scenario& s) {
  const int cp = s.parallel.cp;
  if (cp <= 1) return out;
  const CpLevels lv = cp_levels(s.parallel);
  out.cp = cp;
  out.cp_a2a = lv.a2a;
  const int recompute_passes = s.schedule.recompute == Recompute::Full ? 1 : 0;  // flash: selective adds none
  for (std::size_t w = 0; w < out.per_worker.size(); w++) {
    // The ring (p2p, allgather, a2a+p2p's outer level) and the all-to-all groups (a2a, a2a+p2p's inner level).
    std::int32_t ring = -1, a2a = -1;
    const auto worker = static_cast<std::int32_t>(w);
    if (lv.ring > 1) {
      out.groups.push_back(
          CollGroup{CollTag::ContextParallel, {worker}, NodeDedup{}, lv.a2a > 1 ? CpRing::Outer : CpRing::Whole});
      ring = static_cast<std::int32_t>(out.groups.size() - 1);
    }
    if (lv.a2a > 1) {
      out.groups.push_back(
          CollGroup{CollTag::ContextParallel, {worker}, NodeDedup{}, lv.ring > 1 ? CpRing::Inner : CpRing::Whole});
      a2a = static_cast<std::int32_t>(out.groups.size() - 1);
    }
    const std::vector<LoweredOp> prog = std::move(out.per_worker[w]);
    std::vector<LoweredOp> next;
    next.reserve(prog.size() * 3 + 4);
    for (const LoweredOp& l : prog) {
      if (l.kind == LOpKind::Compute && l.op.kind != OpKind::BackwardWeight) {
        const int layers = stage_layer_range(s, l.op.stage).count;
        const int b = out.schedule.microbatches.at(static_cast<std::size_t>(l.op.microbatch)).seq_count;
        // Forward passes of the op (1, or the recomputed one of a backward) and backward passes (0 or 1).
        const int fwd = l.op.kind == OpKind::Forward ? 1 : recompute_passes, bwd = l.op.kind == OpKind::Forward ? 0 : 1;
        // Ring: K/V once per forward pass, K/V and dK/dV per backward pass (allgather: the gather, then the gather
        // and the dK/dV reduce-scatter: the same bytes on the same ring). A ring all-gather of cp x bytes moves
        // one rank's K/V per step.
        if (ring >= 0)
          next.push_back(
              cp_traffic(l, LOpKind::AllGather, ring, (fwd + 2 * bwd) * layers, lv.ring * cp_kv_step_bytes(s, b)));
        // All-to-all: Q, K, V and the output per forward pass, dO and dQ, dK, dV per backward pass.
        if (a2a >= 0) {
          const CpDims d = cp_dims(s, b);
          const int calls = (fwd + bwd) * layers;
          next.push_back(cp_traffic(l, LOpKind::AllToAll, a2a, calls, cp_qkv_bytes(d)));
          next.push_back(cp_traffic(l, LOpKind::AllToAll, a2a, calls, cp_o_bytes(d)));
        }
      }
      next.push_back(l);
    }
    out.per_worker[w] = std::move(next);
  }
  return out;
}

}  // namespace pipescope
