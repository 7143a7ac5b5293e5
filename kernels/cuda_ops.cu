// Device kernels of the CUDA backend and their thin launchers (declared in kernels/cuda_ops.h).
// Storage is fp16 or bf16, all arithmetic fp32. bf16 only goes through __bfloat162float / __float2bfloat16,
// which every architecture provides, so nothing here needs sm_80 bf16 arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/cuda_ops.h"

namespace pipescope::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // block size of the row kernels (a multiple of 32)
constexpr int kRowChunk = 32;  // rows per partial sum of the column reductions

__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float gelu_f(float u) {
  const float k = 0.7978845608028654f, a = 0.044715f;
  return 0.5f * u * (1.f + tanhf(k * (u + a * u * u * u)));
}
__device__ __forceinline__ float gelu_grad_f(float u) {
  const float k = 0.7978845608028654f, a = 0.044715f;
  const float t = tanhf(k * (u + a * u * u * u));
  return 0.5f * (1.f + t) + 0.5f * u * (1.f - t * t) * k * (1.f + 3.f * a * u * u);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reduction; every thread gets the result. Safe to call repeatedly in one kernel.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // the previous call's readers of sh[0] are done
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = lane < nw ? sh[lane] : (kMax ? -INFINITY : 0.f);
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

int blocks_for(std::size_t n, int threads = kThreads) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535u * 32u ? b : 65535u * 32u);  // grid-stride loops cover the rest
}

// Grid-stride loop over [0, n).
#define PIPESCOPE_GRID_LOOP(i, n)                                                   \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::size_t(gridDim.x) * blockDim.x)

#define PIPESCOPE_DISPATCH(dt, ...)                                                                 \
  switch (dt) {                                                                                     \
    case DType::kF16: {                                                                             \
      using T = __half;                                                                             \
      __VA_ARGS__;                                                                                  \
      break;                                                                                        \
    }                                                                                               \
    case DType::kBF16: {                                                                            \
      using T = __nv_bfloat16;                                                                      \
      __VA_ARGS__;                                                                                  \
      break;                                                                                        \
    }                                                                                               \
    case DType::kF64:                                                                               \
    case DType::kF32:                                                                               \
      throw KernelError(std::string("CUDA kernels: dtype ") + dtype_name(dt) + " is not f16/bf16"); \
  }

// ---------------------------------------------------------------- element-wise

template <class T>
__global__ void k_from_f32(const float* src, T* dst, std::size_t n) {
  PIPESCOPE_GRID_LOOP(i, n)
  dst[i] = from_f<T>(src[i]);
}
template <class T>
__global__ void k_to_f32(const T* src, float* dst, std::size_t n) {
  PIPESCOPE_GRID_LOOP(i, n)
  dst[i] = to_f(src[i]);
}

template <class T>
__global__ void k_add_bias(T* y, const float* b, std::size_t n, int cols) {
  PIPESCOPE_GRID_LOOP(i, n)
  y[i] = from_f<T>(to_f(y[i]) + b[i % cols]);
}

template <class T>
__global__ void k_bias_residual(const T* z, const float* b, const T* r, T* y, std::size_t n, int cols) {
  PIPESCOPE_GRID_LOOP(i, n)
  y[i] = from_f<T>(to_f(z[i]) + b[i % cols] + to_f(r[i]));
}

template <class T>
__global__ void k_bias_gelu(T* u, const float* b, T* g, std::size_t n, int cols) {
  PIPESCOPE_GRID_LOOP(i, n) {
    // Round u first so that backward's gelu'(u) sees the same u as the forward's gelu(u).
    const T uq = from_f<T>(to_f(u[i]) + b[i % cols]);
    u[i] = uq;
    g[i] = from_f<T>(gelu_f(to_f(uq)));
  }
}

template <class T>
__global__ void k_gelu_backward(const T* dg, const T* u, T* du, std::size_t n) {
  PIPESCOPE_GRID_LOOP(i, n)
  du[i] = from_f<T>(to_f(dg[i]) * gelu_grad_f(to_f(u[i])));
}

// ---------------------------------------------------------------- LayerNorm (one block per row)

