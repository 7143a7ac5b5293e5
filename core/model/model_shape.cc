#include "core/model/model_shape.h"

#include <stdexcept>
#include <string>

#include "core/model/placement.h"
#include "core/model/schedule_registry.h"

namespace pipescope {

LayerDims layer_dims(const ModelSpec& m) {
  LayerDims d;
  d.h = m.hidden;
  d.f = m.ffn_hidden;
  d.a = m.heads;
  d.g = m.kv_heads();
  d.kv = m.heads > 0 ? d.h * d.g / d.a : 0.0;
  d.qkv_out = d.h + 2.0 * d.kv;
  d.bias = m.linear_bias;
  switch (m.ffn) {
    case FfnKind::Gelu:
      d.up_out = d.f;
      break;
    case FfnKind::SwiGlu:
      d.up_out = 2.0 * d.f;
      break;
  }
  switch (m.norm) {
    case NormKind::LayerNorm:
      d.norm_params = 2.0 * d.h;
      break;
    case NormKind::RmsNorm:
      d.norm_params = d.h;
      break;
  }
  return d;
}

LayerFlops layer_forward_flops(const ModelSpec& m, int t, int b, int l, int c) {
  const LayerDims d = layer_dims(m);
  const double T = static_cast<double>(b) * l, tt = t;
  LayerFlops x;
  x.qkv = 2.0 * T * d.h * d.qkv_out / tt;
  x.proj = 2.0 * T * d.h * d.h / tt;
  x.mlp = 2.0 * T * d.h * (d.up_out + d.f) / tt;
  // Causal pairs: query i of the slice sees c context keys and i + 1 keys of its own slice. Every query head
  // scores its keys (GQA shares K/V between heads, not the work).
  const double pairs = static_cast<double>(l) * c + 0.5 * static_cast<double>(l) * (l + 1.0);
  x.attn = 4.0 * b * d.h * pairs / tt;
  return x;
}

double layer_parameter_count(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  // QKV h*qkv_out, output projection h^2, MLP h*up_out + f*h, two norms; biases on each GEMM's output.
  double p = d.h * d.qkv_out + d.h * d.h + d.h * d.up_out + d.f * d.h + 2.0 * d.norm_params;
  if (d.bias) p += d.qkv_out + d.h + d.up_out + d.h;
  return p;
}

namespace {

double position_params(const ModelSpec& m) {
  switch (m.position) {
    case PositionKind::Learned:
      return static_cast<double>(m.seq_len) * m.hidden;
    case PositionKind::Rope:
      return 0.0;
  }
  return 0.0;
}

}  // namespace

double parameter_count(const ModelSpec& m) {
  const double h = m.hidden;
  double p = m.layers * layer_parameter_count(m) + static_cast<double>(m.vocab) * h + position_params(m);
  if (!m.tied_embeddings) p += static_cast<double>(m.vocab) * h;  // separate output layer
  return p;
}

double megatron_flops_per_iteration(const ModelSpec& m, int global_batch, Recompute recompute) {
  // Eq. 3 counts full (non-causal) attention: 3 passes (4 with full recompute); logits 6*B*s*h*V, not recomputed.
  const LayerDims d = layer_dims(m);
  const double B = global_batch, s = m.seq_len, h = d.h;
  const double gemm_fwd = 2.0 * B * s * (h * d.qkv_out + h * h + h * d.up_out + d.f * h);
  const double attn_fwd = 4.0 * B * s * s * h;
  double passes_gemm = 3.0, passes_attn = 3.0;
  switch (recompute) {
    case Recompute::None:
      break;
    case Recompute::Selective:
      passes_attn = 4.0;
      break;
    case Recompute::Full:
      passes_gemm = passes_attn = 4.0;
      break;
  }
  return m.layers * (passes_gemm * gemm_fwd + passes_attn * attn_fwd) + 6.0 * B * s * h * m.vocab;
}

double rank_parameter_count(const Scenario& s, int rank) {
  const ModelSpec& m = s.model;
  const ParallelSpec& par = s.parallel;
  if (rank < 0 || rank >= par.pp)
    throw std::invalid_argument("rank_parameter_count: rank " + std::to_string(rank) + " outside 0.." +
                                std::to_string(par.pp - 1));
  const double h = m.hidden, V = m.vocab;
  const double layers_on_rank = rank_layer_count(s, rank);  // its v chunks
  double p = layers_on_rank * layer_parameter_count(m);
  // The ranks of the first and last virtual stage (both rank 0 in a V-shaped schedule).
  const StageStyle style = scenario_stage_style(s);
  const int first = stage_rank(style, par.pp, 0), last = stage_rank(style, par.pp, par.pp * par.v - 1);
  if (rank == first) p += V * h + position_params(m);  // word (+ learned position) embeddings, first stage
  if (rank == last) {
    p += layer_dims(m).norm_params;  // final norm
    // Megatron keeps a copy of the tied word embedding on the last stage when it is on another rank; untied
    // models have their own output layer.
    if (!m.tied_embeddings || first != last) p += V * h;
  }
  return p / par.tp;
}

std::vector<ActivationTensor> layer_activation_tensors(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  std::vector<ActivationTensor> x = {
      {2.0 * d.h, false, false},  // first LayerNorm input
      {2.0 * d.h, false, false},  // QKV GEMM input (the LayerNorm output)
      {2.0 * d.h, true, false},   // Q
      {2.0 * d.kv, true, true},   // K
      {2.0 * d.kv, true, true},   // V
      {2.0 * d.h, true, false},   // output projection input (the attention output)
      {1.0 * d.h, false, false},  // residual dropout mask
      {2.0 * d.h, false, false},  // second LayerNorm input
      {2.0 * d.h, false, false},  // fc1 input
  };
  switch (m.ffn) {
    case FfnKind::Gelu:
      x.push_back({2.0 * d.f, true, false});  // fc1 output (GeLU input)
      break;
    case FfnKind::SwiGlu:
      x.push_back({4.0 * d.f, true, false});  // fc1 output: gate and up, 2f wide
      break;
  }
  x.push_back({2.0 * d.f, true, false});   // fc2 input
  x.push_back({1.0 * d.h, false, false});  // residual dropout mask
  return x;
}

}  // namespace pipescope
