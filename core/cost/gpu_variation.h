#pragma once
// GPU-to-GPU speed variation (cluster.gpu_speed_sigma_pct, cluster.variation_seed): GPUs of one model and SKU
// run at different speeds (manufacturing spread under the same power limit), and a synchronous training step
// waits for its slowest member. Each GPU g draws a speed 1 + sigma * z_g, z_g a standard normal deviate drawn
// from (seed, g) alone (counter-based, so GPU g has the same speed in every job on the cluster and a larger job's
// GPUs include a smaller one's). The device description is the median GPU.
//
// Who waits for whom: a tensor- or context-parallel group computes in lock step (every layer exchanges), and
// the data-parallel copies of a pipeline rank meet in its gradient reduction every iteration, so each pipeline
// rank runs at the pace of the slowest GPU among all its copies. Pipeline ranks keep their own speeds (the
// pipeline's own dependencies decide how much a slow rank delays the others). This keeps the replicas identical
// (replica folding still applies) and bounds each replica's time from above; it is exact when one rank bounds
// the pipeline. docs/cost-model.md "GPU speed variation" has the source of the presets' sigma.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/lower/cost_model.h"
#include "core/model/config.h"

namespace pipescope {

// Speed of GPU g relative to the median GPU: 1 + sigma * z (z clamped to [-4, 4]).
double gpu_speed(double sigma, std::uint64_t seed, int gpu);
// Per pipeline rank: the compute-time factor of its slowest GPU over every replica and lane, at least 1 (a rank whose
// GPUs all beat the median is not credited for it: the description stays the best a job is priced at); 1
// everywhere with sigma 0. Throws std::invalid_argument when the layout does not fit the cluster.
std::vector<double> rank_slowdowns(const Scenario& s);

// "sigma 1% (seed 1): compute x1.021 to x1.034 by pipeline rank (its slowest GPU)"; "" with sigma 0.
std::string describe_variation(const Scenario& s);

// A cost model whose compute (and optimizer) seconds are another's times the op's rank slowdown; bytes, calls
// and collectives unchanged.
class VariedCostModel final : public CostModel {
 public:
  VariedCostModel(std::unique_ptr<CostModel> inner, std::vector<double> rank_slowdown);
  double compute_seconds(const Op& op, int microbatch_seqs) const override;
  double p2p_bytes(const Op& op, int microbatch_seqs) const override { return inner_->p2p_bytes(op, microbatch_seqs); }
  int tp_allreduce_calls(const Op& op) const override { return inner_->tp_allreduce_calls(op); }
  double tp_allreduce_bytes(const Op& op, int microbatch_seqs) const override {
    return inner_->tp_allreduce_bytes(op, microbatch_seqs);
  }
  double grad_bytes(int rank) const override { return inner_->grad_bytes(rank); }
  double optimizer_seconds(int rank) const override;
  double embedding_grad_bytes() const override { return inner_->embedding_grad_bytes(); }
  double param_bytes(int rank) const override { return inner_->param_bytes(rank); }
  double expert_grad_bytes(int rank) const override { return inner_->expert_grad_bytes(rank); }
  double expert_param_bytes(int rank) const override { return inner_->expert_param_bytes(rank); }
  double recompute_seconds(const Op& op, int microbatch_seqs) const override;
  double cp_wait_seconds(const Op& op, int microbatch_seqs) const override;
  const CostModel& inner() const { return *inner_; }

 private:
  double factor(int rank) const;
  std::unique_ptr<CostModel> inner_;
  std::vector<double> slowdown_;
};

}  // namespace pipescope
