#pragma once
// The `kernels` section of a device profile (core/model/kernel_model.h): the GEMM, attention and memory-bound kernel
// fits and the held-out transfer checks `pipescope calibrate` measured. YAML read / write, used by
// core/model/profile.cc.
//
//   kernels:
//     dtype: fp64
//     gemm: {rate_gflops, m0, n0, k0, fixed_us, holdout_rel_err, train_points, test_points}
//     attention:   # per (sequence, head): t = a0 + a1 l + a2 l (c + l), microseconds
//       - {head_dim, forward_us: [a0, a1, a2], backward_us: [a0, a1, a2], holdout_rel_err}
//     memory:      # t = fixed + bytes / bw
//       - {class, fixed_us, bw_GBps, holdout_rel_err}
//     in_situ: {forward, backward}   # layer table / kernel sum at the profile's shape (optional, default 1)
//     transfer:    # layers at shapes outside the fits: measured vs predicted
//       - {op, hidden, heads, ffn, micro_batch, l, c, measured_us, predicted_us}

#include <yaml-cpp/yaml.h>

#include <ostream>
#include <string>

#include "core/model/kernel_model.h"
#include "core/model/profile_error.h"

namespace pipescope {

// Throws ProfileError "file:line:col: kernels.key: message".
KernelFits read_kernel_fits(const std::string& source, const YAML::Node& n);
// Writes "kernels:" and its block (deterministic).
void write_kernel_fits(const KernelFits& f, std::ostream& os);

}  // namespace pipescope
