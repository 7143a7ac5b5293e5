#pragma once
// Shapes, flat parameter layouts and conventions shared by every kernels/ backend (CPU reference and
// CUDA). See kernels/README.md for the model definition and the slice / K/V-cache protocol.
//
// Layout conventions (all backends):
//   - Activations of a slice are row-major [b * l, hidden]; row s * l + t is token c + t of sequence s.
//   - Weights are row-major [in, out] and a linear layer computes y = x W + bias (GPT-2 "Conv1D").
//   - The fused QKV output has columns [q | k | v]; inside each, head j owns columns [j*dh, (j+1)*dh).
//   - Parameters, gradients and Adam moments of one module live in one flat buffer whose tensors sit at
//     the offsets of LayerLayout / EmbeddingLayout / HeadLayout, so all of them update with one loop.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipescope::kernels {

// Any misuse of the kernels API (bad shape, slice out of order, wrong backend object) throws this.
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType : std::uint8_t { kF64, kF32, kF16, kBF16 };
const char* dtype_name(DType t);
std::size_t dtype_bytes(DType t);

// One transformer layer. heads must divide hidden.
// tp > 1: the shape of one of tp Megatron tensor-parallel shards of that layer (docs/papers.md#megatron): heads / tp
// attention heads (column-parallel fused QKV: the q, k and v columns of its heads; row-parallel W_o: the rows of
// its heads), ffn / tp MLP columns (column-parallel fc1 + bias, row-parallel fc2), replicated LayerNorms and
// row-parallel biases b_o, b_fc2. Parameters, K/V caches and records of such a shape hold the shard only.
struct LayerShape {
  int hidden = 0;
  int heads = 0;
  int ffn = 0;  // MLP width (4 * hidden for GPT)
  int tp = 1;   // tensor-parallel degree; must divide heads and ffn
  // Mixture of experts (kernels/README.md "Mixture of experts"): experts > 0 makes this an MoE layer, whose MLP
  // block is `experts` routed GELU experts of width expert_ffn (each token goes to its top_k) plus the dense MLP of
  // width ffn as the shared experts (ffn may then be 0: none). ep: expert-parallel degree, an experts module
  // (ModuleKind::kExperts) holds experts / ep of them. MoE layers are not tensor-parallel (tp = 1).
  int experts = 0;
  int top_k = 0;
  int expert_ffn = 0;
  int ep = 1;
  bool moe() const { return experts > 0; }
  int local_experts() const { return experts / ep; }
  int head_dim() const { return hidden / heads; }
  int shard_heads() const { return heads / tp; }
  int shard_width() const { return hidden / tp; }  // attention width of the shard: shard_heads() * head_dim()
  int shard_ffn() const { return ffn / tp; }
  void validate() const;  // throws KernelError
};

// In-place sum of `count` elements of `dtype` at `data` over the tp shards of a layer (its tensor-parallel group),
// blocking until the sum is there. The layer kernels call it twice per forward (after W_o and after fc2) and
// twice per backward (the gradients w.r.t. the LayerNorm outputs feeding the column-parallel GEMMs), in the
// same order on every shard; the caller supplies the transport. CPU backend: host memory.
using TpAllReduce = std::function<void(void* data, std::size_t count, DType dtype)>;

// The expert-parallel exchange of an MoE layer: an all-to-all over the ep members of the layer's expert-parallel
// group, blocking. `send` holds, in member order, send_bytes[j] bytes for member j; `recv` receives recv_bytes[i]
// bytes from member i, in member order (the caller sized it). kCounts exchanges the per-expert row counts (64-bit
// integers, host memory) before a dispatch; kTokens moves rows of activations or their gradients (the backend's
// memory: host on the CPU). A forward makes one kCounts and two kTokens calls per MoE layer (dispatch, combine), a
// backward two kTokens calls (the reverse exchanges, with the forward's counts), in the same order on every member.
enum class EpExchange : std::uint8_t { kCounts, kTokens };
using EpAllToAll = std::function<void(EpExchange what, const void* send, const std::vector<std::size_t>& send_bytes,
                                      void* recv, const std::vector<std::size_t>& recv_bytes)>;

// Everything a stage needs besides its layers: vocabulary and the longest sequence (position table).
struct ModelShape {
  LayerShape layer;
  int vocab = 0;
  int max_seq = 0;
  void validate() const;
};

// A token slice: `batch` sequences of one micro-batch, tokens [begin, begin + len) of each.
// begin is the attention context length c of the slice (TeraPipe's c_i).
struct Slice {
  int batch = 0;
  int begin = 0;
  int len = 0;
  int end() const { return begin + len; }
  int rows() const { return batch * len; }
};

// Element offsets of each tensor inside a module's flat parameter buffer. With tp > 1 (w = h / tp,
// f = ffn / tp) the shard's: w_qkv [h, 3w] (columns [q | k | v] of its heads), b_qkv [3w], w_o [w, h],
// w_fc1 [h, f], b_fc1 [f], w_fc2 [f, h]; the other tensors are whole.
struct LayerLayout {
  std::size_t ln1_g, ln1_b;  // [h]
  std::size_t w_qkv, b_qkv;  // [h, 3h], [3h]
  std::size_t w_o, b_o;      // [h, h], [h]
  std::size_t ln2_g, ln2_b;  // [h]
  std::size_t w_fc1, b_fc1;  // [h, ffn], [ffn]
  std::size_t w_fc2, b_fc2;  // [ffn, h], [h]
  std::size_t w_router;      // [h, experts] (MoE layers; empty otherwise)
  std::size_t size;
  static LayerLayout of(const LayerShape& s);
};

