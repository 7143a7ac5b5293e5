#include "kernels/cuda_timer.h"

#include "kernels/cuda_check.h"

namespace pipescope::kernels {

CudaEventTimer::CudaEventTimer(cudaStream_t stream) : stream_(stream) {
  CUDA_CHECK(cudaEventCreate(&start_));
  try {
    CUDA_CHECK(cudaEventCreate(&stop_));
    restart();
  } catch (...) {
    cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    throw;
  }
}

CudaEventTimer::~CudaEventTimer() {
  // Destructors must not throw; a failure here leaks two events at worst.
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

void CudaEventTimer::restart() { CUDA_CHECK(cudaEventRecord(start_, stream_)); }

double CudaEventTimer::elapsed_s() {
  CUDA_CHECK(cudaEventRecord(stop_, stream_));
  CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return static_cast<double>(ms) * 1e-3;
}

}  // namespace pipescope::kernels
