#include "core/lower/op_price.h"

#include <algorithm>
#include <cmath>

#include "core/lower/cost_model.h"

namespace pipescope {

std::uint8_t question_of(const LoweredOp& l) {
  switch (l.kind) {
    case LOpKind::Compute:
      return kAskCompute;
    case LOpKind::Send:
    case LOpKind::Recv:
      return kAskP2p;
    case LOpKind::Optimizer:
      return 0;
    case LOpKind::AllReduce:
    case LOpKind::AllGather:
    case LOpKind::ReduceScatter:
    case LOpKind::AllToAll:
      break;
  }
  switch (l.tag) {
    case CollTag::TensorParallel:
      return kAskTp;
    case CollTag::ScatterGather:
      return kAskP2p;
    case CollTag::DataParallel:
      return l.async ? kAskCompute : 0;  // an overlapped bucket's lead is a share of its backward
    case CollTag::None:
    case CollTag::Embedding:
    case CollTag::ParamGather:
    case CollTag::ContextParallel:
    case CollTag::ExpertParallel:
    case CollTag::ExpertData:
      return 0;  // rank questions, or priced by its own pass (core/cost/context_parallel.h, expert_parallel.h)
  }
  return 0;
}

OpAnswers ask_op(const CostModel& cost, const Op& op, int seqs, std::uint8_t asks) {
  OpAnswers a;
  if (asks & kAskCompute) a.compute_s = cost.compute_seconds(op, seqs);
  if (asks & kAskP2p) a.p2p_bytes = cost.p2p_bytes(op, seqs);
  if (asks & kAskTp) {
    a.tp_calls = cost.tp_allreduce_calls(op);
    if (a.tp_calls > 0) a.tp_bytes = cost.tp_allreduce_bytes(op, seqs);
  }
  return a;
}

constexpr double kMaxBuckets = 1024;
int bucket_count(double bytes, double bucket_bytes) {
  if (!(bucket_bytes > 0) || !(bytes > 0)) return 1;
  return static_cast<int>(std::clamp(std::ceil(bytes / bucket_bytes), 1.0, kMaxBuckets));
}

BucketSplit split_buckets(double rank_bytes, int spans, double bucket_bytes) {
  const double per_stage = rank_bytes / static_cast<double>(spans);
  BucketSplit b;
  b.n = bucket_count(per_stage, bucket_bytes);
  b.bytes_each = per_stage / b.n;
  return b;
}

}  // namespace pipescope