// One routed expert inside an experts module (ModuleKind::kExperts), which holds the layer's local_experts()
// experts one after the other (expert j of the module at j * size): the GELU MLP w_fc1 [h, fe], b_fc1 [fe],
// w_fc2 [fe, h], b_fc2 [h], fe = expert_ffn.
struct ExpertLayout {
  std::size_t w_fc1, b_fc1, w_fc2, b_fc2;
  std::size_t size;
  static ExpertLayout of(const LayerShape& s);
};

struct EmbeddingLayout {
  std::size_t tok;  // [vocab, h]
  std::size_t pos;  // [max_seq, h]
  std::size_t size;
  static EmbeddingLayout of(const ModelShape& m);
};

// Final LayerNorm and an untied LM head (no bias). Untied so that the first and last stage share no
// parameter and need no cross-stage embedding-gradient sum.
struct HeadLayout {
  std::size_t lnf_g, lnf_b;  // [h]
  std::size_t w_vocab;       // [h, vocab]
  std::size_t size;
  static HeadLayout of(const ModelShape& m);
};

// K/V-cache slice protocol of one (micro-batch, layer), shared by every backend so that they reject
// the same misuse. Forward slices of a micro-batch run in token order; a forward writes K/V of its
// tokens and zeroes their dK/dV. Backward slices run in reverse order: each adds dK/dV for all tokens
// before its end and consumes the (then complete) dK/dV of its own tokens. A forward at begin 0 starts
// a new micro-batch; that is allowed only once the previous one's backward is done (or after reset()).
class KVState {
 public:
  KVState() = default;
  KVState(int batch, int max_len);
  int batch() const { return batch_; }
  int max_len() const { return max_len_; }
  int length() const { return len_; }            // tokens whose K/V are written
  int backward_end() const { return bwd_end_; }  // end of the next slice backward must process
  void check_forward(const Slice& s) const;
  void commit_forward(const Slice& s);
  void check_backward(const Slice& s) const;
  void commit_backward(const Slice& s);
  void reset() { len_ = bwd_end_ = 0; }
  // Forgets the K/V of tokens >= len (0 <= len <= length()), as if the forwards stopped there, so a slice can
  // run again: calibration times one slice repeatedly after the same context.
  void rewind(int len);

 private:
  void check_batch(const Slice& s, const char* what) const;
  int batch_ = 0, max_len_ = 0, len_ = 0, bwd_end_ = 0;
};

inline constexpr double kLayerNormEps = 1e-5;

// kExperts: the routed experts of one MoE layer that an expert-parallel rank holds (ExpertLayout).
enum class ModuleKind : std::uint8_t { kLayer, kEmbedding, kHead, kExperts };
std::size_t param_count(ModuleKind kind, const ModelShape& m);
// The named tensors of a module's flat buffer, in layout order, covering it (the shard's when m.layer.tp > 1):
// for per-tensor error reports and checks.
struct TensorSpan {
  std::string name;
  std::size_t offset = 0, size = 0;
};
std::vector<TensorSpan> module_tensor_spans(ModuleKind kind, const ModelShape& m);

// Adam with bias correction; weight_decay is decoupled (AdamW) and 0 by default.
struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Gradients are multiplied by this before use: 1 / loss_scale when the loss was scaled.
  double grad_scale = 1.0;
};

// Deterministic initial parameters (platform-independent normal draws, GPT-2 style: weights N(0, std),
// biases 0, LayerNorm gamma 1 / beta 0). perturb_norm_bias > 0 adds N(0, perturb_norm_bias) to gammas,
// betas and biases so that tests exercise every gradient path.
// Layers of a tp > 1 shape are refused: draw the unsharded layer and cut it with shard_params.
std::vector<double> init_params(ModuleKind kind, const ModelShape& m, std::uint64_t seed, double std_dev = 0.02,
                                double perturb_norm_bias = 0.0);

// What tensor-parallel shard `rank` (0 <= rank < shard.layer.tp) of a module holds, cut from the unsharded
// module's flat buffer `full` (parameters, gradients or moments; layout of the same shape with tp = 1): for a
// layer the column / row blocks of LayerLayout, for the embedding and the head (replicated over the TP group)
// `full` itself. So shard_params(init_params(full)) are the shard's initial parameters, and a shard's gradient
// equals the same cut of the unsharded gradient.
std::vector<double> shard_params(ModuleKind kind, const ModelShape& shard, int rank, const std::vector<double>& full);
// The experts expert-parallel rank `rank` of shard.layer.ep holds, cut from the module of all experts (ep = 1):
// experts [rank E / ep, (rank + 1) E / ep).
std::vector<double> expert_shard(const ModelShape& shard, int rank, const std::vector<double>& full);

// Deterministic top-k routing of one token (kernels/README.md "Mixture of experts"): the k largest of `n` router
// logits, largest first; equal logits: the lower expert index first. Selecting on the logits selects the largest
// softmax probabilities (softmax is increasing) without the ties exp's rounding could make.
std::vector<int> top_k_experts(const double* logits, int n, int k);

// Counts non-ignored targets (target >= 0). The loss of a run is normalised by this count over the
// whole global batch, so that any slicing / micro-batching yields the same loss and gradients.
std::size_t count_targets(const std::vector<std::int32_t>& targets);

// FLOPs of one layer (of one shard when tp > 1: 1/tp of them) on a slice (docs/calibration.md, causal pair
// count): forward 24 b l h^2 + 4 b h (l c + l (l + 1) / 2); backward twice that.
double layer_forward_flops(const LayerShape& s, const Slice& sl);

}  // namespace pipescope::kernels
