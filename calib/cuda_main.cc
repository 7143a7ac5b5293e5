// pipescope-calibrate-cuda: the compute benchmarks of `pipescope calibrate --backend cuda-bf16 | cuda-f16`, a
// program of its own so that `pipescope` does not link cudart and cuBLAS (they keep about 200 MB resident in every
// process that loads them, a `--version` included). `pipescope calibrate` runs it under its guard process
// (sim/launch.h: signals forwarded, temporary directory removed) with the options as JSON (options_json.h):
//   pipescope-calibrate-cuda OPTIONS.json PROFILE.yaml
// after pipescope-cuda-check (cuda_check_main.cc) found a GPU, before the link benchmarks.
// Exit codes, those of README.md: 0 done, 1 bad options, 3 no usable GPU, 4 internal error, 5 a quality gate
// refused the fits (nothing written). Messages go to stderr; progress lines too.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "calib/calibrate.h"
#include "calib/options_json.h"
#include "core/model/backends.h"
#include "core/model/profile.h"
#include "core/util/exit_codes.h"
#include "kernels/backend.h"
#include "runtime/parent_watch.h"

namespace pipescope::calib {
namespace {

struct NoGpu : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The backend once, before anything is measured: no device, a driver too old, bf16 on a pre-Ampere GPU.
void check_gpu(const std::string& backend) {
  if (!backend_on(backend, BackendDevice::Cuda))
    throw std::invalid_argument("--backend: '" + backend + "' is not a CUDA backend (" +
                                backend_names([](const BackendInfo& b) { return b.device == BackendDevice::Cuda; }) +
                                ")");
  try {
    kernels::make_cuda_backend(backend_named(backend).kind == BackendKind::CudaBF16 ? kernels::DType::kBF16
                                                                                    : kernels::DType::kF16);
  } catch (const std::exception& e) {
    throw NoGpu("--backend " + backend + ": no usable GPU: " + e.what());
  }
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument(path + ": cannot open the calibrate options");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int run(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: pipescope-calibrate-cuda OPTIONS.json PROFILE.yaml (run by `pipescope calibrate --backend "
                 "cuda-bf16|cuda-f16`)\n");
    return kExitInput;
  }
  const CalibrateOptions o = options_from_json(read_text(argv[1]));
  check_gpu(o.backend);
  const DeviceProfile p = calibrate(o);
  std::ofstream f(argv[2], std::ios::binary);
  write_profile(p, f);
  if (!f.flush()) throw std::runtime_error(std::string(argv[2]) + ": write failed");
  return 0;
}

}  // namespace
}  // namespace pipescope::calib

int main(int argc, char** argv) {
  using namespace pipescope::calib;
  using namespace pipescope;               // the exit codes (core/util/exit_codes.h)
  pipescope::runtime::exit_with_parent();  // header-only: no link dependency on runtime/
  try {
    return run(argc, argv);
  } catch (const NoGpu& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitEnvironment;
  } catch (const CalibrationRefused& e) {
    std::fprintf(stderr, "error: %s\nno profile written (--accept-poor-fit writes it with the failures recorded)\n",
                 e.what());
    return kExitPoorFit;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return kExitInternal;
  }
}
