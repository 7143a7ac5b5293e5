#pragma once
// First analytic device model: transformer-layer FLOPs (forward 24*b*s*h^2 + 4*b*s^2*h for a full
// sequence; a slice of l tokens after c tokens of context: 24*b*l*h^2 + 4*b*h*(l*c + l*(l+1)/2)),
// backward 2x forward, +1 forward with recomputation; GEMMs by tile and wave quantisation over the SMs
// (core/cost/gemm_model.h), bandwidth-bound element-wise kernels by bytes over HBM bandwidth, and a per-kernel
// launch overhead. Logits on the last virtual stage. Per GPU of a tensor-parallel group.
// The formulas are written out at the top of core/cost/analytic_cost.cc.

#include "core/cost/fp8.h"
#include "core/cost/kernel_cost.h"
#include "core/lower/cost_model.h"
#include "core/model/model_shape.h"  // LayerFlops, parameter counts (declared there)
#include "core/util/memo_table.h"

namespace pipescope {

class AnalyticCostModel : public CostModel {
 public:
  explicit AnalyticCostModel(const Scenario& s);  // throws std::invalid_argument on an unusable scenario
  double compute_seconds(const Op& op, int microbatch_seqs) const override;
  double p2p_bytes(const Op& op, int microbatch_seqs) const override;
  int tp_allreduce_calls(const Op& op) const override;
  double tp_allreduce_bytes(const Op& op, int microbatch_seqs) const override;
  double grad_bytes(int rank) const override;
  double optimizer_seconds(int rank) const override;
  double embedding_grad_bytes() const override;
  double param_bytes(int rank) const override;  // rank parameters x weight bytes (training.dtype)
  double expert_grad_bytes(int rank) const override;
  double expert_param_bytes(int rank) const override;
  // The recomputed kernels' share of the fused backward, times compute_seconds(op) (I and W alike).
  double recompute_seconds(const Op& op, int microbatch_seqs) const override;
  // The wait kernels (KernelCost::wait_s) of the op's kernels, at most its compute_seconds; 0 for a W op.
  double cp_wait_seconds(const Op& op, int microbatch_seqs) const override;

  // One transformer layer on one GPU: b sequences, l tokens after c tokens of context.
  double layer_forward_seconds(int b, int l, int c) const;
  double layer_backward_seconds(int b, int l, int c) const;  // includes the recomputed forward with recompute
  int layers_of_stage(int stage) const;  // stage_layer_range (core/model/placement.h), cached per virtual stage

  // Share of a fused backward B that its W part takes: the weight-gradient kernels' time over all the kernels'
  // time of the op (kernel launch costs split in the same ratio). I takes the rest, so I + W = B exactly.
  double backward_weight_share(const Op& op, int microbatch_seqs) const;

  // Useful FLOPs of a compute op on one GPU (causal attention, backward 2x, + recomputed forward, logits
  // 2*b*l*h*V/t forward on the last virtual stage), for utilisation reports.
  double op_flops(const Op& op, int microbatch_seqs) const;
  // Time of one GPU kernel (roofline with efficiency, no launch overhead).
  double kernel_seconds(const KernelCost& k) const;
  // A fused attention kernel (KernelCost::attention) at `peak`: the device's flash efficiency for its pass, the head
  // dimension padded to the kernels' step, and its thread blocks (one per kFlashTileRows of KernelCost::m rows, per
  // head and sequence: KernelCost::batch) in waves over the SMs (docs/cost-model.md "Fused attention").
  double fused_attention_seconds(const KernelCost& k, double peak) const;
  static constexpr double kFlashHeadStep = 32;
  static constexpr double kFlashTileRows = 128;
  KernelTimer timer() const {
    return [this](const KernelCost& k) { return kernel_seconds(k); };
  }
  // The kernels of one layer's forward / backward (without recomputation), in issue order; moe: a layer with routed
  // experts (ModelSpec::moe_layer) in place of the dense MLP.
  std::vector<KernelCost> layer_forward_kernels(int b, int l, int c, bool moe = false, double overload = 1) const;
  // tp_overlap: the fused backward with training.async_tp_allreduce or sequence parallelism (the column-parallel wgrads
  // carry the collective of their input gradient, core/cost/tp_overlap.h); off for a split backward (I / W), whose W
  // runs later.
  std::vector<KernelCost> layer_backward_kernels(int b, int l, int c, bool tp_overlap = false, bool moe = false,
                                                 double overload = 1) const;
  // An MoE layer's router, permutation, grouped expert GEMMs, combine and shared experts (docs/moe.md), forward and
  // backward, on one GPU; the dispatch and combine all-to-alls are collectives of the lowering. overload: the busiest
  // expert-parallel GPU's tokens / the balanced mean (core/cost/moe_load.h): the grouped GEMMs run its rows.
  std::vector<KernelCost> moe_forward_kernels(int b, int l, double overload = 1) const;
  // Multi-head latent attention's projections (in place of the fused QKV GEMM), forward and backward.
  std::vector<KernelCost> mla_forward_kernels(int b, int l) const;
  std::vector<KernelCost> mla_backward_kernels(int b, int l) const;
  std::vector<KernelCost> moe_backward_kernels(int b, int l, bool tp_overlap, double overload = 1) const;
  // The attention core of a layer's forward (Q.K^T, softmax, dropout, P.V; or the one flash kernel).
  std::vector<KernelCost> attention_core_kernels(int b, int l, int c) const;
  // What a layer's backward recomputes first: schedule.recompute full = the whole forward, selective = the
  // schedule.recompute_modules' kernels (core_attn: nothing with flash attention, which recomputes its scores
  // anyway), none = nothing.
  std::vector<KernelCost> recompute_kernels(int b, int l, int c, bool moe = false, double overload = 1) const;
  // Those of the recompute modules in `modules` (module_bit()s), for a dense or an MoE layer.
  std::vector<KernelCost> selective_recompute_kernels(int b, int l, int c, bool moe, std::uint8_t modules,
                                                      double overload = 1) const;
  // Parts of the lists above that selective recomputation reruns on their own.
  KernelCost norm_kernel(int b, int l) const;                                // one LayerNorm / RMSNorm on Tr rows
  std::vector<KernelCost> dense_mlp_kernels(int b, int l) const;             // up GEMM, activation, down GEMM
  std::vector<KernelCost> shared_expert_kernels(int b, int l) const;         // the shared experts' MLP and the sum
  KernelCost expert_activation_kernel(int b, int l, double overload) const;  // the routed experts' activation
  std::vector<KernelCost> mla_up_kernels(int b, int l) const;  // MLA's up projections and the rotary key copy
  int moe_layers_of_stage(int stage) const;                    // of layers_of_stage, those with routed experts
  // Whether the stage runs the embedding / the LM head (holds_embedding, holds_head: cached per virtual stage).
  bool first_stage(int stage) const { return (stage_ends_[static_cast<std::size_t>(stage)] & 1) != 0; }
  bool last_stage(int stage) const { return (stage_ends_[static_cast<std::size_t>(stage)] & 2) != 0; }

