#include "core/model/kernel_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pipescope {

const char* to_string(MemoryKernel k) {
  switch (k) {
    case MemoryKernel::LayerNorm:
      return "layernorm";
    case MemoryKernel::LayerNormBackward:
      return "layernorm_backward";
    case MemoryKernel::Gelu:
      return "gelu";
    case MemoryKernel::GeluBackward:
      return "gelu_backward";
    case MemoryKernel::Add:
      return "add";
    case MemoryKernel::ColumnSum:
      return "column_sum";
    case MemoryKernel::Copy:
      return "copy";
    case MemoryKernel::Softmax:
      return "softmax";
  }
  return "?";
}

MemoryKernel memory_kernel_of(const std::string& name) {
  for (int i = 0; i < kMemoryKernels; i++)
    if (name == to_string(static_cast<MemoryKernel>(i))) return static_cast<MemoryKernel>(i);
  throw std::invalid_argument("unknown memory kernel class '" + name +
                              "' (layernorm, layernorm_backward, gelu, gelu_backward, add, column_sum, copy, softmax)");
}

double memory_bytes(MemoryKernel k, double rows, double cols, int e) {
  const double x = rows * cols * e;
  switch (k) {
    case MemoryKernel::LayerNorm:
    case MemoryKernel::Gelu:
    case MemoryKernel::Copy:
    case MemoryKernel::Softmax:
      return 2 * x;  // read one, write one
    case MemoryKernel::GeluBackward:
    case MemoryKernel::Add:
      return 3 * x;  // read two, write one
    case MemoryKernel::LayerNormBackward:
      return 4 * x;  // read x, dy, dx; write dx
    case MemoryKernel::ColumnSum:
      return x;  // read rows; the n sums stay in cache
  }
  return x;
}

double GemmModel::seconds(double m, double n, double k) const {
  return fixed_s + 2.0 * (m * n * k + k0 * m * n + n0 * m * k + m0 * n * k) / rate_flops;
}

// ---------------------------------------------------------------- decomposition

namespace {

KernelCall gemm(double m, double k, double n) {
  KernelCall c;
  c.kind = KernelCall::Kind::Gemm;
  c.m = m;
  c.n = n;
  c.k = k;
  return c;
}
KernelCall mem(MemoryKernel kind, double bytes) {
  KernelCall c;
  c.kind = KernelCall::Kind::Memory;
  c.mem = kind;
  c.bytes = bytes;
  return c;
}
KernelCall attention(int reps, int l, int keys, int d, bool backward) {
  KernelCall c;
  c.kind = KernelCall::Kind::Attention;
  c.reps = reps;
  c.l = l;
  c.keys = keys;
  c.head_dim = d;
  c.backward = backward;
  return c;
}

struct Dims {
  double T, h, w, f;  // token rows, hidden, attention width and MLP width on this device
  int reps, d;        // (sequence, head) pairs on this device, head dimension
};
Dims dims(const ModelSpec& m, int t, int b, int l) {
  if (t < 1 || b < 1 || l < 1 || m.hidden < 1 || m.heads < 1 || m.heads % t != 0 || m.hidden % m.heads != 0)
    throw std::invalid_argument("kernel model: needs b, l >= 1, heads dividing hidden and t dividing heads");
  return Dims{static_cast<double>(b) * l,
              static_cast<double>(m.hidden),
              static_cast<double>(m.hidden) / t,
              static_cast<double>(m.ffn_hidden) / t,
              b * (m.heads / t),
              m.hidden / m.heads};
}

}  // namespace

std::vector<KernelCall> layer_forward_calls(const ModelSpec& m, int t, int e, int b, int l, int c) {
  const Dims D = dims(m, t, b, l);
  const double T = D.T, h = D.h, w = D.w, f = D.f;
  using MK = MemoryKernel;
  return {
      mem(MK::Copy, memory_bytes(MK::Copy, T, h, e)),            // record of the input
      mem(MK::LayerNorm, memory_bytes(MK::LayerNorm, T, h, e)),  // LN 1
      gemm(T, h, 3 * w),                                         // QKV
      mem(MK::Add, memory_bytes(MK::Copy, T, 3 * w, e)),         // bias (row broadcast: read + write)
      mem(MK::Copy, memory_bytes(MK::Copy, T, 3 * w, e)),        // K/V into the cache, zeroed dK/dV, context
      attention(D.reps, l, c + l, D.d, false),                   // scores, causal softmax, weighted sum
      gemm(T, w, h),                                             // output projection
      mem(MK::Add, memory_bytes(MK::Copy, T, h, e)),             // bias
      mem(MK::Add, memory_bytes(MK::Add, T, h, e)),              // residual
      mem(MK::LayerNorm, memory_bytes(MK::LayerNorm, T, h, e)),  // LN 2
      gemm(T, h, f),                                             // MLP up
      mem(MK::Add, memory_bytes(MK::Copy, T, f, e)),             // bias
      mem(MK::Gelu, memory_bytes(MK::Gelu, T, f, e)),            // GeLU
      gemm(T, f, h),                                             // MLP down
      mem(MK::Add, memory_bytes(MK::Copy, T, h, e)),             // bias
      mem(MK::Add, memory_bytes(MK::Add, T, h, e)),              // residual
  };
}

