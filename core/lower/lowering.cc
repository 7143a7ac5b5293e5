// Lowering passes: compute schedule -> per-worker programs with p2p, collectives and costs.
// Each pass copies its input and returns a new value (core/lower/lowering.h).
#include "core/lower/lowering.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "core/lower/cost_model.h"
#include "core/lower/grad_sync.h"
#include "core/lower/op_price.h"

namespace pipescope {

namespace {

int seqs_of(const Schedule& s, const Op& op) {
  return s.microbatches[static_cast<std::size_t>(op.microbatch)].seq_count;
}

// Room left at the end of rebuilt programs for the grad-sync collectives and the optimizer step, so that
// appending them does not reallocate million-op programs.
constexpr std::size_t kTailSlack = 4;

// A message op inserted into a worker's program: a Send after (after = true) its producer at position `at`, or a Recv
// before (after = false) its first consumer at `at`; msg: its message (LoweringSink::add). It names its producer op
// (position `producer` in the sender's program) instead of carrying a lowered op: 32 bytes, not 88 (a structure's
// inserts are rewritten at every structure of a search); message_op makes the op.
struct Insert {
  std::uint32_t at;  // a program position (programs stay far below 2^32 ops: docs/limits.md)
  std::int32_t msg;
  std::int32_t peer;       // the receiver (Send) or the sender (Recv)
  std::uint32_t producer;  // the producer's position in the sender's program
  double bytes;
  bool after;
};
static_assert(sizeof(Insert) == 32);

LOpKind kind_of(const Insert& x) { return x.after ? LOpKind::Send : LOpKind::Recv; }

// The lowered op of insert x into worker w's program, `progs` the compute programs.
LoweredOp message_op(const Insert& x, const std::vector<std::vector<LoweredOp>>& progs, std::size_t w) {
  LoweredOp l;
  l.kind = kind_of(x);
  l.op = progs[x.after ? w : static_cast<std::size_t>(x.peer)][x.producer].op;
  l.peer = x.peer;
  l.bytes = x.bytes;
  return l;
}

// Where a rule writes worker w's ops: the sink (lower()), or a vector (the passes run one by one).
struct ToSink {
  LoweringSink& sink;
  std::size_t w;
  void operator()(const LoweredOp& l, std::int32_t msg = -1) const { sink.add(w, l, msg); }
};
struct ToVector {
  std::vector<LoweredOp>& out;
  void operator()(const LoweredOp& l, std::int32_t = -1) const { out.push_back(l); }
};

// Worker w's program (of `progs`) with the inserts placed, each op handed to emit(op, msg) in the new order; inserts
// at the same spot keep their generation order. Placed by counting (each spot's inserts counted, then laid out in
// generation order): linear, no sort of the ops.
template <class Emit>
void apply_inserts(const std::vector<std::vector<LoweredOp>>& progs, std::size_t w, const std::vector<Insert>& ins,
                   const Emit& emit) {
  const std::vector<LoweredOp>& prog = progs[w];
  // Spot 2 * at + after: before op `at` (even) or after it (odd).
  std::vector<std::uint32_t> first(2 * prog.size() + 1, 0);
  for (const Insert& x : ins) first[2 * x.at + x.after + 1]++;
  for (std::size_t k = 1; k < first.size(); k++) first[k] += first[k - 1];
  std::vector<std::uint32_t> order(ins.size());
  {
    std::vector<std::uint32_t> next(first.begin(), first.end() - 1);
    for (std::size_t k = 0; k < ins.size(); k++)
      order[next[2 * ins[k].at + ins[k].after]++] = static_cast<std::uint32_t>(k);
  }
  std::size_t k = 0;
  auto place = [&](std::size_t x) { emit(message_op(ins[x], progs, w), ins[x].msg); };
  for (std::size_t i = 0; i < prog.size(); i++) {
    for (; k < first[2 * i + 1]; k++) place(order[k]);
    emit(prog[i], -1);
    for (; k < first[2 * i + 2]; k++) place(order[k]);
  }
}

// The scatter/gather rule for one op (add_scatter_gather): a Send or Recv carries its 1/tp share; a Recv of a
// non-empty message is followed by the all-gather of the whole tensor over the receiver's TP group `group`.
bool gathers(LOpKind k, double bytes) { return k == LOpKind::Recv && bytes > 0; }
bool gathers(const LoweredOp& l) { return gathers(l.kind, l.bytes); }
template <class Out>
void emit_scatter_gather(const Out& out, LoweredOp l, std::int32_t msg, int tp, std::int32_t group) {
  const double full = l.bytes;
  if (l.kind == LOpKind::Send || l.kind == LOpKind::Recv) l.bytes = message_bytes(full, true, tp);
  out(l, msg);
  if (l.kind != LOpKind::Recv || full <= 0) return;
  out(collective_op(LOpKind::AllGather, CollTag::ScatterGather, group, full, l.op));
}

// The tensor-parallel rule for one op (add_tp_allreduce): a compute op that issues TP all-reduces is followed by
// them (one op, `calls` folded) on worker w's TP group, created in `groups` on first use.
struct TpRule {
  const Schedule& schedule;
  const CostModel& cost;
  std::vector<CollGroup>& groups;
  template <class Out>
  void emit(const Out& out, const LoweredOp& l, int w, std::int32_t& group) const {
    if (l.kind != LOpKind::Compute) return;
    const OpAnswers a = ask_op(cost, l.op, seqs_of(schedule, l.op), kAskTp);
    if (a.tp_calls <= 0) return;
    if (group < 0) {
      group = static_cast<std::int32_t>(groups.size());
      groups.push_back(CollGroup{CollTag::TensorParallel, {static_cast<std::int32_t>(w)}});
    }
    out(tp_allreduce_op(l.op, a, group));
  }
};

// Worker w's scatter/gather group, made in `groups` when its program (with the inserts to come) gathers anything.
std::int32_t scatter_gather_group(const std::vector<LoweredOp>& prog, const std::vector<Insert>* ins, std::size_t w,
                                  std::vector<CollGroup>& groups) {
  // The inserts first: lower()'s programs are compute ops only, and almost every worker receives something.
  const bool any =
      (ins && std::any_of(ins->begin(), ins->end(), [](const Insert& x) { return gathers(kind_of(x), x.bytes); })) ||
      std::any_of(prog.begin(), prog.end(), [](const LoweredOp& l) { return gathers(l); });
  if (!any) return -1;
  groups.push_back(CollGroup{CollTag::ScatterGather, {static_cast<std::int32_t>(w)}});
  return static_cast<std::int32_t>(groups.size() - 1);
}

void require_shape(const LoweredSchedule& in, const char* pass) {
  if (in.dp < 1 || in.p < 1 || in.tp < 1 || in.per_worker.size() != static_cast<std::size_t>(in.dp) * in.p)
    throw std::invalid_argument(std::string(pass) + ": lowered schedule has " + std::to_string(in.per_worker.size()) +
                                " worker programs, expected dp * p = " + std::to_string(in.dp) + " * " +
                                std::to_string(in.p));
}

}  // namespace

LoweredSchedule lower_compute(Schedule s, int dp, int tp, const CostModel& cost) {
  const char* where = "lower_compute";
  if (dp < 1 || tp < 1)
    throw std::invalid_argument(std::string(where) + ": dp and tp must be >= 1, got dp = " + std::to_string(dp) +
                                ", tp = " + std::to_string(tp));
  if (s.p < 1 || s.per_rank.size() != static_cast<std::size_t>(s.p))
    throw std::invalid_argument(std::string(where) + ": schedule '" + s.name + "' has " +
                                std::to_string(s.per_rank.size()) + " rank lists for p = " + std::to_string(s.p));
  LoweredSchedule ls;
  ls.dp = dp;
  ls.p = s.p;
  ls.tp = tp;
  ls.per_worker.resize(static_cast<std::size_t>(dp) * s.p);
  for (int r = 0; r < s.p; r++) {
    std::vector<LoweredOp> prog;
    prog.reserve(s.per_rank[r].size() + kTailSlack);
    for (const Op& op : s.per_rank[r]) {
      if (op.microbatch < 0 || op.microbatch >= static_cast<int>(s.microbatches.size()))
        throw std::invalid_argument(std::string(where) + ": op " + op_text(op) + " on rank " + std::to_string(r) +
                                    " names micro-batch " + std::to_string(op.microbatch) + " of " +
                                    std::to_string(s.microbatches.size()));
      LoweredOp l;
      l.kind = LOpKind::Compute;
      l.op = op;
      l.seconds = ask_op(cost, op, seqs_of(s, op), kAskCompute).compute_s;
      prog.push_back(l);
    }
    for (int d = 0; d + 1 < dp; d++) ls.per_worker[LoweredSchedule::worker(d, r, s.p)] = prog;
    ls.per_worker[LoweredSchedule::worker(dp - 1, r, s.p)] = std::move(prog);
  }
  ls.schedule = std::move(s);  // a search lowers schedules of millions of ops: moved, not copied
  return ls;
}

namespace {

// The passes work on a value so that lower() can move one program set through all of them; the public
// functions copy their input once.
// add_p2p's messages: per worker, its Sends (after their producers) and Recvs (before their first consumers), each
// message numbered (its Send and its Recv alike) in the order made.
std::vector<std::vector<Insert>> p2p_inserts(const LoweredSchedule& in, const CostModel& cost) {
  const Schedule& s = in.schedule;
  const OpKeyIndex index(s);
  const int p = in.p;
  std::vector<std::vector<Insert>> ins(in.per_worker.size());
  for (int r = 0; r < p; r++)
    ins[r].reserve(2 * in.per_worker[r].size());  // a middle rank: a receive and a send per op
  // Per replica: where each op of the grid runs, and (per consumer worker) which producers it already receives.
  // Made unset (-1) here and cleared again only for a later replica: not zeroed, then filled.
  std::vector<std::int32_t> at_worker(index.size(), -1), at_index(index.size()), received_on(index.size(), -1);
  std::int32_t msgs = 0, replica0_msgs = 0;
  for (int d = 0; d < in.dp; d++) {
    if (d == 1) replica0_msgs = msgs;
    // A replica whose programs are replica 0's gets replica 0's messages, moved to its own workers (and numbers).
    if (d > 0 && replica_programs_equal(in, d)) {
      for (int r = 0; r < p; r++) {
        auto& mine = ins[LoweredSchedule::worker(d, r, p)];
        mine = ins[r];
        for (Insert& x : mine) x.peer += d * p, x.msg += msgs;
      }
      msgs += replica0_msgs;
      continue;
    }
    if (d > 0) {
      std::fill(at_worker.begin(), at_worker.end(), -1);
      std::fill(received_on.begin(), received_on.end(), -1);
    }
    for (int r = 0; r < p; r++) {
      const int w = LoweredSchedule::worker(d, r, p);
      const auto& prog = in.per_worker[w];
      for (std::size_t i = 0; i < prog.size(); i++) {
        if (prog[i].kind != LOpKind::Compute) continue;
        const std::int64_t slot = index.slot(key_of(prog[i].op));
        if (slot >= 0 && at_worker[slot] < 0) at_worker[slot] = w, at_index[slot] = static_cast<std::int32_t>(i);
      }
    }
    for (int r = 0; r < p; r++) {
      const int w = LoweredSchedule::worker(d, r, p);
      const auto& prog = in.per_worker[w];
      for (std::size_t i = 0; i < prog.size(); i++) {
        if (prog[i].kind != LOpKind::Compute) continue;
        OpKey deps[3];
        const int n_deps = op_dependencies(index, key_of(prog[i].op), deps);
        for (int k = 0; k < n_deps; k++) {
          const std::int64_t slot = index.slot(deps[k]);
          // A producer missing from the schedule is left for the checker to report by name.
          if (slot < 0 || at_worker[slot] < 0 || at_worker[slot] == w || received_on[slot] == w) continue;
          received_on[slot] = w;
          const int pw = at_worker[slot];
          const auto at = static_cast<std::uint32_t>(at_index[slot]);
          const Op& producer = in.per_worker[pw][at].op;
          const double bytes = ask_op(cost, producer, seqs_of(s, producer), kAskP2p).p2p_bytes;
          // An overlapped pair receives everything before its first op and sends after its second.
          const std::uint32_t send_at = at + (producer.overlap == Overlap::First ? 1 : 0);
          const auto recv_at = static_cast<std::uint32_t>(i - (prog[i].op.overlap == Overlap::Second ? 1 : 0));
          ins[pw].push_back(Insert{send_at, msgs, w, at, bytes, true});
          ins[w].push_back(Insert{recv_at, msgs++, pw, at, bytes, false});
        }
      }
    }
  }
  return ins;
}

// add_p2p, then add_scatter_gather (when `scatter_gather`) and add_tp_allreduce (when `tp_allreduce`) in one sweep
// over each program, every op written to `sink`: the same rules (emit_scatter_gather, TpRule) and the same group
// numbering (every scatter/gather group before the first TP group, each kind in worker order) as the passes one by
// one, without two more copies of every program. `in`: compute programs; its groups get the new ones.
void p2p_sg_tp_to(LoweredSchedule& in, const CostModel& cost, bool scatter_gather, bool tp_allreduce,
                  LoweringSink& sink) {
  const std::vector<std::vector<Insert>> ins = p2p_inserts(in, cost);
  const bool tp = tp_allreduce && in.tp > 1;  // neither later pass changes anything with tp = 1
  std::vector<std::int32_t> sg(in.per_worker.size(), -1);
  if (tp && scatter_gather)
    for (std::size_t w = 0; w < sg.size(); w++) sg[w] = scatter_gather_group(in.per_worker[w], &ins[w], w, in.groups);
  const TpRule tp_rule{in.schedule, cost, in.groups};
  for (std::size_t w = 0; w < ins.size(); w++) {
    const ToSink out{sink, w};
    std::int32_t tp_group = -1;
    auto emit = [&](const LoweredOp& l, std::int32_t msg) {
      if (!tp) return out(l, msg);
      if (scatter_gather)
        emit_scatter_gather(out, l, msg, in.tp, sg[w]);
      else
        out(l, msg);
      tp_rule.emit(out, l, static_cast<int>(w), tp_group);
    };
    // Room for a TP all-reduce after each compute op and an all-gather after each receive, and the tail.
    const std::size_t n = in.per_worker[w].size() + ins[w].size();
    sink.reserve(w, (tp ? 2 * n : n) + kTailSlack);
    apply_inserts(in.per_worker, w, ins[w], emit);
  }
}

LoweredSchedule p2p_pass(LoweredSchedule in, const CostModel& cost) {
  require_shape(in, "add_p2p");
  std::vector<std::vector<LoweredOp>> out;
  ProgramSink sink(out);
  sink.begin(in);
  p2p_sg_tp_to(in, cost, false, false, sink);
  in.per_worker = std::move(out);
  return in;
}

LoweredSchedule scatter_gather_pass(LoweredSchedule in) {
  require_shape(in, "add_scatter_gather");
  if (in.tp == 1) return in;
  for (std::size_t w = 0; w < in.per_worker.size(); w++) {
    auto& prog = in.per_worker[w];
    const std::int32_t group = scatter_gather_group(prog, nullptr, w, in.groups);
    std::vector<LoweredOp> next;
    const auto recvs = std::count_if(prog.begin(), prog.end(), [](const LoweredOp& l) { return gathers(l); });
    next.reserve(prog.size() + static_cast<std::size_t>(recvs) + kTailSlack);
    for (const LoweredOp& l : prog) emit_scatter_gather(ToVector{next}, l, -1, in.tp, group);
    prog = std::move(next);
  }
  return in;
}

LoweredSchedule tp_pass(LoweredSchedule in, const CostModel& cost) {
  require_shape(in, "add_tp_allreduce");
  if (in.tp == 1) return in;
  const TpRule tp{in.schedule, cost, in.groups};
  for (std::size_t w = 0; w < in.per_worker.size(); w++) {
    const auto& prog = in.per_worker[w];
    std::vector<LoweredOp> next;
    const auto computes =
        std::count_if(prog.begin(), prog.end(), [](const LoweredOp& l) { return l.kind == LOpKind::Compute; });
    next.reserve(prog.size() + static_cast<std::size_t>(computes) + kTailSlack);
    std::int32_t group = -1;  // this worker's TP group, created on first use
    for (const LoweredOp& l : prog) {
      next.push_back(l);
      tp.emit(ToVector{next}, l, static_cast<int>(w), group);
    }
    in.per_worker[w] = std::move(next);
  }
  return in;
}

// Passes 4 and 5 on `ls` (its groups, schedule and shape), their ops written to `sink`.
void grad_sync_to(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& o, LoweringSink& sink) {
  const int p = ls.p;
  // DualPipe's copies reduce together even without data parallelism (core/lower/grad_sync.h).
  const bool copies = ls.schedule.style == StageStyle::Dual;
  if (ls.dp > 1 || o.replica_of_dp || copies) add_dp_grad_sync(ls, cost, o, sink);  // core/lower/grad_sync.cc
  const double emb = cost.embedding_grad_bytes();
  // The ranks of the first and the last virtual stage (the same rank in a V-shaped schedule: nothing to sync).
  const int r_first = ls.schedule.rank_of_stage(0), r_last = ls.schedule.rank_of_stage(ls.schedule.stages() - 1);
  if (emb > 0 && r_first != r_last) {
    for (int d = 0; d < ls.dp; d++) {
      ls.groups.push_back(CollGroup{CollTag::Embedding,
                                    {LoweredSchedule::worker(d, r_first, p), LoweredSchedule::worker(d, r_last, p)}});
      const auto group = static_cast<std::int32_t>(ls.groups.size() - 1);
      for (std::int32_t w : ls.groups.back().workers)
        sink.add(static_cast<std::size_t>(w), collective_op(LOpKind::AllReduce, CollTag::Embedding, group, emb), -1);
    }
  }
}

void optimizer_to(LoweredSchedule& ls, const CostModel& cost, const GradSyncOptions& opts, LoweringSink& sink) {
  for (int w = 0; w < ls.workers(); w++) {
    LoweredOp o;
    o.kind = LOpKind::Optimizer;
    o.seconds = cost.optimizer_seconds(w % ls.p);
    sink.add(static_cast<std::size_t>(w), o, -1);
  }
  if (ls.dp > 1 || opts.replica_of_dp || ls.schedule.style == StageStyle::Dual)
    add_param_gather(ls, cost, opts, sink);  // core/lower/grad_sync.cc
}

}  // namespace

LoweredSchedule add_p2p(const LoweredSchedule& in, const CostModel& cost) { return p2p_pass(in, cost); }
LoweredSchedule add_scatter_gather(const LoweredSchedule& in) { return scatter_gather_pass(in); }
LoweredSchedule add_tp_allreduce(const LoweredSchedule& in, const CostModel& cost) { return tp_pass(in, cost); }
LoweredSchedule add_grad_sync(const LoweredSchedule& in, const CostModel& cost, const GradSyncOptions& o) {
  require_shape(in, "add_grad_sync");
  LoweredSchedule out = in;
  ProgramSink sink(out.per_worker);
  grad_sync_to(out, cost, o, sink);
  return out;
}
LoweredSchedule add_optimizer(const LoweredSchedule& in, const CostModel& cost, const GradSyncOptions& o) {
  require_shape(in, "add_optimizer");
  LoweredSchedule out = in;
  ProgramSink sink(out.per_worker);
  optimizer_to(out, cost, o, sink);
  return out;
}

Schedule fuse_adjacent_iw(const Schedule& s) {
  Schedule out = s;
  for (auto& ops : out.per_rank) {
    std::vector<Op> next;
    next.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); i++) {
      Op w = ops[i];
      w.kind = OpKind::BackwardWeight;
      const bool pair = ops[i].kind == OpKind::BackwardInput && i + 1 < ops.size() && ops[i + 1] == w;
      next.push_back(ops[i]);
      if (!pair) continue;
      next.back().kind = OpKind::Backward;
      i++;
    }
    ops = std::move(next);
  }
  return out;
}

void lower_to(Schedule s, int dp, int tp, const CostModel& cost, bool scatter_gather, const GradSyncOptions& grad_sync,
              LoweredSchedule& ls, LoweringSink& sink) {
  ls = lower_compute(std::move(s), dp, tp, cost);
  sink.begin(ls);
  p2p_sg_tp_to(ls, cost, scatter_gather, true, sink);  // add_p2p, add_scatter_gather, add_tp_allreduce
  ls.per_worker.clear();                               // the compute programs: what the sink has replaces them
  grad_sync_to(ls, cost, grad_sync, sink);
  optimizer_to(ls, cost, grad_sync, sink);
}

LoweredSchedule lower(Schedule s, int dp, int tp, const CostModel& cost, bool scatter_gather,
                      const GradSyncOptions& grad_sync) {
  LoweredSchedule ls;
  std::vector<std::vector<LoweredOp>> programs;
  ProgramSink sink(programs);
  lower_to(std::move(s), dp, tp, cost, scatter_gather, grad_sync, ls, sink);
  ls.per_worker = std::move(programs);
  return ls;
}

}  // namespace pipescope
