// The kernels backends, the one table: every place that asks "which backends are there", "is this one a GPU's",
// "what dtype does it compute in" reads it (calibrate, validate, the runtime's ranks, profiles). Names are what
// --backend takes and what a profile's provenance records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipescope {

enum class BackendKind : std::uint8_t { CpuF64, CpuF32, CudaBF16, CudaF16, Null };

enum class BackendDevice : std::uint8_t {
  Cpu,   // Eigen on this machine's cores (kernels/cpu_backend)
  Cuda,  // cuBLAS + the CUDA kernels on one GPU per rank, NCCL between ranks
  None,  // no arithmetic: times the runtime's own overhead (runtime/null_backend)
};

struct BackendInfo {
  BackendKind kind;
  const char* name;  // "cpu-f64"
  BackendDevice device;
  const char* dtype;  // the profile / scenario dtype it computes in: fp64, fp32, bf16, fp16 ("" for null)
  const char* help;
};

const std::vector<BackendInfo>& backend_table();
const BackendInfo& backend_info(BackendKind kind);
// nullptr for a name that is not in the table.
const BackendInfo* find_backend(const std::string& name);
// "cpu-f64, cpu-f32, ..." of the backends `keep` accepts (every one without it), for help and error messages.
std::string backend_names(bool (*keep)(const BackendInfo&) = nullptr);
// Whether `name` is a backend of that device (false for an unknown name).
bool backend_on(const std::string& name, BackendDevice device);
// The backend named `name`; std::invalid_argument "<what>: unknown backend 'x' (valid: ...)" otherwise.
const BackendInfo& backend_named(const std::string& name, const std::string& what = "--backend");

}  // namespace pipescope