std::vector<KernelCall> layer_backward_calls(const ModelSpec& m, int t, int e, int b, int l, int c) {
  const Dims D = dims(m, t, b, l);
  const double T = D.T, h = D.h, w = D.w, f = D.f;
  using MK = MemoryKernel;
  return {
      gemm(f, T, h),                                                             // MLP down wgrad
      mem(MK::ColumnSum, memory_bytes(MK::ColumnSum, T, h, e)),                  // its bias
      gemm(T, h, f),                                                             // MLP down dgrad
      mem(MK::GeluBackward, memory_bytes(MK::GeluBackward, T, f, e)),            // GeLU backward
      gemm(h, T, f),                                                             // MLP up wgrad
      mem(MK::ColumnSum, memory_bytes(MK::ColumnSum, T, f, e)),                  // its bias
      gemm(T, f, h),                                                             // MLP up dgrad
      mem(MK::Copy, memory_bytes(MK::Copy, T, h, e)),                            // residual gradient
      mem(MK::LayerNormBackward, memory_bytes(MK::LayerNormBackward, T, h, e)),  // LN 2 backward
      gemm(w, T, h),                                                             // projection wgrad
      mem(MK::ColumnSum, memory_bytes(MK::ColumnSum, T, h, e)),                  // its bias
      gemm(T, h, w),                                                             // projection dgrad
      attention(D.reps, l, c + l, D.d, true),                                    // dV, dP, softmax bwd, dQ, dK
      mem(MK::Copy, memory_bytes(MK::Copy, T, 2 * w, e)),                        // dK/dV out of the cache
      gemm(h, T, 3 * w),                                                         // QKV wgrad
      mem(MK::ColumnSum, memory_bytes(MK::ColumnSum, T, 3 * w, e)),              // its bias
      gemm(T, 3 * w, h),                                                         // QKV dgrad
      mem(MK::Copy, memory_bytes(MK::Copy, T, h, e)),                            // residual gradient
      mem(MK::LayerNormBackward, memory_bytes(MK::LayerNormBackward, T, h, e)),  // LN 1 backward
  };
}

std::vector<KernelCall> embedding_calls(const ModelSpec& m, int e, int b, int l, bool forward) {
  const double T = static_cast<double>(b) * l, h = m.hidden;
  using MK = MemoryKernel;
  if (forward) return {mem(MK::Add, memory_bytes(MK::Add, T, h, e))};  // token row + position row
  return {mem(MK::Add, 2 * memory_bytes(MK::Add, T, h, e))};           // scatter-add into both tables
}

std::vector<KernelCall> head_calls(const ModelSpec& m, int e, int b, int l, bool forward) {
  const double T = static_cast<double>(b) * l, h = m.hidden, V = m.vocab;
  using MK = MemoryKernel;
  if (forward)
    return {mem(MK::Copy, memory_bytes(MK::Copy, T, h, e)), mem(MK::LayerNorm, memory_bytes(MK::LayerNorm, T, h, e)),
            gemm(T, h, V), mem(MK::Copy, memory_bytes(MK::Copy, T, V, e) / 2),
            mem(MK::Softmax, memory_bytes(MK::Softmax, T, V, e))};
  return {gemm(h, T, V), gemm(T, V, h), mem(MK::Copy, memory_bytes(MK::Copy, T, h, e) / 2),
          mem(MK::LayerNormBackward, memory_bytes(MK::LayerNormBackward, T, h, e))};
}

// ---------------------------------------------------------------- model

KernelModel::KernelModel(KernelFits f) : f_(std::move(f)) {
  if (!(f_.gemm.rate_flops > 0)) throw std::invalid_argument("kernel model: no GEMM fit");
  if (f_.attention.empty()) throw std::invalid_argument("kernel model: no attention fit");
  for (const MemoryModel& mm : f_.memory) mem_[static_cast<std::size_t>(mm.kind)] = &mm;
  for (int i = 0; i < kMemoryKernels; i++)
    if (!mem_[static_cast<std::size_t>(i)])
      throw std::invalid_argument(std::string("kernel model: no fit for memory kernel class ") +
                                  to_string(static_cast<MemoryKernel>(i)));
  if (!(f_.layer_in_situ_fwd > 0 && f_.layer_in_situ_bwd > 0 && std::isfinite(f_.layer_in_situ_fwd) &&
        std::isfinite(f_.layer_in_situ_bwd)))
    throw std::invalid_argument("kernel model: the in-situ factors must be positive and finite");
}

double KernelModel::attention_seconds(const KernelCall& k) const {
  const auto& fits = f_.attention;
  auto eval = [&](const AttentionModel& a, double scale) {
    const auto& c = k.backward ? a.bwd : a.fwd;
    return c[0] + scale * (c[1] * k.l + c[2] * static_cast<double>(k.l) * k.keys);
  };
  const double d = k.head_dim;
  if (d <= fits.front().head_dim) return eval(fits.front(), d / fits.front().head_dim);
  if (d >= fits.back().head_dim) return eval(fits.back(), d / fits.back().head_dim);
  for (std::size_t i = 1; i < fits.size(); i++)
    if (d <= fits[i].head_dim) {
      const double x = (d - fits[i - 1].head_dim) / (fits[i].head_dim - fits[i - 1].head_dim);
      return (1 - x) * eval(fits[i - 1], 1.0) + x * eval(fits[i], 1.0);
    }
  return eval(fits.back(), 1.0);
}

double KernelModel::seconds(const KernelCall& k) const {
  switch (k.kind) {
    case KernelCall::Kind::Gemm:
      return f_.gemm.seconds(k.m, k.n, k.k);
    case KernelCall::Kind::Attention:
      return k.reps * attention_seconds(k);
    case KernelCall::Kind::Memory:
      return mem_[static_cast<std::size_t>(k.mem)]->seconds(k.bytes);
  }
  return 0;
}

double KernelModel::seconds(const std::vector<KernelCall>& ks) const {
  double s = 0;
  for (const KernelCall& k : ks) s += seconds(k);
  return s;
}

double KernelModel::layer_seconds(const std::vector<KernelCall>& ks, bool backward) const {
  return seconds(ks) * (backward ? f_.layer_in_situ_bwd : f_.layer_in_situ_fwd);
}

}  // namespace pipescope
