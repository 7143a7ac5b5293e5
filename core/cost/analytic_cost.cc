// AnalyticCostModel: transformer FLOPs and bytes per kernel, a roofline with efficiency per kernel, and an
// asynchronous kernel stream with a per-kernel host issue cost. Per GPU of a t-way tensor-parallel group.
//
// Notation: b sequences, l tokens of the op's slice after c tokens of context, K = c + l keys, h hidden,
// f ffn_hidden, a heads, V vocabulary, t TP degree, e bytes per activation element (2 for fp16/bf16),
// T = b*l token rows, S = b*(a/t)*l*K attention-score elements on this GPU.
//
// FLOPs (useful, forward, per GPU; docs/calibration.md, docs/papers.md#megatron):
//   QKV 6*T*h^2/t, output projection 2*T*h^2/t, MLP 4*T*h*f/t (= 16*T*h^2/t at f = 4h),
//   attention (causal) 4*b*h*(l*c + l*(l+1)/2)/t; backward = 2x forward; recompute adds one forward;
//   logits 2*T*h*V/t forward, 4*T*h*V/t backward, on the last virtual stage (never recomputed).
//
// Time of one kernel:
//   GEMM:         core/cost/gemm_model.h with the GEMM's shape (per head for the batched attention GEMMs): output
//                 tiles in waves over the device's SMs at peak * gemm_efficiency (a partial last wave costs a
//                 whole one, small tiles reach less), + each wave's output writes over the HBM bandwidth (not on
//                 Hopper: gemm_epilogue_hidden), + gemm_half_sat_flops / (peak * gemm_efficiency) fixed per
//                 GEMM, at least bytes / (hbm_bw * memory_efficiency) (the weight-load floor of small-M GEMMs).
//                 Without an SM count (calibration profiles) and for the fused flash kernels:
//                 (F + gemm_half_sat_flops) / (peak * gemm_efficiency), at least the byte term.
//                 The batched attention GEMMs (Q.K^T, P.V) are GEMMs too and run over the full l x K
//                 rectangle that the non-flash kernels materialise (the causal mask does not save work).
//                 With training.flash_attention they are replaced by one fused kernel over the causal pairs
//                 (4*b*h*pairs/t FLOPs; bytes: Q, K, V, output and the fp32 log-sum-exp, no score matrix) and,
//                 in backward, by the row-sum preprocessing, one fused kernel of 10*b*h*pairs/t FLOPs (it
//                 recomputes the scores: 5 matmuls) and the fp32 dQ conversion. Token slices with context also
//                 pay, with flash, the K/V cache concatenation in forward and the dK/dV accumulation over the
//                 prefix in backward (Seq1F1B's code, docs/papers.md#seq1f1b).
//   other kernel: max(F / peak, bytes / (hbm_bw * memory_efficiency)) (LayerNorm, softmax, dropout, GeLU,
//                 residual adds, copies, cross entropy).
// Kernels per layer forward (14): LN, QKV, Q.K^T, scale+mask+softmax, dropout, P.V, context transpose,
// output projection, bias+dropout+add, LN, MLP up, bias+GeLU, MLP down, bias+dropout+add. Backward (24):
// dgrad + wgrad per GEMM, 4 attention GEMMs, the element-wise backwards and 4 bias-gradient reductions.
// training.dropout false drops the attention dropout (forward and backward) and the residual masks' byte;
// training.softmax_fp32 replaces the fused softmax by PyTorch's unfused one (TeraPipe's code): mask add, softmax to
// fp32, cast back (e, e + 4, 4 + e bytes per score after the add's 2e), and in backward the cast, an fp32 softmax
// backward (12 B per score) and the cast back. A wgrad
// accumulates into the weight gradient on every micro-batch and slice, the memory floor of short slices' backward:
// training.wgrad_accumulation fused (beta = 1) reads and writes the gradient (2 g bytes per weight, g = 2, or 4
// with grad_fp32); autograd (PyTorch AccumulateGrad) writes a new e-byte tensor, then grad += new (2 e + 2 g).
// Element-wise kernels on the residual stream (LN, dropout+add) act on the full T x h tensor, which tensor
// parallelism replicates (split t ways along the sequence with parallel.sequence_parallel); everything inside
// attention and the MLP is split t ways.
//
// Split backward (zero-bubble schedules): W = the weight-gradient kernels (every wgrad GEMM, the bias gradients,
// the logits wgrad, the embedding-gradient scatter-add); I = everything else, including attention backward and
// the recomputed forward. I and W take the fused backward's time in the ratio of their kernels' times, so
// I + W = B exactly; FLOPs split the same way (W = the forward GEMM FLOPs). The TP all-reduces are I's.
//
// Kernel stream: the host issues kernel j of an op at (j+1)*kernel_launch_s (PyTorch eager dispatch cost,
// one per kernel); the GPU runs kernels in order, each starting when it is issued and its predecessor has
// finished. The op takes max_j [issue_j + sum of kernel times from j to the end]. Launch cost therefore
// hides behind long kernels and dominates short ones: a short slice costs about kernels * kernel_launch_s
// whatever its length (docs/papers.md#terapipe: a GPT3-1B layer's forward on a V100 is flat from 1 to about 256
// tokens), a long one costs its GPU time.
//
// Sizes: p2p b*l*h*e (b*l*h*e/t per TP rank with sequence parallelism: its shard); TP all-reduce b*l*h*e per
// call, 2 per layer forward, 2 per layer backward (+2 with
// recompute), +1 for the vocab-parallel embedding (first virtual stage, forward) and +1 for the LM head's
// input gradient (last virtual stage, backward); none when t = 1. Sequence parallelism turns each all-reduce
// into a reduce-scatter plus an all-gather of the same tensor, which a ring moves in the same bytes and steps,
// so the count and sizes stay. Gradients: the rank's parameters / t at
// 2 B (4 with grad_fp32). Optimizer: memory-bound mixed-precision Adam, per parameter 2*(optimizer state)
// + 2*grad (unscale / norm pass + update) + weight write bytes at hbm_bw * memory_efficiency.
#include "core/cost/analytic_cost.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/cost/context_parallel.h"
#include "core/cost/fp8.h"
#include "core/cost/gemm_model.h"
#include "core/cost/moe_load.h"
#include "core/cost/tp_overlap.h"
#include "core/model/placement.h"
#include "core/model/schedule_registry.h"

namespace pipescope {

namespace {

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("AnalyticCostModel: " + what); }

// Finish time of an in-order kernel stream: `pre` once, `layer` `reps` times, `post` once; kernel j is
// issued at (j+1)*lambda. Closed form of start_j = max(issue_j, end_{j-1}): the op ends at
// max_j (issue_j + remaining work from j); over the repeated layers that maximum is at the first or last
// repetition (it is linear in the repetition index), so this is O(kernels per layer).
// Finish time of an in-order stream of segments, segment i's kernels repeated reps_i times (the closed form above
// per segment, with the kernels issued before it and the work after it).
struct Segment {
  const std::vector<double>* times;
  int reps;
};
double stream_seconds(const std::vector<Segment>& segs, double lambda) {
  std::vector<double> after(segs.size() + 1, 0.0);  // work of the segments after segment i
  for (std::size_t i = segs.size(); i-- > 0;) {
    double G = 0;
    for (double x : *segs[i].times) G += x;
    after[i] = after[i + 1] + segs[i].reps * G;
  }
  double end = 0, before = 0;  // kernels issued before the segment
  for (std::size_t k = 0; k < segs.size(); k++) {
    const std::vector<double>& t = *segs[k].times;
    const int reps = segs[k].reps;
    std::vector<double> suffix(t.size() + 1, 0.0);
    for (std::size_t j = t.size(); j-- > 0;) suffix[j] = suffix[j + 1] + t[j];
    const double G = suffix[0], n = static_cast<double>(t.size()), rest = after[k + 1];
    for (std::size_t i = 0; i < t.size() && reps > 0; i++) {
      end = std::max(end, (before + i + 1) * lambda + suffix[i] + (reps - 1) * G + rest);
      end = std::max(end, (before + (reps - 1) * n + i + 1) * lambda + suffix[i] + rest);
    }
    before += reps * n;
  }
  return end;
}

double stream_seconds(const std::vector<double>& pre, const std::vector<double>& layer, int reps,
                      const std::vector<double>& post, double lambda) {
  auto suffix_sums = [](const std::vector<double>& g) {
    std::vector<double> s(g.size() + 1, 0.0);
    for (std::size_t j = g.size(); j-- > 0;) s[j] = s[j + 1] + g[j];
    return s;
  };
  const auto sp = suffix_sums(pre), sl = suffix_sums(layer), sq = suffix_sums(post);
  const double G = sl[0], Q = sq[0];
  const double np = static_cast<double>(pre.size()), n = static_cast<double>(layer.size());
  double end = 0;
  for (std::size_t j = 0; j < pre.size(); j++) end = std::max(end, (j + 1) * lambda + sp[j] + reps * G + Q);
  if (reps > 0)
    for (std::size_t i = 0; i < layer.size(); i++) {
      end = std::max(end, (np + i + 1) * lambda + sl[i] + (reps - 1) * G + Q);
      end = std::max(end, (np + (reps - 1) * n + i + 1) * lambda + sl[i] + Q);
    }
  for (std::size_t j = 0; j < post.size(); j++) end = std::max(end, (np + reps * n + j + 1) * lambda + sq[j]);
  return end;
}

}  // namespace

