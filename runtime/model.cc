#include "runtime/model.h"

#include <tuple>

#include "core/model/backends.h"
#include "core/util/splitmix.h"
#include "runtime/null_backend.h"

namespace pipescope::runtime {

ModelConfig ModelConfig::from(const ModelSpec& m, const std::vector<int>& stage_layers) {
  ModelConfig c;
  c.stage_layers = stage_layers;
  c.shape.layer.hidden = m.hidden;
  c.shape.layer.heads = m.heads;
  c.shape.layer.ffn = m.ffn_hidden;
  c.shape.vocab = m.vocab;
  c.shape.max_seq = m.seq_len;
  c.layers = m.layers;
  if (m.moe()) {
    c.experts = m.moe_experts;
    c.top_k = m.moe_top_k;
    c.expert_ffn = m.moe_ffn_hidden;
    c.shared_ffn = m.moe_shared_ffn_hidden;
    c.dense_layers = m.moe_dense_layers;
    c.layer_freq = m.moe_layer_freq;
  }
  c.validate();
  return c;
}

bool ModelConfig::moe_layer(int layer) const {
  return moe() && layer >= dense_layers && layer_freq >= 1 && (layer - dense_layers) % layer_freq == 0;
}

kernels::ModelShape ModelConfig::layer_shape(int layer) const {
  kernels::ModelShape m = shape;
  if (!moe_layer(layer)) return m;
  m.layer.ffn = shared_ffn;
  m.layer.experts = experts;
  m.layer.top_k = top_k;
  m.layer.expert_ffn = expert_ffn;
  return m;
}

std::vector<TensorSpan> module_tensors(const ModelConfig& mc, const ModuleId& id) {
  return kernels::module_tensor_spans(id.kind, mc.layer_shape(id.layer));
}

ModelConfig ModelConfig::for_validation(const ModelSpec& m, const std::vector<int>& stage_layers) {
  ModelConfig c = from(m, stage_layers);
  c.perturb = 0.1;
  return c;
}

void ModelConfig::validate() const {
  try {
    shape.validate();
  } catch (const kernels::KernelError& e) {
    throw RuntimeError(std::string("model: ") + e.what());
  }
  if (layers < 1) throw RuntimeError("model: layers must be >= 1, got " + std::to_string(layers));
  if (!moe()) return;
  if (layer_freq < 1) throw RuntimeError("model.moe_layer_freq must be >= 1, got " + std::to_string(layer_freq));
  try {
    for (int l = 0; l < layers; l++)
      if (moe_layer(l)) return layer_shape(l).validate();
  } catch (const kernels::KernelError& e) {
    throw RuntimeError(std::string("model (num_experts, moe_top_k, moe_ffn_hidden, moe_shared_ffn_hidden): ") +
                       e.what());
  }
}

bool ModuleId::operator<(const ModuleId& o) const {
  auto rank = [](const ModuleId& m) {
    // A layer's experts right after the layer.
    return std::make_tuple(m.kind == kernels::ModuleKind::kEmbedding ? 0
                           : m.kind == kernels::ModuleKind::kHead    ? 2
                                                                     : 1,
                           m.layer, m.kind == kernels::ModuleKind::kExperts ? 1 : 0);
  };
  return rank(*this) < rank(o);
}

std::string ModuleId::name() const {
  switch (kind) {
    case kernels::ModuleKind::kEmbedding:
      return "embedding";
    case kernels::ModuleKind::kHead:
      return "head";
    case kernels::ModuleKind::kExperts:
      return "layer" + std::to_string(layer) + ".experts";
    case kernels::ModuleKind::kLayer:
      break;
  }
  return "layer" + std::to_string(layer);
}

int ModuleId::code(int layers) const {
  switch (kind) {
    case kernels::ModuleKind::kEmbedding:
      return -1;
    case kernels::ModuleKind::kHead:
      return layers;
    case kernels::ModuleKind::kExperts:
      return layers + 1 + layer;
    case kernels::ModuleKind::kLayer:
      break;
  }
  return layer;
}

ModuleId ModuleId::from_code(int code, int layers) {
  if (code < -1 || code > 2 * layers) throw RuntimeError("module code " + std::to_string(code) + " out of range");
  if (code == -1) return {kernels::ModuleKind::kEmbedding, 0};
  if (code == layers) return {kernels::ModuleKind::kHead, 0};
  if (code > layers) return {kernels::ModuleKind::kExperts, code - layers - 1};
  return {kernels::ModuleKind::kLayer, code};
}

std::vector<double> initial_params(const ModelConfig& mc, const ModuleId& id) {
  const std::uint64_t seed = splitmix64(mc.seed + static_cast<std::uint64_t>(id.code(mc.layers) + 1));
  return kernels::init_params(id.kind, mc.layer_shape(id.layer), seed, mc.init_std, mc.perturb);
}

StageLayers stage_layers(const ModelConfig& mc, int stages, int stage) {
  try {
    return stage_layer_range(mc.layers, mc.stage_layers, stages, stage);
  } catch (const std::invalid_argument& e) {
    throw RuntimeError(std::string("model: ") + e.what());
  }
}

SyntheticData::SyntheticData(int sequences, int seq_len, int vocab, std::uint64_t seed, int ignore_every)
    : sequences_(sequences), seq_len_(seq_len) {
  if (sequences < 1 || seq_len < 1 || vocab < 1) throw RuntimeError("data: sequences, seq_len and vocab must be >= 1");
  const std::size_t n = static_cast<std::size_t>(sequences) * seq_len;
  tokens_.resize(n);
  targets_.resize(n);
  for (std::size_t i = 0; i < n; i++) tokens_[i] = static_cast<std::int32_t>(splitmix64(seed * 1000003ULL + i) % vocab);
  for (int s = 0; s < sequences; s++)
    for (int t = 0; t < seq_len; t++) {
      const std::size_t i = static_cast<std::size_t>(s) * seq_len + t;
      const std::uint64_t h = splitmix64(~seed + 31 * i);
      if (ignore_every > 0 && h % static_cast<std::uint64_t>(ignore_every) == 0)
        targets_[i] = -1;
      else
        targets_[i] = t + 1 < seq_len ? tokens_[i + 1] : static_cast<std::int32_t>((h >> 8) % vocab);
    }
  loss_norm_ = kernels::count_targets(targets_);
  if (loss_norm_ == 0) throw RuntimeError("data: every target is ignored");
}

std::vector<std::int32_t> SyntheticData::slice(const std::vector<std::int32_t>& v, int first, int count, int begin,
                                               int end) const {
  if (first < 0 || count < 0 || first + count > sequences_ || begin < 0 || end < begin || end > seq_len_)
    throw RuntimeError("data: sequences [" + std::to_string(first) + ", " + std::to_string(first + count) +
                       ") tokens [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside a batch of " +
                       std::to_string(sequences_) + " x " + std::to_string(seq_len_));
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(count) * (end - begin));
  for (int s = first; s < first + count; s++)
    for (int t = begin; t < end; t++) out.push_back(v[static_cast<std::size_t>(s) * seq_len_ + t]);
  return out;
}

