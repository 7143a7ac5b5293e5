#include "core/lower/grad_sync.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/lower/cost_model.h"
#include "core/lower/op_price.h"

namespace pipescope {

GradSyncOptions grad_sync_options(const TrainingSpec& t) {
  GradSyncOptions o;
  // FSDP moves what the distributed optimizer moves, each stage's share when it is due: its parameters gathered
  // before its first op, its gradients reduce-scattered after its last backward (config.h TrainingSpec::fsdp).
  o.distributed_optimizer = t.sharded_optimizer();
  o.overlap_grad_reduce = t.overlap_grad_reduce || t.fsdp;
  o.bucket_bytes = t.grad_bucket_bytes;
  o.overlap_param_gather = t.overlap_param_gather || t.fsdp;
  o.reshard_after_forward = t.fsdp && t.fsdp_reshard_after_forward;
  return o;
}

namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// Where each virtual stage of a program starts (its first compute op) and where its weight gradients become final
// (its last B or W), in stage order.
struct StageSpan {
  int stage = 0;
  std::size_t first = kNone, last_backward = kNone;
};
std::vector<StageSpan> stage_spans(const std::vector<LoweredOp>& prog) {
  // Indexed by virtual stage (a few per program; a search lowers millions of ops: no map per op).
  std::vector<StageSpan> by_stage;
  for (std::size_t i = 0; i < prog.size(); i++) {
    if (prog[i].kind != LOpKind::Compute) continue;
    const int stage = prog[i].op.stage;
    if (stage < 0) throw std::invalid_argument("gradient sync: " + op_text(prog[i].op) + " has a negative stage");
    if (static_cast<std::size_t>(stage) >= by_stage.size()) by_stage.resize(static_cast<std::size_t>(stage) + 1);
    StageSpan& s = by_stage[static_cast<std::size_t>(stage)];
    s.stage = stage;
    if (s.first == kNone) s.first = i;
    if (prog[i].op.kind == OpKind::Backward || prog[i].op.kind == OpKind::BackwardWeight) s.last_backward = i;
  }
  std::vector<StageSpan> out;
  for (const StageSpan& span : by_stage)
    if (span.first != kNone) out.push_back(span);
  return out;
}

// Inserts each op before its position; ops for one position keep their order.
void insert_before(std::vector<LoweredOp>& prog, std::vector<std::pair<std::size_t, LoweredOp>> ins) {
  std::stable_sort(ins.begin(), ins.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LoweredOp> out;
  out.reserve(prog.size() + ins.size() + 4);
  std::size_t k = 0;
  for (std::size_t i = 0; i < prog.size(); i++) {
    for (; k < ins.size() && ins[k].first == i; k++) out.push_back(ins[k].second);
    out.push_back(prog[i]);
  }
  for (; k < ins.size(); k++) out.push_back(ins[k].second);
  prog = std::move(out);
}

// Worker w's program so far, for a pass that inserts into it.
std::vector<LoweredOp>& program_of(LoweringSink& sink, std::int32_t w) {
  std::vector<LoweredOp>* prog = sink.program(static_cast<std::size_t>(w));
  if (!prog)
    throw std::logic_error("gradient sync: overlapped collectives need the programs, which this sink keeps not");
  return *prog;
}

// ---------------------------------------------------------------- FSDP's actions, where a schedule names them
// Where an action "before compute op k" goes in a lowered program: before the k-th Compute op and the receives (and
// their scatter/gather) that prepare it, so that it is posted when the op before it is done; the program's end for
// k = the rank's op count.
std::vector<std::size_t> action_positions(const std::vector<LoweredOp>& prog) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < prog.size(); i++) {
    if (prog[i].kind != LOpKind::Compute) continue;
    std::size_t k = i;
    while (k > 0 && (prog[k - 1].kind == LOpKind::Recv || prog[k - 1].tag == CollTag::ScatterGather)) k--;
    at.push_back(k);
  }
  at.push_back(prog.size());
  return at;
}

// The compute op of `stage` at or after compute op `from` (UNSHARD: the op that waits for it), or the last one before
// `from` (REDUCE_GRAD: the backward whose gradients it reduces).
Op stage_op(const std::vector<Op>& ops, int stage, std::size_t from, bool after) {
  if (after) {
    for (std::size_t i = from; i < ops.size(); i++)
      if (ops[i].stage == stage) return ops[i];
  } else {
    for (std::size_t i = std::min(from, ops.size()); i-- > 0;)
      if (ops[i].stage == stage) return ops[i];
  }
  throw std::logic_error("FSDP actions: no op of stage " + std::to_string(stage) + " where the action needs one");
}

