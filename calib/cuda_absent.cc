// The GPU benchmarks of benches.h for a program linked without pipescope_calib_cuda (calib/CMakeLists.txt):
// `pipescope` itself, which runs a CUDA calibration as the program pipescope-calibrate-cuda (cuda_main.cc) and
// so loads no CUDA library. That program links bench_gemm_cuda.cc as objects, which come before this archive
// member on the link line; this file holds these two functions only, so it is never pulled in there.
#include <stdexcept>

#include "calib/benches.h"

namespace pipescope::calib {

namespace {
[[noreturn]] void absent(const char* what) {
  throw std::logic_error(std::string(what) +
                         ": this program is linked without the CUDA benchmarks; `pipescope calibrate --backend cuda-*` "
                         "runs them in pipescope-calibrate-cuda");
}
}  // namespace

std::vector<GemmPoint> bench_gemm_cuda(const std::string&, const ComputeConfig&, const std::vector<int>&) {
  absent("bench_gemm_cuda");
}

std::unique_ptr<Timer> cuda_event_timer(void*) { absent("cuda_event_timer"); }

}  // namespace pipescope::calib