std::vector<std::int32_t> SyntheticData::tokens(int first, int count, int begin, int end) const {
  return slice(tokens_, first, count, begin, end);
}

std::vector<std::int32_t> SyntheticData::targets(int first, int count, int begin, int end) const {
  return slice(targets_, first, count, begin, end);
}

bool built_with_nccl() {
#ifdef PIPESCOPE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool is_cuda_backend(const std::string& name) { return backend_on(name, BackendDevice::Cuda); }

namespace {

bool usable_here(const BackendInfo& b) { return b.device != BackendDevice::Cuda || built_with_nccl(); }

}  // namespace

void check_backend(const std::string& name) {
  const BackendInfo* b = find_backend(name);
  if (b == nullptr) throw RuntimeError("unknown backend '" + name + "' (valid: " + backend_names(usable_here) + ")");
  if (!usable_here(*b))
    throw RuntimeError("backend '" + name + "': this pipescope was built without the runtime's GPU path (" +
                       (kernels::built_with_cuda() ? "NCCL" : "CUDA and NCCL") + " not found at configure time); use " +
                       backend_names([](const BackendInfo& x) { return x.device == BackendDevice::Cpu; }));
}

std::unique_ptr<kernels::Backend> make_backend(const std::string& name, int device) {
  check_backend(name);
  kernels::DType cuda_dtype = kernels::DType::kF16;
  switch (backend_named(name).kind) {
    case BackendKind::CpuF64:
      return kernels::make_cpu_backend(kernels::DType::kF64);
    case BackendKind::CpuF32:
      return kernels::make_cpu_backend(kernels::DType::kF32);
    case BackendKind::Null:
      return make_null_backend();
    case BackendKind::CudaBF16:
      cuda_dtype = kernels::DType::kBF16;
      break;
    case BackendKind::CudaF16:
      break;
  }
  try {
    return kernels::make_cuda_backend(cuda_dtype, device);
  } catch (const std::exception& e) {
    throw RuntimeError("backend '" + name + "' on GPU " + std::to_string(device) + ": " + e.what());
  }
}

}  // namespace pipescope::runtime