// ---------------------------------------------------------------- model

AnalyticCostModel::AnalyticCostModel(const Scenario& s) : s_(s) {
  const ModelSpec& m = s_.model;
  const ParallelSpec& par = s_.parallel;
  const DeviceSpec& d = s_.cluster.device;
  const std::string src = s_.source.empty() ? "" : s_.source + ": ";
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) invalid(src + what);
  };
  need(m.layers > 0 && m.hidden > 0 && m.heads > 0 && m.ffn_hidden > 0 && m.vocab > 0 && m.seq_len > 0,
       "model.layers, hidden, heads, ffn_hidden, vocab and seq_len must all be positive");
  need(par.pp >= 1 && par.tp >= 1 && par.v >= 1 && par.cp >= 1, "parallel.pp, tp, cp and v must be >= 1");
  need(par.cp == 1 || (m.seq_len % (2 * par.cp) == 0 && s_.training.flash_attention),
       "parallel.cp = " + std::to_string(par.cp) +
           " needs seq_len divisible by 2 * cp and training.flash_attention (ring attention)");
  try {
    for (int g = 0; g < par.pp * par.v; g++) {
      stage_layers_.push_back(stage_layer_range(s_, g).count);
      stage_ends_.push_back(static_cast<char>((holds_embedding(s_, g) ? 1 : 0) | (holds_head(s_, g) ? 2 : 0)));
      stage_moe_.push_back(stage_moe_layer_count(s_, g));
      stage_overload_.push_back(stage_expert_load(s_, g).time);
    }
    load_varies_ = m.moe() && expert_load_varies(s_);
  } catch (const std::invalid_argument& e) {
    invalid(src + e.what());
  }
  need(m.heads % par.tp == 0,
       "model.heads = " + std::to_string(m.heads) + " is not divisible by tp = " + std::to_string(par.tp));
  const std::string& dt = s_.training.dtype;
  if (dt != "fp16" && dt != "bf16" && dt != "fp32" && dt != "fp64" && dt != "fp8")
    invalid(src + "training.dtype: unknown dtype '" + dt + "' (fp16 | bf16 | fp32 | fp64 | fp8)");
  dtype_peak_flops_ = dtype_peak_flops(d, dt);
  if (s_.training.fp8()) fp8_peak_flops_ = d.peak_flops_fp8;  // linear GEMMs in FP8, the rest in bf16 (core/cost/fp8.h)
  need(dt != "fp8" || (std::isfinite(fp8_peak_flops_) && fp8_peak_flops_ > 0),
       "training.dtype: device " + d.name + " has no FP8 tensor cores (peak FLOP/s for fp8 is 0)");
  need(std::isfinite(dtype_peak_flops_) && dtype_peak_flops_ > 0,
       "device " + d.name + " has no " + dt + " peak (peak FLOP/s for that dtype is 0)");
  need(std::isfinite(d.hbm_bw_Bps) && d.hbm_bw_Bps > 0, "cluster.device.hbm_bw_GBps must be > 0");
  need(d.gemm_efficiency > 0 && d.gemm_efficiency <= 1, "cluster.device.gemm_efficiency must be in (0, 1]");
  need(d.memory_efficiency > 0 && d.memory_efficiency <= 1, "cluster.device.memory_efficiency must be in (0, 1]");
  need(std::isfinite(d.gemm_half_sat_flops) && d.gemm_half_sat_flops >= 0,
       "cluster.device.gemm_half_sat_gflop must be >= 0");
  need(std::isfinite(d.kernel_launch_s) && d.kernel_launch_s >= 0, "cluster.device.kernel_launch_us must be >= 0");
  need(std::isfinite(s_.training.optimizer_bytes_per_param), "training.optimizer_bytes_per_param must be finite");
}

int AnalyticCostModel::moe_layers_of_stage(int stage) const {
  layers_of_stage(stage);  // checks the index
  return stage_moe_[static_cast<std::size_t>(stage)];
}

int AnalyticCostModel::layers_of_stage(int stage) const {
  if (stage < 0 || stage >= static_cast<int>(stage_layers_.size()))
    invalid("stage " + std::to_string(stage) + " outside 0.." + std::to_string(stage_layers_.size() - 1));
  return stage_layers_[static_cast<std::size_t>(stage)];
}

// A fused attention kernel at its pass's share of peak. FlashAttention compiles its kernels for head dimensions in
// steps of 32 (FlashAttention-2: 32, 64, 96, 128, ... 256; FlashAttention-3 a subset) and runs a smaller head in the
// next one up: head 80 does the matmul work of 96.
double AnalyticCostModel::fused_attention_seconds(const KernelCost& k, double peak) const {
  const DeviceSpec& d = s_.cluster.device;
  const double fwd = d.flash_fwd_efficiency > 0 ? d.flash_fwd_efficiency : d.gemm_efficiency;
  const double bwd = d.flash_bwd_efficiency > 0 ? d.flash_bwd_efficiency : d.gemm_efficiency;
  const double head = layer_dims(s_.model).hd;
  const double padded = std::ceil(head / kFlashHeadStep) * kFlashHeadStep;
  const double flops = k.flops * (head > 0 ? padded / head : 1.0);
  const double at_rate =
      (flops + d.gemm_half_sat_flops) / (peak * (k.attention == FusedAttention::Forward ? fwd : bwd));
  if (k.m <= 0 || d.sm_count <= 0) return at_rate;
  const double blocks = std::ceil(k.m / kFlashTileRows) * k.batch, waves = blocks / d.sm_count;
  return at_rate * std::ceil(waves) / waves;
}

double AnalyticCostModel::kernel_seconds(const KernelCost& k) const {
  const DeviceSpec& d = s_.cluster.device;
  if (k.wait_s > 0) return k.wait_s;
  if (k.beside_s > 0) {
    KernelCost own = k;
    own.beside_s = 0;
    return std::max(kernel_seconds(own), k.beside_s);
  }
  const double mem = k.bytes / (d.hbm_bw_Bps * d.memory_efficiency);
  if (k.flops <= 0) return mem;
  const double peak =
      k.fp8 ? fp8_peak_flops_ / (k.fp8_split_accumulator ? kFp8SplitAccumulatorSlowdown : 1.0) : dtype_peak_flops_;
  if (k.attention != FusedAttention::None) return std::max(fused_attention_seconds(k, peak), mem);
  if (k.gemm && k.m > 0) {  // tile and wave quantisation over the SMs (core/cost/gemm_model.h)
    const GemmDevice g{peak,
                       d.gemm_efficiency,
                       d.sm_count,
                       d.gemm_half_sat_flops / (peak * d.gemm_efficiency),
                       d.hbm_bw_Bps,
                       d.memory_efficiency,
                       static_cast<double>(elem_bytes()),
                       d.gemm_epilogue_hidden};
    return gemm_timing(g, k.m, k.n, k.k, k.bytes, k.batch).seconds;
  }
  const double compute =
      k.gemm ? (k.flops + d.gemm_half_sat_flops) / (peak * d.gemm_efficiency) : k.flops / dtype_peak_flops_;
  return std::max(compute, mem);
}

