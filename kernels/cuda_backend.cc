// The CUDA Backend: cuBLAS GEMMs (fp16/bf16 operands, fp32 accumulation; weight gradients accumulate
// straight into fp32 buffers with beta = 1) stitched with the kernels of kernels/cuda_ops.cu. Host code
// only. The numerics mirror kernels/reference.cc step by step; see README.md for the data layout.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/backend.h"
#include "kernels/block_cache.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_ops.h"

namespace pipescope::kernels {
namespace {

// Every buffer takes its blocks from its context's BlockCache (kernels/block_cache.h): no cudaFree, which
// synchronises the device, while a rank runs. A block is reused only by buffers of the same context, whose kernels
// all run on its one stream, so stream order makes reuse safe; the NCCL transport orders each operation after
// everything the stream had enqueued (its `ready` event), and the executor keeps a send's buffer until the send
// completes.
DeviceAllocator cuda_allocator() {
  DeviceAllocator a;
  a.allocate = [](std::size_t bytes) -> void* {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it so the next check does not see it
      return nullptr;
    }
    CUDA_CHECK(e);
    return p;
  };
  a.free = [](void* p) { cudaFree(p); };  // from destructors too: an error here cannot be reported
  a.synchronize = [] { CUDA_CHECK(cudaDeviceSynchronize()); };
  return a;
}

// Owning device allocation that only grows; growing discards the contents. Blocks come from and go back to the
// context's BlockCache it is bound to.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void bind(BlockCache* cache) {
    release();
    cache_ = cache;
  }
  void reserve(std::size_t bytes) {
    if (bytes <= cap_) return;
    if (!cache_) throw KernelError("DeviceBuffer::reserve: buffer not bound to a context's cache");
    release();  // back to the cache: the stream's queued work on it runs before any later reuse
    p_ = cache_->take(bytes, &cap_);
  }
  void release() {
    if (p_) cache_->give(p_, cap_);
    p_ = nullptr;
    cap_ = 0;
  }
  template <class T = void>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  std::size_t cap_ = 0;
  BlockCache* cache_ = nullptr;
};

// Offset a 16-bit array by elements.
inline void* at(void* p, std::size_t i) { return static_cast<char*>(p) + 2 * i; }
inline const void* at(const void* p, std::size_t i) { return static_cast<const char*>(p) + 2 * i; }

cudaDataType cuda_type(DType dt) {
  switch (dt) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF64:
      break;  // the CUDA backend computes in f16 / bf16 (f32 accumulation); f64 is the CPU reference's
  }
  throw KernelError(std::string("CUDA backend: no cuBLAS type for ") + dtype_name(dt));
}

// State shared by a backend and every object it created (objects may outlive the backend object).
struct Ctx {
  int device = 0;
  DType dt = DType::kBF16;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  BlockCache cache{cuda_allocator()};  // every buffer of the objects below; outlives them (they hold the context)
  DeviceBuffer staging;                // fp32 staging for host <-> 16-bit conversions

  Ctx() { staging.bind(&cache); }
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;

