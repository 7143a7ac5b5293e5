#pragma once
// RAII CUDA event-pair timer for the calibration harness (docs/calibration.md): construction records
// the start event on the stream, elapsed_s() records the stop event, waits for it and returns seconds.
// restart() re-records the start. Errors throw CudaError. Not copyable.

#include <cuda_runtime.h>

namespace pipescope::kernels {

class CudaEventTimer {
 public:
  explicit CudaEventTimer(cudaStream_t stream = nullptr);
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  void restart();
  // Seconds of GPU time between the start event and now on the stream (resolution about 0.5 us).
  double elapsed_s();

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace pipescope::kernels
