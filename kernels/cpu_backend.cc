// The CPU Backend: the reference kernels (kernels/reference.h) behind the device-neutral API.
#include <string>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/host_memory.h"
#include "kernels/reference.h"

namespace pipescope::kernels {
namespace {

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 8 ? DType::kF64 : DType::kF32;
}

template <class To, class From>
To& as(From& obj, const char* what) {
  auto* p = dynamic_cast<To*>(&obj);
  if (!p) throw KernelError(std::string(what) + ": object was created by another backend");
  return *p;
}

template <class T>
class CpuTensor final : public Tensor {
 public:
  CpuTensor(int rows, int cols) {
    dtype_ = dtype_of<T>();
    resize(rows, cols);
  }
  void resize(int rows, int cols) override {
    if (rows < 0 || cols < 0) throw KernelError("Tensor::resize: negative shape");
    rows_ = rows;
    cols_ = cols;
    m.resize(rows, cols);
  }
  void* data() override { return m.data(); }
  const void* data() const override { return m.data(); }
  void upload(const std::vector<double>& host) override {
    if (host.size() != static_cast<std::size_t>(m.size()))
      throw KernelError("Tensor::upload: expected " + std::to_string(m.size()) + " values, got " +
                        std::to_string(host.size()));
    for (std::size_t i = 0; i < host.size(); ++i) m.data()[i] = static_cast<T>(host[i]);
  }
  std::vector<double> download() const override { return std::vector<double>(m.data(), m.data() + m.size()); }
  // After a reference kernel resized m.
  void resize_view() {
    rows_ = static_cast<int>(m.rows());
    cols_ = static_cast<int>(m.cols());
  }
  ref::Mat<T> m;
};

template <class T>
class CpuParams final : public Params {
 public:
  CpuParams(ModuleKind kind, const ModelShape& shape) {
    kind_ = kind;
    shape_ = shape;
    size_ = param_count(kind, shape);
    p.assign(size_, T(0));
    g.assign(size_, T(0));
  }
  void set(const std::vector<double>& values) override {
    if (values.size() != size_)
      throw KernelError("Params::set: expected " + std::to_string(size_) + " values, got " +
                        std::to_string(values.size()));
    for (std::size_t i = 0; i < size_; ++i) p[i] = static_cast<T>(values[i]);
    m.clear();  // Adam starts again from zero moments
    v.clear();
  }
  std::vector<double> get() const override { return {p.begin(), p.end()}; }
  std::vector<double> grads() const override { return {g.begin(), g.end()}; }
  void zero_grads() override { g.assign(size_, T(0)); }
  void* grad_data() override { return g.data(); }
  DType grad_dtype() const override { return dtype_of<T>(); }
  void* param_data() override { return p.data(); }
  // Adam's moments, zero until the first step: made there, so that a module that is never stepped (calibration's
  // timed modules, forward-only checks) does not touch twice its size in fresh pages (a 105M-parameter LM head: 1.7
  // GB, 4 s of page faults on the 2-core VM).
  T* moment(std::vector<T>& s) {
    if (s.size() != size_) s.assign(size_, T(0));
    return s.data();
  }
  std::vector<T> p, g, m, v;
};

template <class T>
class CpuKVCache final : public KVCache {
 public:
  CpuKVCache(const LayerShape& shape, int batch, int max_len) : kv(shape, batch, max_len) {}
  // The reference keeps its protocol state inside its own cache; mirror it for state().
  void sync_state() { state_ = kv.state; }
  void push_state() { kv.state = state_; }
  ref::KVCache<T> kv;
};

template <class T>
class CpuRecord final : public Record {
 public:
  void release() override {
    layer = ref::LayerRecord<T>();
    head = ref::HeadRecord<T>();
    loss = 0;
  }
  ref::LayerRecord<T> layer;
  ref::HeadRecord<T> head;
  double loss = 0;
};

template <class T>
class CpuBackend final : public Backend {
 public:
  std::string name() const override { return std::string("cpu-") + dtype_name(dtype_of<T>()); }
  DType dtype() const override { return dtype_of<T>(); }

  std::unique_ptr<Tensor> tensor(int rows, int cols) override { return std::make_unique<CpuTensor<T>>(rows, cols); }
  std::unique_ptr<Params> params(ModuleKind kind, const ModelShape& shape) override {
    return std::make_unique<CpuParams<T>>(kind, shape);
  }
  std::unique_ptr<KVCache> kv_cache(const LayerShape& shape, int batch, int max_len) override {
    auto c = std::make_unique<CpuKVCache<T>>(shape, batch, max_len);
    c->sync_state();
    return c;
  }
  std::unique_ptr<Record> record() override { return std::make_unique<CpuRecord<T>>(); }