  ~Ctx() {
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }
  float* stage(std::size_t n) {
    staging.reserve(n * sizeof(float));
    return staging.as<float>();
  }
  void upload_f32(const std::vector<double>& host, float* dst) {
    const std::vector<float> tmp(host.begin(), host.end());
    CUDA_CHECK(cudaMemcpyAsync(dst, tmp.data(), tmp.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  std::vector<double> download_f32(const float* src, std::size_t n) {
    std::vector<float> tmp(n);
    CUDA_CHECK(cudaMemcpyAsync(tmp.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return {tmp.begin(), tmp.end()};
  }
};

template <class To, class From>
To& as(From& obj, const char* what) {
  auto* p = dynamic_cast<To*>(&obj);
  if (!p) throw KernelError(std::string(what) + ": object was created by another backend");
  return *p;
}

class CudaTensor final : public Tensor {
 public:
  CudaTensor(std::shared_ptr<Ctx> ctx, int rows, int cols) : ctx_(std::move(ctx)) {
    buf_.bind(&ctx_->cache);
    dtype_ = ctx_->dt;
    resize(rows, cols);
  }
  void resize(int rows, int cols) override {
    if (rows < 0 || cols < 0) throw KernelError("Tensor::resize: negative shape");
    rows_ = rows;
    cols_ = cols;
    buf_.reserve(bytes());
  }
  void* data() override { return buf_.as(); }
  const void* data() const override { return buf_.as(); }
  void upload(const std::vector<double>& host) override {
    const std::size_t n = static_cast<std::size_t>(rows_) * cols_;
    if (host.size() != n)
      throw KernelError("Tensor::upload: expected " + std::to_string(n) + " values, got " +
                        std::to_string(host.size()));
    float* s = ctx_->stage(n);
    ctx_->upload_f32(host, s);
    cuda::convert_from_f32(dtype_, s, buf_.as(), n, ctx_->stream);
    CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));
  }
  std::vector<double> download() const override {
    const std::size_t n = static_cast<std::size_t>(rows_) * cols_;
    float* s = ctx_->stage(n);
    cuda::convert_to_f32(dtype_, buf_.as(), s, n, ctx_->stream);
    return ctx_->download_f32(s, n);
  }

 private:
  std::shared_ptr<Ctx> ctx_;
  DeviceBuffer buf_;
};

class CudaParams final : public Params {
 public:
  CudaParams(std::shared_ptr<Ctx> ctx, ModuleKind kind, const ModelShape& shape) : ctx_(std::move(ctx)) {
    kind_ = kind;
    shape_ = shape;
    size_ = param_count(kind, shape);
    for (DeviceBuffer* b : {&master_, &grad_, &m_, &v_, &lp_}) b->bind(&ctx_->cache);
    for (DeviceBuffer* b : {&master_, &grad_, &m_, &v_}) b->reserve(size_ * sizeof(float));
    lp_.reserve(size_ * 2);
    for (DeviceBuffer* b : {&master_, &grad_, &m_, &v_})
      CUDA_CHECK(cudaMemsetAsync(b->as(), 0, size_ * sizeof(float), ctx_->stream));
    CUDA_CHECK(cudaMemsetAsync(lp_.as(), 0, size_ * 2, ctx_->stream));
  }
  void set(const std::vector<double>& values) override {
    if (values.size() != size_)
      throw KernelError("Params::set: expected " + std::to_string(size_) + " values, got " +
                        std::to_string(values.size()));
    ctx_->upload_f32(values, master_.as<float>());
    cuda::convert_from_f32(ctx_->dt, master_.as<float>(), lp_.as(), size_, ctx_->stream);
    CUDA_CHECK(cudaMemsetAsync(m_.as(), 0, size_ * sizeof(float), ctx_->stream));
    CUDA_CHECK(cudaMemsetAsync(v_.as(), 0, size_ * sizeof(float), ctx_->stream));
  }
  std::vector<double> get() const override { return ctx_->download_f32(master_.as<float>(), size_); }
  std::vector<double> grads() const override { return ctx_->download_f32(grad_.as<float>(), size_); }
  void zero_grads() override { CUDA_CHECK(cudaMemsetAsync(grad_.as(), 0, size_ * sizeof(float), ctx_->stream)); }
  void* grad_data() override { return grad_.as(); }
  DType grad_dtype() const override { return DType::kF32; }

  const float* f(std::size_t off) const { return master_.as<float>() + off; }  // fp32 master (norms, biases)
  const void* w(std::size_t off) const { return at(lp_.as(), off); }           // 16-bit copy (GEMM operands)
  float* g(std::size_t off) { return grad_.as<float>() + off; }
  float* master() { return master_.as<float>(); }
  float* moment1() { return m_.as<float>(); }
  float* moment2() { return v_.as<float>(); }
  void* lp() { return lp_.as(); }
  const float* grad() const { return grad_.as<float>(); }

 private:
  std::shared_ptr<Ctx> ctx_;
  DeviceBuffer master_, grad_, m_, v_, lp_;
};

class CudaKV final : public KVCache {
  std::shared_ptr<Ctx> ctx_;  // first: the buffers below give their blocks back to its cache when destroyed

 public:
  CudaKV(std::shared_ptr<Ctx> ctx, const LayerShape& shape, int batch, int max_len) : ctx_(std::move(ctx)) {
    for (DeviceBuffer* b : {&k, &v, &dk, &dv}) b->bind(&ctx_->cache);
    shape.validate();
    state_ = KVState(batch, max_len);
    hidden = shape.hidden;
    width = shape.shard_width();
    const std::size_t n = static_cast<std::size_t>(batch) * max_len * width;
    k.reserve(2 * n);
    v.reserve(2 * n);
    dk.reserve(4 * n);
    dv.reserve(4 * n);
    // Never read before written; zeroed anyway so a protocol bug shows as zeros, not as NaN garbage.
    for (DeviceBuffer* b : {&k, &v}) CUDA_CHECK(cudaMemsetAsync(b->as(), 0, 2 * n, ctx_->stream));
    for (DeviceBuffer* b : {&dk, &dv}) CUDA_CHECK(cudaMemsetAsync(b->as(), 0, 4 * n, ctx_->stream));
  }
  KVState& st() { return state_; }
  int hidden = 0;
  int width = 0;              // the shard's attention width (hidden when tp = 1)
  DeviceBuffer k, v, dk, dv;  // [batch, max_len, width]: 16-bit K/V, fp32 dK/dV
};

class CudaRecord final : public Record {
  std::shared_ptr<Ctx> ctx_;  // first: outlives the buffers, which give their blocks back to its cache

 public:
  explicit CudaRecord(std::shared_ptr<Ctx> c) : ctx_(std::move(c)) {
    for (DeviceBuffer* b : buffers()) b->bind(&ctx_->cache);
  }
  void release() override {
    for (DeviceBuffer* b : buffers()) b->release();
    has_layer = has_head = has_grads = has_hda = false;
  }
  // Layer forward.
  bool has_layer = false;
  Slice slice;
  LayerShape shape;
  DeviceBuffer x, a1, qkv, ctx, x1, a2, u, g, probs;  // 16-bit
  DeviceBuffer mu1, rstd1, mu2, rstd2;                // fp32
  // Layer backward for inputs (split backward): the output gradients the weight half needs (16-bit).
  bool has_grads = false;
  DeviceBuffer gdy, gdu, gda2, gdx1, gdqkv, gda1;
  // Head forward.
  bool has_head = false;
  Slice head_slice;
  double loss_norm = 1;
  DeviceBuffer hx, ha, dlogits, hmu, hrstd, row_loss, targets;
  bool has_hda = false;  // head backward for inputs ran: hda = gradient w.r.t. the final LN's output
  DeviceBuffer hda;

 private:
  std::array<DeviceBuffer*, 27> buffers() {
    return {&x,  &a1,      &qkv, &ctx,   &x1,       &a2,      &u,   &g,   &probs, &mu1,  &rstd1, &mu2,  &rstd2, &hx,
            &ha, &dlogits, &hmu, &hrstd, &row_loss, &targets, &gdy, &gdu, &gda2,  &gdx1, &gdqkv, &gda1, &hda};
  }
};

// CUDA events on the backend's stream; one pool of events reused across iterations (created on demand).
class CudaOpTimer final : public OpTimer {
 public:
  explicit CudaOpTimer(std::shared_ptr<Ctx> ctx) : ctx_(std::move(ctx)) {}
  ~CudaOpTimer() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);  // destructors cannot report; leaks an event at worst
  }
  bool on_device() const override { return true; }
  void begin() override {
    used_ = 0;
    mark();
  }
  int mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], ctx_->stream));
    return static_cast<int>(used_++) - 1;  // event 0 is begin()
  }
  std::vector<double> resolve() override {
    std::vector<double> s;
    if (used_ == 0) return s;
    CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
    for (std::size_t i = 1; i < used_; i++) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[i]));
      s.push_back(static_cast<double>(ms) * 1e-3);
    }
    return s;
  }

 private:
  std::shared_ptr<Ctx> ctx_;
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(DType dt, int device) : ctx_(std::make_shared<Ctx>()) {
    if (dt != DType::kF16 && dt != DType::kBF16)
      throw KernelError(std::string("make_cuda_backend: dtype ") + dtype_name(dt) + " unsupported (f16 or bf16)");
    const int count = cuda_device_count();
    if (device < 0 || device >= count)
      throw KernelError("make_cuda_backend: no CUDA device " + std::to_string(device) + " (" + std::to_string(count) +
                        " usable)");
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    cc_ = prop.major * 10 + prop.minor;
    if (dt == DType::kBF16 && cc_ < 80)
      throw KernelError("make_cuda_backend: bf16 needs compute capability >= 8.0, device " + std::to_string(device) +
                        " (" + prop.name + ") is sm_" + std::to_string(cc_) + "; use f16");
    device_name_ = prop.name;
    ctx_->device = device;
    ctx_->dt = dt;
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&ctx_->blas));
    CUBLAS_CHECK(cublasSetStream(ctx_->blas, ctx_->stream));
    for (DeviceBuffer* b : {&scores_, &ds_, &tf_, &t3h_, &th1_, &th2_, &red_, &logits_, &ids_, &tsum_, &ta2_, &ta1_})
      b->bind(&ctx_->cache);
  }

  std::string name() const override {
    return std::string("cuda-") + dtype_name(ctx_->dt) + " " + device_name_ + " (sm_" + std::to_string(cc_) + ")";
  }
  DType dtype() const override { return ctx_->dt; }

  std::unique_ptr<Tensor> tensor(int rows, int cols) override { return std::make_unique<CudaTensor>(ctx_, rows, cols); }
  std::unique_ptr<Params> params(ModuleKind kind, const ModelShape& shape) override {
    return std::make_unique<CudaParams>(ctx_, kind, shape);
  }
  std::unique_ptr<KVCache> kv_cache(const LayerShape& shape, int batch, int max_len) override {
    return std::make_unique<CudaKV>(ctx_, shape, batch, max_len);
  }
  std::unique_ptr<Record> record() override { return std::make_unique<CudaRecord>(ctx_); }

  void layer_forward(const Params& layer, const Tensor& xt, const Slice& sl, KVCache& kvb, Record& recb,
                     Tensor& yt) override;
  void layer_backward(Params& layer, const Record& recb, KVCache& kvb, const Tensor& dyt, Tensor& dxt) override;
  void layer_backward_input(const Params& layer, Record& recb, KVCache& kvb, const Tensor& dyt, Tensor& dxt) override;
  void layer_backward_weight(Params& layer, Record& recb) override;
  void embedding_forward(const Params& emb, const std::vector<std::int32_t>& tokens, const Slice& sl,
                         Tensor& xt) override;
  void embedding_backward(Params& emb, const std::vector<std::int32_t>& tokens, const Slice& sl,
                          const Tensor& dxt) override;
  void head_forward(const Params& head, const Tensor& xt, const std::vector<std::int32_t>& targets, const Slice& sl,
                    double loss_norm, double loss_scale, Record& recb) override;
  double head_loss(const Record& recb) override;
  void accumulate_loss(const Record& recb) override;
  double take_loss() override;
  void head_backward(Params& head, const Record& recb, Tensor& dxt) override;
  void head_backward_input(const Params& head, Record& recb, Tensor& dxt) override;
  void head_backward_weight(Params& head, Record& recb) override;
  void adam_step(Params& p, const AdamConfig& cfg, int step) override;

  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(ctx_->stream)); }
  void* stream() override { return ctx_->stream; }
  std::unique_ptr<OpTimer> op_timer() override { return std::make_unique<CudaOpTimer>(ctx_); }

 private:
  // The output gradients of a layer's weight operations on a slice (16-bit; n = slice rows): dy [n, h] (fc2),
  // du [n, f] (fc1, after GELU), da2 [n, h] (LN2 out), dx1 [n, h] (W_o), dqkv [n, 3w] (QKV), da1 [n, h] (LN1 out).
  // The backward for inputs writes them (all but dy), the backward for weights reads them.
  struct LayerOutGrads {
    const void* dy;
    void *du, *da2, *dx1, *dqkv, *da1;
  };
  void check_layer_backward(const CudaParams& P, const CudaRecord& r, CudaKV& kv, const CudaTensor& dy,
                            const char* what) const;
  void backward_input(const CudaParams& P, const CudaRecord& r, CudaKV& kv, const LayerOutGrads& d, CudaTensor& dx);
  void backward_weight(CudaParams& P, const CudaRecord& r, const LayerOutGrads& d);
  void head_input(const CudaParams& P, const CudaRecord& r, void* da, CudaTensor& dx);
  void head_weight(CudaParams& P, const CudaRecord& r, const void* da);

  struct Operand {
    const void* p;
    cudaDataType t;
    int ld;
    long long stride = 0;
  };

  // Row-major C[M x N] = alpha op(A) op(B) + beta C, `batch` times with the given strides. cuBLAS is
  // column-major, so this computes C^T = op(B)^T op(A)^T: the operands swap and M, N swap.
  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, Operand A, Operand B, float beta, void* C,
            cudaDataType ct, int ldc, long long stride_c = 0, int batch = 1) {
    const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
      CUBLAS_CHECK(cublasGemmEx(ctx_->blas, opa, opb, N, M, K, &alpha, B.p, B.t, B.ld, A.p, A.t, A.ld, &beta, C, ct,
                                ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx_->blas, opa, opb, N, M, K, &alpha, B.p, B.t, B.ld, B.stride, A.p, A.t,
                                              A.ld, A.stride, &beta, C, ct, ldc, stride_c, batch, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
    }
  }
  Operand lp(const void* p, int ld, long long stride = 0) const { return {p, cuda_type(ctx_->dt), ld, stride}; }
  cudaDataType lpt() const { return cuda_type(ctx_->dt); }

  void require_tp_sum(const LayerShape& s, const char* what) const {
    if (s.tp > 1 && !tp_all_reduce_)
      throw KernelError(std::string(what) + ": a tensor-parallel shard (tp = " + std::to_string(s.tp) +
                        ") needs the all-reduce over its shards (Backend::set_tp_all_reduce)");
  }
  // C [M x N] (16-bit, ld N) = A op(B) where, on a shard (tp > 1), the product is a partial sum over the shards
  // (row-parallel W_o / fc2 outputs, column-parallel input gradients): it is computed in fp32, summed in place by
  // the TP all-reduce (fp32, so the sum adds no 16-bit rounding), then rounded once to 16 bits as the unsharded
  // product is. The callback gets the buffer with its GEMM enqueued on the stream, not finished: it orders itself
  // after the stream (NcclTransport: an event) or synchronizes it, and returns once the sum is in place.
  void gemm_tp_sum(const LayerShape& s, bool tb, int M, int N, int K, Operand A, Operand B, void* C) {
    if (s.tp == 1) {
      gemm(false, tb, M, N, K, 1.f, A, B, 0.f, C, lpt(), N);
      return;
    }
    const std::size_t count = static_cast<std::size_t>(M) * N;
    tsum_.reserve(sizeof(float) * count);
    gemm(false, tb, M, N, K, 1.f, A, B, 0.f, tsum_.as(), CUDA_R_32F, N);
    tp_all_reduce_(tsum_.as(), count, DType::kF32);
    cuda::convert_from_f32(ctx_->dt, tsum_.as<float>(), C, count, ctx_->stream);
  }

  template <class Q>
  static auto& module(Q& p, ModuleKind kind, const char* what) {
    using C = std::conditional_t<std::is_const_v<Q>, const CudaParams, CudaParams>;
    auto& P = as<C>(p, what);
    if (P.kind() != kind) throw KernelError(std::string(what) + ": parameters of the wrong module kind");
    return P;
  }
  static void check_shape(const char* what, const Tensor& t, int rows, int cols) {
    if (t.rows() != rows || t.cols() != cols)
      throw KernelError(std::string(what) + ": expected [" + std::to_string(rows) + ", " + std::to_string(cols) +
                        "], got [" + std::to_string(t.rows()) + ", " + std::to_string(t.cols()) + "]");
  }
  static void check_ids(const char* what, const std::vector<std::int32_t>& ids, const Slice& sl, int lo, int hi) {
    if (ids.size() != static_cast<std::size_t>(sl.rows()))
      throw KernelError(std::string(what) + ": expected " + std::to_string(sl.rows()) + " ids (b * l), got " +
                        std::to_string(ids.size()));
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < lo || ids[i] >= hi)
        throw KernelError(std::string(what) + ": id " + std::to_string(ids[i]) + " at " + std::to_string(i) +
                          " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  }
  static void check_positions(const ModelShape& m, const Slice& sl) {
    if (sl.batch <= 0 || sl.len <= 0 || sl.begin < 0 || sl.end() > m.max_seq)
      throw KernelError("embedding: slice [" + std::to_string(sl.begin) + ", " + std::to_string(sl.end()) +
                        ") outside the position table [0, " + std::to_string(m.max_seq) + ")");
  }
  void upload_ids(const std::vector<std::int32_t>& ids, std::size_t at_elem = 0) {
    ids_.reserve((at_elem + ids.size()) * sizeof(std::int32_t));
    CUDA_CHECK(cudaMemcpyAsync(ids_.as<std::int32_t>() + at_elem, ids.data(), ids.size() * sizeof(std::int32_t),
                               cudaMemcpyHostToDevice, ctx_->stream));
  }

  std::shared_ptr<Ctx> ctx_;
  int cc_ = 0;
  std::string device_name_;
  // Workspaces (grow-only; operations on the one stream use them in order).
  DeviceBuffer scores_, ds_, tf_, t3h_, th1_, th2_, red_, logits_, ids_;
  DeviceBuffer ta2_, ta1_;  // the fused layer_backward's dLN2 / dLN1 outputs (LayerOutGrads da2, da1)
  DeviceBuffer tsum_;       // fp32 partial sums of a shard for the TP all-reduce
  // accumulate_loss: each slice's per-row losses, copied on the stream (its record is reused before take_loss).
  struct LossRows {
    DeviceBuffer rows;
    std::size_t n = 0;
    double loss_norm = 1;
  };
  std::deque<LossRows> loss_rows_;  // a deque: DeviceBuffer does not move
};

// On a tensor-parallel shard (tp > 1) every step below is the unsharded one on the shard's heads (attention width
// w = h / tp: QKV [n, 3w], K/V caches [b, max_len, w]) and MLP columns (f = ffn / tp), with the partial sums of
// the row-parallel W_o / fc2 (forward) and of the column-parallel input gradients into LN2 / LN1 (backward)
// summed by gemm_tp_sum, as in kernels/reference.cc. With tp = 1, w = h and f = ffn.
void CudaBackend::layer_forward(const Params& layer, const Tensor& xt, const Slice& sl, KVCache& kvb, Record& recb,
                                Tensor& yt) {
  const auto& P = module(layer, ModuleKind::kLayer, "layer_forward");
  auto& kv = as<CudaKV>(kvb, "layer_forward kv");
  auto& r = as<CudaRecord>(recb, "layer_forward record");
  const auto& x = as<const CudaTensor>(xt, "layer_forward x");
  auto& y = as<CudaTensor>(yt, "layer_forward y");
  const LayerShape& s = P.shape().layer;
  const LayerLayout L = LayerLayout::of(s);
  require_tp_sum(s, "layer_forward");
  if (r.has_grads)
    throw KernelError("layer_forward: the record's weight gradients are pending (run layer_backward_weight first)");
  if (kv.hidden != s.hidden || kv.width != s.shard_width())
    throw KernelError("layer_forward: the K/V cache was made for another layer shape");
  kv.st().check_forward(sl);
  const int h = s.hidden, w = s.shard_width(), f = s.shard_ffn(), nh = s.shard_heads(), dh = s.head_dim();
  const int l = sl.len, c = sl.begin, nk = sl.end(), n = sl.rows(), max_len = kv.st().max_len();
  check_shape("layer_forward x", x, n, h);
  const DType dt = ctx_->dt;
  cudaStream_t st = ctx_->stream;
  const std::size_t nz = n;

  for (DeviceBuffer* b : {&r.x, &r.a1, &r.x1, &r.a2}) b->reserve(2 * nz * h);
  r.ctx.reserve(2 * nz * w);
  r.qkv.reserve(2 * nz * 3 * w);
  r.u.reserve(2 * nz * f);
  r.g.reserve(2 * nz * f);
  r.probs.reserve(2 * static_cast<std::size_t>(sl.batch) * nh * l * nk);
  for (DeviceBuffer* b : {&r.mu1, &r.rstd1, &r.mu2, &r.rstd2}) b->reserve(4 * nz);
  scores_.reserve(4 * static_cast<std::size_t>(nh) * l * nk);
  th1_.reserve(2 * nz * h);
  y.resize(n, h);

  CUDA_CHECK(cudaMemcpyAsync(r.x.as(), x.data(), 2 * nz * h, cudaMemcpyDeviceToDevice, st));
  cuda::layer_norm_forward(dt, x.data(), P.f(L.ln1_g), P.f(L.ln1_b), r.a1.as(), r.mu1.as<float>(), r.rstd1.as<float>(),
                           n, h, st);
  gemm(false, false, n, 3 * w, h, 1.f, lp(r.a1.as(), h), lp(P.w(L.w_qkv), 3 * w), 0.f, r.qkv.as(), lpt(), 3 * w);
  cuda::add_bias(dt, r.qkv.as(), P.f(L.b_qkv), n, 3 * w, st);
  cuda::kv_store(dt, r.qkv.as(), kv.k.as(), kv.v.as(), kv.dk.as<float>(), kv.dv.as<float>(), sl.batch, l, c, max_len, w,
                 st);

  const float scale = 1.f / std::sqrt(static_cast<float>(dh));
  const long long pstride = static_cast<long long>(l) * nk;
  for (int q = 0; q < sl.batch; ++q) {
    const void* Q = at(r.qkv.as(), static_cast<std::size_t>(q) * l * 3 * w);
    const void* K = at(kv.k.as(), static_cast<std::size_t>(q) * max_len * w);
    const void* V = at(kv.v.as(), static_cast<std::size_t>(q) * max_len * w);
    void* Pq = at(r.probs.as(), static_cast<std::size_t>(q) * nh * pstride);
    // S = scale Q K^T over the prefix [0, nk), one [l, nk] block per head.
    gemm(false, true, l, nk, dh, scale, lp(Q, 3 * w, dh), lp(K, w, dh), 0.f, scores_.as(), CUDA_R_32F, nk, pstride, nh);
    cuda::softmax_forward(dt, scores_.as<float>(), Pq, nh * l, l, c, nk, st);
    gemm(false, false, l, dh, nk, 1.f, lp(Pq, nk, pstride), lp(V, w, dh), 0.f,
         at(r.ctx.as(), static_cast<std::size_t>(q) * l * w), lpt(), w, dh, nh);
  }

  // Row-parallel W_o and fc2: partial sums on a shard; the bias and the residual are added once, after the sum.
  gemm_tp_sum(s, false, n, h, w, lp(r.ctx.as(), w), lp(P.w(L.w_o), h), th1_.as());
  cuda::bias_residual(dt, th1_.as(), P.f(L.b_o), x.data(), r.x1.as(), n, h, st);
  cuda::layer_norm_forward(dt, r.x1.as(), P.f(L.ln2_g), P.f(L.ln2_b), r.a2.as(), r.mu2.as<float>(), r.rstd2.as<float>(),
                           n, h, st);
  gemm(false, false, n, f, h, 1.f, lp(r.a2.as(), h), lp(P.w(L.w_fc1), f), 0.f, r.u.as(), lpt(), f);
  cuda::bias_gelu(dt, r.u.as(), P.f(L.b_fc1), r.g.as(), n, f, st);
  gemm_tp_sum(s, false, n, h, f, lp(r.g.as(), f), lp(P.w(L.w_fc2), h), th1_.as());
  cuda::bias_residual(dt, th1_.as(), P.f(L.b_fc2), r.x1.as(), y.data(), n, h, st);

  r.slice = sl;
  r.shape = s;
  r.has_layer = true;
  kv.st().commit_forward(sl);
}

void CudaBackend::check_layer_backward(const CudaParams& P, const CudaRecord& r, CudaKV& kv, const CudaTensor& dy,
                                       const char* what) const {
  const LayerShape& s = P.shape().layer;
  require_tp_sum(s, what);
  if (!r.has_layer) throw KernelError(std::string(what) + ": the activation record holds no forward");
  if (r.has_grads)
    throw KernelError(std::string(what) + ": the record's backward for inputs already ran (its W is pending)");
  if (r.shape.hidden != s.hidden || r.shape.heads != s.heads || r.shape.ffn != s.ffn || r.shape.tp != s.tp)
    throw KernelError(std::string(what) + ": the record was made by a layer of another shape");
  if (kv.hidden != s.hidden || kv.width != s.shard_width())
    throw KernelError(std::string(what) + ": the K/V cache was made for another layer shape");
  kv.st().check_backward(r.slice);
  check_shape((std::string(what) + " dy").c_str(), dy, r.slice.rows(), s.hidden);
}

void CudaBackend::layer_backward(Params& layer, const Record& recb, KVCache& kvb, const Tensor& dyt, Tensor& dxt) {
  auto& P = module(layer, ModuleKind::kLayer, "layer_backward");
  auto& kv = as<CudaKV>(kvb, "layer_backward kv");
  const auto& r = as<const CudaRecord>(recb, "layer_backward record");
  const auto& dy = as<const CudaTensor>(dyt, "layer_backward dy");
  auto& dx = as<CudaTensor>(dxt, "layer_backward dx");
  check_layer_backward(P, r, kv, dy, "layer_backward");
  const LayerShape& s = P.shape().layer;
  const std::size_t n = static_cast<std::size_t>(r.slice.rows());
  tf_.reserve(2 * n * s.shard_ffn());
  t3h_.reserve(2 * n * 3 * s.shard_width());
  for (DeviceBuffer* b : {&ta2_, &th2_, &ta1_}) b->reserve(2 * n * s.hidden);
  const LayerOutGrads d{dy.data(), tf_.as(), ta2_.as(), th2_.as(), t3h_.as(), ta1_.as()};
  backward_input(P, r, kv, d, dx);
  backward_weight(P, r, d);
}

void CudaBackend::layer_backward_input(const Params& layer, Record& recb, KVCache& kvb, const Tensor& dyt,
                                       Tensor& dxt) {
  const auto& P = module(layer, ModuleKind::kLayer, "layer_backward_input");
  auto& kv = as<CudaKV>(kvb, "layer_backward_input kv");
  auto& r = as<CudaRecord>(recb, "layer_backward_input record");
  const auto& dy = as<const CudaTensor>(dyt, "layer_backward_input dy");
  auto& dx = as<CudaTensor>(dxt, "layer_backward_input dx");
  check_layer_backward(P, r, kv, dy, "layer_backward_input");
  const LayerShape& s = P.shape().layer;
  const std::size_t n = static_cast<std::size_t>(r.slice.rows());
  r.gdu.reserve(2 * n * s.shard_ffn());
  r.gdqkv.reserve(2 * n * 3 * s.shard_width());
  for (DeviceBuffer* b : {&r.gdy, &r.gda2, &r.gdx1, &r.gda1}) b->reserve(2 * n * s.hidden);
  CUDA_CHECK(cudaMemcpyAsync(r.gdy.as(), dy.data(), 2 * n * s.hidden, cudaMemcpyDeviceToDevice, ctx_->stream));
  const LayerOutGrads d{r.gdy.as(), r.gdu.as(), r.gda2.as(), r.gdx1.as(), r.gdqkv.as(), r.gda1.as()};
  backward_input(P, r, kv, d, dx);
  // Only the input half reads these; the stream orders any reuse of their blocks after the kernels above.
  for (DeviceBuffer* b : {&r.probs, &r.qkv, &r.u}) b->release();
  r.has_grads = true;
}

void CudaBackend::layer_backward_weight(Params& layer, Record& recb) {
  auto& P = module(layer, ModuleKind::kLayer, "layer_backward_weight");
  auto& r = as<CudaRecord>(recb, "layer_backward_weight record");
  const LayerShape& s = P.shape().layer;
  if (!r.has_layer || !r.has_grads)
    throw KernelError("layer_backward_weight: the record holds no backward for inputs (run layer_backward_input)");
  if (r.shape.hidden != s.hidden || r.shape.heads != s.heads || r.shape.ffn != s.ffn || r.shape.tp != s.tp)
    throw KernelError("layer_backward_weight: the record was made by a layer of another shape");
  backward_weight(P, r, {r.gdy.as(), r.gdu.as(), r.gda2.as(), r.gdx1.as(), r.gdqkv.as(), r.gda1.as()});
  r.release();  // consumed; its blocks go back to the cache, reused in stream order
}

// Writes d.du, d.da2, d.dx1, d.dqkv, d.da1 and dx; adds dK/dV into the cache; no parameter gradient.
void CudaBackend::backward_input(const CudaParams& P, const CudaRecord& r, CudaKV& kv, const LayerOutGrads& d,
                                 CudaTensor& dx) {
  const LayerShape& s = P.shape().layer;
  const LayerLayout L = LayerLayout::of(s);
  const Slice& sl = r.slice;
  const int h = s.hidden, w = s.shard_width(), f = s.shard_ffn(), nh = s.shard_heads(), dh = s.head_dim();
  const int l = sl.len, c = sl.begin, nk = sl.end(), n = sl.rows(), max_len = kv.st().max_len();
  const DType dt = ctx_->dt;
  cudaStream_t st = ctx_->stream;
  const std::size_t nz = n;
  th1_.reserve(2 * nz * w);
  scores_.reserve(4 * static_cast<std::size_t>(nh) * l * nk);
  ds_.reserve(2 * static_cast<std::size_t>(nh) * l * nk);
  dx.resize(n, h);

  // MLP: y = x1 + gelu(LN2(x1) W1 + b1) W2 + b2.
  gemm(false, true, n, f, h, 1.f, lp(d.dy, h), lp(P.w(L.w_fc2), h), 0.f, d.du, lpt(), f);
  cuda::gelu_backward(dt, d.du, r.u.as(), d.du, n, f, st);
  // Column-parallel fc1 (and QKV below): on a shard the gradient w.r.t. their input is a partial sum.
  gemm_tp_sum(s, true, n, h, f, lp(d.du, f), lp(P.w(L.w_fc1), f), d.da2);  // dLN2 out
  cuda::layer_norm_backward_input(dt, r.x1.as(), r.mu2.as<float>(), r.rstd2.as<float>(), P.f(L.ln2_g), d.da2, d.dy,
                                  d.dx1, n, h, st);

  // Output projection: x1 = x + ctx Wo + bo.
  gemm(false, true, n, w, h, 1.f, lp(d.dx1, h), lp(P.w(L.w_o), h), 0.f, th1_.as(), lpt(), w);  // th1 = dctx

  // Attention over the prefix [0, nk): dK/dV of all earlier tokens accumulate (fp32) in the cache.
  const float scale = 1.f / std::sqrt(static_cast<float>(dh));
  const long long pstride = static_cast<long long>(l) * nk;
  for (int q = 0; q < sl.batch; ++q) {
    const void* Q = at(r.qkv.as(), static_cast<std::size_t>(q) * l * 3 * w);
    const void* K = at(kv.k.as(), static_cast<std::size_t>(q) * max_len * w);
    const void* V = at(kv.v.as(), static_cast<std::size_t>(q) * max_len * w);
    float* dK = kv.dk.as<float>() + static_cast<std::size_t>(q) * max_len * w;
    float* dV = kv.dv.as<float>() + static_cast<std::size_t>(q) * max_len * w;
    const void* Pq = at(r.probs.as(), static_cast<std::size_t>(q) * nh * pstride);
    const void* dO = at(th1_.as(), static_cast<std::size_t>(q) * l * w);
    gemm(false, true, l, nk, dh, 1.f, lp(dO, w, dh), lp(V, w, dh), 0.f, scores_.as(), CUDA_R_32F, nk, pstride, nh);
    gemm(true, false, nk, dh, l, 1.f, lp(Pq, nk, pstride), lp(dO, w, dh), 1.f, dV, CUDA_R_32F, w, dh, nh);
    cuda::softmax_backward(dt, scores_.as<float>(), Pq, ds_.as(), scale, nh * l, nk, st);
    gemm(false, false, l, dh, nk, 1.f, lp(ds_.as(), nk, pstride), lp(K, w, dh), 0.f,
         at(d.dqkv, static_cast<std::size_t>(q) * l * 3 * w), lpt(), 3 * w, dh, nh);  // dQ
    gemm(true, false, nk, dh, l, 1.f, lp(ds_.as(), nk, pstride), lp(Q, 3 * w, dh), 1.f, dK, CUDA_R_32F, w, dh, nh);
  }
  // The slice's own dK/dV are complete: every later slice's backward has already added its share.
  cuda::kv_grad_gather(dt, kv.dk.as<float>(), kv.dv.as<float>(), d.dqkv, sl.batch, l, c, max_len, w, st);

  gemm_tp_sum(s, true, n, h, 3 * w, lp(d.dqkv, 3 * w), lp(P.w(L.w_qkv), 3 * w), d.da1);  // dLN1 out
  cuda::layer_norm_backward_input(dt, r.x.as(), r.mu1.as<float>(), r.rstd1.as<float>(), P.f(L.ln1_g), d.da1, d.dx1,
                                  dx.data(), n, h, st);
  kv.st().commit_backward(sl);
}

// Every parameter gradient of the layer (fp32, accumulated) from the record's activations and d.
void CudaBackend::backward_weight(CudaParams& P, const CudaRecord& r, const LayerOutGrads& d) {
  const LayerShape& s = P.shape().layer;
  const LayerLayout L = LayerLayout::of(s);
  const int h = s.hidden, w = s.shard_width(), f = s.shard_ffn(), n = r.slice.rows();
  const DType dt = ctx_->dt;
  cudaStream_t st = ctx_->stream;
  red_.reserve(2 * sizeof(float) * cuda::reduce_workspace_floats(n, std::max({h, 3 * w, f})));
  float* red = red_.as<float>();
  cuda::bias_grad(dt, d.dy, P.g(L.b_fc2), n, h, red, st);
  gemm(true, false, f, h, n, 1.f, lp(r.g.as(), f), lp(d.dy, h), 1.f, P.g(L.w_fc2), CUDA_R_32F, h);
  cuda::bias_grad(dt, d.du, P.g(L.b_fc1), n, f, red, st);
  gemm(true, false, h, f, n, 1.f, lp(r.a2.as(), h), lp(d.du, f), 1.f, P.g(L.w_fc1), CUDA_R_32F, f);
  cuda::layer_norm_backward_params(dt, r.x1.as(), r.mu2.as<float>(), r.rstd2.as<float>(), d.da2, P.g(L.ln2_g),
                                   P.g(L.ln2_b), n, h, red, st);
  cuda::bias_grad(dt, d.dx1, P.g(L.b_o), n, h, red, st);
  gemm(true, false, w, h, n, 1.f, lp(r.ctx.as(), w), lp(d.dx1, h), 1.f, P.g(L.w_o), CUDA_R_32F, h);
  cuda::bias_grad(dt, d.dqkv, P.g(L.b_qkv), n, 3 * w, red, st);
  gemm(true, false, h, 3 * w, n, 1.f, lp(r.a1.as(), h), lp(d.dqkv, 3 * w), 1.f, P.g(L.w_qkv), CUDA_R_32F, 3 * w);
  cuda::layer_norm_backward_params(dt, r.x.as(), r.mu1.as<float>(), r.rstd1.as<float>(), d.da1, P.g(L.ln1_g),
                                   P.g(L.ln1_b), n, h, red, st);
}

void CudaBackend::embedding_forward(const Params& emb, const std::vector<std::int32_t>& tokens, const Slice& sl,
                                    Tensor& xt) {
  const auto& P = module(emb, ModuleKind::kEmbedding, "embedding_forward");
  auto& x = as<CudaTensor>(xt, "embedding_forward x");
  const ModelShape& m = P.shape();
  const EmbeddingLayout E = EmbeddingLayout::of(m);
  check_positions(m, sl);
  check_ids("embedding_forward tokens", tokens, sl, 0, m.vocab);
  x.resize(sl.rows(), m.layer.hidden);
  upload_ids(tokens);
  cuda::embedding_forward(ctx_->dt, ids_.as<std::int32_t>(), P.f(E.tok), P.f(E.pos), x.data(), sl.batch, sl.len,
                          sl.begin, m.layer.hidden, ctx_->stream);
}

void CudaBackend::embedding_backward(Params& emb, const std::vector<std::int32_t>& tokens, const Slice& sl,
                                     const Tensor& dxt) {
  auto& P = module(emb, ModuleKind::kEmbedding, "embedding_backward");
  const auto& dx = as<const CudaTensor>(dxt, "embedding_backward dx");
  const ModelShape& m = P.shape();
  const EmbeddingLayout E = EmbeddingLayout::of(m);
  check_positions(m, sl);
  check_ids("embedding_backward tokens", tokens, sl, 0, m.vocab);
  check_shape("embedding_backward dx", dx, sl.rows(), m.layer.hidden);
  const int n = sl.rows();
  // Rows grouped by destination row (token id, then position), in row order: a deterministic sum.
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tokens[a] < tokens[b]; });
  std::vector<std::int32_t> tok_off{0}, tok_dest;
  for (int i = 0; i < n; ++i) {
    if (i > 0 && tokens[order[i]] != tokens[order[i - 1]]) tok_off.push_back(i);
    if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) tok_dest.push_back(tokens[order[i]]);
  }
  tok_off.push_back(n);
  std::vector<std::int32_t> pos_off, pos_rows, pos_dest;
  for (int t = 0; t < sl.len; ++t) {
    pos_off.push_back(static_cast<std::int32_t>(pos_rows.size()));
    pos_dest.push_back(sl.begin + t);
    for (int q = 0; q < sl.batch; ++q) pos_rows.push_back(q * sl.len + t);
  }
  pos_off.push_back(n);
  // One upload: [tok_off | order | tok_dest | pos_off | pos_rows | pos_dest].
  std::vector<std::int32_t> all;
  std::vector<std::size_t> start;
  for (const auto* v : {&tok_off, &order, &tok_dest, &pos_off, &pos_rows, &pos_dest}) {
    start.push_back(all.size());
    all.insert(all.end(), v->begin(), v->end());
  }
  upload_ids(all);
  const std::int32_t* d = ids_.as<std::int32_t>();
  cuda::scatter_add_rows(ctx_->dt, dx.data(), d + start[0], d + start[1], d + start[2],
                         static_cast<int>(tok_dest.size()), P.g(E.tok), m.layer.hidden, ctx_->stream);
  cuda::scatter_add_rows(ctx_->dt, dx.data(), d + start[3], d + start[4], d + start[5],
                         static_cast<int>(pos_dest.size()), P.g(E.pos), m.layer.hidden, ctx_->stream);
}

