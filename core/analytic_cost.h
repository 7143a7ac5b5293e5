#pragma once
// First analytic device model: transformer-layer FLOPs (forward 24*b*s*h^2 + 4*b*s^2*h for a full
// sequence; a slice of l tokens after c tokens of context: 24*b*l*h^2 + 4*b*h*(l*c + l*(l+1)/2)),
// backward 2x forward, +1 forward with recomputation; a roofline with efficiency parameters (GEMM
// efficiency that saturates with GEMM size, bandwidth-bound element-wise kernels) and a per-kernel
// launch overhead. Logits on the last virtual stage. Per GPU of a tensor-parallel group.

#include "core/cost_model.h"

namespace pipescope {

class AnalyticCostModel : public CostModel {
 public:
  explicit AnalyticCostModel(const Scenario& s);
  double compute_seconds(const Op& op, int microbatch_seqs) const override;
  double p2p_bytes(const Op& op, int microbatch_seqs) const override;
  int tp_allreduce_calls(const Op& op) const override;
  double tp_allreduce_bytes(const Op& op, int microbatch_seqs) const override;
  double grad_bytes(int rank) const override;
  double optimizer_seconds(int rank) const override;
  double embedding_grad_bytes() const override;

  // One transformer layer on one GPU: b sequences, l tokens after c tokens of context.
  double layer_forward_seconds(int b, int l, int c) const;
  double layer_backward_seconds(int b, int l, int c) const;
  int layers_per_chunk() const;

 protected:
  Scenario s_;
  double dtype_peak_flops_ = 0;
};

// Model accounting (spec/megatron.md section 6).
double parameter_count(const ModelSpec& m);                       // Eq. 2
double megatron_flops_per_iteration(const ModelSpec& m, int global_batch, bool recompute);  // Eq. 3

}  // namespace pipescope
