#pragma once
// The device-neutral kernels API the validation runtime drives: a Backend creates tensors, parameter
// sets, K/V caches and activation records on its device and runs the layer / embedding / head / Adam
// operations on them. Two implementations: the CPU reference (f64 or f32, kernels/reference.h) and CUDA
// (f16 or bf16 storage, fp32 accumulation and fp32 master weights, kernels/cuda_backend.cc).
//
// Objects are only valid with the backend that created them (mixing throws KernelError). Operations are
// enqueued in order on the backend's stream (CUDA) and may return before they finish; the calls that
// hand data to the host (download, get, grads, head_loss) synchronize.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/layer.h"

namespace pipescope::kernels {

// A row-major [rows, cols] matrix in the backend's activation dtype: a slice's activations or their
// gradient, the unit sent between pipeline stages.
class Tensor {
 public:
  virtual ~Tensor() = default;
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  DType dtype() const { return dtype_; }
  std::size_t bytes() const { return static_cast<std::size_t>(rows_) * cols_ * dtype_bytes(dtype_); }
  // Changes the shape; storage grows when needed and the contents are then undefined.
  virtual void resize(int rows, int cols) = 0;
  virtual void* data() = 0;  // device pointer (CUDA) or host pointer (CPU), e.g. for a p2p send
  virtual const void* data() const = 0;
  virtual void upload(const std::vector<double>& host) = 0;  // rows * cols values, converted
  virtual std::vector<double> download() const = 0;

 protected:
  int rows_ = 0, cols_ = 0;
  DType dtype_ = DType::kF64;
};

// Parameters of one module (a layer, the embedding, or the head) with their gradients and Adam moments,
// all in the flat layout of kernels/layer.h. The CUDA backend keeps fp32 master weights, fp32 gradients
// and moments, and a 16-bit copy of the weights for the GEMMs.
class Params {
 public:
  virtual ~Params() = default;
  ModuleKind kind() const { return kind_; }
  const ModelShape& shape() const { return shape_; }
  std::size_t size() const { return size_; }
  virtual void set(const std::vector<double>& values) = 0;  // also resets the Adam moments
  virtual std::vector<double> get() const = 0;
  virtual std::vector<double> grads() const = 0;
  virtual void zero_grads() = 0;
  // Gradient storage for an in-place data-parallel all-reduce: size() elements of grad_dtype().
  virtual void* grad_data() = 0;
  virtual DType grad_dtype() const = 0;
  // Parameter storage (size() elements of grad_dtype()) for the distributed optimizer's in-place parameter
  // all-gather; nullptr where the backend has no host copy to exchange (the caller refuses then).
  virtual void* param_data() { return nullptr; }

 protected:
  ModuleKind kind_ = ModuleKind::kLayer;
  ModelShape shape_;
  std::size_t size_ = 0;
};

// K/V of one (micro-batch, layer), at full sequence length, and the dK/dV accumulated by backward.
class KVCache {
 public:
  virtual ~KVCache() = default;
  const KVState& state() const { return state_; }
  void reset() { state_.reset(); }
  void rewind(int len) { state_.rewind(len); }  // see KVState::rewind (calibration)

 protected:
  KVState state_;
};

// What a backward needs from its forward, for one (micro-batch, slice, module). Reusable: a forward
// overwrites it, growing its storage when needed; release() frees the storage.
class Record {
 public:
  virtual ~Record() = default;
  virtual void release() = 0;
};

// Timestamps of a sequence of operations on the backend's own timeline: CUDA events recorded on the backend's
// stream (the GPU's time, so asynchronous launches are not mistaken for work) or the host's steady clock on
// the CPU backends. The runtime takes a mark before and after each op and reads them at the end of the iteration.
class OpTimer {
 public:
  virtual ~OpTimer() = default;
  // True when marks are device events (mark() returns before the work it times has run).
  virtual bool on_device() const = 0;
  // Forgets earlier marks; t = 0 is this call (on a device: an event recorded now on the stream).
  virtual void begin() = 0;
  // A timestamp after everything enqueued so far; returns its index (0, 1, ... since begin()).
  virtual int mark() = 0;
  // Seconds since begin() of every mark, in order. On a device it waits for the last mark.
  virtual std::vector<double> resolve() = 0;
};

// The host steady clock (the CPU backends' and the default OpTimer).
std::unique_ptr<OpTimer> make_host_op_timer();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // e.g. "cpu-f64", "cuda-bf16 NVIDIA H100 80GB HBM3 (sm_90)"
  virtual DType dtype() const = 0;       // activation dtype