std::vector<KernelCost> AnalyticCostModel::attention_core_kernels(int b, int l, int c) const {
  const ModelSpec& m = s_.model;
  const double t = s_.parallel.tp, e = elem_bytes();
  // h: the attention width a * head_dim (the hidden size unless model.head_dim says otherwise).
  const double h = layer_dims(m).q, kv = layer_dims(m).kv, T = static_cast<double>(b) * l,
               K = static_cast<double>(c) + l;
  const double S = b * (m.heads / t) * l * K;                    // score elements on this GPU
  const double qk = 2.0 * b * l * K * h / t;                     // Q.K^T (and P.V) FLOPs over the full l x K rectangle
  const double L = l, hd = h / m.heads, bh = b * (m.heads / t);  // per-head GEMMs (rows, head dim, batch)
  if (s_.parallel.cp > 1) return cp_attention_forward_kernels(timer(), s_, b);  // ring attention (whole sequences)
  if (s_.training.flash_attention) {
    std::vector<KernelCost> k;
    if (c > 0) k.push_back({0, 4 * e * b * K * kv / t, false});  // K/V cache concatenation (a new contiguous copy)
    // One fused kernel over the causal pairs (within sliding windows): reads Q, K, V, writes the output and the fp32
    // log-sum-exp.
    const double pairs = attended_pairs(m, l, c);
    KernelCost fused{4 * b * h * pairs / t, e * (2 * T * h / t + 2 * b * K * kv / t) + 4 * b * (m.heads / t) * l, true};
    if (layer_dims(m).mla) {  // Q.K^T over the q-wide heads, P.V over the o-wide ones; reads Q, K, V, writes O
      const double o = layer_dims(m).o;
      fused.flops = 2 * b * (h + o) * pairs / t;
      fused.bytes = e * (T * (h + o) / t + 2 * b * K * kv / t) + 4 * b * (m.heads / t) * l;
    }
    fused.attention = FusedAttention::Forward;
    fused.m = l, fused.batch = b * (m.heads / t);
    k.push_back(fused);
    return k;
  }
  std::vector<KernelCost> k = {
      {qk, e * (T * h / t + b * K * kv / t + S), true, false, L, K, hd, bh}};  // Q.K^T (GQA: the head's group's K)
  if (s_.training.softmax_fp32) {
    // Unfused PyTorch (TeraPipe's code): scores += mask in place, F.softmax(dtype=float32) writes fp32
    // probabilities, .type_as() casts them back to e bytes.
    k.push_back({S, 2 * e * S, false});
    k.push_back({5 * S, (e + 4) * S, false});
    k.push_back({0, (4 + e) * S, false});
  } else {
    k.push_back({5 * S, 2 * e * S, false});  // fused scale + mask + softmax
  }
  if (s_.training.dropout) k.push_back({S, 2 * e * S + S, false});                     // attention dropout (+ 1 B mask)
  k.push_back({qk, e * (S + b * K * kv / t + T * h / t), true, false, L, hd, K, bh});  // P.V
  return k;
}

std::vector<KernelCost> AnalyticCostModel::recompute_kernels(int b, int l, int c, bool moe, double overload) const {
  switch (s_.schedule.recompute) {
    case Recompute::None:
      return {};
    case Recompute::Selective:
      return selective_recompute_kernels(b, l, c, moe, s_.schedule.recompute_modules, overload);
    case Recompute::Full:
      return layer_forward_kernels(b, l, c, moe, overload);
  }
  return {};
}

std::vector<KernelCost> AnalyticCostModel::selective_recompute_kernels(int b, int l, int c, bool moe,
                                                                       std::uint8_t modules, double overload) const {
  auto on = [&](RecomputeModule x) { return (modules & module_bit(x)) != 0; };
  std::vector<KernelCost> k;
  auto add = [&](const std::vector<KernelCost>& x) { k.insert(k.end(), x.begin(), x.end()); };
  // Flash attention already recomputes its scores in backward: core_attn adds nothing then.
  if (on(RecomputeModule::CoreAttn) && !s_.training.flash_attention) add(attention_core_kernels(b, l, c));
  if (on(RecomputeModule::LayerNorm)) add({norm_kernel(b, l), norm_kernel(b, l)});
  if (layer_dims(s_.model).mla && on(RecomputeModule::MlaUpProj)) add(mla_up_kernels(b, l));
  if (!moe) {
    if (on(RecomputeModule::Mlp)) add(dense_mlp_kernels(b, l));
  } else if (on(RecomputeModule::Moe)) {
    add(moe_forward_kernels(b, l, overload));  // its all-to-alls are the lowering's (core/cost/expert_parallel.h)
  } else {
    if (on(RecomputeModule::MoeAct)) k.push_back(expert_activation_kernel(b, l, overload));
    if (on(RecomputeModule::SharedExperts)) add(shared_expert_kernels(b, l));
  }
  return k;
}

KernelCost AnalyticCostModel::norm_kernel(int b, int l) const {
  const double t = s_.parallel.tp, e = elem_bytes(), h = s_.model.hidden;
  const double Tr = static_cast<double>(b) * l / (s_.parallel.sequence_parallel ? t : 1.0);
  return {8 * Tr * h, 2 * e * Tr * h, false};
}

std::vector<KernelCost> AnalyticCostModel::dense_mlp_kernels(int b, int l) const {
  const LayerDims d = layer_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), h = d.h, f = d.f, T = static_cast<double>(b) * l;
  return {
      // MLP up (SwiGLU: gate and up, 2f wide), its input all-gathered beside it with the userbuffers overlap
      with_userbuffers(linear_gemm_kernel(T, h, d.up_out / t, Fp8Pass::Forward), b, l),
      {8 * T * f / t, e * T * (d.up_out + f) / t, false},  // bias + GeLU (SwiGLU: SiLU(gate) * up)
      with_userbuffers(linear_gemm_kernel(T, f / t, h, Fp8Pass::Forward), b, l),  // MLP down (its reduce-scatter)
  };
}

std::vector<KernelCost> AnalyticCostModel::shared_expert_kernels(int b, int l) const {
  const MoeDims x = moe_dims(s_.model);
  if (x.shared_f <= 0) return {};
  const double t = s_.parallel.tp, e = elem_bytes(), h = s_.model.hidden, T = static_cast<double>(b) * l, Tr = T / t;
  return {
      linear_gemm_kernel(T, h, x.shared_up_out / t, Fp8Pass::Forward),
      {8 * T * x.shared_f / t, e * T * (x.shared_up_out + x.shared_f) / t, false},
      linear_gemm_kernel(T, x.shared_f / t, h, Fp8Pass::Forward),
      {Tr * h, 3 * e * Tr * h, false},  // routed + shared outputs
  };
}

KernelCost AnalyticCostModel::expert_activation_kernel(int b, int l, double overload) const {
  const MoeDims x = moe_dims(s_.model);
  // The busiest GPU's copies, gathered over its expert-tensor-parallel group, each 1/etp of the expert wide.
  const double et = s_.parallel.etp, copies = static_cast<double>(b) * l / s_.parallel.tp * x.top_k * overload * et;
  return {8 * copies * x.f / et, elem_bytes() * copies * (x.up_out + x.f) / et, false};
}

// Multi-head latent attention's projections (docs/moe.md): the down projections (h to the Q latent and to the K/V
// latent with the rotary key) on the GPU's Tr rows, the latents' RMSNorms, the up projections split t ways on all T
// rows (Q; K's non-rotary part and V), and the rotary key broadcast into every head's K.
std::vector<KernelCost> AnalyticCostModel::mla_forward_kernels(int b, int l) const {
  const LayerDims d = layer_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), h = d.h, T = static_cast<double>(b) * l;
  const double Tr = T / (s_.parallel.sequence_parallel ? t : 1.0);
  auto gemm = [&](double M, double Kd, double N) { return linear_gemm_kernel(M, Kd, N, Fp8Pass::Forward); };
  const std::vector<KernelCost> up = mla_up_kernels(b, l);  // [Q up,] K/V up, the rotary key's copy
  auto next_up = up.begin();
  std::vector<KernelCost> k;
  if (d.q_lora > 0) {
    k.push_back(gemm(Tr, h, d.q_lora));                            // Q down
    k.push_back({4 * T * d.q_lora, 2 * e * T * d.q_lora, false});  // its RMSNorm
    k.push_back(*next_up++);                                       // Q up
  } else {
    k.push_back(gemm(T, h, d.q / t));  // Q
  }
  k.push_back(gemm(Tr, h, d.kv_lora + d.rope));                    // K/V down and the rotary key
  k.push_back({4 * T * d.kv_lora, 2 * e * T * d.kv_lora, false});  // its RMSNorm
  k.insert(k.end(), next_up, up.end());
  return k;
}

// The up projections (Q from its latent when q_lora_rank is set; K's non-rotary part and V) and the rotary key's
// copy into every head: what mla_up_proj recomputation reruns.
std::vector<KernelCost> AnalyticCostModel::mla_up_kernels(int b, int l) const {
  const LayerDims d = layer_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), T = static_cast<double>(b) * l;
  auto gemm = [&](double M, double Kd, double N) { return linear_gemm_kernel(M, Kd, N, Fp8Pass::Forward); };
  std::vector<KernelCost> k;
  if (d.q_lora > 0) k.push_back(gemm(T, d.q_lora, d.q / t));  // Q up
  k.push_back(gemm(T, d.kv_lora, d.kv_up_out / t));           // K (non-rotary) and V up
  k.push_back({0, 2 * e * T * d.q / t, false});               // K = [K_nope, rotary key] per head
  return k;
}

