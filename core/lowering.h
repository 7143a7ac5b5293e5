#pragma once
// Lowering: a compute-only Schedule becomes a LoweredSchedule, one ordered program per worker, with
// explicit point-to-point sends/receives and collectives, costs (seconds) and sizes (bytes) attached.
// Each pass is a pure function (const in, new value out) with its own tests. The simulator
// (sim/engine.h) and the validation runtime (runtime/) both execute a LoweredSchedule, and both refuse
// one that core/checks.h has not accepted.
//
// A worker is one model-parallel pipeline rank of one data-parallel replica: worker = d * p + r.
// A worker stands for its whole tensor-parallel group of tp GPUs (they run the same ops in lock step);
// Placement maps (worker, tp_rank) to GPUs.
//
// Execution semantics of a worker's program (shared by the simulator, the dry run and the runtime):
// - Compute, Recv, Collective and Optimizer ops run in list order, each after the previous non-Send op.
// - A Send is posted (asynchronously, eager) after the previous non-Send op completes; the ops after it do
//   not wait for it (with LoweredSchedule::blocking_sends they do: the next non-Send op starts only once the
//   transfer has arrived). It is matched with exactly one Recv on the peer (same tag, same bytes).
// - A Recv completes when its matching transfer has arrived (and after the worker's previous op).
// - A Collective (AllReduce, AllGather) starts when every member of its group has reached it; members
//   match collectives by (group, seq): the n-th collective of a group on each member is the same call.
// - An async collective (overlapped gradient reduction / parameter gather, core/grad_sync.h) is posted like an
//   eager Send: it becomes ready lead_s seconds after the worker's previous non-Send, non-async op completes, and
//   the ops after it do not wait for it. It is awaited by the worker's next Optimizer op, or, for a ParamGather,
//   by the worker's first later Compute op of the virtual stage in its `op` field. An async collective without a
//   lead also waits for the previous async collective of its group (one communication stream per group).

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/schedule.h"

namespace pipescope {

class CostModel;

enum class LOpKind : std::uint8_t {
  Compute,        // op: the compute op; seconds: its duration
  Send,           // op: the compute op whose output is carried (F: activation, B: gradient); peer, bytes
  Recv,           // op: same producer op as the matching Send; peer, bytes
  AllReduce,      // group, bytes (per-rank buffer), tag says what (DP grads, TP layer, embedding)
  AllGather,      // group, bytes (total output); Megatron scatter/gather on arrival; distributed optimizer's params
  ReduceScatter,  // group, bytes (total input); the distributed optimizer's gradient reduction
  Optimizer,      // seconds
};
constexpr std::size_t kLOpKinds = static_cast<std::size_t>(LOpKind::Optimizer) + 1;  // flat per-kind tables

// ParamGather: the distributed optimizer's all-gather of the updated parameters over the DP group.
// ContextParallel: the K/V ring exchange of context-parallel attention (core/context_parallel.h), posted async.
enum class CollTag : std::uint8_t {
  None,
  DataParallel,
  TensorParallel,
  Embedding,
  ScatterGather,
  ParamGather,
  ContextParallel
};

// Fields ordered so that the struct packs into 72 bytes (the lowering passes copy millions of them in a search).
struct LoweredOp {
  LOpKind kind = LOpKind::Compute;
  CollTag tag = CollTag::None;
  bool async = false;       // collectives only: posted, not waited for by the next op (see the semantics above)
  Op op;                    // compute op (Compute) or producer op (Send/Recv/TP collective)
  std::int32_t peer = -1;   // peer worker (Send/Recv)
  std::int32_t group = -1;  // collective group index (AllReduce/AllGather)
  std::int32_t count = 1;   // number of back-to-back collective calls folded into this one (TP: per layer)
  double seconds = 0;       // Compute / Optimizer duration
  double bytes = 0;         // Send/Recv message size; collective size per call
  double lead_s = 0;        // async collectives: ready this long after the previous op completes
};
static_assert(sizeof(LoweredOp) == 72);

// A collective op of `kind` and `tag` on `group`, `bytes` per call, for the compute op `op` (per-op collectives name
// theirs; the gradient and parameter collectives carry the op whose weights they move, or none).
inline LoweredOp collective_op(LOpKind kind, CollTag tag, std::int32_t group, double bytes, const Op& op = {}) {
  LoweredOp c;
  c.kind = kind;
  c.tag = tag;
  c.op = op;
  c.group = group;
  c.bytes = bytes;
  return c;
}

struct CollGroup {
  CollTag tag = CollTag::None;
  // Member workers in ring order. A TP group has one member worker (its tp GPUs come from Placement; with
  // context parallelism cp rings of tp GPUs); a context-parallel group has one member worker too (tp rings of its
  // cp ranks); a DP group has the dp workers of one pipeline rank (the call runs as tp parallel rings, one per TP
  // rank, each over the dp * cp GPUs of that TP rank: Megatron reduces gradients over DP and CP together).
  std::vector<std::int32_t> workers;
};

struct Placement;

struct LoweredSchedule {
  Schedule schedule;  // the compute schedule it came from (for reports / checks)
  int dp = 1, p = 1, tp = 1;
  int cp = 1;  // context-parallel ranks per worker (set by add_cp_exchange, core/context_parallel.h)
  std::vector<std::vector<LoweredOp>> per_worker;  // size dp * p; worker = d * p + r
  std::vector<CollGroup> groups;
  // Sends block the sender's stream: Megatron-LM's p2p calls (docs/papers.md)
  // are blocking calls, not overlapped with the next op; pipescope's own runtime posts them eagerly.
  bool blocking_sends = false;