  void layer_forward(const Params& layer, const Tensor& x, const Slice& slice, KVCache& kv, Record& rec,
                     Tensor& y) override {
    const auto& P = module(layer, ModuleKind::kLayer, "layer_forward");
    auto& c = as<CpuKVCache<T>>(kv, "layer_forward kv");
    auto& Y = as<CpuTensor<T>>(y, "layer_forward y");
    c.push_state();  // reset() acts on the base state
    ref::layer_forward(P.shape().layer, P.p.data(), as<const CpuTensor<T>>(x, "layer_forward x").m, slice, c.kv,
                       as<CpuRecord<T>>(rec, "layer_forward record").layer, Y.m, tp_sum(P));
    Y.resize_view();
    c.sync_state();
  }
  void layer_backward(Params& layer, const Record& rec, KVCache& kv, const Tensor& dy, Tensor& dx) override {
    auto& P = module(layer, ModuleKind::kLayer, "layer_backward");
    auto& c = as<CpuKVCache<T>>(kv, "layer_backward kv");
    auto& DX = as<CpuTensor<T>>(dx, "layer_backward dx");
    c.push_state();
    ref::layer_backward(P.shape().layer, P.p.data(), as<const CpuRecord<T>>(rec, "layer_backward record").layer, c.kv,
                        as<const CpuTensor<T>>(dy, "layer_backward dy").m, P.g.data(), DX.m, tp_sum(P));
    DX.resize_view();
    c.sync_state();
  }

  void layer_backward_input(const Params& layer, Record& rec, KVCache& kv, const Tensor& dy, Tensor& dx) override {
    const auto& P = module(layer, ModuleKind::kLayer, "layer_backward_input");
    auto& c = as<CpuKVCache<T>>(kv, "layer_backward_input kv");
    auto& DX = as<CpuTensor<T>>(dx, "layer_backward_input dx");
    c.push_state();
    ref::layer_backward_input(P.shape().layer, P.p.data(), as<CpuRecord<T>>(rec, "layer_backward_input record").layer,
                              c.kv, as<const CpuTensor<T>>(dy, "layer_backward_input dy").m, DX.m, tp_sum(P));
    DX.resize_view();
    c.sync_state();
  }
  void layer_backward_weight(Params& layer, Record& rec) override {
    auto& P = module(layer, ModuleKind::kLayer, "layer_backward_weight");
    ref::layer_backward_weight(P.shape().layer, as<CpuRecord<T>>(rec, "layer_backward_weight record").layer,
                               P.g.data());
  }

  void moe_layer_forward(const Params& layer, const Params& experts, const Tensor& x, const Slice& slice, KVCache& kv,
                         Record& rec, Tensor& y) override {
    const auto& P = module(layer, ModuleKind::kLayer, "moe_layer_forward");
    const auto& X = experts_of(experts, P, "moe_layer_forward");
    auto& c = as<CpuKVCache<T>>(kv, "moe_layer_forward kv");
    auto& Y = as<CpuTensor<T>>(y, "moe_layer_forward y");
    c.push_state();
    ref::moe_layer_forward(P.shape().layer, P.p.data(), X.p.data(), as<const CpuTensor<T>>(x, "moe_layer_forward x").m,
                           slice, c.kv, as<CpuRecord<T>>(rec, "moe_layer_forward record").layer, Y.m, ep_all_to_all_);
    Y.resize_view();
    c.sync_state();
  }
  void moe_layer_backward(Params& layer, Params& experts, const Record& rec, KVCache& kv, const Tensor& dy,
                          Tensor& dx) override {
    auto& P = module(layer, ModuleKind::kLayer, "moe_layer_backward");
    auto& X = experts_of(experts, P, "moe_layer_backward");
    auto& c = as<CpuKVCache<T>>(kv, "moe_layer_backward kv");
    auto& DX = as<CpuTensor<T>>(dx, "moe_layer_backward dx");
    c.push_state();
    ref::moe_layer_backward(
        P.shape().layer, P.p.data(), X.p.data(), as<const CpuRecord<T>>(rec, "moe_layer_backward record").layer, c.kv,
        as<const CpuTensor<T>>(dy, "moe_layer_backward dy").m, P.g.data(), X.g.data(), DX.m, ep_all_to_all_);
    DX.resize_view();
    c.sync_state();
  }

  void embedding_forward(const Params& emb, const std::vector<std::int32_t>& tokens, const Slice& slice,
                         Tensor& x) override {
    const auto& P = module(emb, ModuleKind::kEmbedding, "embedding_forward");
    auto& X = as<CpuTensor<T>>(x, "embedding_forward x");
    ref::embedding_forward(P.shape(), P.p.data(), tokens, slice, X.m);
    X.resize_view();
  }
  void embedding_backward(Params& emb, const std::vector<std::int32_t>& tokens, const Slice& slice,
                          const Tensor& dx) override {
    auto& P = module(emb, ModuleKind::kEmbedding, "embedding_backward");
    ref::embedding_backward(P.shape(), tokens, slice, as<const CpuTensor<T>>(dx, "embedding_backward dx").m,
                            P.g.data());
  }

