// GEMMs on the GPU (cuBLAS, fp16 / bf16 inputs, fp32 accumulation: what the CUDA backend issues), timed with
// CUDA events around a batch of back-to-back launches (docs/calibration.md). Built only with CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <memory>

#include "calib/benches.h"
#include "core/model/backends.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_timer.h"

namespace pipescope::calib {
namespace {

// cudaEvent-based Timer: the reading is GPU time between the two events on the stream.
class EventTimer final : public Timer {
 public:
  explicit EventTimer(cudaStream_t st) : t_(st) {}
  void start() override { t_.restart(); }
  double stop() override { return t_.elapsed_s(); }

 private:
  kernels::CudaEventTimer t_;
};

}  // namespace

std::unique_ptr<Timer> cuda_event_timer(void* stream) {
  return std::make_unique<EventTimer>(static_cast<cudaStream_t>(stream));
}

std::vector<GemmPoint> bench_gemm_cuda(const std::string& backend, const ComputeConfig& cfg,
                                       const std::vector<int>& bs) {
  const bool bf16 = backend_named(backend).kind == BackendKind::CudaBF16;
  const cudaDataType_t dt = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const auto shapes = gemm_shapes(cfg, bs);
  std::size_t max_elems = 0;
  for (const auto& [m, k, n] : shapes)
    max_elems = std::max(
        {max_elems, static_cast<std::size_t>(m) * k, static_cast<std::size_t>(k) * n, static_cast<std::size_t>(m) * n});
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CUDA_CHECK(cudaMalloc(&a, 2 * max_elems));
  CUDA_CHECK(cudaMalloc(&b, 2 * max_elems));
  CUDA_CHECK(cudaMalloc(&c, 2 * max_elems));
  CUDA_CHECK(cudaMemset(a, 0, 2 * max_elems));
  CUDA_CHECK(cudaMemset(b, 0, 2 * max_elems));
  cublasHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasCreate(&handle));
  std::vector<GemmPoint> out;
  try {
    EventTimer timer(nullptr);
    Progress prog("GEMM (cuBLAS)", static_cast<int>(shapes.size()), cfg.progress);
    const float one = 1.0f, zero = 0.0f;
    for (const auto& [m, k, n] : shapes) {
      // Row-major C[m, n] = A[m, k] B[k, n] is column-major C^T = B^T A^T.
      auto call = [&, m = m, k = k, n = n] {
        CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, dt, n, a, dt, k, &zero, c, dt, n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      const double t = time_calls(call, timer, cfg.policy).median_s;
      out.push_back(GemmPoint{m, n, k, bf16 ? "bf16" : "fp16", t});
      prog.step(std::to_string(m) + " x " + std::to_string(k) + " x " + std::to_string(n));
    }
  } catch (...) {
    cublasDestroy(handle);
    cudaFree(a), cudaFree(b), cudaFree(c);
    throw;
  }
  cublasDestroy(handle);
  cudaFree(a), cudaFree(b), cudaFree(c);
  return out;
}

}  // namespace pipescope::calib