std::vector<KernelCost> AnalyticCostModel::mla_backward_kernels(int b, int l) const {
  const LayerDims d = layer_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), h = d.h, T = static_cast<double>(b) * l;
  const double Tr = T / (s_.parallel.sequence_parallel ? t : 1.0);
  auto gemm = [&](double M, double Kd, double N) { return linear_gemm_kernel(M, Kd, N, Fp8Pass::Backward); };
  auto wgrad = [&](double M, double Kd, double N) { return wgrad_kernel(M, Kd, N); };
  std::vector<KernelCost> k = {
      {0, 2 * e * T * d.q / t, false},                    // the rotary key's gradient summed over the heads
      gemm(T, d.kv_up_out / t, d.kv_lora),                // K/V up dgrad
      wgrad(d.kv_lora, T, d.kv_up_out / t),               // K/V up wgrad
      {6 * T * d.kv_lora, 4 * e * T * d.kv_lora, false},  // RMSNorm backward
      gemm(Tr, d.kv_lora + d.rope, h),                    // K/V down dgrad
      wgrad(h, Tr, d.kv_lora + d.rope),                   // K/V down wgrad
  };
  if (d.q_lora > 0) {
    k.push_back(gemm(T, d.q / t, d.q_lora));                       // Q up dgrad
    k.push_back(wgrad(d.q_lora, T, d.q / t));                      // Q up wgrad
    k.push_back({6 * T * d.q_lora, 4 * e * T * d.q_lora, false});  // RMSNorm backward
    k.push_back(gemm(Tr, d.q_lora, h));                            // Q down dgrad
    k.push_back(wgrad(h, Tr, d.q_lora));                           // Q down wgrad
  } else {
    k.push_back(gemm(T, d.q / t, h));   // Q dgrad
    k.push_back(wgrad(h, T, d.q / t));  // Q wgrad
  }
  return k;
}

// The MoE part of a layer's forward on one GPU (docs/moe.md): the GPU's Tr = T / t tokens (sequence parallelism)
// are routed, their k copies each permuted into expert order and dispatched (the all-to-all is the lowering's
// collective, core/cost/expert_parallel.h), the E / ep local experts run as one grouped GEMM over the copies they
// receive (ep * Tr * k / E tokens each when balanced), and the combine brings the outputs back for the weighted sum.
// With expert tensor parallelism each expert's MLP is split etp ways: a GPU receives the copies of its etp group
// (etp times the rows) for 1/etp of every expert's inner size.
std::vector<KernelCost> AnalyticCostModel::moe_forward_kernels(int b, int l, double overload) const {
  const LayerDims d = layer_dims(s_.model);
  const MoeDims x = moe_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), h = d.h, T = static_cast<double>(b) * l, Tr = T / t;
  const double E = x.experts, k = x.top_k, copies = Tr * k, local = E / s_.parallel.ep, et = s_.parallel.etp;
  const double got = copies * overload * et;  // the copies the busiest GPU's experts receive
  const double per_expert = got / local;      // rows of each local expert's GEMM
  auto grouped = [&](double Kd, double N) {   // one GEMM per local expert, launched as one grouped kernel
    KernelCost g{2 * got * Kd * N, e * (got * Kd + local * Kd * N + got * N), true, false, per_expert, N, Kd, local};
    return linear_gemm(g, e, Fp8Pass::Forward);
  };
  std::vector<KernelCost> out = {
      KernelCost{2 * Tr * h * E, e * (Tr * h + h * E) + 4 * Tr * E, true, false, Tr, E, h},  // router logits
      {6 * Tr * E, 12 * Tr * E + 8 * copies, false},  // softmax, top-k, the routing map (fp32 scores)
      {2 * Tr * E, 8 * Tr * E, false},                // load-balancing loss (per-expert token counts, probabilities)
      {0, e * (Tr * h + copies * h) + 8 * copies, false},  // permute: each token's k copies in expert order
      grouped(h, x.up_out / et),                           // expert MLP up (SwiGLU: gate and up)
      expert_activation_kernel(b, l, overload),            // activation
      grouped(x.f / et, h),                                // expert MLP down
      {2 * copies * h, e * (copies * h + Tr * h) + 4 * copies, false},  // unpermute: weighted sum of the k outputs
  };
  // Shared experts: a dense MLP over the whole tokens, split t ways like the dense one.
  const std::vector<KernelCost> shared = shared_expert_kernels(b, l);
  out.insert(out.end(), shared.begin(), shared.end());
  return out;
}

std::vector<KernelCost> AnalyticCostModel::moe_backward_kernels(int b, int l, bool tp_overlap, double overload) const {
  const LayerDims d = layer_dims(s_.model);
  const MoeDims x = moe_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), h = d.h, T = static_cast<double>(b) * l, Tr = T / t;
  const double E = x.experts, k = x.top_k, copies = Tr * k, local = E / s_.parallel.ep, et = s_.parallel.etp;
  const double got = copies * overload * et;  // the copies the busiest GPU's experts received (moe_forward_kernels)
  const double per_expert = got / local, f = x.f / et, up = x.up_out / et;
  const double acc = wgrad_accumulation_bytes();
  auto gemm = [&](double M, double Kd, double N) { return linear_gemm_kernel(M, Kd, N, Fp8Pass::Backward); };
  auto wgrad = [&](double M, double Kd, double N) { return wgrad_kernel(M, Kd, N); };
  // dgrad: got x N from got x Kd; wgrad: each local expert's Kd x N gradient over its rows.
  auto grouped_dgrad = [&](double Kd, double N) {
    KernelCost c{2 * got * Kd * N, e * (got * Kd + local * Kd * N + got * N), true, false, per_expert, N, Kd, local};
    return linear_gemm(c, e, Fp8Pass::Backward);
  };
  auto grouped_wgrad = [&](double Kd, double N) {
    KernelCost c{2 * got * Kd * N, e * got * (Kd + N) + acc * local * Kd * N, true, true, Kd, N, per_expert, local};
    return linear_gemm(c, acc, Fp8Pass::Backward);
  };
  std::vector<KernelCost> out;
  if (x.shared_f > 0) {
    const double ar = tp_overlap ? tp_overlap_seconds(b, l) : 0.0;
    KernelCost up_w = wgrad(h, T, x.shared_up_out / t);
    up_w.beside_s = ar;
    out.push_back(gemm(T, h, x.shared_f / t));                                                       // down dgrad
    out.push_back(wgrad(x.shared_f / t, T, h));                                                      // down wgrad
    out.push_back({8 * T * x.shared_f / t, e * T * (x.shared_f + 2 * x.shared_up_out) / t, false});  // act backward
    out.push_back(gemm(T, x.shared_up_out / t, h));                                                  // up dgrad
    out.push_back(up_w);                                                                             // up wgrad
  }
  const std::vector<KernelCost> routed = {
      {copies * h, e * (Tr * h + 2 * copies * h) + 4 * copies, false},  // unpermute backward (and the weights' grads)
      grouped_dgrad(h, f),                                              // expert down dgrad
      grouped_wgrad(f, h),                                              // expert down wgrad
      {8 * got * f, e * got * (f + 2 * up), false},                     // activation backward
      grouped_dgrad(up, h),                                             // expert up dgrad
      grouped_wgrad(h, up),                                             // expert up wgrad
      {copies * h, e * (copies * h + Tr * h) + 8 * copies, false},  // permute backward: the copies' gradients summed
      {4 * Tr * E, 16 * Tr * E, false},                             // softmax / top-k / loss backward
      KernelCost{2 * Tr * E * h, e * (Tr * E + E * h + Tr * h), true, false, Tr, h, E},       // router dgrad
      KernelCost{2 * Tr * E * h, e * (Tr * E + Tr * h) + acc * E * h, true, true, h, E, Tr},  // router wgrad
  };
  out.insert(out.end(), routed.begin(), routed.end());
  return out;
}

std::vector<KernelCost> AnalyticCostModel::layer_forward_kernels(int b, int l, int c, bool moe, double overload) const {
  const ModelSpec& m = s_.model;
  const LayerDims d = layer_dims(m);
  const double t = s_.parallel.tp, e = elem_bytes();
  const double h = m.hidden, T = static_cast<double>(b) * l;
  const double Tr = T / (s_.parallel.sequence_parallel ? t : 1.0);  // residual-stream rows on this GPU
  const double mask = s_.training.dropout ? 1.0 : 0.0;              // dropout mask bytes per element
  auto gemm = [&](double M, double Kd, double N) { return linear_gemm_kernel(M, Kd, N, Fp8Pass::Forward); };
  std::vector<KernelCost> k = {norm_kernel(b, l)};  // LayerNorm
  if (d.mla) {
    const std::vector<KernelCost> x = mla_forward_kernels(b, l);
    k.insert(k.end(), x.begin(), x.end());
  } else {
    k.push_back(with_userbuffers(gemm(T, h, d.qkv_out / t), b, l));  // QKV (GQA: K and V kv wide each)
  }
  const std::vector<KernelCost> core = attention_core_kernels(b, l, c);
  k.insert(k.end(), core.begin(), core.end());
  const std::vector<KernelCost> rest = {
      {0, 2 * e * T * d.o / t, false},               // context transpose
      with_userbuffers(gemm(T, d.o / t, h), b, l),   // output projection
      {3 * Tr * h, (3 * e + mask) * Tr * h, false},  // bias + dropout + residual add
      norm_kernel(b, l),                             // LayerNorm
  };
  k.insert(k.end(), rest.begin(), rest.end());
  if (moe) {
    const std::vector<KernelCost> x = moe_forward_kernels(b, l, overload);
    k.insert(k.end(), x.begin(), x.end());
  } else {
    const std::vector<KernelCost> mlp = dense_mlp_kernels(b, l);
    k.insert(k.end(), mlp.begin(), mlp.end());
  }
  k.push_back({3 * Tr * h, (3 * e + mask) * Tr * h, false});  // bias + dropout + residual add
  const std::vector<KernelCost> casts = fp8_layer_kernels(b, l, true, moe);
  k.insert(k.end(), casts.begin(), casts.end());
  return k;
}

