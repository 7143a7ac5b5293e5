#pragma once
// Cost-model interface: op -> seconds, message -> bytes. Three kinds of implementation:
// ConstantCostModel (engine and closed-form tests), AnalyticCostModel (FLOPs + roofline with
// efficiency and launch overhead, core/cost/analytic_cost.h) and, later, a calibrated profile.
// Costs are per GPU of a tensor-parallel group (the group's GEMMs are split t ways).

#include <memory>
#include <vector>

#include "core/ir/schedule.h"
#include "core/model/config.h"

namespace pipescope {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Duration of a compute op on one GPU (tensor-parallel share), excluding TP communication.
  virtual double compute_seconds(const Op& op, int microbatch_seqs) const = 0;
  // Bytes of the tensor a compute op sends to the next (F) or previous (B) virtual stage.
  virtual double p2p_bytes(const Op& op, int microbatch_seqs) const = 0;
  // Tensor-parallel all-reduces issued by a compute op: number of calls and bytes per call.
  virtual int tp_allreduce_calls(const Op& op) const = 0;
  virtual double tp_allreduce_bytes(const Op& op, int microbatch_seqs) const = 0;
  // Data-parallel gradient bytes held by one GPU of pipeline rank r (all its chunks).
  virtual double grad_bytes(int rank) const = 0;
  // Optimizer step of one GPU of pipeline rank r.
  virtual double optimizer_seconds(int rank) const = 0;
  // Word-embedding gradient bytes (tied embeddings, first/last stage all-reduce); 0 = none.
  virtual double embedding_grad_bytes() const = 0;
  // Parameter bytes held by one GPU of pipeline rank r: what the distributed optimizer all-gathers after its step.
  virtual double param_bytes(int rank) const { return grad_bytes(rank); }
  // Of an MoE model: the routed experts' gradient and parameter bytes held by one GPU of pipeline rank r, reduced
  // (gathered) over the expert-data-parallel group instead; grad_bytes and param_bytes leave them out. Pure: a
  // wrapper that forwarded the rest and forgot these would drop the experts' gradient traffic silently.
  virtual double expert_grad_bytes(int rank) const = 0;
  virtual double expert_param_bytes(int rank) const = 0;
  // Of compute_seconds(op): the seconds a backward op spends recomputing the forward (activation recomputation);
  // 0 for a forward and without recomputation. The time breakdown reads it (core/lower/time_breakdown.h).
  virtual double recompute_seconds(const Op& /*op*/, int /*microbatch_seqs*/) const { return 0.0; }
  // Of compute_seconds(op): the seconds the op waits for context-parallel transfers that its attention does not hide
  // (ring steps, all-gathers, all-to-alls; core/cost/context_parallel.h); 0 without context parallelism.
  virtual double cp_wait_seconds(const Op& /*op*/, int /*microbatch_seqs*/) const { return 0.0; }
};

// Fixed costs per (micro-batch, stage); slices scale linearly with their token share. Used by
// closed-form tests (free communication when bytes are 0).
struct ConstantCosts {
  double forward_s = 1.0;   // forward of one whole micro-batch on one virtual stage... see note
  double backward_s = 2.0;  // ... costs are per rank-stage; divided by v for a chunk
  // Split backward: W (weight gradients) takes this share of backward_s, I (input gradients) the rest, so
  // I + W = B. The default 1/2 is the transformer's: the weight-gradient GEMMs are as many FLOPs as the
  // input-gradient GEMMs (attention backward is ignored here), giving tF = tI = tW at backward_s = 2 forward_s.
  double weight_share = 0.5;
  double p2p_bytes = 0.0;   // per whole micro-batch; slices get their token share
  double grad_bytes = 0.0;  // per rank
  // Per rank, of an MoE model: the routed experts' gradient (and parameter) bytes, reduced over the expert-data-
  // parallel group (core/cost/expert_parallel.h); 0 = none.
  double expert_grad_bytes = 0.0;
  double optimizer_s = 0.0;
  double tp_bytes = 0.0;            // per TP all-reduce call (whole micro-batch)
  int tp_calls_fwd = 0;             // TP all-reduce calls per forward (backward uses the same count)
  std::vector<int> stage_tp_calls;  // per virtual stage, instead of tp_calls_fwd when given (uneven layers)
  int v = 1;                        // chunks per rank (a chunk costs 1/v of a stage)
  int seq_len = 1;                  // tokens per sequence, to scale slices
};

class ConstantCostModel final : public CostModel {
 public:
  explicit ConstantCostModel(ConstantCosts c);  // throws std::invalid_argument on v < 1, seq_len < 1, costs < 0
  double compute_seconds(const Op& op, int microbatch_seqs) const override;
  double p2p_bytes(const Op& op, int microbatch_seqs) const override;
  int tp_allreduce_calls(const Op& op) const override;
  double tp_allreduce_bytes(const Op& op, int microbatch_seqs) const override;
  double grad_bytes(int) const override { return c_.grad_bytes; }
  double optimizer_seconds(int) const override { return c_.optimizer_s; }
  double embedding_grad_bytes() const override { return 0.0; }
  double expert_grad_bytes(int) const override { return c_.expert_grad_bytes; }
  double expert_param_bytes(int) const override { return c_.expert_grad_bytes; }

 private:
  double token_share(const Op& op) const;  // tokens / seq_len
  ConstantCosts c_;
};

}  // namespace pipescope
