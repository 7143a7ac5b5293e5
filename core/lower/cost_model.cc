// ConstantCostModel: fixed per-(micro-batch, stage) costs, scaled by chunk (1/v) and token share.
#include "core/lower/cost_model.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace pipescope {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("ConstantCostModel: " + what);
}

}  // namespace

ConstantCostModel::ConstantCostModel(ConstantCosts c) : c_(c) {
  require(c.v >= 1, "v must be >= 1, got " + std::to_string(c.v));
  require(c.seq_len >= 1, "seq_len must be >= 1, got " + std::to_string(c.seq_len));
  require(c.tp_calls_fwd >= 0, "tp_calls_fwd must be >= 0, got " + std::to_string(c.tp_calls_fwd));
  for (int n : c.stage_tp_calls) require(n >= 0, "stage_tp_calls must be >= 0, got " + std::to_string(n));
  const double vals[] = {c.forward_s,   c.backward_s, c.p2p_bytes,        c.grad_bytes,
                         c.optimizer_s, c.tp_bytes,   c.expert_grad_bytes};
  for (double x : vals) require(std::isfinite(x) && x >= 0, "costs and sizes must be finite and >= 0");
  require(c.weight_share >= 0 && c.weight_share <= 1, "weight_share must be in [0, 1]");
}

double ConstantCostModel::token_share(const Op& op) const { return static_cast<double>(op.tokens()) / c_.seq_len; }

double ConstantCostModel::compute_seconds(const Op& op, int) const {
  double stage_s = 0;
  switch (op.kind) {
    case OpKind::Forward:
      stage_s = c_.forward_s;
      break;
    case OpKind::Backward:
      stage_s = c_.backward_s;
      break;
    case OpKind::BackwardInput:
      stage_s = c_.backward_s * (1 - c_.weight_share);
      break;
    case OpKind::BackwardWeight:
      stage_s = c_.backward_s * c_.weight_share;
      break;
  }
  return stage_s / c_.v * token_share(op);
}

// An activation (or its gradient) has the same size whichever chunk produced it.
double ConstantCostModel::p2p_bytes(const Op& op, int) const { return c_.p2p_bytes * token_share(op); }

int ConstantCostModel::tp_allreduce_calls(const Op& op) const {
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Backward:
    case OpKind::BackwardInput:
      if (c_.stage_tp_calls.empty()) return c_.tp_calls_fwd;
      if (op.stage < 0 || op.stage >= static_cast<int>(c_.stage_tp_calls.size()))
        throw std::invalid_argument("ConstantCostModel: stage " + std::to_string(op.stage) +
                                    " has no stage_tp_calls entry");
      return c_.stage_tp_calls[static_cast<std::size_t>(op.stage)];
    case OpKind::BackwardWeight:  // weight gradients stay on their GPU
      return 0;
  }
  return 0;
}

double ConstantCostModel::tp_allreduce_bytes(const Op& op, int) const { return c_.tp_bytes * token_share(op); }

}  // namespace pipescope
