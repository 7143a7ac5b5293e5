// pipescope-cuda-check BACKEND: can cuda-bf16 / cuda-f16 run here? `pipescope calibrate` asks before it measures
// anything. A program of its own that links cudart alone (2 MB resident): pipescope-calibrate-cuda links cuBLAS,
// which keeps about 200 MB resident from the start, too much for a refusal (docs/limits.md). The same conditions
// as kernels::make_cuda_backend: a device, and compute capability >= 8.0 for bf16.
// Exit codes (README.md): 0 usable, 1 not a CUDA backend, 3 no usable GPU (the reason on stderr).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "core/model/backends.h"
#include "core/util/exit_codes.h"

int main(int argc, char** argv) {
  using namespace pipescope;
  const std::string backend = argc == 2 ? argv[1] : "";
  if (!backend_on(backend, BackendDevice::Cuda)) {
    std::fprintf(stderr, "usage: pipescope-cuda-check %s\n",
                 backend_names([](const BackendInfo& b) { return b.device == BackendDevice::Cuda; }).c_str());
    return kExitInput;
  }
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    std::fprintf(stderr, "error: --backend %s: no usable GPU (cudaGetDeviceCount: %s)\n", backend.c_str(),
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kExitEnvironment;
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (backend_named(backend).kind == BackendKind::CudaBF16 && major < 8) {
    std::fprintf(stderr,
                 "error: --backend cuda-bf16: GPU 0 has compute capability %d.%d; bf16 needs 8.0 (use cuda-f16)\n",
                 major, minor);
    return kExitEnvironment;
  }
  return 0;
}
