#pragma once
// The exactness check: a pipelined / sliced / data-parallel run must give the loss and every
// parameter gradient of a single-process, unsliced run of the same model on the same global batch.
// The reference runs the whole global batch as one slice through all layers on the CPU f64 backend.
// Errors are norm-wise per parameter tensor: max|run - ref| / max|ref| over the tensor (the tensors of
// kernels/layer.h's layouts), maximised over tensors and over data-parallel copies. With tensor parallelism
// every process's layer shards are compared with the same cut of the reference (kernels::shard_params),
// scaled by the whole tensor, so the worst shard gives the whole tensor's error.

#include <map>
#include <string>
#include <vector>

#include "kernels/layer.h"
#include "runtime/job.h"
#include "runtime/model.h"

namespace pipescope::runtime {

struct ReferenceResult {
  double loss = 0;                                 // of the last step
  std::map<ModuleId, std::vector<double>> grads;   // of the last step
  std::map<ModuleId, std::vector<double>> params;  // after the last step's Adam update
};

// `steps` training steps (Adam step 1..steps) of the whole model, unsliced, on the whole batch.
ReferenceResult reference_run(const ModelConfig& mc, const SyntheticData& data, const kernels::AdamConfig& adam,
                              int steps = 1);

struct Exactness {
  double loss = 0, loss_ref = 0, loss_rel_err = 0;
  double grad_rel_err = 0;   // worst tensor
  std::string grad_worst;    // "layer3.w_qkv (worker 5)", "layer3.w_o (worker 1, TP rank 1)"
  double param_rel_err = 0;  // parameters after the optimizer step
  std::string param_worst;
  int modules = 0;  // distinct modules compared
  int copies = 0;   // module copies compared (each data-parallel replica holds one; with tp, each TP rank a shard)
  std::vector<std::string> problems;  // modules missing from the run, or with the wrong size
  double max_rel_err() const;
  bool ok(double tol) const { return problems.empty() && max_rel_err() <= tol; }
};

// The tolerance a backend's run must meet against the f64 reference: 1e-10 (cpu-f64), 1e-3 (cpu-f32), 3e-2 for
// the 16-bit cuda backends (bf16 keeps 8 significant bits; Adam turns gradients that are ~0, e.g. the key bias's,
// into +-lr steps whatever their rounding noise). Throws RuntimeError for backends without one (null).
double exactness_tolerance(const std::string& backend);

Exactness compare_with_reference(const JobResult& run, const ReferenceResult& ref, const ModelConfig& mc);
// Two lines: loss and gradients / parameters with their worst tensors.
std::string format_exactness(const Exactness& e);

}  // namespace pipescope::runtime