// The rank's actions of one kind as async collectives of `kind` on group g: each stage's `bytes` share (its rank's
// bytes over its stages) in buckets, posted where the action sits.
void add_shard_collectives(LoweredSchedule& ls, std::int32_t w, ShardKind which, LOpKind kind, CollTag tag,
                           std::int32_t g, double rank_bytes, double bucket_bytes, LoweringSink& sink) {
  const int r = w % ls.p;
  const std::vector<Op>& ops = ls.schedule.per_rank[static_cast<std::size_t>(r)];
  std::vector<LoweredOp>& prog = program_of(sink, w);
  const std::vector<std::size_t> at = action_positions(prog);
  const BucketSplit b = split_buckets(rank_bytes, ls.schedule.v, bucket_bytes);
  std::vector<std::pair<std::size_t, LoweredOp>> ins;
  for (const ShardAction& a : ls.schedule.shard_actions[static_cast<std::size_t>(r)]) {
    if (a.kind != which) continue;
    const auto before = static_cast<std::size_t>(a.before);
    for (int j = 0; j < b.n; j++) {
      LoweredOp c =
          collective_op(kind, tag, g, b.bytes_each, stage_op(ops, a.stage, before, which == ShardKind::Unshard));
      c.async = true;
      ins.emplace_back(at.at(before), c);
    }
  }
  insert_before(prog, std::move(ins));
}

// Resharding after forward: before each forward and backward (B or I) of worker w, its stage's gather in buckets; the
// op waits for the first bucket, the rank's next op (or the optimizer) for the others, which FSDP prefetches block by
// block while the op computes.
void add_gathers_per_op(LoweredSchedule& ls, std::int32_t w, std::int32_t g, double rank_bytes, double bucket_bytes,
                        LoweringSink& sink) {
  const std::vector<Op>& ops = ls.schedule.per_rank[static_cast<std::size_t>(w % ls.p)];
  std::vector<LoweredOp>& prog = program_of(sink, w);
  const std::vector<std::size_t> at = action_positions(prog);
  const BucketSplit b = split_buckets(rank_bytes, ls.schedule.v, bucket_bytes);
  std::vector<std::pair<std::size_t, LoweredOp>> ins;
  for (std::size_t k = 0; k < ops.size(); k++) {
    if (ops[k].kind == OpKind::BackwardWeight) continue;  // weight gradients need no weights
    for (int j = 0; j < b.n; j++) {
      const Op& waits = j == 0 || k + 1 == ops.size() ? ops[k] : ops[k + 1];
      LoweredOp c = collective_op(LOpKind::AllGather, CollTag::ParamGather, g, b.bytes_each, waits);
      c.async = true;
      ins.emplace_back(at[k], c);
    }
  }
  insert_before(prog, std::move(ins));
}

}  // namespace