  int workers() const { return dp * p; }
  static int worker(int d, int r, int p) { return d * p + r; }
};

// Canonical text of a lowered op: compute ops as op_text; "send(2F0->3)", "recv(2F0<-2)",
// "allreduce[dp g1 25.0MB]", "opt".
std::string lowered_text(const LoweredOp& op);
// The name the checker, the DAG and traces use for op `index` of `worker`: lowered_text, plus "@w<worker>"
// where the text alone does not say which worker runs it (every op when dp > 1; "opt" always).
std::string lowered_op_name(const LoweredSchedule& ls, int worker, std::size_t index);

// ---------------------------------------------------------------- passes
// 1. Replicate the schedule over dp replicas; compute ops get their durations from the cost model.
LoweredSchedule lower_compute(Schedule s, int dp, int tp, const CostModel& cost);
// 2. Point-to-point send/recv for every cross-rank dependency (including the interleaved wrap-around
//    from the last rank to the first): each Send right after its producer, each Recv right before the
//    first consumer. Sizes from the cost model.
LoweredSchedule add_p2p(const LoweredSchedule& in, const CostModel& cost);
// 2b. Megatron scatter/gather (docs/papers.md#megatron): with tp > 1 each TP rank sends only its 1/tp share of
//    every pipeline message (Send/Recv bytes / tp, one flow per TP lane), and the receiver all-gathers the
//    whole tensor over its TP group (NVLink): an AllGather tagged ScatterGather right after each Recv, bytes =
//    the full message. No-op when tp == 1.
LoweredSchedule add_scatter_gather(const LoweredSchedule& in);
// 3. Tensor-parallel all-reduces: after each compute op, its 2 (forward) / 2 (+2 with recompute)
//    (backward) all-reduces per layer of b*s*h elements over the worker's TP group, folded into one
//    AllReduce op with count = number of calls. No-op when tp == 1.
LoweredSchedule add_tp_allreduce(const LoweredSchedule& in, const CostModel& cost);
// How data-parallel gradients are synchronised (training.* keys; core/grad_sync.h has the passes' details).
struct GradSyncOptions {
  bool distributed_optimizer = false;  // reduce-scatter + optimizer on the shard + parameter all-gather
  bool overlap_grad_reduce = false;    // bucketed reductions during the last backward of each virtual stage
  double bucket_bytes = 40e6;          // gradient bytes per bucket (overlap_grad_reduce)
  bool overlap_param_gather = false;   // the parameter all-gather beside the (next iteration's) first forwards
  // One replica (dp = 1) of a data-parallel run lowered alone: its gradient (and parameter) collectives where lower()
  // of the whole run puts them, on groups of its one worker (the search's estimate rings them over the dp peers).
  bool replica_of_dp = false;
};
GradSyncOptions grad_sync_options(const TrainingSpec& t);
// 4. Data-parallel gradient synchronisation (one DP group per pipeline rank, over the dp replicas of that rank):
//    an all-reduce after the flush, or with the options the distributed optimizer's reduce-scatter and bucketed,
//    overlapped reductions; then the embedding all-reduce between first and last stage when embeddings are tied.
LoweredSchedule add_grad_sync(const LoweredSchedule& in, const CostModel& cost, const GradSyncOptions& o = {});
// 5. Optimizer step at the end of every worker; with the distributed optimizer the parameter all-gather after it
//    (or, with overlap_param_gather, at the start of the program before each virtual stage's first forward).
LoweredSchedule add_optimizer(const LoweredSchedule& in, const CostModel& cost, const GradSyncOptions& o = {});

// 0. (Optional, on the compute schedule.) Every I immediately followed on its rank by the W of the same
//    (stage, micro-batch, slice) becomes one B: the same work as one op (the runtime's cheaper form). Not part
//    of lower(): it moves the input-gradient send from after I to after W.
Schedule fuse_adjacent_iw(const Schedule& s);

// All passes in order: what `simulate` and `validate` run.
// scatter_gather: run pass 2b (Scenario::schedule.scatter_gather).
// (The schedule is taken by value: a temporary is moved into the result, not copied.)
LoweredSchedule lower(Schedule s, int dp, int tp, const CostModel& cost, bool scatter_gather = false,
                      const GradSyncOptions& grad_sync = {});

// Where the passes write the ops they make: lower() keeps them as programs (ProgramSink); stage 2 of the search
// (core/search_retime.h) makes its DAG from them as they come, keeping no program. One lowering, one set of rules,
// whatever receives the ops.
class LoweringSink {
 public:
  virtual ~LoweringSink() = default;
  // Before the first op: the lowering's schedule, dp, p and tp (its groups grow as the ops that use them come).
  virtual void begin(const LoweredSchedule& ls) = 0;
  // Room for about n more ops of worker w (a hint).
  virtual void reserve(std::size_t w, std::size_t n) = 0;
  // Worker w's next op; each worker's ops come in program order, the workers' interleaved. msg: a Send's or a Recv's
  // message, numbered from 0 in the order the p2p pass makes them (a Send and the Recv it goes to share it); -1 for
  // other ops.
  virtual void add(std::size_t w, const LoweredOp& l, std::int32_t msg) = 0;
  // Worker w's program so far, for the passes that insert into it (overlapped gradient and parameter collectives,
  // core/grad_sync.h); null from a sink that keeps none (the lowering then refuses those options).
  virtual std::vector<LoweredOp>* program(std::size_t w) = 0;
};

// The sink that keeps the programs: each op appended to programs[w] (lower(); the passes run on a LoweredSchedule).
class ProgramSink final : public LoweringSink {
 public:
  explicit ProgramSink(std::vector<std::vector<LoweredOp>>& programs) : programs_(programs) {}
  void begin(const LoweredSchedule& ls) override;
  void reserve(std::size_t w, std::size_t n) override { programs_[w].reserve(programs_[w].size() + n); }
  void add(std::size_t w, const LoweredOp& l, std::int32_t) override { programs_[w].push_back(l); }
  std::vector<LoweredOp>* program(std::size_t w) override { return &programs_[w]; }

 private:
  std::vector<std::vector<LoweredOp>>& programs_;
};

// lower() with every op written to `sink` as the passes make it: `ls` gets the rest (schedule, dp, p, tp, groups;
// no programs).
void lower_to(Schedule s, int dp, int tp, const CostModel& cost, bool scatter_gather, const GradSyncOptions& grad_sync,
              LoweredSchedule& ls, LoweringSink& sink);

}  // namespace pipescope
