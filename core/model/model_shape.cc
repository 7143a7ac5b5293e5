#include "core/model/model_shape.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/model/placement.h"
#include "core/model/schedule_registry.h"

namespace pipescope {

namespace {

// The up GEMM's output width of an MLP of inner size f: f (GeLU), or gate and up in one GEMM (SwiGLU).
double up_width(FfnKind k, double f) {
  switch (k) {
    case FfnKind::Gelu:
      return f;
    case FfnKind::SwiGlu:
      return 2.0 * f;
  }
  return f;
}

}  // namespace

LayerDims layer_dims(const ModelSpec& m) {
  LayerDims d;
  d.h = m.hidden;
  d.f = m.ffn_hidden;
  d.a = m.heads;
  d.g = m.kv_heads();
  d.hd = m.head_width();
  d.q = d.a * d.hd;
  d.kv = d.g * d.hd;
  d.qkv_out = d.q + 2.0 * d.kv;
  d.o = d.q;
  if (m.mla()) {
    d.mla = true;
    d.q_lora = m.q_lora_rank, d.kv_lora = m.kv_lora_rank, d.rope = m.qk_rope_head_dim;
    d.hd = static_cast<double>(m.head_dim) + m.qk_rope_head_dim;
    d.q = d.a * d.hd;
    d.o = d.a * m.v_head_dim;
    d.kv = (d.q + d.o) / 2;
    d.kv_up_out = d.a * (static_cast<double>(m.head_dim) + m.v_head_dim);
    d.qkv_out = d.q + 2.0 * d.kv;
  }
  d.bias = m.linear_bias;
  d.up_out = up_width(m.ffn, d.f);
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

namespace {

// QKV h*qkv_out, output projection o*h, two norms; biases on both GEMMs' outputs. MLA: the Q down (h x q_lora) and
// up (q_lora x q) projections or h x q, the K/V down projection (h x (kv_lora + rope)), its up projection
// (kv_lora x a (head_dim + v_head_dim)), the latents' norms.
double attention_parameter_count(const LayerDims& d) {
  if (d.mla) {
    const double q = d.q_lora > 0 ? d.h * d.q_lora + d.q_lora + d.q_lora * d.q : d.h * d.q;
    return q + d.h * (d.kv_lora + d.rope) + d.kv_lora + d.kv_lora * d.kv_up_out + d.o * d.h + 2.0 * d.norm_params;
  }
  double p = d.h * d.qkv_out + d.q * d.h + 2.0 * d.norm_params;
  if (d.bias) p += d.qkv_out + d.h;
  return p;
}

}  // namespace

double mla_qkv_weights(const LayerDims& d) {
  const double q = d.q_lora > 0 ? d.h * d.q_lora + d.q_lora * d.q : d.h * d.q;
  return q + d.h * (d.kv_lora + d.rope) + d.kv_lora * d.kv_up_out;
}

MoeDims moe_dims(const ModelSpec& m) {
  MoeDims x;
  if (!m.moe()) return x;
  x.experts = m.moe_experts;
  x.top_k = m.moe_top_k;
  x.f = m.moe_ffn_hidden;
  x.up_out = up_width(m.ffn, x.f);
  x.shared_f = m.moe_shared_ffn_hidden;
  x.shared_up_out = up_width(m.ffn, x.shared_f);
  return x;
}

LayerFlops layer_forward_flops(const ModelSpec& m, int t, int b, int l, int c, bool moe) {
  const LayerDims d = layer_dims(m);
  const double T = static_cast<double>(b) * l, tt = t;
  LayerFlops x;
  x.qkv = 2.0 * T * d.h * d.qkv_out / tt;
  x.proj = 2.0 * T * d.q * d.h / tt;
  if (d.mla) {  // the down projections on the GPU's share of the tokens (sequence parallelism), the rest split t ways
    x.qkv = 2.0 * T * (mla_qkv_weights(d)) / tt;
    x.proj = 2.0 * T * d.o * d.h / tt;
  }
  if (moe) {
    const MoeDims e = moe_dims(m);
    x.mlp = 2.0 * T * d.h * (e.experts + e.top_k * (e.up_out + e.f) + e.shared_up_out + e.shared_f) / tt;
  } else {
    x.mlp = 2.0 * T * d.h * (d.up_out + d.f) / tt;
  }
  // Causal pairs: query i of the slice sees c context keys and i + 1 keys of its own slice (at most a sliding
  // window's). Every query head scores its keys (GQA shares K/V between heads, not the work).
  const double pairs = attended_pairs(m, l, c);
  x.attn = d.mla ? 2.0 * b * (d.q + d.o) * pairs / tt : 4.0 * b * d.q * pairs / tt;  // Q.K^T over q, P.V over o
  return x;
}

double attended_pairs(const ModelSpec& m, int l, int c) {
  const double full = static_cast<double>(l) * c + 0.5 * static_cast<double>(l) * (l + 1.0);
  if (m.sliding_window <= 0 || m.layers <= 0) return full;
  // Query p (0-based, c <= p < c + l) sees min(p + 1, w) keys: the sum of min(x, w) for x from a = c + 1 to b = c + l.
  const double w = m.sliding_window, a = c + 1.0, b = static_cast<double>(c) + l;
  const double window = b <= w   ? 0.5 * (a + b) * (b - a + 1)
                        : a >= w ? w * (b - a + 1)
                                 : 0.5 * (a + w) * (w - a + 1) + w * (b - w);
  // ModelSpec::sliding_layer's count: every layer, or all but every pattern-th.
  const int sliding = m.sliding_window_pattern == 0 ? m.layers : m.layers - m.layers / m.sliding_window_pattern;
  return (sliding * window + (m.layers - sliding) * full) / m.layers;
}

double attended_share(const ModelSpec& m) {
  const double s = m.seq_len;
  return s > 0 ? attended_pairs(m, m.seq_len, 0) / (0.5 * s * (s + 1)) : 1.0;
}

double layer_parameter_count(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  // + MLP h*up_out + f*h, biases on its GEMMs' outputs.
  double p = attention_parameter_count(d) + d.h * d.up_out + d.f * d.h;
  if (d.bias) p += d.up_out + d.h;
  return p;
}

double moe_expert_parameter_count(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  const MoeDims e = moe_dims(m);
  return e.experts * (d.h * e.up_out + e.f * d.h + (d.bias ? e.up_out + d.h : 0.0));
}

double moe_layer_parameter_count(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  const MoeDims e = moe_dims(m);
  double shared = d.h * e.shared_up_out + e.shared_f * d.h;
  if (d.bias && e.shared_f > 0) shared += e.shared_up_out + d.h;
  return attention_parameter_count(d) + d.h * e.experts + moe_expert_parameter_count(m) + shared;
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

namespace {

int moe_layer_total(const ModelSpec& m) {
  int n = 0;
  for (int i = 0; i < m.layers; i++) n += m.moe_layer(i) ? 1 : 0;
  return n;
}

}  // namespace

double parameter_count(const ModelSpec& m) {
  const double h = m.hidden;
  const int moe = moe_layer_total(m);
  double p = (m.layers - moe) * layer_parameter_count(m) + moe * moe_layer_parameter_count(m) +
             static_cast<double>(m.vocab) * h + position_params(m);
  if (!m.tied_embeddings) p += static_cast<double>(m.vocab) * h;  // separate output layer
  return p;
}

double megatron_flops_per_iteration(const ModelSpec& m, int global_batch, Recompute recompute) {
  // Eq. 3 counts full (non-causal) attention: 3 passes (4 with full recompute); logits 6*B*s*h*V, not recomputed.
  const LayerDims d = layer_dims(m);
  const double B = global_batch, s = m.seq_len, h = d.h;
  const double attn_gemm = d.mla ? mla_qkv_weights(d) + d.o * h : h * d.qkv_out + d.q * h;
  const double gemm_fwd = 2.0 * B * s * (attn_gemm + h * d.up_out + d.f * h);
  const MoeDims e = moe_dims(m);
  const double moe_gemm_fwd =
      2.0 * B * s * (attn_gemm + h * (e.top_k * (e.up_out + e.f) + e.shared_up_out + e.shared_f));
  // Sliding windows (model.sliding_window) leave attended_share of the causal pairs: the same share of the s^2 term.
  const double attn_fwd = (d.mla ? 2.0 * B * s * s * (d.q + d.o) : 4.0 * B * s * s * d.q) * attended_share(m);
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
  const int moe = moe_layer_total(m);
  return (m.layers - moe) * passes_gemm * gemm_fwd + moe * passes_gemm * moe_gemm_fwd +
         m.layers * passes_attn * attn_fwd + 6.0 * B * s * h * m.vocab;
}

double megatron_core_flops_per_iteration(const ModelSpec& m, int global_batch) {
  const LayerDims d = layer_dims(m);
  const MoeDims e = moe_dims(m);
  const double h = d.h, s = m.seq_len;
  const double attn = d.mla ? mla_qkv_weights(d) + d.o * h : h * d.qkv_out + d.q * h;
  const double dense = h * (d.up_out + d.f), routed = h * (e.top_k * (e.up_out + e.f) + e.shared_up_out + e.shared_f);
  const int moe = moe_layer_total(m);
  const double per_token = 6.0 * (m.layers * attn + (m.layers - moe) * dense + moe * routed) +
                           3.0 * m.layers * s * (d.q + d.o) * attended_share(m) + 6.0 * h * m.vocab;
  return static_cast<double>(global_batch) * s * per_token;
}

double rank_parameter_count(const Scenario& s, int rank) {
  const ModelSpec& m = s.model;
  const ParallelSpec& par = s.parallel;
  if (rank < 0 || rank >= par.pp)
    throw std::invalid_argument("rank_parameter_count: rank " + std::to_string(rank) + " outside 0.." +
                                std::to_string(par.pp - 1));
  const double h = m.hidden, V = m.vocab;
  const double layers_on_rank = rank_layer_count(s, rank);  // its v chunks
  const double moe_on_rank = rank_moe_layer_count(s, rank);
  // Everything but the routed experts, which go to rank_expert_parameter_count.
  double p = (layers_on_rank - moe_on_rank) * layer_parameter_count(m) +
             moe_on_rank * (moe_layer_parameter_count(m) - moe_expert_parameter_count(m));
  // Whether the rank runs the embedding and the head: the first and the last virtual stage (both on rank 0 in a V;
  // on ranks 0 and pp-1 each in DualPipe, whose copies of the first and the last model stage sit there).
  const StageStyle style = scenario_stage_style(s);
  bool embedding = false, head = false;
  for (int g = 0; g < par.pp * par.v; g++)
    if (stage_rank(style, par.pp, g) == rank) embedding |= holds_embedding(s, g), head |= holds_head(s, g);
  if (embedding) p += V * h + position_params(m);  // word (+ learned position) embeddings, first stage
  if (head) {
    p += layer_dims(m).norm_params;  // final norm
    // Megatron keeps a copy of the tied word embedding on the last stage when it is on another rank; untied
    // models have their own output layer.
    if (!m.tied_embeddings || !embedding) p += V * h;
  }
  return p / par.tp + rank_expert_parameter_count(s, rank);
}

double rank_expert_parameter_count(const Scenario& s, int rank) {
  if (!s.model.moe()) return 0;
  // A GPU holds E / ep experts, each split etp ways.
  return rank_moe_layer_count(s, rank) * moe_expert_parameter_count(s.model) / s.parallel.expert_group_gpus();
}

double active_parameter_count(const ModelSpec& m) {
  if (!m.moe()) return parameter_count(m);
  const MoeDims e = moe_dims(m);
  return parameter_count(m) - moe_layer_total(m) * moe_expert_parameter_count(m) * (1.0 - e.top_k / e.experts);
}

namespace {

// Up to and including the second norm's input: what dense and MoE layers both save.
std::vector<ActivationTensor> attention_activation_tensors(const LayerDims& d) {
  const std::uint8_t norm = module_bit(RecomputeModule::LayerNorm), up = module_bit(RecomputeModule::MlaUpProj);
  if (d.mla)
    return {
        {2.0 * d.h, false, false},                   // first LayerNorm input
        {2.0 * d.h, false, false, norm},             // the down projections' input (the LayerNorm output)
        {2.0 * d.q_lora, false, false},              // Q latent (its norm's input; none without q_lora)
        {2.0 * d.q_lora, false, false},              // normed Q latent (the Q up projection's input)
        {2.0 * (d.kv_lora + d.rope), false, false},  // K/V latent and rotary key
        {2.0 * d.kv_lora, false, false},             // normed K/V latent (the up projection's input)
        {2.0 * d.q, true, false, up},                // Q
        {2.0 * d.q, true, true, up},                 // K (the rotary key broadcast to every head)
        {2.0 * d.o, true, true, up},                 // V
        {2.0 * d.o, true, false},                    // output projection input (the attention output)
        {1.0 * d.h, false, false},                   // residual dropout mask
        {2.0 * d.h, false, false},                   // second LayerNorm input
    };
  return {
      {2.0 * d.h, false, false},        // first LayerNorm input
      {2.0 * d.h, false, false, norm},  // QKV GEMM input (the LayerNorm output)
      {2.0 * d.q, true, false},         // Q
      {2.0 * d.kv, true, true},         // K
      {2.0 * d.kv, true, true},         // V
      {2.0 * d.q, true, false},         // output projection input (the attention output)
      {1.0 * d.h, false, false},        // residual dropout mask
      {2.0 * d.h, false, false},        // second LayerNorm input
  };
}

// An MLP of inner size f on `rows` token copies per token (1 for a dense MLP; k for the routed experts, whose
// copies each GPU holds for its 1/t of the tokens: split): its input (unless `with_input` is false: the shared
// experts read the router's input tensor), the up GEMM's output, the down GEMM's input; `mlp` and `act` are the
// recompute modules that drop the up output (the MLP's) and the down input (the MLP's or its activation's).
struct MlpTensors {
  double rows = 1;
  bool split_in = false, with_input = true;
  std::uint8_t input = 0, mlp = 0, act = 0;
  // The routed experts': their input is gathered over etp GPUs, their inner tensors split etp ways.
  bool routed = false;
};
void add_mlp_tensors(std::vector<ActivationTensor>& x, FfnKind kind, double h, double f, const MlpTensors& t) {
  if (t.with_input) x.push_back({2.0 * h * t.rows, t.split_in, false, t.input, t.routed, t.routed});  // fc1 input
  x.push_back({2.0 * up_width(kind, f) * t.rows, true, false, t.mlp, t.routed});  // fc1 output (activation input)
  x.push_back({2.0 * f * t.rows, true, false, static_cast<std::uint8_t>(t.mlp | t.act), t.routed});  // fc2 input
}

}  // namespace

std::vector<ActivationTensor> layer_activation_tensors(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  std::vector<ActivationTensor> x = attention_activation_tensors(d);
  const std::uint8_t mlp = module_bit(RecomputeModule::Mlp);
  add_mlp_tensors(x, m.ffn, d.h, d.f, {1, false, true, module_bit(RecomputeModule::LayerNorm), mlp, 0});
  x.push_back({1.0 * d.h, false, false});  // residual dropout mask
  return x;
}

std::vector<ActivationTensor> moe_layer_activation_tensors(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  const MoeDims e = moe_dims(m);
  const std::uint8_t moe = module_bit(RecomputeModule::Moe), act = module_bit(RecomputeModule::MoeAct);
  const std::uint8_t shared = moe | module_bit(RecomputeModule::SharedExperts);
  std::vector<ActivationTensor> x = attention_activation_tensors(d);
  x.push_back({2.0 * d.h, false, false, module_bit(RecomputeModule::LayerNorm)});  // router input (the norm output)
  x.push_back({4.0 * e.experts, false, false, moe});                               // router probabilities (fp32)
  x.push_back({8.0 * e.top_k, false, false, moe});  // routing map: expert indices of each token's copies
  // The routed experts see the tokens' k copies after the dispatch; with sequence parallelism each GPU of a TP
  // group dispatches its 1/t of the tokens (Megatron requires it for MoE with tp > 1), hence split.
  add_mlp_tensors(x, m.ffn, d.h, e.f, {e.top_k, true, true, moe, moe, act, true});
  x.push_back({2.0 * d.h * e.top_k, true, false, moe, true});  // expert outputs before the combine (unpermute input)
  if (e.shared_f > 0) add_mlp_tensors(x, m.ffn, d.h, e.shared_f, {1, false, false, 0, shared, 0});
  x.push_back({1.0 * d.h, false, false});  // residual dropout mask
  return x;
}

std::vector<ActivationTensor> stored_activation_tensors(std::vector<ActivationTensor> x, const ScheduleSpec& sc) {
  if (sc.recompute != Recompute::Selective) return x;
  x.erase(std::remove_if(x.begin(), x.end(),
                         [&](const ActivationTensor& t) { return t.dropped_by & sc.recompute_modules; }),
          x.end());
  return x;
}

std::vector<ActivationTensor> recomputed_activation_tensors(std::vector<ActivationTensor> x, const ScheduleSpec& sc) {
  if (sc.recompute != Recompute::Selective) return {};
  x.erase(std::remove_if(x.begin(), x.end(),
                         [&](const ActivationTensor& t) { return !(t.dropped_by & sc.recompute_modules); }),
          x.end());
  return x;
}

}  // namespace pipescope
