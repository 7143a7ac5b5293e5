#pragma once
// How a lowered op's values are made from the cost model's answers, stated once. The lowering passes price each op as
// they make it (core/lower/lowering.cc, core/lower/grad_sync.cc); the search's re-timing asks each question once per
// op class and re-prices a cached DAG with the same rules (core/plan/search_retime.cc); the search's bound prices a
// stage's ops with them (core/plan/search_bound.cc). A new cost mechanism changes an answer (CostModel) or a rule
// here, and every consumer follows.

#include <cstdint>

#include "core/lower/lowered_schedule.h"

namespace pipescope {

class CostModel;

// The questions a lowered op's values come from, per compute op (a bit set: an op class may be asked several).
enum CostAsk : std::uint8_t {
  kAskCompute = 1,  // the op's duration (a Compute op; the lead of the gradient buckets posted before it)
  kAskP2p = 2,      // the tensor it sends on (its Send and Recv; the all-gather of a scatter/gather receive)
  kAskTp = 4,       // its tensor-parallel all-reduces (calls, bytes per call)
};
// The question lowered op `l` reads of the cost model about its op (0: none about an op, e.g. an optimizer step).
std::uint8_t question_of(const LoweredOp& l);

// The cost model's answers about one compute op of a micro-batch of `seqs` sequences (unasked ones stay 0).
struct OpAnswers {
  double compute_s = 0;
  double p2p_bytes = 0;
  std::int32_t tp_calls = 0;
  double tp_bytes = 0;  // per call; asked only when there are calls
};
OpAnswers ask_op(const CostModel& cost, const Op& op, int seqs, std::uint8_t asks);

// The rules.
// A Send's or Recv's bytes: the whole tensor, or with Megatron's scatter/gather its 1/tp share.
inline double message_bytes(double p2p_bytes, bool scatter_gather, int tp) {
  return scatter_gather ? p2p_bytes / tp : p2p_bytes;
}
// The tensor-parallel all-reduces after compute op `op` on `group` (a.tp_calls > 0): one op, the calls folded.
inline LoweredOp tp_allreduce_op(const Op& op, const OpAnswers& a, std::int32_t group) {
  LoweredOp ar = collective_op(LOpKind::AllReduce, CollTag::TensorParallel, group, a.tp_bytes, op);
  ar.count = a.tp_calls;
  return ar;
}
// The gradients' collective: a reduce-scatter with the distributed optimizer, an all-reduce without.
inline LOpKind grad_reduce_kind(bool distributed_optimizer) {
  return distributed_optimizer ? LOpKind::ReduceScatter : LOpKind::AllReduce;
}
// A rank's gradient (or parameter) bytes overlapped by virtual stage: `spans` stages share them equally, each cut
// into n buckets of bytes_each (bucket_count).
struct BucketSplit {
  int n = 1;
  double bytes_each = 0;
};
BucketSplit split_buckets(double rank_bytes, int spans, double bucket_bytes);
// Gradient bucket j of n becomes ready (j + 1) / n of the way through the stage's last backward (reverse layer order).
inline double bucket_lead_s(double last_backward_s, int j, int n) { return last_backward_s * (j + 1) / n; }
// Buckets of a virtual stage's `bytes`: bytes / bucket_bytes rounded up, 1 to 1024 (tiny buckets would only multiply
// collectives: beyond that they grow).
int bucket_count(double bytes, double bucket_bytes);

}  // namespace pipescope
