// Overlapped pairs in a lowered program (core/lower/overlap.h).
#include "core/lower/overlap.h"

#include <stdexcept>
#include <string>

namespace pipescope {

bool overlappable(CollTag tag, PairHides hides) {
  switch (tag) {
    case CollTag::TensorParallel:
      switch (hides) {
        case PairHides::ExpertParallel:
          return false;
        case PairHides::ExpertAndTensorParallel:
          return true;
      }
      return false;
    case CollTag::ExpertParallel:
      return true;
    case CollTag::None:
    case CollTag::DataParallel:
    case CollTag::Embedding:
    case CollTag::ScatterGather:
    case CollTag::ParamGather:
    case CollTag::ContextParallel:
    case CollTag::ExpertData:
      return false;
  }
  return false;
}

double overlap_compute_factor(int sm_count, int comm_sm_count) {
  if (comm_sm_count < 0 || (sm_count > 0 && comm_sm_count >= sm_count))
    throw std::invalid_argument("comm_sm_count " + std::to_string(comm_sm_count) +
                                " must be in [0, sm_count = " + std::to_string(sm_count) + ")");
  if (sm_count <= 0 || comm_sm_count == 0) return 1.0;
  return static_cast<double>(sm_count) / (sm_count - comm_sm_count);
}

namespace {

// The ops of the pair whose first compute op is at `first`: up to the first op after its second compute op that is
// not one of the pair's collectives. Marks those collectives; returns whether there were any and the end.
std::size_t mark_pair(std::vector<LoweredOp>& prog, std::size_t first, PairHides hides, bool& any) {
  const Op a = prog[first].op;
  std::size_t i = first + 1;
  bool second_seen = false;
  for (; i < prog.size(); i++) {
    LoweredOp& l = prog[i];
    if (!second_seen && l.kind == LOpKind::Compute && l.op.overlap == Overlap::Second) {
      second_seen = true;
      continue;
    }
    const bool mine = is_collective(l.kind) && !l.async && overlappable(l.tag, hides) &&
                      (key_of(l.op) == key_of(a) || (second_seen && l.op.overlap == Overlap::Second));
    if (!mine) {
      if (second_seen) break;
      continue;
    }
    l.overlap = true;
    any = true;
  }
  return i;
}

}  // namespace

LoweredSchedule overlap_pairs(LoweredSchedule ls, double compute_factor, PairHides hides) {
  if (!(compute_factor >= 1.0))
    throw std::invalid_argument("overlap_pairs: compute factor " + std::to_string(compute_factor) + " below 1");
  for (auto& prog : ls.per_worker)
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].kind != LOpKind::Compute || prog[i].op.overlap != Overlap::First) continue;
      bool any = false;
      const std::size_t end = mark_pair(prog, i, hides, any);
      if (any)
        for (std::size_t k = i; k < end; k++)
          if (prog[k].kind == LOpKind::Compute) prog[k].seconds *= compute_factor;
      i = end - 1;
    }
  return ls;
}

}  // namespace pipescope