template <class T>
__global__ void k_ln_forward(const T* x, const float* g, const float* b, T* y, float* mu, float* rstd, int cols) {
  const std::size_t row = blockIdx.x;
  const T* xr = x + row * cols;
  float s = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += to_f(xr[j]);
  const float m = block_reduce<false>(s) / cols;
  float q = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float d = to_f(xr[j]) - m;
    q += d * d;
  }
  const float rs = rsqrtf(block_reduce<false>(q) / cols + static_cast<float>(kLayerNormEps));
  T* yr = y + row * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = from_f<T>((to_f(xr[j]) - m) * rs * g[j] + b[j]);
  if (threadIdx.x == 0) {
    mu[row] = m;
    rstd[row] = rs;
  }
}

template <class T>
__global__ void k_ln_backward_input(const T* x, const float* mu, const float* rstd, const float* g, const T* dy,
                                    const T* resid, T* dx, int cols) {
  const std::size_t row = blockIdx.x;
  const std::size_t o = row * cols;
  const float m = mu[row], rs = rstd[row];
  float s1 = 0, s2 = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float dxh = to_f(dy[o + j]) * g[j];
    s1 += dxh;
    s2 += dxh * (to_f(x[o + j]) - m) * rs;
  }
  const float mean1 = block_reduce<false>(s1) / cols;
  const float mean2 = block_reduce<false>(s2) / cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (to_f(x[o + j]) - m) * rs;
    const float dxh = to_f(dy[o + j]) * g[j];
    const float r = resid ? to_f(resid[o + j]) : 0.f;
    dx[o + j] = from_f<T>(r + rs * (dxh - mean1 - xh * mean2));
  }
}

// ---------------------------------------------------------------- column reductions (deterministic)

// Partial sums over chunks of kRowChunk rows: part[c * cols + j]. With x != nullptr the LN parameter
// gradients: part_g gets dy * xhat, part_b gets dy.
template <class T>
__global__ void k_colsum_partial(const T* dy, const T* x, const float* mu, const float* rstd, float* part_g,
                                 float* part_b, int rows, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  const int r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
  float sb = 0, sg = 0;
  for (int r = r0; r < r1; ++r) {
    const float d = to_f(dy[std::size_t(r) * cols + j]);
    sb += d;
    if (x) sg += d * (to_f(x[std::size_t(r) * cols + j]) - mu[r]) * rstd[r];
  }
  part_b[std::size_t(blockIdx.y) * cols + j] = sb;
  if (x) part_g[std::size_t(blockIdx.y) * cols + j] = sg;
}

__global__ void k_colsum_final(const float* part, int chunks, int cols, float* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float s = 0;
  for (int c = 0; c < chunks; ++c) s += part[std::size_t(c) * cols + j];
  out[j] += s;
}

// ---------------------------------------------------------------- attention helpers

template <class T>
__global__ void k_kv_store(const T* qkv, T* k, T* v, float* dk, float* dv, int len, int begin, int max_len, int h,
                           std::size_t n) {
  PIPESCOPE_GRID_LOOP(i, n) {
    const int col = static_cast<int>(i % h);
    const std::size_t row = i / h;  // s * len + t
    const int s = static_cast<int>(row / len), t = static_cast<int>(row % len);
    const std::size_t c = (std::size_t(s) * max_len + begin + t) * h + col;
    k[c] = qkv[row * 3 * h + h + col];
    v[c] = qkv[row * 3 * h + 2 * h + col];
    dk[c] = 0.f;
    dv[c] = 0.f;
  }
}

template <class T>
__global__ void k_kv_grad_gather(const float* dk, const float* dv, T* dqkv, int len, int begin, int max_len, int h,
                                 std::size_t n) {
  PIPESCOPE_GRID_LOOP(i, n) {
    const int col = static_cast<int>(i % h);
    const std::size_t row = i / h;
    const int s = static_cast<int>(row / len), t = static_cast<int>(row % len);
    const std::size_t c = (std::size_t(s) * max_len + begin + t) * h + col;
    dqkv[row * 3 * h + h + col] = from_f<T>(dk[c]);
    dqkv[row * 3 * h + 2 * h + col] = from_f<T>(dv[c]);
  }
}