void CudaBackend::head_forward(const Params& head, const Tensor& xt, const std::vector<std::int32_t>& targets,
                               const Slice& sl, double loss_norm, double loss_scale, Record& recb) {
  const auto& P = module(head, ModuleKind::kHead, "head_forward");
  const auto& x = as<const CudaTensor>(xt, "head_forward x");
  auto& r = as<CudaRecord>(recb, "head_forward record");
  const ModelShape& m = P.shape();
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab, n = sl.rows();
  check_shape("head_forward x", x, n, h);
  check_ids("head_forward targets", targets, sl, -1, V);
  if (!(loss_norm > 0)) throw KernelError("head_forward: loss_norm must be positive (target count of the batch)");
  if (r.has_hda)
    throw KernelError("head_forward: the record's weight gradients are pending (run head_backward_weight first)");
  const DType dt = ctx_->dt;
  cudaStream_t st = ctx_->stream;
  const std::size_t nz = n;
  for (DeviceBuffer* b : {&r.hx, &r.ha}) b->reserve(2 * nz * h);
  r.dlogits.reserve(2 * nz * V);
  for (DeviceBuffer* b : {&r.hmu, &r.hrstd, &r.row_loss}) b->reserve(4 * nz);
  r.targets.reserve(4 * nz);
  logits_.reserve(4 * nz * V);

  CUDA_CHECK(cudaMemcpyAsync(r.hx.as(), x.data(), 2 * nz * h, cudaMemcpyDeviceToDevice, st));
  CUDA_CHECK(cudaMemcpyAsync(r.targets.as(), targets.data(), 4 * nz, cudaMemcpyHostToDevice, st));
  cuda::layer_norm_forward(dt, x.data(), P.f(H.lnf_g), P.f(H.lnf_b), r.ha.as(), r.hmu.as<float>(), r.hrstd.as<float>(),
                           n, h, st);
  gemm(false, false, n, V, h, 1.f, lp(r.ha.as(), h), lp(P.w(H.w_vocab), V), 0.f, logits_.as(), CUDA_R_32F, V);
  cuda::cross_entropy(dt, logits_.as<float>(), r.targets.as<std::int32_t>(), r.dlogits.as(), r.row_loss.as<float>(),
                      static_cast<float>(loss_scale / loss_norm), n, V, st);
  r.head_slice = sl;
  r.loss_norm = loss_norm;
  r.has_head = true;
}

