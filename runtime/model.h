#pragma once
// The model and data the validation runtime trains: kernels/'s GPT (token + position embedding, pre-LN
// layers, final LayerNorm and an untied LM head with cross-entropy), split over virtual stages the way the
// schedule says, and a deterministic synthetic batch. The single-process unsliced reference
// (runtime/exactness.h) builds the very same parameters and data, so a pipelined run can be compared with it
// to rounding error.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/model/config.h"
#include "core/model/placement.h"
#include "kernels/backend.h"

namespace pipescope::runtime {

// Thrown for runtime misuse and failures; messages name the rank, the op and the library message.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelConfig {
  kernels::ModelShape shape;  // hidden, heads, ffn, vocab, max_seq (= seq_len)
  int layers = 0;
  std::vector<int> stage_layers;  // layers per virtual stage (parallel.stage_layers); empty = even split
  std::uint64_t seed = 20240611;  // parameter seed: module k draws from seed + k (see module_seed)
  double init_std = 0.02;
  // Adds N(0, perturb) to LayerNorm gammas / betas and biases so that every gradient path is exercised;
  // the exactness tests use 0.1, training-like runs 0.
  double perturb = 0.0;
  // Mixture of experts (model.num_experts > 0; docs/moe.md, kernels/README.md "Mixture of experts"): layer i is
  // MoE as ModelSpec::moe_layer(i) says; there the dense MLP becomes the shared experts (width shared_ffn, 0: none)
  // and experts routed GELU experts of width expert_ffn, top_k per token.
  int experts = 0, top_k = 0, expert_ffn = 0, shared_ffn = 0, dense_layers = 0, layer_freq = 1;
  bool moe() const { return experts > 0; }
  bool moe_layer(int layer) const;
  // The model's shape with `layer`'s layer shape (MoE: the experts fields, ffn = shared_ffn, ep = 1).
  kernels::ModelShape layer_shape(int layer) const;

  // From a scenario's model section and its parallel.stage_layers. Throws RuntimeError on shapes the kernels
  // cannot run.
  static ModelConfig from(const ModelSpec& m, const std::vector<int>& stage_layers = {});
  // The model `pipescope validate` trains and checks: from(m) with perturb 0.1. With all biases 0, the key
  // bias's gradient is exactly 0 (softmax ignores a shift), so 16-bit backends' rounding noise there becomes
  // +-lr Adam steps against a reference that stays at 0; perturbed biases keep the parameter comparison
  // meaningful. Every rank and the reference must use the same one.
  static ModelConfig for_validation(const ModelSpec& m, const std::vector<int>& stage_layers = {});
  void validate() const;
};

// A module of the model: the embedding, transformer layer `layer` (0-based, global), the routed experts of MoE layer
// `layer` (kExperts; with expert parallelism this rank's share), or the head.
struct ModuleId {
  kernels::ModuleKind kind = kernels::ModuleKind::kLayer;
  int layer = 0;  // layers only
  bool operator<(const ModuleId& o) const;
  bool operator==(const ModuleId& o) const { return kind == o.kind && layer == o.layer; }
  std::string name() const;  // "embedding", "layer3", "layer3.experts", "head"
  // Ordering key used on the wire and in reports: embedding -1, layers 0..L-1, head L, experts of layer i L + 1 + i.
  int code(int layers) const;
  static ModuleId from_code(int code, int layers);
};

// Deterministic initial parameters of a module (the same on every rank and in the reference; experts: all of them).
std::vector<double> initial_params(const ModelConfig& mc, const ModuleId& id);

// Layers of virtual stage g of a pipeline of `stages` stages: [first, first + count), mc.stage_layers or the
// even split (core/model/placement.h stage_layer_range). Throws RuntimeError on a layout that does not fit.
using StageLayers = LayerRange;
StageLayers stage_layers(const ModelConfig& mc, int stages, int stage);

// Synthetic training data of one global batch: `sequences` sequences of `seq_len` tokens with next-token
// targets; about one target in `ignore_every` is -1 (ignored by the loss) so that the normalisation by the
// global target count is exercised. Sequence n of the global batch belongs to data-parallel replica
// n / (sequences / dp), at position n % (sequences / dp) of that replica's batch.
class SyntheticData {
 public:
  SyntheticData(int sequences, int seq_len, int vocab, std::uint64_t seed = 7, int ignore_every = 11);
  int sequences() const { return sequences_; }
  int seq_len() const { return seq_len_; }
  const std::vector<std::int32_t>& tokens() const { return tokens_; }    // [sequences * seq_len]
  const std::vector<std::int32_t>& targets() const { return targets_; }  // same shape
  // Row-major [count * (end - begin)] of sequences [first, first + count), tokens [begin, end).
  std::vector<std::int32_t> tokens(int first, int count, int begin, int end) const;
  std::vector<std::int32_t> targets(int first, int count, int begin, int end) const;
  double loss_norm() const { return static_cast<double>(loss_norm_); }  // non-ignored targets of the batch

 private:
  std::vector<std::int32_t> slice(const std::vector<std::int32_t>& v, int first, int count, int begin, int end) const;
  int sequences_, seq_len_;
  std::vector<std::int32_t> tokens_, targets_;
  std::size_t loss_norm_ = 0;
};

// Named sub-tensors of a module's flat buffer (kernels::module_tensor_spans), for error reports.
using TensorSpan = kernels::TensorSpan;
inline std::vector<TensorSpan> module_tensors(const kernels::ModelShape& shape, const ModuleId& id) {
  return kernels::module_tensor_spans(id.kind, shape);
}
// The same with the module's own layer shape (MoE layers and their experts).
std::vector<TensorSpan> module_tensors(const ModelConfig& mc, const ModuleId& id);

// Backend by name: "cpu-f64", "cpu-f32", "null" (no-op compute, for measuring the runtime's own overhead),
// "cuda-bf16", "cuda-f16" on GPU `device` (only in a build with CUDA and NCCL, PIPESCOPE_HAVE_NCCL, and only with a
// device transport: NcclTransport under pipescope-rank; runtime/README.md "GPU path").
std::unique_ptr<kernels::Backend> make_backend(const std::string& name, int device = 0);
// Checks a backend name without creating anything (no CUDA context): throws RuntimeError for unknown names and
// for the cuda backends in a build without CUDA + NCCL.
void check_backend(const std::string& name);
bool is_cuda_backend(const std::string& name);
// True when this build has the runtime's GPU path (CUDA + NCCL).
bool built_with_nccl();

}  // namespace pipescope::runtime
