// Fallbacks for a build without CUDA; with CUDA these live in kernels/cuda_backend.cc.
#include "kernels/backend.h"

#ifndef PIPESCOPE_HAVE_CUDA
namespace pipescope::kernels {

std::unique_ptr<Backend> make_cuda_backend(DType, int) {
  throw KernelError("make_cuda_backend: pipescope was built without CUDA (nvcc not found or PIPESCOPE_CUDA=OFF)");
}
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
int cuda_compute_capability(int) { return 0; }

}  // namespace pipescope::kernels
#endif