double CudaBackend::head_loss(const Record& recb) {
  const auto& r = as<const CudaRecord>(recb, "head_loss record");
  if (!r.has_head) throw KernelError("head_loss: the record holds no head forward");
  const std::vector<double> rows = ctx_->download_f32(r.row_loss.as<float>(), r.head_slice.rows());
  double sum = 0;
  for (double v : rows) sum += v;  // fixed order: deterministic
  return sum / r.loss_norm;
}

void CudaBackend::accumulate_loss(const Record& recb) {
  const auto& r = as<const CudaRecord>(recb, "accumulate_loss record");
  if (!r.has_head) throw KernelError("accumulate_loss: the record holds no head forward");
  const std::size_t n = static_cast<std::size_t>(r.head_slice.rows());
  LossRows& l = loss_rows_.emplace_back();
  try {  // an entry is complete or absent: take_loss must not read a half-made one
    l.rows.bind(&ctx_->cache);
    l.rows.reserve(n * sizeof(float));
    CUDA_CHECK(
        cudaMemcpyAsync(l.rows.as(), r.row_loss.as(), n * sizeof(float), cudaMemcpyDeviceToDevice, ctx_->stream));
  } catch (...) {
    loss_rows_.pop_back();
    throw;
  }
  l.n = n;
  l.loss_norm = r.loss_norm;
}

