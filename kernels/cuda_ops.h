#pragma once
// Launchers of the hand-written CUDA kernels (kernels/cuda_ops.cu) that the cuBLAS GEMMs of
// kernels/cuda_backend.cc are stitched together with. Plain C++ declarations, so host code needs no nvcc.
// `void*` activations are 16-bit of the given dtype (kF16 or kBF16); `float*` are fp32. All math is fp32.
// Matrices are row-major; "rows x cols" below. Every launcher checks the launch and throws CudaError.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/layer.h"

namespace pipescope::kernels::cuda {

void convert_from_f32(DType dt, const float* src, void* dst, std::size_t n, cudaStream_t st);
void convert_to_f32(DType dt, const void* src, float* dst, std::size_t n, cudaStream_t st);

// y = LN(x) * g + b per row; mu, rstd: [rows].
void layer_norm_forward(DType dt, const void* x, const float* g, const float* b, void* y, float* mu, float* rstd,
                        int rows, int cols, cudaStream_t st);
// dx = (resid ? resid : 0) + d LN / dx applied to dy (the gradient w.r.t. the LN output).
void layer_norm_backward_input(DType dt, const void* x, const float* mu, const float* rstd, const float* g,
                               const void* dy, const void* resid, void* dx, int rows, int cols, cudaStream_t st);
// dg += sum_rows dy * xhat, db += sum_rows dy. ws: 2 * reduce_workspace_floats(rows, cols) floats.
void layer_norm_backward_params(DType dt, const void* x, const float* mu, const float* rstd, const void* dy, float* dg,
                                float* db, int rows, int cols, float* ws, cudaStream_t st);
std::size_t reduce_workspace_floats(int rows, int cols);  // for one column reduction (bias_grad)

// db += column sums of dy. ws: reduce_workspace_floats(rows, cols) floats.
void bias_grad(DType dt, const void* dy, float* db, int rows, int cols, float* ws, cudaStream_t st);
// y += b (per column), in place.
void add_bias(DType dt, void* y, const float* b, int rows, int cols, cudaStream_t st);
// y = z + b + resid.
void bias_residual(DType dt, const void* z, const float* b, const void* resid, void* y, int rows, int cols,
                   cudaStream_t st);
// u = u + b in place; g = gelu(u) (tanh approximation).
void bias_gelu(DType dt, void* u, const float* b, void* g, int rows, int cols, cudaStream_t st);
// du = dg * gelu'(u); du may alias dg.
void gelu_backward(DType dt, const void* dg, const void* u, void* du, int rows, int cols, cudaStream_t st);

// K/V cache [batch, max_len, hidden] (16-bit) and dK/dV [batch, max_len, hidden] (fp32). qkv: [batch*len, 3h].
// Stores the slice's K and V at tokens [begin, begin + len) and zeroes their dK/dV.
void kv_store(DType dt, const void* qkv, void* k, void* v, float* dk, float* dv, int batch, int len, int begin,
              int max_len, int hidden, cudaStream_t st);
// dqkv[:, h:3h] = dK/dV of the slice's tokens (complete once every later slice has run backward).
void kv_grad_gather(DType dt, const float* dk, const float* dv, void* dqkv, int batch, int len, int begin, int max_len,
                    int hidden, cudaStream_t st);

// Scores [rows, nk] (fp32, already scaled) -> probabilities (16-bit). Row r is query token begin + r % len;
// it sees keys [0, begin + r % len]; masked entries become exactly 0.
void softmax_forward(DType dt, const float* scores, void* probs, int rows, int len, int begin, int nk, cudaStream_t st);
// dscores = scale * P * (dP - rowsum(dP * P)); dprobs fp32, probs/dscores 16-bit.
void softmax_backward(DType dt, const float* dprobs, const void* probs, void* dscores, float scale, int rows, int nk,
                      cudaStream_t st);

// x[s*len + t] = tok[tokens[s*len + t]] + pos[begin + t]; tables fp32 [*, hidden].
void embedding_forward(DType dt, const std::int32_t* tokens, const float* tok, const float* pos, void* x, int batch,
                       int len, int begin, int hidden, cudaStream_t st);
// For each group g: table[dest[g]] += sum of dx rows rows[offsets[g] .. offsets[g+1]) in that order
// (deterministic, no atomics).
void scatter_add_rows(DType dt, const void* dx, const std::int32_t* offsets, const std::int32_t* rows,
                      const std::int32_t* dest, int groups, float* table, int hidden, cudaStream_t st);

// Per row: loss[r] = logsumexp(logits[r]) - logits[r, target[r]] (0 for target < 0) and
// dlogits[r] = coef * (softmax(logits[r]) - onehot(target[r])) (0 rows for target < 0).
void cross_entropy(DType dt, const float* logits, const std::int32_t* targets, void* dlogits, float* loss, float coef,
                   int rows, int vocab, cudaStream_t st);

// Adam on fp32 master p with fp32 g, m, v; writes the 16-bit copy lp. c1, c2: 1 - beta^t.
void adam(DType dt, float* p, const float* g, float* m, float* v, void* lp, std::size_t n, float lr, float beta1,
          float beta2, float eps, float weight_decay, float grad_scale, float c1, float c2, cudaStream_t st);

}  // namespace pipescope::kernels::cuda
