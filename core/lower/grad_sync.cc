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