double CudaBackend::take_loss() {
  std::deque<LossRows> rows_of_slices;
  rows_of_slices.swap(loss_rows_);  // cleared whatever happens below
  double total = 0;
  for (const LossRows& l : rows_of_slices) {  // as head_loss, slice by slice in order: deterministic
    const std::vector<double> rows = ctx_->download_f32(l.rows.as<float>(), l.n);  // the first waits for the stream
    double sum = 0;
    for (double v : rows) sum += v;
    total += sum / l.loss_norm;
  }
  return total;  // the buffers go back to the cache
}

void CudaBackend::head_backward(Params& head, const Record& recb, Tensor& dxt) {
  auto& P = module(head, ModuleKind::kHead, "head_backward");
  const auto& r = as<const CudaRecord>(recb, "head_backward record");
  auto& dx = as<CudaTensor>(dxt, "head_backward dx");
  if (!r.has_head) throw KernelError("head_backward: the record holds no head forward");
  if (r.has_hda) throw KernelError("head_backward: the record's backward for inputs already ran (its W is pending)");
  th1_.reserve(2 * static_cast<std::size_t>(r.head_slice.rows()) * P.shape().layer.hidden);
  head_input(P, r, th1_.as(), dx);
  head_weight(P, r, th1_.as());
}

void CudaBackend::head_backward_input(const Params& head, Record& recb, Tensor& dxt) {
  const auto& P = module(head, ModuleKind::kHead, "head_backward_input");
  auto& r = as<CudaRecord>(recb, "head_backward_input record");
  auto& dx = as<CudaTensor>(dxt, "head_backward_input dx");
  if (!r.has_head) throw KernelError("head_backward_input: the record holds no head forward");
  if (r.has_hda) throw KernelError("head_backward_input: already ran for this record (its W is pending)");
  r.hda.reserve(2 * static_cast<std::size_t>(r.head_slice.rows()) * P.shape().layer.hidden);
  head_input(P, r, r.hda.as(), dx);
  r.has_hda = true;
}

