#include "runtime/transport.h"

#include "runtime/model.h"

namespace pipescope::runtime {

ElemType elem_type(kernels::DType t) {
  switch (t) {
    case kernels::DType::kF64:
      return ElemType::kF64;
    case kernels::DType::kF32:
      return ElemType::kF32;
    case kernels::DType::kF16:
    case kernels::DType::kBF16:
      break;  // half-precision gradients go through NCCL
  }
  throw RuntimeError(std::string("gradients of dtype ") + kernels::dtype_name(t) +
                     " cannot be all-reduced by the host transports (f64 or f32 only)");
}

std::size_t elem_bytes(ElemType t) { return t == ElemType::kF64 ? 8 : 4; }

}  // namespace pipescope::runtime
