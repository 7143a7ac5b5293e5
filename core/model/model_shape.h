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
  double h = 0;            // hidden
  double f = 0;            // ffn_hidden
  double a = 0;            // attention (query) heads
  double g = 0;            // K/V heads (query groups; = a for multi-head attention)
  double kv = 0;           // width of K (and of V): h * g / a
  double qkv_out = 0;      // fused QKV GEMM output: h + 2 kv
  double up_out = 0;       // MLP up GEMM output: f (GeLU) or 2f (SwiGLU: gate and up in one GEMM)
  bool bias = true;        // linear biases
  double norm_params = 0;  // parameters of one norm: 2h (LayerNorm) or h (RMSNorm)
};
LayerDims layer_dims(const ModelSpec& m);

// Forward FLOPs of one transformer layer for b sequences, l tokens after c context tokens, per GPU of a
// t-way tensor-parallel group (causal attention: query i attends to keys 0..c+i).
struct LayerFlops {
  double qkv = 0, proj = 0, mlp = 0, attn = 0;
  double gemm() const { return qkv + proj + mlp; }
  double total() const { return qkv + proj + mlp + attn; }
};
LayerFlops layer_forward_flops(const ModelSpec& m, int t, int b, int l, int c);

// Model accounting (docs/papers.md#megatron; docs/cost-model.md, "Model shapes").
double layer_parameter_count(const ModelSpec& m);  // GPT: 4h^2 + 2hf + f + 9h (12h^2 + 13h at f = 4h)
// Eq. 2 (+ V*h output layer when untied; learned position embeddings only; the final norm left out, as in Eq. 2).
double parameter_count(const ModelSpec& m);
// Eq. 3 generalised: per layer forward 2Bs(h*qkv_out + h^2 + h*up_out + f*h) + 4Bs^2h, times 3 passes, +1 forward
// with full recomputation, +1 attention-core forward (the 4Bs^2h term) with selective recomputation; logits 6BshV.
double megatron_flops_per_iteration(const ModelSpec& m, int global_batch, Recompute recompute);
// Parameters held by one GPU of pipeline rank `rank` (its v chunks, embeddings on the first / last virtual
// stage, final norm on the last), divided by the tensor-parallel degree.
double rank_parameter_count(const Scenario& s, int rank);

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
  bool kv = false;  // K or V (a token-sliced schedule without flash keeps them in its K/V cache instead)
};
std::vector<ActivationTensor> layer_activation_tensors(const ModelSpec& m);

}  // namespace pipescope