std::vector<KernelCost> AnalyticCostModel::layer_backward_kernels(int b, int l, int c, bool tp_overlap, bool moe,
                                                                  double overload) const {
  const ModelSpec& m = s_.model;
  const LayerDims d = layer_dims(m);
  const double kv = d.kv;
  const double t = s_.parallel.tp, e = elem_bytes();
  const double h = m.hidden, f = m.ffn_hidden, T = static_cast<double>(b) * l, K = static_cast<double>(c) + l;
  const double Tr = T / (s_.parallel.sequence_parallel ? t : 1.0);
  const double S = b * (m.heads / t) * l * K;
  const double q = d.q;  // the attention width (h unless model.head_dim says otherwise)
  const double qk = 2.0 * b * l * K * q / t;
  const double L = l, hd = d.hd, bh = b * (m.heads / t);  // per-head GEMMs (rows, head dim, batch)
  auto gemm = [&](double M, double Kd, double N) { return linear_gemm_kernel(M, Kd, N, Fp8Pass::Backward); };
  auto bias_grad = [&](double rows, double n) { return KernelCost{rows * n, e * (rows * n + n), false, true}; };
  auto wgrad = [&](double M, double Kd, double N) { return wgrad_kernel(M, Kd, N); };
  // A column-parallel linear's wgrad with its input gradient's all-reduce (reduce-scatter with sequence parallelism)
  // beside it, and with sequence parallelism its dgrad beside the re-gather of its input (core/cost/tp_overlap.h).
  const double ar = tp_overlap ? tp_overlap_seconds(b, l) : 0.0;
  const double regather = tp_overlap && sequence_parallel_tp() ? ar : 0.0;
  auto column_wgrad = [&](double M, double Kd, double N) {
    KernelCost k = wgrad(M, Kd, N);
    k.beside_s = ar;
    return k;
  };
  auto column_dgrad = [&](double M, double Kd, double N) {
    KernelCost k = gemm(M, Kd, N);
    k.beside_s = regather;
    return k;
  };
  // A row-parallel linear's dgrad needs its output gradient all-gathered (sequence parallelism): beside it with the
  // userbuffers overlap, in the fused backward.
  auto row_dgrad = [&](double M, double Kd, double N) {
    return tp_overlap ? with_userbuffers(gemm(M, Kd, N), b, l) : gemm(M, Kd, N);
  };
  const double mask = s_.training.dropout ? 1.0 : 0.0;                         // dropout mask bytes per element
  std::vector<KernelCost> k = {{3 * Tr * h, (2 * e + mask) * Tr * h, false}};  // dropout + add backward (MLP)
  if (moe) {
    const std::vector<KernelCost> x = moe_backward_kernels(b, l, tp_overlap, overload);
    k.insert(k.end(), x.begin(), x.end());
  } else {
    const std::vector<KernelCost> mlp = {
        bias_grad(Tr, h),                                        // MLP down bias
        row_dgrad(T, h, f / t),                                  // MLP down dgrad
        wgrad(f / t, T, h),                                      // MLP down wgrad
        {8 * T * f / t, e * T * (f + 2 * d.up_out) / t, false},  // GeLU (SwiGLU) backward
        bias_grad(T, d.up_out / t),                              // MLP up bias
        column_dgrad(T, d.up_out / t, h),                        // MLP up dgrad
        column_wgrad(h, T, d.up_out / t),                        // MLP up wgrad
    };
    k.insert(k.end(), mlp.begin(), mlp.end());
  }
  const std::vector<KernelCost> attn_tail = {
      {10 * Tr * h, 4 * e * Tr * h, false},          // LayerNorm backward (+ residual gradient)
      {3 * Tr * h, (2 * e + mask) * Tr * h, false},  // dropout + add backward (attention)
      bias_grad(Tr, h),                              // output projection bias
      row_dgrad(T, h, d.o / t),                      // output projection dgrad
      wgrad(d.o / t, T, h),                          // output projection wgrad
      {0, 2 * e * T * d.o / t, false},               // context transpose backward
  };
  k.insert(k.end(), attn_tail.begin(), attn_tail.end());
  if (s_.parallel.cp > 1) {  // ring attention (core/cost/context_parallel.h)
    const std::vector<KernelCost> ring = cp_attention_backward_kernels(timer(), s_, b);
    k.insert(k.end(), ring.begin(), ring.end());
  } else if (s_.training.flash_attention) {
    const double pairs = attended_pairs(m, l, c);                  // causal, within sliding windows
    const double lse = 4 * b * (m.heads / t) * l;                  // fp32 per query and head
    k.push_back({2 * T * q / t, 2 * e * T * q / t + lse, false});  // D = rowsum(dO * O)
    // Recomputes the scores: 5 matmuls over the causal pairs (S, dV, dP, dQ, dK); reads Q, K, V, O, dO, writes
    // dK, dV over the whole prefix and accumulates dQ in fp32.
    KernelCost fused{10 * b * q * pairs / t, e * (3 * T * q / t + 4 * b * K * kv / t) + 8 * T * q / t + 2 * lse, true};
    if (d.mla) fused.flops = 5 * b * (q + d.o) * pairs / t;  // the five matmuls over q- and o-wide heads
    fused.attention = FusedAttention::Backward;
    fused.m = K, fused.batch = b * (m.heads / t);
    k.push_back(fused);
    k.push_back({0, (4 + e) * T * q / t, false});  // dQ fp32 -> 16 bit
    // dK/dV of this slice's keys plus the context add up with what the later slices left (docs/papers.md#seq1f1b).
    if (c + l < m.seq_len) k.push_back({2 * b * K * kv / t, 6 * e * b * K * kv / t, false});
  } else {
    k.push_back({qk, e * (T * q / t + b * K * kv / t + S), true, false, L, K, hd, bh});  // dP = dO.V^T
    k.push_back({qk, e * (S + T * q / t + b * K * kv / t), true, false, K, hd, L, bh});  // dV = P^T.dO
    if (s_.training.dropout) k.push_back({S, 2 * e * S + S, false});                     // dropout backward
    if (s_.training.softmax_fp32) {
      // The cast's backward (e -> fp32), softmax backward in fp32 (reads the gradient and the saved fp32
      // probabilities, writes fp32), then the fp32 gradient back to the scores' e bytes.
      k.push_back({0, (e + 4) * S, false});
      k.push_back({4 * S, 12 * S, false});
      k.push_back({0, (4 + e) * S, false});
    } else {
      k.push_back({4 * S, 3 * e * S, false});  // softmax backward
    }
    k.push_back({qk, e * (S + b * K * kv / t + T * q / t), true, false, L, hd, K, bh});  // dQ = dS.K
    k.push_back({qk, e * (S + T * q / t + b * K * kv / t), true, false, K, hd, L, bh});  // dK = dS^T.Q
  }
  if (d.mla) {
    std::vector<KernelCost> x = mla_backward_kernels(b, l);
    for (KernelCost& y : x)
      if (y.weight && y.gemm) y.beside_s = ar;  // the up projections are column-parallel
    k.insert(k.end(), x.begin(), x.end());
    k.push_back({10 * Tr * h, 4 * e * Tr * h, false});  // LayerNorm backward (+ residual gradient)
  } else {
    const std::vector<KernelCost> rest = {
        bias_grad(T, d.qkv_out / t),           // QKV bias
        column_dgrad(T, d.qkv_out / t, h),     // QKV dgrad
        column_wgrad(h, T, d.qkv_out / t),     // QKV wgrad
        {10 * Tr * h, 4 * e * Tr * h, false},  // LayerNorm backward (+ residual gradient)
    };
    k.insert(k.end(), rest.begin(), rest.end());
  }
  const std::vector<KernelCost> casts = fp8_layer_kernels(b, l, false, moe);
  k.insert(k.end(), casts.begin(), casts.end());
  return k;
}

KernelCost AnalyticCostModel::linear_gemm(const KernelCost& k, double out_bytes_per_elem, Fp8Pass pass) const {
  return s_.training.fp8() ? fp8_gemm(k, out_bytes_per_elem, pass) : k;
}

