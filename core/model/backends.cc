// The kernels backends (core/model/backends.h).
#include "core/model/backends.h"

#include <stdexcept>

namespace pipescope {

const std::vector<BackendInfo>& backend_table() {
  static const std::vector<BackendInfo> t = {
      {BackendKind::CpuF64, "cpu-f64", BackendDevice::Cpu, "fp64", "CPU, double precision (the exact reference)"},
      {BackendKind::CpuF32, "cpu-f32", BackendDevice::Cpu, "fp32", "CPU, single precision"},
      {BackendKind::CudaBF16, "cuda-bf16", BackendDevice::Cuda, "bf16", "GPU (compute capability >= 8.0), bf16"},
      {BackendKind::CudaF16, "cuda-f16", BackendDevice::Cuda, "fp16", "GPU, fp16 (loss scaling)"},
      {BackendKind::Null, "null", BackendDevice::None, "", "no compute: the runtime's own overhead"},
  };
  return t;
}

const BackendInfo& backend_info(BackendKind kind) {
  for (const BackendInfo& b : backend_table())
    if (b.kind == kind) return b;
  throw std::logic_error("backend kind without a row in backend_table()");
}

const BackendInfo* find_backend(const std::string& name) {
  for (const BackendInfo& b : backend_table())
    if (name == b.name) return &b;
  return nullptr;
}

std::string backend_names(bool (*keep)(const BackendInfo&)) {
  std::string out;
  for (const BackendInfo& b : backend_table())
    if (keep == nullptr || keep(b)) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

bool backend_on(const std::string& name, BackendDevice device) {
  const BackendInfo* b = find_backend(name);
  return b != nullptr && b->device == device;
}

const BackendInfo& backend_named(const std::string& name, const std::string& what) {
  if (const BackendInfo* b = find_backend(name)) return *b;
  throw std::invalid_argument(what + ": unknown backend '" + name + "' (valid: " + backend_names() + ")");
}

}  // namespace pipescope