  void head_forward(const Params& head, const Tensor& x, const std::vector<std::int32_t>& targets, const Slice& slice,
                    double loss_norm, double loss_scale, Record& rec) override {
    const auto& P = module(head, ModuleKind::kHead, "head_forward");
    auto& R = as<CpuRecord<T>>(rec, "head_forward record");
    R.loss = ref::head_forward(P.shape(), P.p.data(), as<const CpuTensor<T>>(x, "head_forward x").m, targets, slice,
                               loss_norm, loss_scale, R.head);
  }
  double head_loss(const Record& rec) override {
    const auto& R = as<const CpuRecord<T>>(rec, "head_loss record");
    if (!R.head.filled) throw KernelError("head_loss: the record holds no head forward");
    return R.loss;
  }
  void head_backward(Params& head, const Record& rec, Tensor& dx) override {
    auto& P = module(head, ModuleKind::kHead, "head_backward");
    auto& DX = as<CpuTensor<T>>(dx, "head_backward dx");
    ref::head_backward(P.shape(), P.p.data(), as<const CpuRecord<T>>(rec, "head_backward record").head, P.g.data(),
                       DX.m);
    DX.resize_view();
  }

  void head_backward_input(const Params& head, Record& rec, Tensor& dx) override {
    const auto& P = module(head, ModuleKind::kHead, "head_backward_input");
    auto& DX = as<CpuTensor<T>>(dx, "head_backward_input dx");
    ref::head_backward_input(P.shape(), P.p.data(), as<CpuRecord<T>>(rec, "head_backward_input record").head, DX.m);
    DX.resize_view();
  }
  void head_backward_weight(Params& head, Record& rec) override {
    auto& P = module(head, ModuleKind::kHead, "head_backward_weight");
    ref::head_backward_weight(P.shape(), as<CpuRecord<T>>(rec, "head_backward_weight record").head, P.g.data());
  }

  void adam_step(Params& p, const AdamConfig& cfg, int step) override {
    auto& P = as<CpuParams<T>>(p, "adam_step");
    ref::adam_step(cfg, step, P.size(), P.p.data(), P.g.data(), P.moment(P.m), P.moment(P.v));
  }
  void adam_step_shard(Params& p, const AdamConfig& cfg, int step, std::size_t begin, std::size_t end) override {
    auto& P = as<CpuParams<T>>(p, "adam_step_shard");
    if (begin > end || end > P.size())
      throw KernelError("adam_step_shard: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") outside the module's " + std::to_string(P.size()) + " parameters");
    ref::adam_step(cfg, step, end - begin, P.p.data() + begin, P.g.data() + begin, P.moment(P.m) + begin,
                   P.moment(P.v) + begin);
  }

  void synchronize() override {}
  void* stream() override { return nullptr; }

 private:
  // The reference's view of tp_all_reduce_ (empty for unsharded layers, so tp = 1 never calls it).
  ref::TpSum<T> tp_sum(const CpuParams<T>& P) const {
    if (P.shape().layer.tp == 1 || !tp_all_reduce_) return {};
    return [this](ref::Mat<T>& m) { tp_all_reduce_(m.data(), static_cast<std::size_t>(m.size()), dtype_of<T>()); };
  }
  // The experts module of an MoE layer: its shape must be the layer's.
  template <class Q>
  static auto& experts_of(Q& p, const CpuParams<T>& layer, const char* what) {
    auto& X = module(p, ModuleKind::kExperts, what);
    const LayerShape &a = X.shape().layer, &b = layer.shape().layer;
    if (!b.moe() || a.hidden != b.hidden || a.experts != b.experts || a.expert_ffn != b.expert_ffn ||
        a.top_k != b.top_k || a.ep != b.ep)
      throw KernelError(std::string(what) + ": the experts module was made for another layer shape");
    return X;
  }
  template <class Q>
  static auto& module(Q& p, ModuleKind kind, const char* what) {
    using C = std::conditional_t<std::is_const_v<Q>, const CpuParams<T>, CpuParams<T>>;
    auto& P = as<C>(p, what);
    if (P.kind() != kind) throw KernelError(std::string(what) + ": parameters of the wrong module kind");
    return P;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(DType dtype) {
  keep_freed_host_memory();  // kernels/host_memory.h
  switch (dtype) {
    case DType::kF64:
      return std::make_unique<CpuBackend<double>>();
    case DType::kF32:
      return std::make_unique<CpuBackend<float>>();
    case DType::kF16:
    case DType::kBF16:
      break;  // half types need tensor-core kernels: the CUDA backend
  }
  throw KernelError(std::string("make_cpu_backend: dtype ") + dtype_name(dtype) + " unsupported (f64 or f32)");
}

}  // namespace pipescope::kernels
