// The CUDA entry points of kernels/backend.h for a program linked without the CUDA backend: every program that
// does not link the object library pipescope_kernels_cuda (kernels/CMakeLists.txt), `pipescope` itself among
// them, so that it does not load cudart / cuBLAS (about 250 MB of address space resident at start). Programs that
// run CUDA work (pipescope-rank, pipescope-calibrate-cuda, the GPU tests) link the real definitions in
// cuda_backend.cc as objects, which come before any archive on the link line, so this file's archive member is
// never pulled in there. It holds these four functions only, for that reason.
#include "kernels/backend.h"

namespace pipescope::kernels {

std::unique_ptr<Backend> make_cuda_backend(DType, int) {
#ifdef PIPESCOPE_HAVE_CUDA
  throw KernelError(
      "make_cuda_backend: this program is linked without the CUDA backend (pipescope_kernels_cuda); CUDA work runs in "
      "pipescope-rank and pipescope-calibrate-cuda");
#else
  throw KernelError("make_cuda_backend: pipescope was built without CUDA (nvcc not found or PIPESCOPE_CUDA=OFF)");
#endif
}

// Whether the build has CUDA (the messages that say what is missing use it), not whether this program links it.
bool built_with_cuda() {
#ifdef PIPESCOPE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() { return 0; }
int cuda_compute_capability(int) { return 0; }

}  // namespace pipescope::kernels