void CudaBackend::head_backward_weight(Params& head, Record& recb) {
  auto& P = module(head, ModuleKind::kHead, "head_backward_weight");
  auto& r = as<CudaRecord>(recb, "head_backward_weight record");
  if (!r.has_head || !r.has_hda)
    throw KernelError("head_backward_weight: the record holds no backward for inputs (run head_backward_input)");
  head_weight(P, r, r.hda.as());
  r.release();  // consumed (the slice's loss rows were copied by accumulate_loss at the forward)
}

// da (16-bit [n, h]) = dlogits W_vocab^T, the gradient w.r.t. the final LN's output; dx = its LN backward.
void CudaBackend::head_input(const CudaParams& P, const CudaRecord& r, void* da, CudaTensor& dx) {
  const ModelShape& m = P.shape();
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab, n = r.head_slice.rows();
  dx.resize(n, h);
  gemm(false, true, n, h, V, 1.f, lp(r.dlogits.as(), V), lp(P.w(H.w_vocab), V), 0.f, da, lpt(), h);
  cuda::layer_norm_backward_input(ctx_->dt, r.hx.as(), r.hmu.as<float>(), r.hrstd.as<float>(), P.f(H.lnf_g), da,
                                  nullptr, dx.data(), n, h, ctx_->stream);
}

