#include "core/cost/fp8.h"

#include "core/model/model_shape.h"

namespace pipescope {

double fp8_meta_bytes_per_layer() {
  return static_cast<double>(kFp8LinearsPerLayer) * kFp8MetaSlots * (kFp8AmaxHistory + 2) * 4.0;
}

double fp8_linear_weight_params(const ModelSpec& m) {
  const LayerDims d = layer_dims(m);
  if (d.mla) return mla_qkv_weights(d) + d.o * d.h + d.h * d.up_out + d.f * d.h;
  return d.h * d.qkv_out + d.q * d.h + d.h * d.up_out + d.f * d.h;
}

KernelCost fp8_gemm(KernelCost k, double out_bytes_per_elem, Fp8Pass pass) {
  k.bytes = (k.m * k.k + k.k * k.n) * k.batch + out_bytes_per_elem * k.m * k.n * k.batch;
  k.fp8 = true;
  switch (pass) {
    case Fp8Pass::Forward:
      k.fp8_split_accumulator = false;
      break;
    case Fp8Pass::Backward:
      k.fp8_split_accumulator = true;
      break;
  }
  return k;
}

KernelCost fp8_cast_transpose(double rows, double cols, double e) {
  const double n = rows * cols;
  return KernelCost{2 * n, (e + 2) * n, false};  // amax (compare) and scale (multiply) per element
}

KernelCost fp8_amax_update(bool forward, double layers) {
  const double slots = layers * kFp8LinearsPerLayer * (forward ? 3 : 2);
  // Roll each history by one, take its max, recompute scale and scale_inv: read and write every history.
  return KernelCost{slots * kFp8AmaxHistory, 2.0 * slots * (kFp8AmaxHistory + 2) * 4.0, false};
}

}  // namespace pipescope