std::vector<std::int32_t> rank_groups(LoweredSchedule& ls, CollTag tag) {
  const bool copies = ls.schedule.style == StageStyle::Dual;
  std::vector<std::int32_t> of_rank(static_cast<std::size_t>(ls.p), -1);
  for (int r = 0; r < ls.p; r++) {
    const int mirror = ls.p - 1 - r;
    if (copies && r > mirror) {
      of_rank[static_cast<std::size_t>(r)] = of_rank[static_cast<std::size_t>(mirror)];
      continue;
    }
    CollGroup g{tag, {}};
    for (int d = 0; d < ls.dp; d++) {
      g.workers.push_back(LoweredSchedule::worker(d, r, ls.p));
      if (copies && mirror != r) g.workers.push_back(LoweredSchedule::worker(d, mirror, ls.p));
    }
    ls.groups.push_back(std::move(g));
    of_rank[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(ls.groups.size() - 1);
  }
  return of_rank;
}

void add_dp_grad_sync(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o, LoweringSink& sink) {
  const LOpKind kind = grad_reduce_kind(o.distributed_optimizer);
  const std::vector<std::int32_t> groups = rank_groups(ls, CollTag::DataParallel);
  for (int r = 0; r < ls.p; r++) {
    const std::int32_t g = groups[static_cast<std::size_t>(r)];
    const double bytes = cost.grad_bytes(r);
    for (std::int32_t w : ls.groups[g].workers) {
      if (w % ls.p != r) continue;  // a DualPipe group's other rank: its own turn
      if (!ls.schedule.shard_actions.empty()) {
        add_shard_collectives(ls, w, ShardKind::ReduceGrad, kind, CollTag::DataParallel, g, bytes, o.bucket_bytes,
                              sink);
        continue;
      }
      // Not overlapped (or nothing to overlap): one call at the end. The program is scanned only when overlapped
      // (a search lowers millions of ops).
      std::vector<StageSpan> spans;
      if (o.overlap_grad_reduce) spans = stage_spans(program_of(sink, w));
      spans.erase(
          std::remove_if(spans.begin(), spans.end(), [](const StageSpan& s) { return s.last_backward == kNone; }),
          spans.end());
      if (spans.empty()) {
        sink.add(static_cast<std::size_t>(w), collective_op(kind, CollTag::DataParallel, g, bytes), -1);
        continue;
      }
      std::vector<LoweredOp>& prog = program_of(sink, w);
      const BucketSplit b = split_buckets(bytes, static_cast<int>(spans.size()), o.bucket_bytes);
      std::vector<std::pair<std::size_t, LoweredOp>> ins;
      for (const StageSpan& s : spans) {
        const LoweredOp& last = prog[s.last_backward];
        for (int j = 0; j < b.n; j++) {
          LoweredOp c = collective_op(kind, CollTag::DataParallel, g, b.bytes_each);
          c.async = true;
          c.op = last.op;
          c.lead_s = bucket_lead_s(last.seconds, j, b.n);
          ins.emplace_back(s.last_backward, c);
        }
      }
      insert_before(prog, std::move(ins));
    }
  }
}

void add_param_gather(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o, LoweringSink& sink) {
  if (!o.distributed_optimizer) return;
  const std::vector<std::int32_t> groups = rank_groups(ls, CollTag::ParamGather);
  for (int r = 0; r < ls.p; r++) {
    const std::int32_t g = groups[static_cast<std::size_t>(r)];
    const double bytes = cost.param_bytes(r);
    for (std::int32_t w : ls.groups[g].workers) {
      if (w % ls.p != r) continue;  // as in add_dp_grad_sync
      if (!ls.schedule.shard_actions.empty()) {
        add_shard_collectives(ls, w, ShardKind::Unshard, LOpKind::AllGather, CollTag::ParamGather, g, bytes,
                              o.bucket_bytes, sink);
        continue;
      }
      if (o.reshard_after_forward) {
        add_gathers_per_op(ls, w, g, bytes, o.bucket_bytes, sink);
        continue;
      }
      std::vector<StageSpan> spans;
      if (o.overlap_param_gather) spans = stage_spans(program_of(sink, w));  // scanned only when overlapped, as above
      if (spans.empty()) {
        sink.add(static_cast<std::size_t>(w), collective_op(LOpKind::AllGather, CollTag::ParamGather, g, bytes), -1);
        continue;
      }
      std::vector<LoweredOp>& prog = program_of(sink, w);
      // In the order the stages first run, all posted at the program start.
      std::sort(spans.begin(), spans.end(), [](const StageSpan& a, const StageSpan& b) { return a.first < b.first; });
      const BucketSplit b = split_buckets(bytes, static_cast<int>(spans.size()), o.bucket_bytes);
      std::vector<std::pair<std::size_t, LoweredOp>> ins;
      for (const StageSpan& s : spans)
        for (int j = 0; j < b.n; j++) {
          LoweredOp c = collective_op(LOpKind::AllGather, CollTag::ParamGather, g, b.bytes_each);
          c.async = true;
          c.op = prog[s.first].op;
          ins.emplace_back(0, c);
        }
      insert_before(prog, std::move(ins));
    }
  }
}

void add_dp_grad_sync(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o) {
  ProgramSink sink(ls.per_worker);
  add_dp_grad_sync(ls, cost, o, sink);
}

void add_param_gather(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o) {
  ProgramSink sink(ls.per_worker);
  add_param_gather(ls, cost, o, sink);
}

}  // namespace pipescope