// The LM head's and the final LN's gradients from the record and da.
void CudaBackend::head_weight(CudaParams& P, const CudaRecord& r, const void* da) {
  const ModelShape& m = P.shape();
  const HeadLayout H = HeadLayout::of(m);
  const int h = m.layer.hidden, V = m.vocab, n = r.head_slice.rows();
  red_.reserve(2 * sizeof(float) * cuda::reduce_workspace_floats(n, h));
  gemm(true, false, h, V, n, 1.f, lp(r.ha.as(), h), lp(r.dlogits.as(), V), 1.f, P.g(H.w_vocab), CUDA_R_32F, V);
  cuda::layer_norm_backward_params(ctx_->dt, r.hx.as(), r.hmu.as<float>(), r.hrstd.as<float>(), da, P.g(H.lnf_g),
                                   P.g(H.lnf_b), n, h, red_.as<float>(), ctx_->stream);
}

void CudaBackend::adam_step(Params& p, const AdamConfig& cfg, int step) {
  auto& P = as<CudaParams>(p, "adam_step");
  if (step < 1) throw KernelError("adam_step: step counts from 1, got " + std::to_string(step));
  const double c1 = 1.0 - std::pow(cfg.beta1, step), c2 = 1.0 - std::pow(cfg.beta2, step);
  cuda::adam(ctx_->dt, P.master(), P.grad(), P.moment1(), P.moment2(), P.lp(), P.size(), static_cast<float>(cfg.lr),
             static_cast<float>(cfg.beta1), static_cast<float>(cfg.beta2), static_cast<float>(cfg.eps),
             static_cast<float>(cfg.weight_decay), static_cast<float>(cfg.grad_scale), static_cast<float>(c1),
             static_cast<float>(c2), ctx_->stream);
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(DType dtype, int device) {
  return std::make_unique<CudaBackend>(dtype, device);
}

bool built_with_cuda() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

int cuda_compute_capability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

}  // namespace pipescope::kernels
