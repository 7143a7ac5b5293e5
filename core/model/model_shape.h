#pragma once
// Transformer shape accounting shared by the cost model (core/cost/analytic_cost.h), the memory model
// (core/memory/memory_model.h) and the reports: GEMM widths per layer (grouped-query attention, SwiGLU), parameter
// counts (norm kind, biases, position embeddings, untied output layer), Megatron's FLOP formula, and the bytes
// one layer's forward stores (Korthikanti et al. 2022, generalised to GQA and SwiGLU). Formulas:
// docs/cost-model.md, "Model shapes".

#include <vector>

#include "core/model/config.h"

namespace pipescope {

// Widths of one transformer layer (whole layer, before the tensor-parallel split).
struct LayerDims {
  double h = 0;        // hidden
  double f = 0;        // ffn_hidden
  double a = 0;        // attention (query) heads
  double g = 0;        // K/V heads (query groups; = a for multi-head attention)
  double hd = 0;       // Q/K head width: model.head_dim (+ qk_rope_head_dim with MLA), else h / a
  double q = 0;        // width of Q (and of K with MLA): a * hd (= h unless head_dim is given)
  double o = 0;        // width of the attention output (the projection's input): q, or a * v_head_dim with MLA
  double kv = 0;       // width of K (and of V): g * hd; with MLA (q + o) / 2, so that K + V is q + o
  double qkv_out = 0;  // fused QKV GEMM output: q + 2 kv (MLA: what its up-projections make)
  // Multi-head latent attention (all 0 without): the latent widths, the shared rotary key, a * (head_dim + v_head_dim)
  // (the K/V up-projection's output).
  bool mla = false;
  double q_lora = 0, kv_lora = 0, rope = 0, kv_up_out = 0;
  double up_out = 0;       // MLP up GEMM output: f (GeLU) or 2f (SwiGLU: gate and up in one GEMM)
  bool bias = true;        // linear biases
  double norm_params = 0;  // parameters of one norm: 2h (LayerNorm) or h (RMSNorm)
};
LayerDims layer_dims(const ModelSpec& m);

// Widths of an MoE layer's MLP part (docs/moe.md); all zero for a dense model.
struct MoeDims {
  double experts = 0;        // E routed experts
  double top_k = 0;          // k experts per token
  double f = 0;              // one expert's inner size
  double up_out = 0;         // its up GEMM's output: f, or 2f with SwiGLU
  double shared_f = 0;       // the shared experts' inner size (all of them)
  double shared_up_out = 0;  // their up GEMM's output
};
MoeDims moe_dims(const ModelSpec& m);
// The weights of an MLA layer's Q, K and V projections (down and up; the rotary key's part of the K/V down one).
double mla_qkv_weights(const LayerDims& d);

// Forward FLOPs of one transformer layer for b sequences, l tokens after c context tokens, per GPU of a
// t-way tensor-parallel group (causal attention: query i attends to keys 0..c+i).
// An MoE layer (moe = true) has the router and the top-k experts of each token (plus the shared experts) in
// place of the dense MLP: mlp = router + routed experts + shared experts, every token's k expert MLPs counted
// (the active work, not E experts' worth); the experts are not split t ways but each GPU of the TP group routes
// its 1/t of the tokens (sequence parallelism), the same work per GPU.
struct LayerFlops {
  double qkv = 0, proj = 0, mlp = 0, attn = 0;
  double gemm() const { return qkv + proj + mlp; }
  double total() const { return qkv + proj + mlp + attn; }
};
LayerFlops layer_forward_flops(const ModelSpec& m, int t, int b, int l, int c, bool moe = false);

// The (query, key) pairs that one sequence's slice of l tokens after c earlier ones attends causally, the mean over the
// model's layers: l c + l (l + 1) / 2 for full attention; a sliding-window layer's query sees at most the window's
// tokens (model.sliding_window). Attention kernels do the work of the pairs they attend (flash skips the rest).
double attended_pairs(const ModelSpec& m, int l, int c);
// attended_pairs over a whole sequence / its full causal pairs: the share of attention work sliding windows leave.
double attended_share(const ModelSpec& m);

// Model accounting (docs/papers.md#megatron; docs/cost-model.md, "Model shapes").
double layer_parameter_count(const ModelSpec& m);  // GPT: 4h^2 + 2hf + f + 9h (12h^2 + 13h at f = 4h)
// Of an MoE layer: attention and norms as a dense layer's, the router (h x E), E routed experts, the shared ones.
double moe_layer_parameter_count(const ModelSpec& m);
// The routed experts' parameters of one MoE layer (what expert parallelism spreads).
double moe_expert_parameter_count(const ModelSpec& m);
// Eq. 2 (+ V*h output layer when untied; learned position embeddings only; the final norm left out, as in Eq. 2).
double parameter_count(const ModelSpec& m);
// Eq. 3 generalised: per layer forward 2Bs(h*qkv_out + h^2 + h*up_out + f*h) + 4Bs^2h, times 3 passes, +1 forward
// with full recomputation, +1 attention-core forward (the 4Bs^2h term) with selective recomputation; logits 6BshV.
double megatron_flops_per_iteration(const ModelSpec& m, int global_batch, Recompute recompute);
// Megatron-Core's own count, the one behind its printed TFLOP/s (megatron/training/training.py, core 0.12 and
// later): per token 6 x (the layers' GEMM weights: attention, the dense MLP or the top-k experts and the shared
// ones, no router) + 6 L s q for causal attention (half the square) + 6 h V for the logits; no recomputation.
double megatron_core_flops_per_iteration(const ModelSpec& m, int global_batch);
// Parameters held by one GPU of pipeline rank `rank` (its v chunks, embeddings on the first / last virtual
// stage, final norm on the last): the routed experts divided by the expert-parallel degree, the rest by the
// tensor-parallel degree.
double rank_parameter_count(const Scenario& s, int rank);
// Of those, the routed experts' (reduced over the expert-data-parallel group, not the data-parallel one).
double rank_expert_parameter_count(const Scenario& s, int rank);
// Parameters of one token's forward: the dense ones and, per MoE layer, top-k experts (the "active" count).
double active_parameter_count(const ModelSpec& m);

// The tensors one layer's forward saves, in the order it creates them (Megatron-LM's layer; Korthikanti et al. 2022,
// Table 2, term by term, with K/V of width kv and an MLP of width f). `width` is bytes per token row at 2-byte
// activations; `split` tensors are divided t ways (Q and the projection input 4h, K and V 4kv, the MLP's 4f for
// GeLU or 6f for SwiGLU: 24h for GPT), the others are held whole by every GPU of the TP group unless sequence
// parallel (norm inputs, QKV and MLP inputs, dropout masks: 10h). Q, K and V are separate tensors (the attention
// call's contiguous inputs). The attention-score tensors (5 B per score and head) come on top unless selective
// recomputation or flash attention drops them. The memory model sums them; its caching-allocator replay
// (core/memory/caching_allocator.h) needs them one by one.
struct ActivationTensor {
  double width = 0;
  bool split = false;
  bool kv = false;              // K or V (a token-sliced schedule without flash keeps them in its K/V cache instead)
  std::uint8_t dropped_by = 0;  // the module_bit()s of the recompute modules that rerun its producer
  bool routed = false;          // held per routed copy on the GPU of its expert (scaled by the expert load)
  bool gathered = false;        // rows gathered over the expert-tensor-parallel group (etp times the copies)
};
std::vector<ActivationTensor> layer_activation_tensors(const ModelSpec& m);
// An MoE layer's: the attention part as above, then the router's input and probabilities, the routing map, the
// routed experts' tensors for the k copies of each token this GPU dispatches, the expert outputs before the
// combine, and the shared experts' MLP tensors (docs/moe.md).
std::vector<ActivationTensor> moe_layer_activation_tensors(const ModelSpec& m);
// The tensors a layer stores under the schedule's selective recomputation: those no recomputed module drops.
std::vector<ActivationTensor> stored_activation_tensors(std::vector<ActivationTensor> x, const ScheduleSpec& sc);
// The others: what backward recomputes (one layer at a time) before it runs.
std::vector<ActivationTensor> recomputed_activation_tensors(std::vector<ActivationTensor> x, const ScheduleSpec& sc);

}  // namespace pipescope