template <class T>
__global__ void k_softmax_forward(const float* scores, T* probs, int len, int begin, int nk) {
  const std::size_t row = blockIdx.x;
  const int valid = begin + static_cast<int>(row % len) + 1;
  const float* s = scores + row * nk;
  T* p = probs + row * nk;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, s[j]);
  mx = block_reduce<true>(mx);
  float sum = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(s[j] - mx);
  const float inv = 1.f / block_reduce<false>(sum);
  for (int j = threadIdx.x; j < nk; j += blockDim.x) p[j] = from_f<T>(j < valid ? expf(s[j] - mx) * inv : 0.f);
}

template <class T>
__global__ void k_softmax_backward(const float* dprobs, const T* probs, T* dscores, float scale, int nk) {
  const std::size_t row = blockIdx.x;
  const float* dp = dprobs + row * nk;
  const T* p = probs + row * nk;
  float s = 0;
  for (int j = threadIdx.x; j < nk; j += blockDim.x) s += dp[j] * to_f(p[j]);
  const float dot = block_reduce<false>(s);
  T* ds = dscores + row * nk;
  for (int j = threadIdx.x; j < nk; j += blockDim.x) ds[j] = from_f<T>(scale * to_f(p[j]) * (dp[j] - dot));
}

// ---------------------------------------------------------------- embedding, loss, Adam

template <class T>
__global__ void k_embedding_forward(const std::int32_t* tokens, const float* tok, const float* pos, T* x, int len,
                                    int begin, int h, std::size_t n) {
  PIPESCOPE_GRID_LOOP(i, n) {
    const int col = static_cast<int>(i % h);
    const std::size_t row = i / h;
    const int t = static_cast<int>(row % len);
    x[i] = from_f<T>(tok[std::size_t(tokens[row]) * h + col] + pos[std::size_t(begin + t) * h + col]);
  }
}

template <class T>
__global__ void k_scatter_add_rows(const T* dx, const std::int32_t* offsets, const std::int32_t* rows,
                                   const std::int32_t* dest, float* table, int h) {
  const int g = blockIdx.x;
  float* out = table + std::size_t(dest[g]) * h;
  for (int col = threadIdx.x; col < h; col += blockDim.x) {
    float s = 0;
    for (int i = offsets[g]; i < offsets[g + 1]; ++i) s += to_f(dx[std::size_t(rows[i]) * h + col]);
    out[col] += s;
  }
}

template <class T>
__global__ void k_cross_entropy(const float* logits, const std::int32_t* targets, T* dlogits, float* loss, float coef,
                                int vocab) {
  const std::size_t row = blockIdx.x;
  const int y = targets[row];
  T* d = dlogits + row * vocab;
  if (y < 0) {  // ignored target: no loss, no gradient (uniform branch for the whole block)
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = from_f<T>(0.f);
    if (threadIdx.x == 0) loss[row] = 0.f;
    return;
  }
  const float* l = logits + row * vocab;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, l[j]);
  mx = block_reduce<true>(mx);
  float s = 0;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(l[j] - mx);
  const float sum = block_reduce<false>(s);
  const float inv = 1.f / sum;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x)
    d[j] = from_f<T>(coef * (expf(l[j] - mx) * inv - (j == y ? 1.f : 0.f)));
  if (threadIdx.x == 0) loss[row] = mx + logf(sum) - l[y];
}

template <class T>
__global__ void k_adam(float* p, const float* g, float* m, float* v, T* lp, std::size_t n, float lr, float b1, float b2,
                       float eps, float wd, float gs, float c1, float c2) {
  PIPESCOPE_GRID_LOOP(i, n) {
    const float gi = g[i] * gs;
    const float mi = b1 * m[i] + (1.f - b1) * gi;
    const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] - lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
    p[i] = pi;
    lp[i] = from_f<T>(pi);
  }
}

}  // namespace

// ---------------------------------------------------------------- launchers

void convert_from_f32(DType dt, const float* src, void* dst, std::size_t n, cudaStream_t st) {
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_from_f32<T><<<blocks_for(n), kThreads, 0, st>>>(src, static_cast<T*>(dst), n));
  CUDA_CHECK_LAUNCH();
}

void convert_to_f32(DType dt, const void* src, float* dst, std::size_t n, cudaStream_t st) {
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_to_f32<T><<<blocks_for(n), kThreads, 0, st>>>(static_cast<const T*>(src), dst, n));
  CUDA_CHECK_LAUNCH();
}

