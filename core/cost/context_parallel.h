#pragma once
// Context parallelism (parallel.cp; Megatron-LM --context-parallel-size with Transformer Engine's ring
// attention). Each sequence is cut into 2 * cp chunks of s / (2 cp) tokens and context-parallel rank r holds
// chunks r and 2 cp - 1 - r (causal load balancing: every rank then has the same attention work). Everything
// but attention is token-local: the GEMMs, norms and element-wise kernels of a rank see s / cp tokens. Attention
// runs cp ring steps per layer: at step i a rank attends its queries to the K/V it received i steps earlier
// (step 0: its own) while it sends them on to the next rank and receives the next ones, so cp - 1 transfers of
// its K/V (2 b (s/cp) (kv/t) e bytes) per layer forward; backward moves the K/V again and the dK/dV partial sums
// (2 x cp - 1 transfers). A transfer overlaps the step's attention compute: per step only max(0, comm - compute)
// is exposed (the cost model's wait kernels). The ring runs over the rank grid in Megatron's order tp, cp, dp,
// pp: a context-parallel group's ranks are tp GPUs apart, inside one node while tp * cp fits (NVLink), else
// across nodes (the NIC). Gradients are reduced over dp * cp GPUs (core/lower/dag.cc rings) and the distributed
// optimizer shards over dp * cp; activation memory per rank is that of s / cp tokens.
// docs/cost-model.md "Context parallelism" has the formulas.

#include <vector>

#include "core/cost/kernel_cost.h"
#include "core/lower/lowering.h"

namespace pipescope {

// Causal (query, key) pairs one context-parallel rank computes at ring step `step` (0 .. cp-1) of one sequence
// of seq_len tokens: 2 c^2 + c at step 0 (its two diagonal blocks and chunk 2cp-1-r over chunk r), 2 c^2 after
// (half of a received K/V or half of its queries), c = seq_len / (2 cp). Summed over steps and ranks:
// seq_len (seq_len + 1) / 2. Throws std::invalid_argument unless 2 cp divides seq_len and 0 <= step < cp.
double cp_step_pairs(int seq_len, int cp, int step);

// Bytes one GPU sends per ring step and layer: the K and V of its s / cp tokens for b sequences, kv / t wide.
double cp_kv_step_bytes(const Scenario& s, int b);
// Seconds of one transfer of `bytes` per GPU inside a group of context-parallel ranks that spans `span_gpus`
// consecutive GPUs (Megatron's rank order: tp * the group's ranks): NVLink (or PCIe on a PCIe-only node) when they
// fit in a node, else the NIC share of a GPU (nics_per_node / gpus_per_node NICs, all GPUs of a node sending at
// once); latency + bytes / bandwidth.
double cp_link_seconds(const ClusterSpec& c, long long span_gpus, double bytes);
// One ring-step transfer between neighbouring context-parallel ranks: cp_link_seconds over tp * cp GPUs.
double cp_step_comm_seconds(const ClusterSpec& c, const ParallelSpec& p, double bytes);

// The two levels of parallel.cp_comm_type: an all-to-all over groups of `a2a` ranks (heads spread over them) and a
// ring of `ring` ranks (p2p: 1 x cp, a2a: cp x 1, a2a+p2p: cp_a2a x cp / cp_a2a); `gather`: allgather, the whole
// K/V gathered over the cp ranks (ring = cp) instead of passed around.
struct CpLevels {
  int a2a = 1, ring = 1;
  bool gather = false;
};
CpLevels cp_levels(const ParallelSpec& p);

// Attention of one layer on one GPU with cp > 1 (replacing the whole-sequence attention core): per ring step the
// fused flash kernel over the step's pairs (on 1 / a2a of the heads), from step 1 the output / log-sum-exp
// correction, and after each of the first ring - 1 steps a wait kernel of the exposed transfer time; with an
// all-to-all level, a wait for the Q, K, V all-to-all before and the output's after; with allgather, a wait for the
// K/V all-gather before one kernel over the rank's pairs. `time` prices the step kernels.
std::vector<KernelCost> cp_attention_forward_kernels(const KernelTimer& time, const Scenario& s, int b);
// Backward: D = rowsum(dO * O), per step the fused backward kernel (and from step 1 the dK/dV accumulation),
// the exposed part of the step's K/V + dK/dV transfers, and the dQ conversion; the all-to-alls of dO before and of
// dQ, dK, dV after; allgather: the K/V gathered again before and dK/dV reduce-scattered after.
std::vector<KernelCost> cp_attention_backward_kernels(const KernelTimer& time, const Scenario& s, int b);

// Lowering pass: before every forward, backward and input-gradient op of every worker, the op's context-parallel
// traffic as async collectives (tag ContextParallel) over the worker's context-parallel groups (cp_levels): with a
// ring level one AllGather, count = ring passes (layers of the op's stage; x2 in backward for the dK/dV ring, +
// layers with full recomputation), bytes = ring x cp_kv_step_bytes (a ring all-gather moves bytes / ring per step;
// allgather moves the same); with an all-to-all level two AllToAlls per pass and layer (Q, K, V; the output, or
// in backward dO; dQ, dK, dV). Posted when the op starts, so the transfers share the links with the op's other
// traffic; their exposed time is already in the op's duration (cost model), so nothing waits for them but the
// optimizer step. Sets ls.cp and ls.cp_a2a. Identity when cp == 1.
LoweredSchedule add_cp_exchange(LoweredSchedule ls, const Scenario& s);

}  // namespace pipescope