KernelCost AnalyticCostModel::linear_gemm_kernel(double M, double Kd, double N, Fp8Pass pass) const {
  const double e = elem_bytes();
  return linear_gemm(KernelCost{2 * M * Kd * N, e * (M * Kd + Kd * N + M * N), true, false, M, N, Kd}, e, pass);
}

// Weight gradients accumulate over the micro-batches and slices of an iteration (cuBLAS beta = 1 into the gradient
// buffer): each wgrad reads and writes the whole weight gradient, and small slices pay it per slice. fused: read +
// write of the gradient; autograd: the GEMM's own output, then grad += new reads both and writes one.
double AnalyticCostModel::wgrad_accumulation_bytes() const {
  const double e = elem_bytes(), g = s_.training.grad_fp32 ? 4.0 : 2.0;
  return s_.training.wgrad_accumulation == "autograd" ? 2 * e + 2 * g : 2 * g;
}

KernelCost AnalyticCostModel::wgrad_kernel(double M, double Kd, double N) const {
  const double e = elem_bytes(), acc = wgrad_accumulation_bytes();
  return linear_gemm(KernelCost{2 * M * Kd * N, e * (M * Kd + Kd * N) + acc * M * N, true, true, M, N, Kd}, acc,
                     Fp8Pass::Backward);
}

std::vector<KernelCost> AnalyticCostModel::fp8_layer_kernels(int b, int l, bool forward, bool moe) const {
  if (!s_.training.fp8()) return {};
  const LayerDims d = layer_dims(s_.model);
  const double t = s_.parallel.tp, e = elem_bytes(), T = static_cast<double>(b) * l;
  // Forward: the inputs of QKV, projection, MLP up and MLP down; backward: the output gradients of the same four.
  // An MoE layer's experts cast the k copies of the GPU's 1/t of the tokens (and the shared experts their input).
  // MLA: its projections' inputs (h, the two latents) and their output gradients in place of the fused QKV's.
  const double qkv_in = d.mla ? d.h + d.q_lora + d.kv_lora : d.h;
  const double qkv_out = d.mla ? (d.q + d.kv_up_out) / t + d.q_lora + d.kv_lora + d.rope : d.qkv_out / t;
  if (!moe && !d.mla) {
    const double cols = forward ? d.h + d.q / t + d.h + d.f / t : d.qkv_out / t + d.h + d.up_out / t + d.h;
    return {fp8_cast_transpose(T, cols, e)};
  }
  if (!moe) {
    const double cols = forward ? qkv_in + d.o / t + d.h + d.f / t : qkv_out + d.h + d.up_out / t + d.h;
    return {fp8_cast_transpose(T, cols, e)};
  }
  const MoeDims x = moe_dims(s_.model);
  const double et = s_.parallel.etp;  // the copies gathered over etp GPUs, each 1/etp of the expert wide
  const double mlp = x.top_k * (forward ? et * d.h + x.f : x.up_out + et * d.h) / t +
                     (x.shared_f > 0 ? (forward ? d.h + x.shared_f / t : x.shared_up_out / t + d.h) : 0.0);
  const double cols = forward ? qkv_in + d.o / t + mlp : qkv_out + d.h + mlp;
  return {fp8_cast_transpose(T, cols, e)};
}

namespace {

std::vector<double> times_of(const AnalyticCostModel& cm, const std::vector<KernelCost>& ks) {
  std::vector<double> out;
  out.reserve(ks.size());
  for (const auto& k : ks) out.push_back(cm.kernel_seconds(k));
  return out;
}

}  // namespace

double AnalyticCostModel::layer_forward_seconds(int b, int l, int c) const {
  if (b < 1 || l < 1 || c < 0) invalid("layer_forward_seconds needs b >= 1, l >= 1, c >= 0");
  return stream_seconds({}, times_of(*this, layer_forward_kernels(b, l, c)), 1, {}, s_.cluster.device.kernel_launch_s);
}

double AnalyticCostModel::layer_backward_seconds(int b, int l, int c) const {
  if (b < 1 || l < 1 || c < 0) invalid("layer_backward_seconds needs b >= 1, l >= 1, c >= 0");
  std::vector<double> g = times_of(*this, layer_backward_kernels(b, l, c));
  const std::vector<double> f = times_of(*this, recompute_kernels(b, l, c));
  g.insert(g.begin(), f.begin(), f.end());
  return stream_seconds({}, g, 1, {}, s_.cluster.device.kernel_launch_s);
}

void AnalyticCostModel::check_op(const Op& op, int microbatch_seqs) const {
  const int stages = s_.parallel.pp * s_.parallel.v;
  if (op.stage < 0 || op.stage >= stages)
    invalid("op " + op_text(op) + ": virtual stage " + std::to_string(op.stage) + " outside 0.." +
            std::to_string(stages - 1));
  if (op.tok_begin < 0 || op.tok_end <= op.tok_begin || op.tok_end > s_.model.seq_len)
    invalid("op " + op_text(op) + ": token range [" + std::to_string(op.tok_begin) + ", " + std::to_string(op.tok_end) +
            ") is empty or outside the sequence of " + std::to_string(s_.model.seq_len) + " tokens");
  if (microbatch_seqs < 1)
    invalid("op " + op_text(op) + ": micro-batch of " + std::to_string(microbatch_seqs) + " sequences");
}

AnalyticCostModel::OpKernels AnalyticCostModel::op_kernels(const Op& op, int microbatch_seqs, bool forward) const {
  const ModelSpec& m = s_.model;
  // With context parallelism a GPU holds seq_len / cp tokens of each (whole) sequence.
  const int b = microbatch_seqs, l = op.tokens() / s_.parallel.cp, c = op.tok_begin;
  const double t = s_.parallel.tp, e = elem_bytes();
  const double h = m.hidden, V = m.vocab, T = static_cast<double>(b) * l;
  const double Tr = T / (s_.parallel.sequence_parallel ? t : 1.0);  // residual-stream rows on this GPU
  const bool first = first_stage(op.stage), last = last_stage(op.stage);
  const double mask = s_.training.dropout ? 1.0 : 0.0;  // dropout mask bytes per element
  auto gemm = [&](double M, double Kd, double N) {
    return KernelCost{2 * M * Kd * N, e * (M * Kd + Kd * N + M * N), true, false, M, N, Kd};
  };
  OpKernels k;
  if (forward) {
    if (first) {
      k.pre = {{0, 2 * e * T * h, false},                      // word-embedding gather (vocab-parallel)
               {2 * Tr * h, (3 * e + mask) * Tr * h, false}};  // + position embedding, dropout
    }
    k.layers = layers_of_stage(op.stage), k.moe_layers = moe_layers_of_stage(op.stage);
    if (k.layers > k.moe_layers) k.layer = layer_forward_kernels(b, l, c);
    if (k.moe_layers > 0)
      k.moe_layer = layer_forward_kernels(b, l, c, true, stage_overload_[static_cast<std::size_t>(op.stage)]);
    if (last) {
      k.post = {{8 * Tr * h, 2 * e * Tr * h, false},           // final LayerNorm
                gemm(T, h, V / t),                             // logits
                {T * V / t, e * T * V / t, false},             // cross entropy: max
                {3 * T * V / t, (e + 4) * T * V / t, false}};  // exp, sum, softmax kept in fp32
    }
    if (s_.training.fp8()) k.post.push_back(fp8_amax_update(true, layers_of_stage(op.stage)));
    return k;
  }
  if (last) {
    KernelCost logits_wgrad = gemm(h, T, V / t);
    logits_wgrad.weight = true;
    if (tp_overlap(op)) logits_wgrad.beside_s = tp_overlap_seconds(b, l);  // the LM head's input gradient
    k.pre = {{2 * T * V / t, (4 + e) * T * V / t, false},                  // cross-entropy backward
             gemm(T, V / t, h),                                            // logits dgrad
             logits_wgrad,                                                 // logits wgrad
             {10 * Tr * h, 4 * e * Tr * h, false}};                        // final LayerNorm backward
  }
  k.layers = layers_of_stage(op.stage), k.moe_layers = moe_layers_of_stage(op.stage);
  // Megatron recomputes each checkpointed layer (or its attention core) just before its backward.
  if (k.layers > k.moe_layers) {
    k.layer = layer_backward_kernels(b, l, c, tp_overlap(op));
    const std::vector<KernelCost> f = recompute_kernels(b, l, c);
    k.layer.insert(k.layer.begin(), f.begin(), f.end());
  }
  if (k.moe_layers > 0) {
    const double overload = stage_overload_[static_cast<std::size_t>(op.stage)];
    k.moe_layer = layer_backward_kernels(b, l, c, tp_overlap(op), true, overload);
    const std::vector<KernelCost> f = recompute_kernels(b, l, c, true, overload);
    k.moe_layer.insert(k.moe_layer.begin(), f.begin(), f.end());
  }
  if (first) {
    k.post = {{Tr * h, (2 * e + mask) * Tr * h, false},  // dropout backward
              {T * h, (e + 8) * T * h, false, true}};    // embedding gradient scatter-add (fp32 rows)
  }
  if (s_.training.fp8()) k.post.push_back(fp8_amax_update(false, layers_of_stage(op.stage)));
  return k;
}

