#include "kernels/cuda_check.h"

namespace pipescope::kernels {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cudaGetErrorName(err) +
                  ": " + cudaGetErrorString(err));
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cublasGetStatusName(st) +
                  ": " + cublasGetStatusString(st));
}

}  // namespace pipescope::kernels