  virtual std::unique_ptr<Tensor> tensor(int rows, int cols) = 0;
  virtual std::unique_ptr<Params> params(ModuleKind kind, const ModelShape& shape) = 0;
  virtual std::unique_ptr<KVCache> kv_cache(const LayerShape& shape, int batch, int max_len) = 0;
  virtual std::unique_ptr<Record> record() = 0;

  // y (resized to [b * l, hidden]) = layer(x) for the slice; appends the slice's K/V to `kv`.
  virtual void layer_forward(const Params& layer, const Tensor& x, const Slice& slice, KVCache& kv, Record& rec,
                             Tensor& y) = 0;
  // Backward of the slice recorded in `rec` (slices of a micro-batch in reverse order): adds the layer's
  // parameter gradients, adds dK/dV of earlier tokens into `kv`, writes dx (resized).
  virtual void layer_backward(Params& layer, const Record& rec, KVCache& kv, const Tensor& dy, Tensor& dx) = 0;
  // The same backward split in two (zero-bubble I and W). layer_backward_input is layer_backward without the
  // parameter gradients: it writes dx and adds dK/dV into `kv` (making the same TP all-reduces) and keeps in `rec`
  // the output gradients of the layer's weight GEMMs, freeing what only it needed (attention probabilities).
  // layer_backward_weight then adds every parameter gradient of the layer (no TP communication) and frees the
  // record's storage; the record then holds no forward. I then W adds the same gradients as layer_backward (bitwise
  // on the CPU); a W may run any time after its I, but `rec` must not be reused in between.
  virtual void layer_backward_input(const Params& layer, Record& rec, KVCache& kv, const Tensor& dy, Tensor& dx) = 0;
  virtual void layer_backward_weight(Params& layer, Record& rec) = 0;

  // An MoE layer (kernels/README.md "Mixture of experts"; `layer` of a LayerShape with moe(), `experts` its kExperts
  // module of this expert-parallel rank): layer_forward's attention block and shared experts plus the routed
  // experts, whose tokens move through set_ep_all_to_all's exchange (3 calls forward, 2 backward, in the same order
  // on every member of the group). No split backward. Backends without MoE kernels throw KernelError.
  virtual void moe_layer_forward(const Params& layer, const Params& experts, const Tensor& x, const Slice& slice,
                                 KVCache& kv, Record& rec, Tensor& y) {
    (void)layer, (void)experts, (void)x, (void)slice, (void)kv, (void)rec, (void)y;
    throw KernelError(name() + ": this backend has no mixture-of-experts layer");
  }
  virtual void moe_layer_backward(Params& layer, Params& experts, const Record& rec, KVCache& kv, const Tensor& dy,
                                  Tensor& dx) {
    (void)layer, (void)experts, (void)rec, (void)kv, (void)dy, (void)dx;
    throw KernelError(name() + ": this backend has no mixture-of-experts layer");
  }

  // First stage: x = token embedding + position embedding (positions begin..end-1). tokens: [b * l].
  virtual void embedding_forward(const Params& emb, const std::vector<std::int32_t>& tokens, const Slice& slice,
                                 Tensor& x) = 0;
  // All of it is weight gradient (no input gradient): a split backward runs it as the W half.
  virtual void embedding_backward(Params& emb, const std::vector<std::int32_t>& tokens, const Slice& slice,
                                  const Tensor& dx) = 0;