double AnalyticCostModel::fused_seconds(const Op& op, int microbatch_seqs, bool forward) const {
  const OpKernels k = op_kernels(op, microbatch_seqs, forward);
  if (k.moe_layers == 0)
    return stream_seconds(times_of(*this, k.pre), times_of(*this, k.layer), k.layers, times_of(*this, k.post),
                          s_.cluster.device.kernel_launch_s);
  const std::vector<double> pre = times_of(*this, k.pre), dense = times_of(*this, k.layer),
                            moe = times_of(*this, k.moe_layer), post = times_of(*this, k.post);
  return stream_seconds({{&pre, 1}, {&dense, k.layers - k.moe_layers}, {&moe, k.moe_layers}, {&post, 1}},
                        s_.cluster.device.kernel_launch_s);
}

double AnalyticCostModel::backward_weight_share(const Op& op, int microbatch_seqs) const {
  check_op(op, microbatch_seqs);
  const OpKernels k = op_kernels(op, microbatch_seqs, false);
  double all = 0, weight = 0;
  auto add = [&](const std::vector<KernelCost>& ks, double reps) {
    for (const KernelCost& x : ks) {
      const double sec = reps * kernel_seconds(x);
      all += sec;
      if (x.weight) weight += sec;
    }
  };
  add(k.pre, 1);
  add(k.layer, k.layers - k.moe_layers);
  add(k.moe_layer, k.moe_layers);
  add(k.post, 1);
  return all > 0 ? weight / all : 0.0;
}

double AnalyticCostModel::compute_seconds(const Op& op, int microbatch_seqs) const {
  check_op(op, microbatch_seqs);
  // An MoE stage's key holds its MoE layer count beside its layer count (12 bits each).
  const int moe = moe_layers_of_stage(op.stage);
  int layers = moe == 0 ? layers_of_stage(op.stage) : (layers_of_stage(op.stage) << 12 | moe) | 1 << 23;
  // With uneven expert loads each stage's MoE layers have their own (core/cost/moe_load.h): keyed by stage.
  if (moe > 0 && load_varies_) layers = op.stage | 1 << 22;
  if (moe > 0 && load_varies_ && op.stage >= (1 << 22)) return compute_seconds_uncached(op, microbatch_seqs);
  // The key packs layers and sequences in 24 bits each; wider values are asked directly.
  if (layers >= (1 << 24) || microbatch_seqs >= (1 << 24) || layers_of_stage(op.stage) >= (1 << 11))
    return compute_seconds_uncached(op, microbatch_seqs);
  auto u32 = [](std::int32_t x) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)); };
  const std::uint64_t where = (first_stage(op.stage) ? 1u : 0u) | (last_stage(op.stage) ? 2u : 0u);
  return compute_memo_.get(
      static_cast<std::uint64_t>(op.kind) | where << 8 | u32(layers) << 16 | u32(microbatch_seqs) << 40,
      u32(op.tok_begin) | u32(op.tok_end) << 32, [&] { return compute_seconds_uncached(op, microbatch_seqs); });
}

double AnalyticCostModel::compute_seconds_uncached(const Op& op, int microbatch_seqs) const {
  switch (op.kind) {
    case OpKind::Forward:
      return fused_seconds(op, microbatch_seqs, true);
    case OpKind::Backward:
      return fused_seconds(op, microbatch_seqs, false);
    case OpKind::BackwardInput:
      return fused_seconds(op, microbatch_seqs, false) * (1 - backward_weight_share(op, microbatch_seqs));
    case OpKind::BackwardWeight:
      return fused_seconds(op, microbatch_seqs, false) * backward_weight_share(op, microbatch_seqs);
  }
  return 0.0;
}

double AnalyticCostModel::cp_wait_seconds(const Op& op, int microbatch_seqs) const {
  if (s_.parallel.cp == 1 || op.kind == OpKind::BackwardWeight) return 0.0;
  check_op(op, microbatch_seqs);
  const OpKernels k = op_kernels(op, microbatch_seqs, op.kind == OpKind::Forward);
  double waits = 0;
  auto add = [&](const std::vector<KernelCost>& ks, double reps) {
    for (const KernelCost& x : ks) waits += reps * x.wait_s;
  };
  add(k.pre, 1);
  add(k.layer, k.layers - k.moe_layers);
  add(k.moe_layer, k.moe_layers);
  add(k.post, 1);
  return std::min(waits, compute_seconds(op, microbatch_seqs));
}

double AnalyticCostModel::recompute_seconds(const Op& op, int microbatch_seqs) const {
  if (op.kind == OpKind::Forward || s_.schedule.recompute == Recompute::None) return 0.0;
  check_op(op, microbatch_seqs);
  const int b = microbatch_seqs, l = op.tokens() / s_.parallel.cp, c = op.tok_begin;
  const int moe = moe_layers_of_stage(op.stage), dense = layers_of_stage(op.stage) - moe;
  const std::vector<KernelCost> k = recompute_kernels(b, l, c);
  const std::vector<KernelCost> km =
      moe > 0 ? recompute_kernels(b, l, c, true, stage_overload_[static_cast<std::size_t>(op.stage)])
              : std::vector<KernelCost>{};
  if (k.empty() && km.empty()) return 0.0;
  const double lambda = s_.cluster.device.kernel_launch_s;
  double redo = 0;
  if (moe == 0) {
    redo = stream_seconds({}, times_of(*this, k), dense, {}, lambda);
  } else {
    const std::vector<double> d = times_of(*this, k), x = times_of(*this, km);
    redo = stream_seconds({{&d, dense}, {&x, moe}}, lambda);
  }
  const double fused = fused_seconds(op, microbatch_seqs, false);
  return fused > 0 ? std::min(1.0, redo / fused) * compute_seconds(op, microbatch_seqs) : 0.0;
}

double AnalyticCostModel::op_flops(const Op& op, int microbatch_seqs) const {
  check_op(op, microbatch_seqs);
  const ModelSpec& m = s_.model;
  const int b = microbatch_seqs, l = op.tokens(), c = op.tok_begin;
  const int moe = moe_layers_of_stage(op.stage), dense = layers_of_stage(op.stage) - moe;
  const LayerFlops lf = layer_forward_flops(m, s_.parallel.tp, b, l, c);
  const LayerFlops mf = moe > 0 ? layer_forward_flops(m, s_.parallel.tp, b, l, c, true) : LayerFlops{};
  const double fwd = moe == 0 ? lf.total() * dense : lf.total() * dense + mf.total() * moe;
  const double logits = 2.0 * b * l * static_cast<double>(m.hidden) * m.vocab / s_.parallel.tp;
  const bool last = last_stage(op.stage);
  // W is the weight-gradient GEMMs: as many FLOPs as the forward GEMMs (and the logits GEMM); I is the rest.
  const double wgrad = (moe == 0 ? lf.gemm() * dense : lf.gemm() * dense + mf.gemm() * moe) + (last ? logits : 0.0);
  double recomputed = 0;  // the forward work backward redoes
  switch (s_.schedule.recompute) {
    case Recompute::None:
      break;
    case Recompute::Selective: {
      const bool attn = s_.schedule.recomputes(RecomputeModule::CoreAttn) && !s_.training.flash_attention;
      recomputed = attn ? lf.attn * layers_of_stage(op.stage) : 0.0;  // attention alike
      // The other modules' GEMMs (LayerNorms and activations are not counted, as in the forward's).
      const auto others =
          static_cast<std::uint8_t>(s_.schedule.recompute_modules & ~module_bit(RecomputeModule::CoreAttn));
      auto gemm_flops = [&](bool moe_layer) {
        double sum = 0;
        for (const KernelCost& k : selective_recompute_kernels(b, l, c, moe_layer, others))
          sum += k.gemm ? k.flops : 0.0;
        return sum;
      };
      if (others != 0) recomputed += dense * gemm_flops(false) + (moe > 0 ? moe * gemm_flops(true) : 0.0);
      break;
    }
    case Recompute::Full:
      recomputed = fwd;
      break;
  }
  const double bwd = 2.0 * fwd + recomputed + (last ? 2.0 * logits : 0.0);
  // Context parallelism: every GPU of the group does 1/cp of the work (load-balanced causal attention).
  const double cp = s_.parallel.cp;
  switch (op.kind) {
    case OpKind::Forward:
      return (fwd + (last ? logits : 0.0)) / cp;
    case OpKind::Backward:
      return bwd / cp;
    case OpKind::BackwardInput:
      return (bwd - wgrad) / cp;
    case OpKind::BackwardWeight:
      return wgrad / cp;
  }
  return 0.0;
}

