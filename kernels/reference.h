#pragma once
// CPU reference of the GPT layer, embedding, LM head + loss and Adam (Eigen), templated on the scalar and
// instantiated for double and float. It defines the numerics the CUDA backend is checked against, and
// runs the exactness tests in double. Conventions: kernels/layer.h; protocol: kernels/README.md.

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/layer.h"

namespace pipescope::kernels::ref {

// GELU, tanh approximation (GPT-2, Megatron's bias_gelu), and its derivative: the reference kernels and the
// calibration's memory-bound benchmark compute the same function.
template <class T>
T gelu(T u) {
  const T k = T(0.7978845608028654), a = T(0.044715);
  return T(0.5) * u * (T(1) + std::tanh(k * (u + a * u * u * u)));
}
template <class T>
T gelu_grad(T u) {
  const T k = T(0.7978845608028654), a = T(0.044715);
  const T t = std::tanh(k * (u + a * u * u * u));
  return T(0.5) * (T(1) + t) + T(0.5) * u * (T(1) - t * t) * k * (T(1) + T(3) * a * u * u);
}

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// In-place sum of a [rows, hidden] partial result over the tensor-parallel shards of a layer (LayerShape::tp).
template <class T>
using TpSum = std::function<void(Mat<T>&)>;

// K and V of every token of one (micro-batch, layer), plus the dK/dV that later slices' backward
// accumulates for earlier tokens. Per sequence s: k[s], v[s], dk[s], dv[s] are [max_len, shard_width()]
// (the shard's heads only when tp > 1).
template <class T>
struct KVCache {
  KVCache() = default;
  KVCache(const LayerShape& shape, int batch, int max_len);
  KVState state;
  std::vector<Mat<T>> k, v, dk, dv;
};

// The output gradients of a layer's parameterised operations on one slice, computed by the backward for
// inputs (I) and consumed by the backward for weights (W): the GEMM / bias of fc2 (dy), fc1 (du, after GELU),
// W_o (dx1), QKV (dqkv), and LN2 / LN1 (da2, da1: w.r.t. their outputs, TP-summed on a shard).
template <class T>
struct LayerGrads {
  bool filled = false;
  Mat<T> dy, du, da2, dx1, dqkv, da1;
};

// The routed half of an MoE layer's forward on one slice (kernels/README.md "Mixture of experts"). Tokens are
// dispatched in send order: by global expert, then token, so member j's rows are contiguous.
template <class T>
struct MoeRecord {
  bool filled = false;
  std::vector<int> sel;                   // [n * k]: each token's experts, best first
  Mat<T> gates;                           // [n, k]: softmax over the selected logits
  std::vector<std::size_t> pos;           // [n * k]: send-order row of (token, slot)
  std::vector<std::size_t> send_rows;     // per member: rows dispatched to it
  std::vector<std::int64_t> recv_counts;  // [ep * local]: rows from member i for local expert e
  std::vector<std::size_t> recv_rows;     // per member: rows received from it
  Mat<T> xr, u, g;                        // received rows, expert fc1 outputs, their GELU ([rows, fe])
  Mat<T> yb;                              // [n * k, h]: expert outputs back in send order (before the gates)
};

// What a layer's backward needs from its forward on one slice; after a split backward's I, also what its W
// needs (grads).
template <class T>
struct LayerRecord {
  Slice slice;
  bool filled = false;
  Mat<T> x, a1, qkv, ctx, x1, a2, u, g;  // input, LN1 out, QKV, attention out, residual 1, LN2 out, FC1 out, GELU out
  Vec<T> mu1, rstd1, mu2, rstd2;
  std::vector<Mat<T>> probs;  // softmax of sequence s, head j at [s * heads + j]: [len, end]
  LayerGrads<T> grads;        // set by layer_backward_input, consumed by layer_backward_weight
  MoeRecord<T> moe;           // MoE layers: the routed experts' part
};

template <class T>
struct HeadRecord {
  Slice slice;
  bool filled = false;
  Mat<T> x, a, dlogits;  // input, final-LN out, d(scaled loss)/d(logits)
  Vec<T> mu, rstd;
  bool has_da = false;  // set by head_backward_input: da (gradient w.r.t. the final LN's output) for the W half
  Mat<T> da;
};

// y = layer(x) on a slice that attends to the cached K/V of tokens [0, slice.begin). Writes the slice's K/V
// into the cache and fills `rec`. x, y: [b * l, hidden] (row s * l + t).
// shape.tp > 1: `params` are one shard (kernels/layer.h) and tp_sum (required then) sums the two row-parallel
// partial products (attention W_o, fc2) over the shards before their bias and residual; x and y are whole.
template <class T>
void layer_forward(const LayerShape& shape, const T* params, const Mat<T>& x, const Slice& slice, KVCache<T>& kv,
                   LayerRecord<T>& rec, Mat<T>& y, const TpSum<T>& tp_sum = {});

// Backward of the slice recorded in `rec`: adds the parameter gradients into `grads` (LayerLayout), adds
// dK/dV of all tokens [0, end) into the cache, consumes those of the slice's own tokens, writes dx.
// shape.tp > 1: tp_sum sums the gradients w.r.t. LN2's and LN1's outputs (inputs of the column-parallel fc1 and
// QKV) over the shards; dy and dx are whole, and the replicated tensors' gradients equal on every shard.
template <class T>
void layer_backward(const LayerShape& shape, const T* params, const LayerRecord<T>& rec, KVCache<T>& kv,
                    const Mat<T>& dy, T* grads, Mat<T>& dx, const TpSum<T>& tp_sum = {});

// The same backward split in two (zero-bubble I and W): layer_backward_input writes dx and the dK/dV of the
// cache exactly as layer_backward does (with the same TP sums) but adds no parameter gradient; it keeps the
// output gradients of the layer's weights in rec.grads and frees what only it needed (probs, qkv, u).
// layer_backward_weight then adds every parameter gradient (GEMM weights, biases, LayerNorm gains and shifts;
// no TP communication) and frees rec.grads; the record then holds no forward. I then W adds bitwise the same
// gradients as layer_backward. W of different slices may run in any order after their I.
template <class T>
void layer_backward_input(const LayerShape& shape, const T* params, LayerRecord<T>& rec, KVCache<T>& kv,
                          const Mat<T>& dy, Mat<T>& dx, const TpSum<T>& tp_sum = {});
template <class T>
void layer_backward_weight(const LayerShape& shape, LayerRecord<T>& rec, T* grads);

// An MoE layer (shape.moe()): the attention block and the dense MLP of width shape.ffn (the shared experts) as
// layer_forward, plus the routed experts on LN2's output: router logits a2 W_router, top-k (top_k_experts), gates =
// softmax over the k selected logits (the top-k softmax probabilities renormalised over the k, as Mixtral and
// Qwen3), dispatch all-to-all, each local expert's GELU MLP, combine all-to-all, gate-weighted sum added to y.
// `experts` are this rank's local_experts() experts (ExpertLayout). ep_all_to_all carries the exchanges; it may be
// empty only when shape.ep == 1 (the rows stay here). Not tensor-parallel; no split backward.
template <class T>
void moe_layer_forward(const LayerShape& shape, const T* params, const T* experts, const Mat<T>& x, const Slice& slice,
                       KVCache<T>& kv, LayerRecord<T>& rec, Mat<T>& y, const EpAllToAll& ep_all_to_all);
// Its backward: gradients of the layer (router included, through the gates; the top-k choice is not differentiated)
// into `grads`, of the local experts into `expert_grads`; the reverse exchanges (combine, then dispatch) with the
// forward's counts.
template <class T>
void moe_layer_backward(const LayerShape& shape, const T* params, const T* experts, const LayerRecord<T>& rec,
                        KVCache<T>& kv, const Mat<T>& dy, T* grads, T* expert_grads, Mat<T>& dx,
                        const EpAllToAll& ep_all_to_all);

// x[s * l + t] = tok[tokens[s * l + t]] + pos[begin + t]. tokens: [b * l].
template <class T>
void embedding_forward(const ModelShape& m, const T* params, const std::vector<std::int32_t>& tokens,
                       const Slice& slice, Mat<T>& x);
template <class T>
void embedding_backward(const ModelShape& m, const std::vector<std::int32_t>& tokens, const Slice& slice,
                        const Mat<T>& dx, T* grads);

// Final LayerNorm, logits = LN(x) W_vocab, cross-entropy against targets (< 0: ignored). Returns
// sum(CE) / loss_norm, loss_norm being the target count of the whole global batch. The stored logit gradient
// is that of loss_scale * loss (loss scaling for fp16).
template <class T>
double head_forward(const ModelShape& m, const T* params, const Mat<T>& x, const std::vector<std::int32_t>& targets,
                    const Slice& slice, double loss_norm, double loss_scale, HeadRecord<T>& rec);
template <class T>
void head_backward(const ModelShape& m, const T* params, const HeadRecord<T>& rec, T* grads, Mat<T>& dx);
// Split: the input half writes dx and keeps the final LN's output gradient; the weight half adds the LM head's and
// the final LN's gradients (as head_backward, bitwise) and frees the record.
template <class T>
void head_backward_input(const ModelShape& m, const T* params, HeadRecord<T>& rec, Mat<T>& dx);
template <class T>
void head_backward_weight(const ModelShape& m, HeadRecord<T>& rec, T* grads);

// One bias-corrected Adam step (step counts from 1) on n parameters.
template <class T>
void adam_step(const AdamConfig& cfg, int step, std::size_t n, T* params, const T* grads, T* m, T* v);

}  // namespace pipescope::kernels::ref