  // Last stage: final LayerNorm, untied LM head, cross-entropy against targets (< 0 ignored). The slice's
  // loss is sum(CE) / loss_norm, loss_norm = target count of the whole global batch; gradients are those of
  // loss_scale * loss. head_loss() returns the slice's (unscaled) loss.
  virtual void head_forward(const Params& head, const Tensor& x, const std::vector<std::int32_t>& targets,
                            const Slice& slice, double loss_norm, double loss_scale, Record& rec) = 0;
  virtual double head_loss(const Record& rec) = 0;
  // The same loss, added to a running sum without waiting for the device; take_loss() returns the sum of the
  // slices since the last call, in the order they were added, and waits once. On a GPU, head_loss per slice
  // would stall the host at every last-stage forward and stop it from queueing the next kernels.
  virtual void accumulate_loss(const Record& rec) { pending_loss_ += head_loss(rec); }
  virtual double take_loss() {
    const double l = pending_loss_;
    pending_loss_ = 0;
    return l;
  }
  virtual void head_backward(Params& head, const Record& rec, Tensor& dx) = 0;
  // Split like the layer's: the input half writes dx (LM head and final LayerNorm backward to the input) and keeps
  // the final LN's output gradient; the weight half adds the head's and the final LN's gradients and frees the record.
  virtual void head_backward_input(const Params& head, Record& rec, Tensor& dx) = 0;
  virtual void head_backward_weight(Params& head, Record& rec) = 0;

  // One bias-corrected Adam step (step >= 1) on the module's accumulated gradients.
  virtual void adam_step(Params& p, const AdamConfig& cfg, int step) = 0;
  // The same step on parameters [begin, end) only: the distributed optimizer's shard (ZeRO-1). Adam is
  // element-wise, so the shards of all replicas together give adam_step's result exactly. Backends without it
  // throw KernelError.
  virtual void adam_step_shard(Params& p, const AdamConfig& cfg, int step, std::size_t begin, std::size_t end) {
    (void)p, (void)cfg, (void)step, (void)begin, (void)end;
    throw KernelError("this backend has no sharded optimizer step (training.distributed_optimizer)");
  }

  virtual void synchronize() = 0;
  virtual void* stream() = 0;  // the cudaStream_t operations run on; nullptr on the CPU
  // A timer for this backend's operations (CUDA events on stream() for CUDA; the host clock otherwise).
  virtual std::unique_ptr<OpTimer> op_timer() { return make_host_op_timer(); }

  // The all-reduce over a layer's tensor-parallel shards (kernels/layer.h TpAllReduce), needed by
  // layer_forward / layer_backward on parameters of a LayerShape with tp > 1; the kernels know nothing about
  // the transport. Set it before the first such call; one TP group per backend.
  void set_tp_all_reduce(TpAllReduce f) { tp_all_reduce_ = std::move(f); }
  // The all-to-all over an MoE layer's expert-parallel group (kernels/layer.h EpAllToAll), needed by the MoE layer
  // kernels when ep > 1 (with ep = 1 and none set, the rows stay on this backend). One group per backend.
  void set_ep_all_to_all(EpAllToAll f) { ep_all_to_all_ = std::move(f); }

 protected:
  TpAllReduce tp_all_reduce_;
  EpAllToAll ep_all_to_all_;
  double pending_loss_ = 0;  // accumulate_loss's sum on backends that read the loss at once
};

// dtype kF64 or kF32.
std::unique_ptr<Backend> make_cpu_backend(DType dtype);
// dtype kF16 or kBF16 (bf16 needs compute capability >= 8.0). Throws KernelError when pipescope was built
// without CUDA, and CudaError when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(DType dtype, int device = 0);
bool built_with_cuda();
// Number of usable CUDA devices; 0 when built without CUDA or when cudaGetDeviceCount fails.
int cuda_device_count();
// Compute capability as major * 10 + minor; 0 when unavailable.
int cuda_compute_capability(int device = 0);

}  // namespace pipescope::kernels