void layer_norm_forward(DType dt, const void* x, const float* g, const float* b, void* y, float* mu, float* rstd,
                        int rows, int cols, cudaStream_t st) {
  if (rows == 0) return;
  PIPESCOPE_DISPATCH(dt, k_ln_forward<T>
                     <<<rows, kThreads, 0, st>>>(static_cast<const T*>(x), g, b, static_cast<T*>(y), mu, rstd, cols));
  CUDA_CHECK_LAUNCH();
}

void layer_norm_backward_input(DType dt, const void* x, const float* mu, const float* rstd, const float* g,
                               const void* dy, const void* resid, void* dx, int rows, int cols, cudaStream_t st) {
  if (rows == 0) return;
  PIPESCOPE_DISPATCH(dt, k_ln_backward_input<T>
                     <<<rows, kThreads, 0, st>>>(static_cast<const T*>(x), mu, rstd, g, static_cast<const T*>(dy),
                                                 static_cast<const T*>(resid), static_cast<T*>(dx), cols));
  CUDA_CHECK_LAUNCH();
}

std::size_t reduce_workspace_floats(int rows, int cols) {
  return static_cast<std::size_t>((rows + kRowChunk - 1) / kRowChunk) * cols;
}

void layer_norm_backward_params(DType dt, const void* x, const float* mu, const float* rstd, const void* dy, float* dg,
                                float* db, int rows, int cols, float* ws, cudaStream_t st) {
  if (rows == 0) return;
  const int chunks = (rows + kRowChunk - 1) / kRowChunk;
  const dim3 grid((cols + kThreads - 1) / kThreads, chunks);
  float* part_g = ws;
  float* part_b = ws + reduce_workspace_floats(rows, cols);
  PIPESCOPE_DISPATCH(
      dt, k_colsum_partial<T><<<grid, kThreads, 0, st>>>(static_cast<const T*>(dy), static_cast<const T*>(x), mu, rstd,
                                                         part_g, part_b, rows, cols));
  CUDA_CHECK_LAUNCH();
  k_colsum_final<<<grid.x, kThreads, 0, st>>>(part_g, chunks, cols, dg);
  CUDA_CHECK_LAUNCH();
  k_colsum_final<<<grid.x, kThreads, 0, st>>>(part_b, chunks, cols, db);
  CUDA_CHECK_LAUNCH();
}

void bias_grad(DType dt, const void* dy, float* db, int rows, int cols, float* ws, cudaStream_t st) {
  if (rows == 0) return;
  const int chunks = (rows + kRowChunk - 1) / kRowChunk;
  const dim3 grid((cols + kThreads - 1) / kThreads, chunks);
  PIPESCOPE_DISPATCH(dt, k_colsum_partial<T><<<grid, kThreads, 0, st>>>(static_cast<const T*>(dy), nullptr, nullptr,
                                                                        nullptr, nullptr, ws, rows, cols));
  CUDA_CHECK_LAUNCH();
  k_colsum_final<<<grid.x, kThreads, 0, st>>>(ws, chunks, cols, db);
  CUDA_CHECK_LAUNCH();
}

void add_bias(DType dt, void* y, const float* b, int rows, int cols, cudaStream_t st) {
  const std::size_t n = std::size_t(rows) * cols;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_add_bias<T><<<blocks_for(n), kThreads, 0, st>>>(static_cast<T*>(y), b, n, cols));
  CUDA_CHECK_LAUNCH();
}

void bias_residual(DType dt, const void* z, const float* b, const void* resid, void* y, int rows, int cols,
                   cudaStream_t st) {
  const std::size_t n = std::size_t(rows) * cols;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_bias_residual<T><<<blocks_for(n), kThreads, 0, st>>>(
                             static_cast<const T*>(z), b, static_cast<const T*>(resid), static_cast<T*>(y), n, cols));
  CUDA_CHECK_LAUNCH();
}

void bias_gelu(DType dt, void* u, const float* b, void* g, int rows, int cols, cudaStream_t st) {
  const std::size_t n = std::size_t(rows) * cols;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(
      dt, k_bias_gelu<T><<<blocks_for(n), kThreads, 0, st>>>(static_cast<T*>(u), b, static_cast<T*>(g), n, cols));
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(DType dt, const void* dg, const void* u, void* du, int rows, int cols, cudaStream_t st) {
  const std::size_t n = std::size_t(rows) * cols;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_gelu_backward<T><<<blocks_for(n), kThreads, 0, st>>>(
                             static_cast<const T*>(dg), static_cast<const T*>(u), static_cast<T*>(du), n));
  CUDA_CHECK_LAUNCH();
}

