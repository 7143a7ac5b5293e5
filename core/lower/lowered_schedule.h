#pragma once
// What the lowering makes (core/lower/lowering.h has the passes and the execution semantics): one ordered program of
// LoweredOps per worker, with explicit sends, receives and collectives, their costs and sizes, and the sinks the
// passes write ops to.

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/model/config.h"

namespace pipescope {

class CostModel;

enum class LOpKind : std::uint8_t {
  Compute,        // op: the compute op; seconds: its duration
  Send,           // op: the compute op whose output is carried (F: activation, B: gradient); peer, bytes
  Recv,           // op: same producer op as the matching Send; peer, bytes
  AllReduce,      // group, bytes (per-rank buffer), tag says what (DP grads, TP layer, embedding)
  AllGather,      // group, bytes (total output); Megatron scatter/gather on arrival; distributed optimizer's params
  ReduceScatter,  // group, bytes (total input); the distributed optimizer's gradient reduction
  AllToAll,       // group, bytes (each rank's whole send buffer, its own share included); MoE dispatch and combine
  Optimizer,      // seconds
};
constexpr std::size_t kLOpKinds = static_cast<std::size_t>(LOpKind::Optimizer) + 1;  // flat per-kind tables
constexpr bool is_collective(LOpKind k) {
  return k == LOpKind::AllReduce || k == LOpKind::AllGather || k == LOpKind::ReduceScatter || k == LOpKind::AllToAll;
}

// How a collective moves data: an all-reduce, an all-gather (a ring reduce-scatter moves the same: n - 1 steps of
// 1/n of the buffer) or an all-to-all. Compute, send, receive and optimizer ops are no collective (AllReduce).
enum class CollShape : std::uint8_t { AllReduce, AllGather, AllToAll };
constexpr CollShape coll_shape(LOpKind k) {
  return k == LOpKind::AllGather || k == LOpKind::ReduceScatter ? CollShape::AllGather
         : k == LOpKind::AllToAll                               ? CollShape::AllToAll
                                                                : CollShape::AllReduce;
}

// ParamGather: the distributed optimizer's all-gather of the updated parameters over the DP group.
// ContextParallel: the K/V ring exchange of context-parallel attention (core/cost/context_parallel.h), posted async.
// ExpertParallel: an MoE layer's token dispatch and combine (all-to-all over an expert-parallel group);
// ExpertData: the routed experts' gradient reduction (and, with the distributed optimizer, parameter gather) over
// their expert-data-parallel group (core/cost/expert_parallel.h).
enum class CollTag : std::uint8_t {
  None,
  DataParallel,
  TensorParallel,
  Embedding,
  ScatterGather,
  ParamGather,
  ContextParallel,
  ExpertParallel,
  ExpertData
};

// Fields ordered so that the struct packs into 72 bytes (the lowering passes copy millions of them in a search).
struct LoweredOp {
  LOpKind kind = LOpKind::Compute;
  CollTag tag = CollTag::None;
  bool async = false;  // collectives only: posted, not waited for by the next op (see the semantics above)
  // Collectives only: one of an overlapped pair's per-op collectives, run on the worker's communication stream while
  // the pair computes (core/lower/overlap.h; the semantics in core/lower/lowering.h).
  bool overlap = false;
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

// Which rings a context-parallel group runs (parallel.cp_comm_type, core/cost/context_parallel.h): one over the cp
// ranks of each tensor-parallel lane (Whole: p2p, allgather, a2a), the all-to-all groups of cp_a2a adjacent ranks
// (Inner) or the ring through those groups, one rank of each (Outer) of a2a+p2p.
enum class CpRing : std::uint8_t { Whole, Inner, Outer };

struct CollGroup {
  CollTag tag = CollTag::None;
  // Member workers in ring order. A TP group has one member worker (its tp GPUs come from Placement; with
  // context parallelism cp rings of tp GPUs); a context-parallel group has one member worker too (tp rings of its
  // cp ranks); a DP group has the dp workers of one pipeline rank (the call runs as tp parallel rings, one per TP
  // rank, each over the dp * cp GPUs of that TP rank: Megatron reduces gradients over DP and CP together).
  std::vector<std::int32_t> workers;
  // An expert-parallel group under DeepEP's dispatch (core/cost/expert_parallel.h): how its all-to-all's token copies
  // spread over the group's nodes, each token crossing the network once per node it goes to (NodeDedup,
  // core/model/config.h). Empty: every copy crosses (every other group).
  NodeDedup node_dedup{};
  CpRing cp_ring = CpRing::Whole;  // a ContextParallel group's rings
};

struct Placement;

struct LoweredSchedule {
  Schedule schedule;  // the compute schedule it came from (for reports / checks)
  int dp = 1, p = 1, tp = 1;
  int cp = 1;      // context-parallel ranks per worker (set by add_cp_exchange, core/cost/context_parallel.h)
  int cp_a2a = 1;  // ranks of a context-parallel all-to-all group under a2a+p2p (add_cp_exchange; CpRing::Inner)
  int ep = 1;      // expert group size in GPUs, etp * ep (set by add_expert_parallel, core/cost/expert_parallel.h)
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

// Whether replica d's worker programs are replica 0's with every peer moved to replica d (d * p added):
// same ops, kinds, tags, costs, sizes and call counts in the same order (collective groups are not
// compared). Passes and checks whose result depends on nothing else do replica 0's work once for all such
// replicas.
bool replica_programs_equal(const LoweredSchedule& ls, int d);

// Where the passes write the ops they make: lower() keeps them as programs (ProgramSink); stage 2 of the search
// (core/plan/search_retime.h) makes its DAG from them as they come, keeping no program. One lowering, one set of rules,
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
  // core/lower/grad_sync.h); null from a sink that keeps none (the lowering then refuses those options).
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

}  // namespace pipescope
