#pragma once
// Check macros at the CUDA / cuBLAS C-API boundary: a failing call throws CudaError carrying file:line,
// the call text and the library's own message. Host code only (also usable in .cu launchers).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace pipescope::kernels {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line);

}  // namespace pipescope::kernels

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    const cudaError_t pipescope_err_ = (call);                                           \
    if (pipescope_err_ != cudaSuccess)                                                   \
      ::pipescope::kernels::throw_cuda_error(pipescope_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                \
  do {                                                                                    \
    const cublasStatus_t pipescope_st_ = (call);                                          \
    if (pipescope_st_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::pipescope::kernels::throw_cublas_error(pipescope_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next unrelated call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