double AnalyticCostModel::p2p_bytes(const Op& op, int microbatch_seqs) const {
  check_op(op, microbatch_seqs);
  // With sequence parallelism each TP rank holds (and sends) its 1/t share of the sequence; context parallelism
  // splits the sequence over cp ranks.
  const double shard = s_.parallel.sequence_parallel ? s_.parallel.tp : 1.0;
  return static_cast<double>(microbatch_seqs) * op.tokens() * s_.model.hidden * elem_bytes() / shard / s_.parallel.cp;
}

bool AnalyticCostModel::sequence_parallel_tp() const { return s_.parallel.sequence_parallel && s_.parallel.tp > 1; }

// Priced on the analytic kernels only: a profile's measured layer times carry no split of their GEMMs.
bool AnalyticCostModel::userbuffers() const {
  return s_.training.tp_comm_overlap && sequence_parallel_tp() && kernels_time_backward();
}

KernelCost AnalyticCostModel::with_userbuffers(KernelCost k, int b, int l) const {
  if (userbuffers()) k.beside_s = std::max(k.beside_s, tp_overlap_seconds(b, l));
  return k;
}

bool AnalyticCostModel::tp_overlap(const Op& op) const {
  return (s_.training.async_tp_allreduce || sequence_parallel_tp()) && s_.parallel.tp > 1 &&
         op.kind == OpKind::Backward && kernels_time_backward();
}

double AnalyticCostModel::tp_overlap_seconds(int b, int l) const {
  // The all-reduce of b*l tokens of the hidden width, as tp_allreduce_bytes sizes it (l already / cp); with sequence
  // parallelism the reduce-scatter (or all-gather) of the same tensor.
  const double bytes = static_cast<double>(b) * l * s_.model.hidden * elem_bytes();
  return sequence_parallel_tp() ? tp_allgather_seconds(s_, bytes) : tp_allreduce_seconds(s_, bytes);
}

int AnalyticCostModel::tp_allreduce_calls(const Op& op) const {
  if (s_.parallel.tp == 1) return 0;
  const bool last = last_stage(op.stage);
  // Per layer: the attention's and the MLP's; an MoE layer's experts are not split t ways (its tokens are: each GPU
  // dispatches its own 1/t), leaving the attention's and, with shared experts, theirs.
  const int moe = moe_layers_of_stage(op.stage);
  const int per_layer = 2 * (layers_of_stage(op.stage) - moe) + (s_.model.moe_shared_ffn_hidden > 0 ? 2 : 1) * moe;
  // Recomputed modules rerun their collectives: all of them with full recomputation; the dense MLPs' with mlp, the
  // shared experts' with moe or shared_experts.
  const ScheduleSpec& sc = s_.schedule;
  const bool shared = s_.model.moe_shared_ffn_hidden > 0 &&
                      (sc.recomputes(RecomputeModule::Moe) || sc.recomputes(RecomputeModule::SharedExperts));
  const int recomputed =
      sc.recompute == Recompute::Full
          ? per_layer
          : (sc.recomputes(RecomputeModule::Mlp) ? layers_of_stage(op.stage) - moe : 0) + (shared ? moe : 0);
  // + the LM head's input gradient; with async_tp_allreduce the input-gradient all-reduces (2 per layer and the
  // LM head's) run beside their wgrads and are costed there (compute_seconds), leaving the recomputed forward's.
  // With sequence parallelism the two all-gathers of the row-parallel outputs' gradients (one all-reduce's worth per
  // layer) stay exposed (core/cost/tp_overlap.h).
  int sp_exposed = sequence_parallel_tp() ? (per_layer + 1) / 2 : 0;
  // The userbuffers overlap runs the dense layers' and the attention's collectives beside their GEMMs, in forward,
  // recomputation and the fused backward's dgrads (layer_forward_kernels, layer_backward_kernels): the shared
  // experts' stay.
  int forward = per_layer, recomputed_exposed = recomputed;
  if (userbuffers()) {
    const int shared_calls = s_.model.moe_shared_ffn_hidden > 0 ? moe : 0;
    forward = shared_calls;
    recomputed_exposed = sc.recompute == Recompute::Full || shared ? shared_calls : 0;
    sp_exposed = (shared_calls + 1) / 2;
  }
  const int backward =
      tp_overlap(op) ? recomputed_exposed + sp_exposed : recomputed_exposed + per_layer + (last ? 1 : 0);
  switch (op.kind) {
    case OpKind::Forward:
      return forward + (first_stage(op.stage) ? 1 : 0);  // + vocab-parallel embedding output
    case OpKind::Backward:
    case OpKind::BackwardInput:  // the all-reduces of the input gradients (and the recomputed forward)
      return backward;
    case OpKind::BackwardWeight:  // weight gradients stay on their GPU
      return 0;
  }
  return 0;
}

double AnalyticCostModel::tp_allreduce_bytes(const Op& op, int microbatch_seqs) const {
  check_op(op, microbatch_seqs);
  return static_cast<double>(microbatch_seqs) * op.tokens() * s_.model.hidden * elem_bytes() / s_.parallel.cp;
}

// The routed experts' gradients are reduced over their own group (core/cost/expert_parallel.h), not over DP.
double AnalyticCostModel::grad_bytes(int rank) const {
  return (rank_parameter_count(s_, rank) - rank_expert_parameter_count(s_, rank)) * grad_elem_bytes();
}

double AnalyticCostModel::param_bytes(int rank) const {
  return (rank_parameter_count(s_, rank) - rank_expert_parameter_count(s_, rank)) * s_.training.param_bytes().weight;
}

double AnalyticCostModel::expert_grad_bytes(int rank) const {
  return rank_expert_parameter_count(s_, rank) * grad_elem_bytes();
}

double AnalyticCostModel::expert_param_bytes(int rank) const {
  return rank_expert_parameter_count(s_, rank) * s_.training.param_bytes().weight;
}

double AnalyticCostModel::optimizer_seconds(int rank) const {
  const DeviceSpec& d = s_.cluster.device;
  // The distributed optimizer updates its 1/dp shard only (the all-gather of the result is a collective).
  // Megatron shards it over the data-parallel group with context parallelism: dp * cp GPUs.
  const ParallelSpec& par = s_.parallel;
  const double shards = s_.training.sharded_optimizer() ? 1.0 * par.dp * par.cp * stage_copies(s_) : 1.0;
  // The routed experts' state is sharded over their expert-data-parallel group: tp * cp * dp / (ep * etp) GPUs.
  const double expert_shards =
      s_.training.sharded_optimizer() ? static_cast<double>(par.expert_data_gpus()) * stage_copies(s_) : 1.0;
  const double experts = rank_expert_parameter_count(s_, rank);
  const double params = experts == 0 ? rank_parameter_count(s_, rank) / shards
                                     : (rank_parameter_count(s_, rank) - experts) / shards + experts / expert_shards;
  const TrainingSpec::ParamBytes pb = s_.training.param_bytes();
  const double w = pb.weight, g = pb.grad, state = pb.state;  // state: fp32 master + moments
  // Read and write the state, read the gradient twice (unscale / norm, update), write the working weights
  // (read and write them when there is no separate master copy).
  const double bytes_per_param = 2 * state + 2 * g + (state > 0 ? w : 2 * w);
  const double gpu = params * bytes_per_param / (d.hbm_bw_Bps * d.memory_efficiency);
  // Three multi-tensor passes (unscale + inf check, grad norm, Adam), ~110 tensors per launch, 12 tensors per
  // layer plus embeddings.
  const double tensors = 12.0 * rank_layer_count(s_, rank) + 4.0;
  const int launches = 3 * static_cast<int>(std::ceil(tensors / 110.0));
  std::vector<double> ks(static_cast<std::size_t>(launches), gpu / launches);
  if (s_.training.fp8()) {  // FP8 copies (+ transposes) of every linear weight, cast from the new bf16 weights
    const double layers = rank_layer_count(s_, rank);
    const double params = layers * fp8_linear_weight_params(s_.model) / s_.parallel.tp;
    const double cast = params * (w + kFp8WeightCopyBytes) / (d.hbm_bw_Bps * d.memory_efficiency);
    const auto casts = static_cast<std::size_t>(kFp8LinearsPerLayer * layers);
    ks.insert(ks.end(), casts, cast / static_cast<double>(casts));
  }
  return stream_seconds({}, ks, 1, {}, d.kernel_launch_s);
}

double AnalyticCostModel::embedding_grad_bytes() const {
  if (!s_.model.tied_embeddings || s_.parallel.pp == 1) return 0.0;  // (lowering skips it when one rank holds both)
  return static_cast<double>(s_.model.vocab) * s_.model.hidden / s_.parallel.tp * grad_elem_bytes();
}

}  // namespace pipescope