void kv_store(DType dt, const void* qkv, void* k, void* v, float* dk, float* dv, int batch, int len, int begin,
              int max_len, int hidden, cudaStream_t st) {
  const std::size_t n = std::size_t(batch) * len * hidden;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_kv_store<T><<<blocks_for(n), kThreads, 0, st>>>(static_cast<const T*>(qkv),
                                                                           static_cast<T*>(k), static_cast<T*>(v), dk,
                                                                           dv, len, begin, max_len, hidden, n));
  CUDA_CHECK_LAUNCH();
}

void kv_grad_gather(DType dt, const float* dk, const float* dv, void* dqkv, int batch, int len, int begin, int max_len,
                    int hidden, cudaStream_t st) {
  const std::size_t n = std::size_t(batch) * len * hidden;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_kv_grad_gather<T><<<blocks_for(n), kThreads, 0, st>>>(dk, dv, static_cast<T*>(dqkv), len,
                                                                                 begin, max_len, hidden, n));
  CUDA_CHECK_LAUNCH();
}

void softmax_forward(DType dt, const float* scores, void* probs, int rows, int len, int begin, int nk,
                     cudaStream_t st) {
  if (rows == 0) return;
  PIPESCOPE_DISPATCH(dt,
                     k_softmax_forward<T><<<rows, kThreads, 0, st>>>(scores, static_cast<T*>(probs), len, begin, nk));
  CUDA_CHECK_LAUNCH();
}

void softmax_backward(DType dt, const float* dprobs, const void* probs, void* dscores, float scale, int rows, int nk,
                      cudaStream_t st) {
  if (rows == 0) return;
  PIPESCOPE_DISPATCH(dt, k_softmax_backward<T><<<rows, kThreads, 0, st>>>(dprobs, static_cast<const T*>(probs),
                                                                          static_cast<T*>(dscores), scale, nk));
  CUDA_CHECK_LAUNCH();
}

void embedding_forward(DType dt, const std::int32_t* tokens, const float* tok, const float* pos, void* x, int batch,
                       int len, int begin, int hidden, cudaStream_t st) {
  const std::size_t n = std::size_t(batch) * len * hidden;
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_embedding_forward<T>
                     <<<blocks_for(n), kThreads, 0, st>>>(tokens, tok, pos, static_cast<T*>(x), len, begin, hidden, n));
  CUDA_CHECK_LAUNCH();
}

void scatter_add_rows(DType dt, const void* dx, const std::int32_t* offsets, const std::int32_t* rows,
                      const std::int32_t* dest, int groups, float* table, int hidden, cudaStream_t st) {
  if (groups == 0) return;
  PIPESCOPE_DISPATCH(dt, k_scatter_add_rows<T>
                     <<<groups, kThreads, 0, st>>>(static_cast<const T*>(dx), offsets, rows, dest, table, hidden));
  CUDA_CHECK_LAUNCH();
}

void cross_entropy(DType dt, const float* logits, const std::int32_t* targets, void* dlogits, float* loss, float coef,
                   int rows, int vocab, cudaStream_t st) {
  if (rows == 0) return;
  PIPESCOPE_DISPATCH(
      dt, k_cross_entropy<T><<<rows, kThreads, 0, st>>>(logits, targets, static_cast<T*>(dlogits), loss, coef, vocab));
  CUDA_CHECK_LAUNCH();
}

void adam(DType dt, float* p, const float* g, float* m, float* v, void* lp, std::size_t n, float lr, float beta1,
          float beta2, float eps, float weight_decay, float grad_scale, float c1, float c2, cudaStream_t st) {
  if (n == 0) return;
  PIPESCOPE_DISPATCH(dt, k_adam<T><<<blocks_for(n), kThreads, 0, st>>>(p, g, m, v, static_cast<T*>(lp), n, lr, beta1,
                                                                       beta2, eps, weight_decay, grad_scale, c1, c2));
  CUDA_CHECK_LAUNCH();
}

}  // namespace pipescope::kernels::cuda
