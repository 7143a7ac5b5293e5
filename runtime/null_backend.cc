#include "runtime/null_backend.h"

#include <vector>

#include "core/model/backends.h"

namespace pipescope::runtime {

namespace {

using kernels::DType;
using kernels::KernelError;

class NullTensor final : public kernels::Tensor {
 public:
  NullTensor(int rows, int cols) {
    dtype_ = DType::kF32;
    resize(rows, cols);
  }
  void resize(int rows, int cols) override {
    if (rows < 0 || cols < 0) throw KernelError("Tensor::resize: negative shape");
    rows_ = rows;
    cols_ = cols;
    storage_.resize(static_cast<std::size_t>(rows) * cols);
  }
  void* data() override { return storage_.data(); }
  const void* data() const override { return storage_.data(); }
  void upload(const std::vector<double>& host) override {
    if (host.size() != storage_.size()) throw KernelError("Tensor::upload: size mismatch");
    for (std::size_t i = 0; i < host.size(); i++) storage_[i] = static_cast<float>(host[i]);
  }
  std::vector<double> download() const override { return {storage_.begin(), storage_.end()}; }

 private:
  std::vector<float> storage_;
};

class NullParams final : public kernels::Params {
 public:
  NullParams(kernels::ModuleKind kind, const kernels::ModelShape& shape) {
    kind_ = kind;
    shape_ = shape;
    size_ = kernels::param_count(kind, shape);
    p_.assign(size_, 0.0f);
    g_.assign(size_, 0.0f);
  }
  void set(const std::vector<double>& values) override {
    if (values.size() != size_) throw KernelError("Params::set: size mismatch");
    for (std::size_t i = 0; i < size_; i++) p_[i] = static_cast<float>(values[i]);
  }
  std::vector<double> get() const override { return {p_.begin(), p_.end()}; }
  std::vector<double> grads() const override { return {g_.begin(), g_.end()}; }
  void zero_grads() override { g_.assign(size_, 0.0f); }
  void* grad_data() override { return g_.data(); }
  DType grad_dtype() const override { return DType::kF32; }

 private:
  std::vector<float> p_, g_;
};

class NullKVCache final : public kernels::KVCache {
 public:
  NullKVCache(int batch, int max_len) { state_ = kernels::KVState(batch, max_len); }
  kernels::KVState& state() { return state_; }
};

class NullRecord final : public kernels::Record {
 public:
  void release() override { slice = {}; }
  kernels::Slice slice;
};

class NullBackend final : public kernels::Backend {
 public:
  std::string name() const override { return backend_info(BackendKind::Null).name; }
  DType dtype() const override { return DType::kF32; }
  std::unique_ptr<kernels::Tensor> tensor(int rows, int cols) override {
    return std::make_unique<NullTensor>(rows, cols);
  }
  std::unique_ptr<kernels::Params> params(kernels::ModuleKind kind, const kernels::ModelShape& shape) override {
    return std::make_unique<NullParams>(kind, shape);
  }
  std::unique_ptr<kernels::KVCache> kv_cache(const kernels::LayerShape&, int batch, int max_len) override {
    return std::make_unique<NullKVCache>(batch, max_len);
  }
  std::unique_ptr<kernels::Record> record() override { return std::make_unique<NullRecord>(); }

  void layer_forward(const kernels::Params& layer, const kernels::Tensor& x, const kernels::Slice& slice,
                     kernels::KVCache& kv, kernels::Record& rec, kernels::Tensor& y) override {
    auto& st = static_cast<NullKVCache&>(kv).state();
    st.check_forward(slice);
    st.commit_forward(slice);
    static_cast<NullRecord&>(rec).slice = slice;
    y.resize(x.rows(), layer.shape().layer.hidden);
    tp_exchange(layer, y);
  }
  void layer_backward(kernels::Params& layer, const kernels::Record& rec, kernels::KVCache& kv,
                      const kernels::Tensor& dy, kernels::Tensor& dx) override {
    auto& st = static_cast<NullKVCache&>(kv).state();
    const kernels::Slice& slice = static_cast<const NullRecord&>(rec).slice;
    st.check_backward(slice);
    st.commit_backward(slice);
    dx.resize(dy.rows(), layer.shape().layer.hidden);
    tp_exchange(layer, dx);
  }
  void layer_backward_input(const kernels::Params& layer, kernels::Record& rec, kernels::KVCache& kv,
                            const kernels::Tensor& dy, kernels::Tensor& dx) override {
    auto& st = static_cast<NullKVCache&>(kv).state();
    const kernels::Slice& slice = static_cast<const NullRecord&>(rec).slice;
    st.check_backward(slice);
    st.commit_backward(slice);
    dx.resize(dy.rows(), layer.shape().layer.hidden);
    tp_exchange(layer, dx);
  }
  void layer_backward_weight(kernels::Params&, kernels::Record& rec) override { rec.release(); }
  void embedding_forward(const kernels::Params& emb, const std::vector<std::int32_t>&, const kernels::Slice& slice,
                         kernels::Tensor& x) override {
    x.resize(slice.rows(), emb.shape().layer.hidden);
  }
  void embedding_backward(kernels::Params&, const std::vector<std::int32_t>&, const kernels::Slice&,
                          const kernels::Tensor&) override {}
  void head_forward(const kernels::Params& head, const kernels::Tensor&, const std::vector<std::int32_t>&,
                    const kernels::Slice& slice, double, double, kernels::Record& rec) override {
    (void)head;
    static_cast<NullRecord&>(rec).slice = slice;
  }
  double head_loss(const kernels::Record&) override { return 0.0; }
  void head_backward(kernels::Params& head, const kernels::Record& rec, kernels::Tensor& dx) override {
    dx.resize(static_cast<const NullRecord&>(rec).slice.rows(), head.shape().layer.hidden);
  }
  void head_backward_input(const kernels::Params& head, kernels::Record& rec, kernels::Tensor& dx) override {
    dx.resize(static_cast<const NullRecord&>(rec).slice.rows(), head.shape().layer.hidden);
  }
  void head_backward_weight(kernels::Params&, kernels::Record& rec) override { rec.release(); }
  void adam_step(kernels::Params&, const kernels::AdamConfig&, int) override {}
  void synchronize() override {}
  void* stream() override { return nullptr; }

 private:
  // No arithmetic, but the real kernels' two tensor-parallel all-reduces of [rows, hidden] per layer call, so the
  // overhead benchmark sees their communication.
  void tp_exchange(const kernels::Params& layer, kernels::Tensor& t) {
    if (layer.shape().layer.tp == 1) return;
    if (!tp_all_reduce_) throw KernelError("null backend: a tensor-parallel shard needs set_tp_all_reduce");
    const std::size_t n = static_cast<std::size_t>(t.rows()) * t.cols();
    for (int k = 0; k < 2; k++) tp_all_reduce_(t.data(), n, DType::kF32);
  }
};

}  // namespace

std::unique_ptr<kernels::Backend> make_null_backend() { return std::make_unique<NullBackend>(); }

}  // namespace pipescope::runtime