 protected:
  Scenario s_;
  double dtype_peak_flops_ = 0;
  double fp8_peak_flops_ = 0;      // training.dtype fp8: the linear GEMMs' peak (dtype_peak_flops_ is bf16's then)
  std::vector<int> stage_layers_;  // per virtual stage
  std::vector<int> stage_moe_;     // per virtual stage: its MoE layers
  std::vector<char> stage_ends_;   // per virtual stage: 1 the embedding, 2 the head (first_stage, last_stage)
  // Per virtual stage: its MoE layers' mean expert overload (core/cost/moe_load.h); whether any differs from 1.
  std::vector<double> stage_overload_;
  bool load_varies_ = false;
  // Whether this model's kernel lists time backward ops (a profile's layer tables or kernel fits do not, and carry
  // no wgrad for training.async_tp_allreduce to hide the all-reduces behind: those stay exposed then).
  virtual bool kernels_time_backward() const { return true; }

 private:
  void check_op(const Op& op, int microbatch_seqs) const;
  double compute_seconds_uncached(const Op& op, int microbatch_seqs) const;
  // compute_seconds by what it reads of an op: kind, first / last virtual stage, the stage's layer count, token
  // range, sequences. Many stages of a pipeline hold the same layers, and a search or a planner asks the same
  // questions thousands of times. Not for concurrent use (nothing shares a cost model across threads).
  mutable MemoTable compute_memo_;
  // layer runs (layers_of_stage - moe_layers_of_stage) times, then moe_layer moe_layers_of_stage times (the stream's
  // time hardly depends on the order of the two kinds).
  struct OpKernels {
    std::vector<KernelCost> pre, layer, moe_layer, post;
    int layers = 0, moe_layers = 0;
  };
  // The kernels of a forward (forward = true) or a fused backward (with the recomputed forward) of `op`.
  OpKernels op_kernels(const Op& op, int microbatch_seqs, bool forward) const;
  double fused_seconds(const Op& op, int microbatch_seqs, bool forward) const;
  // Whether `op` runs the column-parallel input-gradient collectives beside its wgrads (a fused backward with
  // training.async_tp_allreduce or sequence parallelism, tp > 1), and the time of one such collective of b*l tokens.
  bool tp_overlap(const Op& op) const;
  bool sequence_parallel_tp() const;  // sequence parallelism over a tensor-parallel group of 2 or more
  // training.tp_comm_overlap with sequence parallelism: each dense linear's all-gather / reduce-scatter beside its
  // GEMM.
  bool userbuffers() const;
  // A GEMM with the sequence-parallel collective of b * l tokens beside it when the userbuffers overlap runs.
  KernelCost with_userbuffers(KernelCost k, int b, int l) const;
  double tp_overlap_seconds(int b, int l) const;
  int elem_bytes() const { return s_.training.act_bytes_per_elem(); }
  int grad_elem_bytes() const { return s_.training.grad_fp32 ? 4 : elem_bytes(); }
  // A linear layer's GEMM (not attention, not logits): FP8 operands with training.dtype fp8 (core/cost/fp8.h).
  KernelCost linear_gemm(const KernelCost& k, double out_bytes_per_elem, Fp8Pass pass) const;
  // FP8 casts of one layer's linear-GEMM inputs (forward) or output gradients (backward) and its amax update.
  std::vector<KernelCost> fp8_layer_kernels(int b, int l, bool forward, bool moe = false) const;
  // A linear layer's GEMM (M x Kd by Kd x N, in FP8 with training.dtype fp8) and a weight-gradient GEMM that
  // accumulates into the gradient buffer (wgrad_accumulation_bytes per gradient element).
  KernelCost linear_gemm_kernel(double M, double Kd, double N, Fp8Pass pass) const;
  KernelCost wgrad_kernel(double M, double Kd, double N) const;
  double wgrad_accumulation_bytes() const;
};

}  // namespace pipescope
