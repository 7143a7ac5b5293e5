#include "core/plan/search_retime.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/dag_build.h"
#include "core/lower/grad_sync.h"
#include "core/lower/megatron_p2p.h"
#include "core/lower/op_price.h"
#include "core/model/schedule_registry.h"
#include "core/model/seq1f1b.h"
#include "core/plan/pipeline.h"
#include "core/plan/search_timing.h"
#include "core/util/graph.h"

namespace pipescope {

namespace {
constexpr std::size_t kTpWord = 6;  // the key's word that says tp > 1
}  // namespace

bool shape_key(const Scenario& s, ShapeKey& key) {
  const ParallelSpec& par = s.parallel;
  const ScheduleSpec& sch = s.schedule;
  const ScheduleTraits& t = schedule_entry(sch.kind).traits;
  // A schedule file, TeraPipe's joint plan (micro-batches of different sizes) and context parallelism (not in the
  // one-replica lowering) are estimated without the cache.
  if (t.from_file || (t.slicing == SlicePlan::TeraPipe && sch.slicing == "dp") || par.cp != 1) return false;
  // One micro-batch's slices, as make_schedule cuts every micro-batch: the generators take micro-batches of
  // micro_batch_size sequences each, which only the costs see.
  std::vector<MicroBatch> one;
  try {
    one = sliced_scenario_microbatches(s, 1);
  } catch (const std::invalid_argument&) {
    return false;  // make_schedule reports it
  }
  const GradSyncOptions o = grad_sync_options(s.training);
  // Without overlap_param_gather the distributed optimizer adds only a parameter gather after each optimizer step
  // (a sink of the DAG: no time in the critical path when absent) and makes the gradients' all-reduce a
  // reduce-scatter (a duration): the candidates with and without it share the shape lowered with it.
  const bool shared_do = par.dp > 1 && !o.overlap_param_gather;
  key.lower_with_do = shared_do && !o.distributed_optimizer;
  std::int64_t bucket_bits = 0;
  static_assert(sizeof bucket_bits == sizeof o.bucket_bytes);
  std::memcpy(&bucket_bits, &o.bucket_bytes, sizeof bucket_bits);
  key.slice_begin = std::move(one.front().slice_begin);
  key.words.assign({static_cast<std::int64_t>(sch.kind), par.pp, par.v, par.micro_batches(), s.model.seq_len,
                    static_cast<std::int64_t>(key.slice_begin.size()), par.tp > 1, par.dp > 1, uses_scatter_gather(s),
                    shared_do ? 2 : o.distributed_optimizer, o.overlap_grad_reduce, o.overlap_param_gather, bucket_bits,
                    s.sim.p2p == "blocking",
                    // FSDP lowers like ZeRO-1 with both overlaps, but a schedule file then gets its actions, and
                    // resharding after forward gathers before every op.
                    s.training.fsdp, o.reshard_after_forward});
  // tp = 1 lowers without tensor-parallel collectives and scatter/gather; a tp > 1 shape has them after ops and
  // receives, where with tp = 1 they would be rings of one GPU taking no time: such a shape times it too.
  key.tp_words.clear();
  if (par.tp == 1) {
    key.tp_words = key.words;
    key.tp_words[kTpWord] = 1;
  }
  return true;
}

Op with_tokens(Op op, const std::vector<std::int32_t>& slice_begin, int seq_len) {
  const auto k = static_cast<std::size_t>(op.slice);
  op.tok_begin = slice_begin[k];
  op.tok_end = k + 1 < slice_begin.size() ? slice_begin[k + 1] : seq_len;
  return op;
}

namespace {

// An allocator whose resize() leaves new elements uninitialised: the numbering's arrays are written in full after
// each resize, and zeroing them first (megabytes per structure) was a few percent of a pass.
template <class T>
struct DefaultInit : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInit<U>;
  };
  DefaultInit() = default;
  template <class U>
  DefaultInit(const DefaultInit<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using U32s = std::vector<std::uint32_t, DefaultInit<std::uint32_t>>;

// A node as emit() makes it: its recipe and its two predecessors (0: none, the start), one record written per node
// rather than three arrays grown.
struct Node {
  std::uint32_t cls, a, b;
};
using Nodes = std::vector<Node, DefaultInit<Node>>;

// How one node's duration is made from the candidate's cost values (core/lower/lowering.cc and core/lower/grad_sync.cc
// give each lowered op its values this way).
struct Recipe {
  enum class What : std::uint8_t { Zero, Compute, Optimizer, Transfer, Collective };
  What what = What::Zero;
  LOpKind kind = LOpKind::Compute;
  CollTag tag = CollTag::None;
  bool async = false;
  std::int32_t cls = -1;   // op class: compute, message (transfer, scatter/gather), TP all-reduce, bucket lead
  std::int32_t rank = -1;  // optimizer, data-parallel and parameter collectives
  std::int32_t worker = -1, peer = -1, group = -1;
  std::int32_t j = 0;  // bucket index (of n: the rank's bucket count)

  auto tie() const { return std::tie(what, kind, tag, async, cls, rank, worker, peer, group, j); }
  bool operator==(const Recipe& o) const { return tie() == o.tie(); }
};
struct RecipeHash {
  std::size_t operator()(const Recipe& x) const {
    std::uint64_t h = static_cast<std::uint64_t>(x.what) | static_cast<std::uint64_t>(x.kind) << 4 |
                      static_cast<std::uint64_t>(x.tag) << 8 | static_cast<std::uint64_t>(x.async) << 12;
    for (std::int32_t f : {x.cls, x.rank, x.worker, x.peer, x.group, x.j})
      h = (h ^ static_cast<std::uint32_t>(f)) * 0x100000001B3ull;
    return static_cast<std::size_t>(h ^ h >> 29);
  }
};

}  // namespace

struct DagShape {
  std::vector<std::int64_t> key;
  std::vector<std::int64_t> fingerprint, tp_fingerprint;
  int p = 1;
  bool scatter_gather = false;  // message bytes / tp (scatter/gather with tp > 1)
  GradSyncOptions o;
  bool dp = false;  // dp > 1: gradient and parameter collectives
  int seq_len = 1;
  std::vector<Op> ops;                       // an op of each class: (kind, virtual stage, slice)
  std::vector<std::uint8_t> need;            // per op class: the questions asked of it (CostAsk bits)
  std::vector<int> grad_spans, param_spans;  // per rank: virtual stages with a backward, with any op
  std::vector<Recipe> recipes;               // duration classes
  std::vector<CollGroup> groups;             // the lowering's collective groups
  U32s cls;                                  // per node (topological numbering): its recipe
  U32s succ_begin, succ;                     // successors, CSR, topological numbering (build())
  // emit()'s shapes: node u >= 1 starts after nodes pred[2u] and pred[2u + 1]; node 0 is the start (finished at 0,
  // the missing predecessor). Empty for build()'s.
  U32s pred;
};

void DagShapeDelete::operator()(DagShape* p) const { delete p; }
const std::vector<std::int64_t>& shape_key_of(const DagShape& shape) { return shape.key; }
std::size_t shape_nodes(const DagShape& shape) { return shape.cls.size() - (shape.pred.empty() ? 0 : 1); }

struct Retimer::Values {
  std::vector<OpAnswers> op;                 // per op class (where asked)
  std::vector<double> grad, param, opt;      // per rank
  std::vector<BucketSplit> grad_b, param_b;  // per rank (n = 0: not bucketed)
  double emb = 0;
  bool dist_opt = false;                                  // the candidate's distributed optimizer
  std::vector<std::int64_t> fingerprint, tp_fingerprint;  // the latter: the tensor-parallel answers
  std::vector<double> dur, start;
};

Retimer::Retimer() : v_(std::make_unique<Values>()) {}
Retimer::~Retimer() = default;

namespace {

// The cost questions of the shape, asked once per class as the passes ask them (core/lower/lowering.cc,
// core/lower/grad_sync.cc), and the fingerprint of the answers that the lowering's shape depends on.
void ask(const DagShape& sh, const Scenario& s, const std::vector<std::int32_t>& slice_begin, const CostModel& cost,
         Retimer::Values& v) {
  const std::size_t n = sh.ops.size();
  const int seqs = s.parallel.micro_batch_size;
  v.dist_opt = s.training.sharded_optimizer();
  v.op.resize(n);
  auto& fp = v.fingerprint;
  fp.clear();
  v.tp_fingerprint.clear();
  // A candidate with tp = 1 on a tp > 1 shape asks no tensor-parallel question: its TP and scatter/gather
  // collectives are rings of one GPU (no time, so the shape's extra nodes change no path).
  const bool ask_tp = s.parallel.tp > 1;
  for (std::size_t c = 0; c < n; c++) {
    const auto asks = static_cast<std::uint8_t>(ask_tp ? sh.need[c] : sh.need[c] & ~kAskTp);
    const OpAnswers& a = v.op[c] = ask_op(cost, with_tokens(sh.ops[c], slice_begin, sh.seq_len), seqs, asks);
    if (asks & kAskCompute) fp.push_back(a.compute_s > 0);
    if (asks & kAskP2p) fp.push_back(a.p2p_bytes > 0);
    if (asks & kAskTp) {
      v.tp_fingerprint.push_back(a.tp_calls > 0);
      if (a.tp_calls > 0) v.tp_fingerprint.push_back(a.tp_bytes > 0);
    }
  }
  v.grad.assign(static_cast<std::size_t>(sh.p), 0.0);
  v.param = v.grad;
  v.opt = v.grad;
  v.grad_b.assign(static_cast<std::size_t>(sh.p), BucketSplit{0, 0});
  v.param_b = v.grad_b;
  for (int r = 0; r < sh.p; r++) {
    const auto k = static_cast<std::size_t>(r);
    v.opt[k] = cost.optimizer_seconds(r);
    if (!sh.dp) continue;
    v.grad[k] = cost.grad_bytes(r);
    if (sh.o.overlap_grad_reduce && sh.grad_spans[k] > 0)
      v.grad_b[k] = split_buckets(v.grad[k], sh.grad_spans[k], sh.o.bucket_bytes);
    fp.push_back(v.grad[k] > 0);
    fp.push_back(v.grad_b[k].n);
    if (!sh.o.distributed_optimizer) continue;
    if (!v.dist_opt) {  // a shape with the parameter gather timing a candidate without it: nothing to ask
      fp.insert(fp.end(), {cost.param_bytes(r) > 0, 0});  // as the shape's own candidates answer (no overlap)
      continue;
    }
    v.param[k] = cost.param_bytes(r);
    if (sh.o.overlap_param_gather && sh.param_spans[k] > 0)
      v.param_b[k] = split_buckets(v.param[k], sh.param_spans[k], sh.o.bucket_bytes);
    fp.push_back(v.param[k] > 0);
    fp.push_back(v.param_b[k].n);
  }
  v.emb = cost.embedding_grad_bytes();
  fp.push_back(v.emb > 0);
}

// The lowered op's values that a recipe gives with the loaded answers, by the lowering's rules (core/lower/op_price.h).
CostedOp costed(const DagShape& sh, const Recipe& x, const Retimer::Values& v, int tp) {
  CostedOp c;
  c.kind = x.kind;
  c.async = x.async;
  c.worker = x.worker;
  c.peer = x.peer;
  c.group = x.group;
  const auto k = static_cast<std::size_t>(std::max(0, x.cls));
  const auto r = static_cast<std::size_t>(std::max(0, x.rank));
  switch (x.what) {
    case Recipe::What::Zero:
      c.dag = DagKind::Join;
      break;
    case Recipe::What::Compute:
      c.dag = DagKind::Compute;
      c.seconds = v.op[k].compute_s;
      break;
    case Recipe::What::Optimizer:
      c.dag = DagKind::Compute;
      c.seconds = v.opt[r];
      break;
    case Recipe::What::Transfer:
      c.dag = DagKind::Transfer;
      c.bytes = message_bytes(v.op[k].p2p_bytes, sh.scatter_gather, tp);
      break;
    case Recipe::What::Collective:
      c.dag = DagKind::Collective;
      switch (x.tag) {
        case CollTag::TensorParallel:
          c.count = v.op[k].tp_calls;
          c.bytes = v.op[k].tp_bytes;
          break;
        case CollTag::ScatterGather:
          c.bytes = v.op[k].p2p_bytes;
          break;
        case CollTag::DataParallel:
        case CollTag::ParamGather: {
          const bool grads = x.tag == CollTag::DataParallel;
          // A shape shared with and without the distributed optimizer (ShapeKey): the gradients' collective is the
          // candidate's; without it the parameter gather (a sink after the optimizer step) takes no time.
          if (grads) c.kind = grad_reduce_kind(v.dist_opt);
          if (!grads && !v.dist_opt) {
            c.dag = DagKind::Join;
            break;
          }
          const double bytes = grads ? v.grad[r] : v.param[r];
          if (!x.async) {
            c.bytes = bytes;
            break;
          }
          const BucketSplit& b = grads ? v.grad_b[r] : v.param_b[r];
          c.bytes = b.bytes_each;
          if (grads) c.lead_s = bucket_lead_s(v.op[k].compute_s, x.j, b.n);
          break;
        }
        case CollTag::Embedding:
          c.bytes = v.emb;
          break;
        case CollTag::None:
        case CollTag::ContextParallel:
        case CollTag::ExpertParallel:
        case CollTag::ExpertData:
          break;  // not in a one-replica lowering (make_dag_shape refuses them)
      }
      break;
  }
  return c;
}

// Class of an op by what the cost model reads of it: kind, virtual stage and token range, the range being the
// slice's (every micro-batch has the same slices). A flat table over (stage, slice, kind).
class OpClasses {
 public:
  OpClasses(DagShape& sh, int stages, int slices)
      : sh_(sh), slices_(slices), index_(static_cast<std::size_t>(stages) * slices * kKinds, -1) {}
  std::int32_t of(const Op& op, std::uint8_t need) {
    const auto kind = static_cast<std::size_t>(op.kind);
    if (op.stage < 0 || op.slice < 0 || op.slice >= slices_ || kind >= kKinds ||
        static_cast<std::size_t>(op.stage) * slices_ * kKinds >= index_.size())
      throw std::logic_error("stage 2: " + op_text(op) + " is outside the schedule's stages and slices");
    std::int32_t& c = index_[(static_cast<std::size_t>(op.stage) * slices_ + op.slice) * kKinds + kind];
    if (c < 0) {
      c = static_cast<std::int32_t>(sh_.ops.size());
      sh_.ops.push_back(op);
      sh_.need.push_back(0);
    }
    sh_.need[static_cast<std::size_t>(c)] |= need;
    return c;
  }

 private:
  static constexpr auto kKinds = static_cast<std::size_t>(kOpKinds);
  DagShape& sh_;
  int slices_;
  std::vector<std::int32_t> index_;
};

// The recipe of DAG node `n` whose lowered op is `l`; j: the bucket's index.
Recipe recipe_of(const LoweredSchedule& ls, const LoweredOp& l, const DagNode& n, int j, OpClasses& classes) {
  Recipe x;
  x.kind = l.kind;
  switch (n.kind) {
    case DagKind::Join:
      return x;
    case DagKind::Compute:
      if (l.kind == LOpKind::Optimizer) {
        x.what = Recipe::What::Optimizer;
        x.rank = n.worker % ls.p;
      } else {
        x.what = Recipe::What::Compute;
        x.cls = classes.of(l.op, question_of(l));
      }
      return x;
    case DagKind::Transfer:
      x.what = Recipe::What::Transfer;
      x.cls = classes.of(l.op, question_of(l));
      x.worker = n.worker;
      x.peer = l.peer;
      return x;
    case DagKind::Collective:
      break;
  }
  x.what = Recipe::What::Collective;
  x.tag = l.tag;
  x.async = l.async;
  x.group = n.group;
  switch (l.tag) {
    case CollTag::TensorParallel:
      x.cls = classes.of(l.op, question_of(l));
      break;
    case CollTag::ScatterGather:
      x.cls = classes.of(l.op, question_of(l));
      break;
    case CollTag::DataParallel:
      x.rank = ls.groups[static_cast<std::size_t>(l.group)].workers.front() % ls.p;
      if (l.async) x.cls = classes.of(l.op, question_of(l)), x.j = j;
      break;
    case CollTag::ParamGather:
      x.rank = ls.groups[static_cast<std::size_t>(l.group)].workers.front() % ls.p;
      break;
    case CollTag::Embedding:
      break;
    case CollTag::None:
    case CollTag::ContextParallel:
    case CollTag::ExpertParallel:
    case CollTag::ExpertData:
      throw std::logic_error("stage 2: a one-replica lowering has no " + lowered_text(l) + " to re-cost");
  }
  return x;
}

// Per rank: the virtual stages whose weight gradients a program makes (B or W ops), and those it runs at all, from
// `stages` (per rank and virtual stage: -1 not run there, 0 run, 1 with a backward; ShapeSink marks them).
void stage_counts(const std::vector<std::vector<std::int8_t>>& stages, int p, DagShape& sh) {
  sh.grad_spans.assign(static_cast<std::size_t>(p), 0);
  sh.param_spans = sh.grad_spans;
  for (std::size_t r = 0; r < static_cast<std::size_t>(p); r++)
    for (std::int8_t x : stages[r]) {
      sh.param_spans[r] += x >= 0;
      sh.grad_spans[r] += x == 1;
    }
}

// Kahn's algorithm; the nodes renumbered in that order (a pass over them in index order is topological). Each node's
// class and successors are copied as it is taken (successors in the old numbering, translated once all are known).
void number_topologically(const Dag& dag, const std::vector<std::uint32_t>& node_cls, DagShape& sh,
                          const std::string& source, std::vector<std::uint32_t>& pending, U32s& ready, U32s& id) {
  const auto n = static_cast<std::uint32_t>(node_cls.size());
  pending.assign(dag.preds.begin(), dag.preds.end());
  id.resize(n);
  sh.cls.resize(n);
  sh.succ_begin.resize(n + 1);
  sh.succ.resize(dag.succ.size());
  std::uint32_t k = 0, fill = 0;
  const std::size_t done = kahn_walk(
      n, dag.succ_begin, dag.succ, pending, ready,
      [&](std::uint32_t u) {
        id[u] = k;
        sh.cls[k] = node_cls[u];
        sh.succ_begin[k++] = fill;  // its successors start where the previous node's end
      },
      [&](std::uint32_t, std::uint32_t v) { sh.succ[fill++] = v; });
  sh.succ_begin[k] = fill;
  if (done != n) throw std::runtime_error(source + ": the lowered schedule's DAG has a cycle");
  for (std::uint32_t& v : sh.succ) v = id[v];
}

bool same(const CostedOp& a, const CostedOp& b) {
  return a.dag == b.dag && a.kind == b.kind && a.async == b.async && a.seconds == b.seconds && a.bytes == b.bytes &&
         a.count == b.count && a.lead_s == b.lead_s && a.worker == b.worker && a.peer == b.peer && a.group == b.group;
}

}  // namespace

// Everything a shape build keeps between structures (the DAG's edges and the classes' scratch).
struct ShapeBuilder::Storage {
  Dag dag;  // node_of and the successor lists (no DagNode: the sink below classes each node instead)
  dag_build::Scratch scratch;
  std::vector<std::uint32_t> node_cls, pending;
  U32s ready, id;
  std::vector<std::vector<std::int8_t>> stages;  // per rank and virtual stage (stage_counts)
  std::vector<CostedOp> first;                   // per recipe: the values of its first node
  struct At {
    std::uint32_t node;
    std::int32_t worker, index;
    LoweredOp op;
  };
  std::vector<At> first_at;  // per recipe: its first node and that node's lowered op
  DagShapePtr spare;         // a shape no longer used, whose storage the next build takes (recycle)

  // emit()'s, per node in the order made: its recipe and two predecessors (b: 0 for none, kPending | msg for the
  // transfer of a message not sent yet); per worker its last node that is not a send and its ops so far; per message
  // its transfer node; per collective group of several workers its calls' nodes and each member's calls so far; the
  // topological numbering's successor lists (CSR; the folding counts them) and walk (and `id`: new ids, or the
  // folding's marks).
  Nodes nodes;  // emit()'s made so far: the first EmitSink::made_ (the rest is room, not initialised)
  std::vector<std::uint32_t> prev, pos, sent, recv_pending;
  std::vector<std::vector<std::uint32_t>> call_node, calls;
  U32s succ_begin, succ;
};

namespace {

// Where a node's lowered op is, for errors.
std::string op_at(const LoweredOp& l, int w, int i) {
  return lowered_text(l) + " (worker " + std::to_string(w) + ", position " + std::to_string(i) + ")";
}

// Each node of a shape classed into its recipe as it is made, and its lowered values compared with its recipe's
// first node's (the check; each recipe's first node is compared with the recipe re-costed once the classes are
// complete, check_recipes). `ls`: the lowering's schedule, p, tp and groups (its programs are not read).
class NodeClasses {
 public:
  NodeClasses(const LoweredSchedule& ls, const Scenario& s, DagShape& sh, OpClasses& classes, ShapeBuilder::Storage& st)
      : ls_(ls), s_(s), sh_(sh), classes_(classes), st_(st), join_recipe_(kLOpKinds, -1) {
    // Every compute op asks the TP question when tp > 1 (core/lower/lowering.cc, tp_pass), whether or not it issues
    // one.
    compute_need_ = ls.tp > 1 ? kAskCompute | kAskTp : kAskCompute;
    st_.node_cls.clear();
    st_.first.clear();
    st_.first_at.clear();
    st_.stages.resize(static_cast<std::size_t>(ls.p));
    for (auto& x : st_.stages) x.clear();
  }
  // The recipe of node u (of `kind`, worker w's op i, `l`; its collective group). Most nodes take a recipe they find
  // with a look-up and a compare (a compute op of a known class, a join after its recipe's first node, a transfer or
  // per-op collective with its class's last recipe): that path inline, the rest (a node's first recipe, the check of
  // a new value) in first_of, out of line, so that the per-op path saves and restores no registers for it.
  [[gnu::always_inline]] std::uint32_t of(std::uint32_t u, DagKind kind, int w, std::size_t i, const LoweredOp& l,
                                          std::int32_t group) {
    if (kind == DagKind::Compute && l.kind == LOpKind::Compute) {
      const auto c = static_cast<std::size_t>(classes_.of(l.op, compute_need_));
      if (c < compute_recipe_.size() && compute_recipe_[c] >= 0 && w < ls_.p) {
        mark_stage(w, l.op);
        const auto x = static_cast<std::uint32_t>(compute_recipe_[c]);
        if (x < st_.first.size() && l.seconds == st_.first[x].seconds) return x;
      }
    } else if (kind == DagKind::Join) {
      const std::int64_t x = join_recipe_[static_cast<std::size_t>(l.kind)];
      if (x >= 0 && static_cast<std::size_t>(x) < st_.first.size()) return static_cast<std::uint32_t>(x);
    } else if (const int slot = per_op_slot(kind, l); slot >= 0) {
      const std::int64_t same = same_as_last(slot, w, l, group);
      if (same >= 0) return static_cast<std::uint32_t>(same);
    }
    return first_of(u, kind, w, i, l, group);
  }

 private:
  // Transfers (0), TP all-reduces (1) and scatter/gather all-gathers (2) are classed by op class, each class's last
  // recipe reused when equal; -1 for other nodes.
  static int per_op_slot(DagKind kind, const LoweredOp& l) {
    return kind == DagKind::Transfer                                         ? 0
           : kind == DagKind::Collective && l.tag == CollTag::TensorParallel ? 1
           : kind == DagKind::Collective && l.tag == CollTag::ScatterGather  ? 2
                                                                             : -1;
  }
  // of() for the nodes its look-ups do not settle.
  [[gnu::noinline]] std::uint32_t first_of(std::uint32_t u, DagKind kind, int w, std::size_t i, const LoweredOp& l,
                                           std::int32_t group) {
    // The node as build_graph makes it, made only where asked (most nodes find their recipe without it).
    auto n = [&] {
      DagNode d;
      d.kind = kind;
      d.worker = w;
      d.index = static_cast<std::int32_t>(i);
      d.group = group;
      return d;
    };
    // Compute ops and joins, most of the nodes, find their recipe by op class and op kind.
    if (kind == DagKind::Compute && l.kind == LOpKind::Compute) {
      const auto c = static_cast<std::size_t>(classes_.of(l.op, compute_need_));
      if (c >= compute_recipe_.size()) compute_recipe_.resize(c + 1, -1);
      if (compute_recipe_[c] < 0) compute_recipe_[c] = add_recipe(recipe_of(ls_, l, n(), 0, classes_));
      if (w < ls_.p) mark_stage(w, l.op);
      const auto x = static_cast<std::uint32_t>(compute_recipe_[c]);
      // A compute node's values are its kind (the recipe's) and its seconds: the check compares the seconds.
      if (x < st_.first.size() && l.seconds == st_.first[x].seconds) return x;
      return assign(u, n(), l, x);
    }
    if (kind == DagKind::Join) {
      std::int64_t& x = join_recipe_[static_cast<std::size_t>(l.kind)];
      if (x < 0) x = add_recipe(recipe_of(ls_, l, n(), 0, classes_));
      // A join's values are its lowered kind alone, the recipe's: nothing to compare after its first node.
      if (static_cast<std::size_t>(x) < st_.first.size()) return static_cast<std::uint32_t>(x);
      return assign(u, n(), l, static_cast<std::uint32_t>(x));
    }
    // Transfers and per-op collectives (TP, scatter/gather): by op class too, the class's last recipe reused when
    // equal.
    const int slot = per_op_slot(kind, l);
    if (slot >= 0) {
      const std::int64_t same = same_as_last(slot, w, l, group);
      if (same >= 0) return static_cast<std::uint32_t>(same);
      const Recipe x = recipe_of(ls_, l, n(), 0, classes_);
      auto& last = per_class_[slot];
      const auto c = static_cast<std::size_t>(x.cls);
      if (c >= last.size()) last.resize(c + 1, -1);
      if (last[c] < 0 || !(sh_.recipes[static_cast<std::size_t>(last[c])] == x)) last[c] = add_recipe(x);
      return assign(u, n(), l, static_cast<std::uint32_t>(last[c]));
    }
    int j = 0;
    // Bucket j of a stage is the j-th async gradient collective of that stage in the program (core/lower/grad_sync.cc):
    // build_graph numbers a group's calls in member program order, and the check would catch it otherwise.
    if (kind == DagKind::Collective && l.tag == CollTag::DataParallel && l.async) j = buckets_[{w, l.op.stage}]++;
    return assign(u, n(), l, add_recipe(recipe_of(ls_, l, n(), j, classes_)));
  }
  // The op class's last recipe when a transfer (slot 0), TP (1) or scatter/gather (2) node takes it with the values
  // of that recipe's first node, else -1. The recipe's fields other than those compared here are
  // the slot's and the class's, and the node's values other than those compared are the recipe's (recipe_of,
  // costed_op): the same answer as building the node's recipe and comparing all fields.
  [[gnu::always_inline]] std::int64_t same_as_last(int slot, int w, const LoweredOp& l, std::int32_t group) {
    const auto c = static_cast<std::size_t>(classes_.of(l.op, slot == 1 ? kAskTp : kAskP2p));
    const auto& last = per_class_[slot];
    if (c >= last.size() || last[c] < 0) return -1;
    const auto x = static_cast<std::uint32_t>(last[c]);
    const Recipe& r = sh_.recipes[x];
    const CostedOp& f = st_.first[x];
    const bool same_values = slot == 0
                                 ? r.kind == l.kind && r.worker == w && r.peer == l.peer && l.bytes == f.bytes
                                 : r.kind == l.kind && r.async == l.async && r.group == group && l.bytes == f.bytes &&
                                       l.count == f.count && (l.async ? l.lead_s : 0.0) == f.lead_s;
    return same_values ? static_cast<std::int64_t>(x) : -1;
  }
  // The stage of a compute op (a valid one: OpClasses checked it) as stage_counts counts it.
  void mark_stage(int w, const Op& op) {
    auto& stages = st_.stages[static_cast<std::size_t>(w)];
    const auto g = static_cast<std::size_t>(op.stage);
    if (g >= stages.size()) stages.resize(g + 1, -1);
    stages[g] = std::max<std::int8_t>(stages[g], op.kind == OpKind::Backward || op.kind == OpKind::BackwardWeight);
  }
  std::uint32_t add_recipe(const Recipe& x) {
    const auto [it, added] = ids_.emplace(x, static_cast<std::uint32_t>(ids_.size()));
    if (added) sh_.recipes.push_back(x);
    return it->second;
  }
  std::uint32_t assign(std::uint32_t u, const DagNode& n, const LoweredOp& l, std::uint32_t x) {
    const CostedOp got = costed_op(l, n);
    if (x == st_.first.size()) {
      st_.first.push_back(got);
      st_.first_at.push_back({u, n.worker, n.index, l});
    } else if (!same(got, st_.first[x])) {
      const ShapeBuilder::Storage::At& f = st_.first_at[x];
      throw std::logic_error(s_.source + ": stage 2: node " + std::to_string(u) + " (" + op_at(l, n.worker, n.index) +
                             ") and node " + std::to_string(f.node) + " (" + op_at(f.op, f.worker, f.index) +
                             ") share a duration class but differ in their lowering (core/plan/search_retime.cc)");
    }
    return x;
  }

  const LoweredSchedule& ls_;
  const Scenario& s_;
  DagShape& sh_;
  OpClasses& classes_;
  ShapeBuilder::Storage& st_;
  std::uint8_t compute_need_;
  std::unordered_map<Recipe, std::uint32_t, RecipeHash> ids_;
  std::vector<std::int64_t> compute_recipe_, join_recipe_, per_class_[3];
  std::map<std::pair<std::int32_t, int>, int> buckets_;  // (worker, stage) -> async gradient buckets so far
};

// build_graph's sink (core/lower/dag_build.h): each node classed as it is numbered.
struct GraphSink {
  NodeClasses& classes;
  std::vector<std::uint32_t>& node_cls;
  void begin(std::size_t ops) { node_cls.reserve(ops); }
  std::uint32_t size() const { return static_cast<std::uint32_t>(node_cls.size()); }
  void add(DagKind kind, int w, std::size_t i, const LoweredOp& l, std::int32_t group) {
    node_cls.push_back(classes.of(size(), kind, w, i, l, group));
  }
};

constexpr std::uint32_t kPending = 0x80000000u;  // a receive's predecessor: the transfer of message (pred ^ kPending)

// The lowering's sink for emit(): each op the lowering writes becomes its node at once (dag_kind_of, the kind
// build_graph gives it), classed and checked (NodeClasses), with its predecessors by build_graph's rules
// (core/lower/dag_build.h: prev_after, waits_for_transfer, shared_by_group) for eager sends and blocking collectives:
// the worker's previous op; for a receive also its message's transfer (the lowering numbered the pair: nothing to
// match); for a call of a group of two workers (the embedding all-reduce) both members' previous ops. Nodes are
// numbered as made (node 0: the start).
class EmitSink final : public LoweringSink {
 public:
  EmitSink(const Scenario& s, const ShapeKey& key, DagShape& sh, ShapeBuilder::Storage& st)
      : s_(s), key_(key), sh_(sh), st_(st) {}

  void begin(const LoweredSchedule& ls) override {
    ls_ = &ls;
    op_classes_.emplace(sh_, ls.schedule.stages(), static_cast<int>(key_.slice_begin.size()));
    classes_.emplace(ls, s_, sh_, *op_classes_, st_);
    const auto workers = static_cast<std::size_t>(ls.workers());
    st_.prev.assign(workers, 0);
    st_.pos.assign(workers, 0);
    st_.sent.clear();
    st_.recv_pending.clear();
    st_.call_node.clear();
    st_.calls.clear();
    made_ = 0;
    node(0, 0, 0);  // the start
  }
  void reserve(std::size_t, std::size_t n) override {
    if (made_ + n > st_.nodes.size()) st_.nodes.resize(std::max(made_ + n, 2 * st_.nodes.size()));
  }
  std::vector<LoweredOp>* program(std::size_t) override { return nullptr; }

  void add(std::size_t w, const LoweredOp& l, std::int32_t msg) override {
    const auto wi = static_cast<int>(w);
    const std::uint32_t i = st_.pos[w]++;
    std::uint32_t& prev = st_.prev[w];
    const auto u = static_cast<std::uint32_t>(made_);
    if (dag_build::shared_by_group(l.kind)) {
      if (l.async) throw std::logic_error(s_.source + ": stage 2: emit() takes no overlapped collectives");
      const auto g = static_cast<std::size_t>(l.group);
      const std::uint32_t call = ls_->groups.at(g).workers.size() > 1
                                     ? shared_call(w, g, l, i)
                                     : node(classes_->of(u, dag_build::dag_kind_of(l), wi, i, l, l.group), prev, 0);
      prev = dag_build::prev_after(l, prev, call);
      return;
    }
    const std::uint32_t x = classes_->of(u, dag_build::dag_kind_of(l), wi, i, l, -1);
    std::uint32_t second = 0;
    if (dag_build::waits_for_transfer(l.kind)) {
      const auto k = static_cast<std::size_t>(msg);
      second = k < st_.sent.size() && st_.sent[k] ? st_.sent[k] : kPending | static_cast<std::uint32_t>(msg);
      if (second & kPending) st_.recv_pending.push_back(u);
    }
    node(x, prev, second);
    if (l.kind == LOpKind::Send) sent(msg, u);  // its transfer, what its message's Recv waits for
    prev = dag_build::prev_after(l, prev, u);
  }

  // The nodes' receives of messages sent after them, pointed at their transfers.
  void finish() {
    for (std::uint32_t u : st_.recv_pending) {
      std::uint32_t& p = st_.nodes[u].b;
      const std::size_t k = p ^ kPending;
      if (k >= st_.sent.size() || !st_.sent[k])
        throw std::logic_error(s_.source + ": stage 2: a receive's message was never sent");
      p = st_.sent[k];
    }
    st_.nodes.resize(made_);  // the nodes made, for the folding and the numbering
  }

 private:
  std::uint32_t node(std::uint32_t x, std::uint32_t a, std::uint32_t b) {
    // Written in place (room made by reserve() or doubled here): push_back's out-of-line growth path was called for
    // every node.
    if (made_ == st_.nodes.size()) st_.nodes.resize(std::max<std::size_t>(64, 2 * st_.nodes.size()));
    st_.nodes[made_] = {x, a, b};
    return static_cast<std::uint32_t>(made_++);
  }
  void sent(std::int32_t msg, std::uint32_t u) {
    const auto k = static_cast<std::size_t>(msg);
    if (k >= st_.sent.size()) st_.sent.resize(std::max(k + 1, 2 * st_.sent.size()), 0);
    st_.sent[k] = u;
  }
  // Call n of worker w on group g (members match calls by their order): one node for the call, made by the member
  // that comes first, the other member's previous op its second predecessor.
  std::uint32_t shared_call(std::size_t w, std::size_t g, const LoweredOp& l, std::uint32_t i) {
    const auto& ws = ls_->groups[g].workers;
    if (ws.size() > 2) throw std::logic_error(s_.source + ": stage 2: emit() takes groups of at most two workers");
    const std::size_t slot = static_cast<std::size_t>(ws[0]) == w ? 0 : 1;
    if (st_.call_node.size() <= g) st_.call_node.resize(g + 1), st_.calls.resize(g + 1);
    auto& calls = st_.calls[g];
    calls.resize(2, 0);
    const std::uint32_t n = calls[slot]++;
    auto& nodes = st_.call_node[g];
    if (n < nodes.size()) {
      st_.nodes[nodes[n]].b = st_.prev[w];
      return nodes[n];
    }
    const auto u = static_cast<std::uint32_t>(made_);
    nodes.push_back(
        node(classes_->of(u, dag_build::dag_kind_of(l), static_cast<int>(w), i, l, l.group), st_.prev[w], 0));
    return nodes.back();
  }

  const Scenario& s_;
  const ShapeKey& key_;
  DagShape& sh_;
  ShapeBuilder::Storage& st_;
  const LoweredSchedule* ls_ = nullptr;
  std::optional<OpClasses> op_classes_;
  std::optional<NodeClasses> classes_;
  std::size_t made_ = 0;  // nodes made (st_.nodes beyond them: room)
};

// The folding's marks in Storage::id, above any node id: folded, kept (numbered later).
constexpr std::uint32_t kKept = 0xFFFFFFFFu, kFolded = 0xFFFFFFFEu;

// Joins folded into their successor: a node of no duration (a Zero recipe: every candidate times it 0) that is the
// one predecessor of its one successor gives that successor its own predecessors (the same maxima; one node fewer
// to time per candidate). Sets st.id to kFolded for the folded nodes, kKept for the others, and st.succ_begin[u] to
// u's number of successors after the folding (the successor lists' sizes). Each node's first predecessor is its
// worker's previous op, made before it: one pass in the order made folds chains. Returns the number of kept nodes.
std::uint32_t fold_joins(ShapeBuilder::Storage& st, const DagShape& sh) {
  const auto n = static_cast<std::uint32_t>(st.nodes.size());
  Node* node = st.nodes.data();
  std::uint32_t* succs = (st.succ_begin.assign(n + 1, 0), st.succ_begin.data());
  U32s& id = st.id;
  id.resize(n);  // marked in the loop below (not filled first: one sweep fewer)
  id[0] = kKept;
  for (std::uint32_t v = 1; v < n; v++) {
    succs[node[v].a]++, succs[node[v].b]++;
    id[v] = kKept;
  }
  std::uint32_t kept = n;
  for (std::uint32_t v = 1; v < n; v++) {
    const std::uint32_t a = node[v].a;
    if (a == 0 || node[v].b != 0 || succs[a] != 1 || sh.recipes[node[a].cls].what != Recipe::What::Zero) continue;
    // a's predecessors now precede v instead (their counts hold); a and v's edge from the start go
    node[v].a = node[a].a, node[v].b = node[a].b;
    succs[a] = 0, succs[0]--;
    id[a] = kFolded, kept--;
  }
  return kept;
}

// The kept nodes' successor lists in CSR form (st.succ_begin from fold_joins' counts, st.succ) and each node's number
// of predecessors to wait for (a folded node 1: nothing names it, so the walk never takes it).
void successor_lists(ShapeBuilder::Storage& st) {
  const auto n = static_cast<std::uint32_t>(st.nodes.size());
  const Node* node = st.nodes.data();
  const std::uint32_t* id = st.id.data();
  std::uint32_t* begin = st.succ_begin.data();
  std::uint32_t* pending = (st.pending.resize(n), st.pending.data());
  pending[0] = 0;
  for (std::uint32_t u = 1; u <= n; u++) begin[u] += begin[u - 1];  // each node's end; filled back to its start
  st.succ.resize(begin[n]);
  std::uint32_t* succ = st.succ.data();
  for (std::uint32_t v = n; v-- > 1;) {
    const bool folded = id[v] == kFolded;
    pending[v] = folded ? 1 : 2;
    if (!folded) succ[--begin[node[v].b]] = v, succ[--begin[node[v].a]] = v;
  }
}

// Why a walk left nodes behind: a kept node after a folded one (folding's error), else a cycle.
[[noreturn]] void unwalked(const ShapeBuilder::Storage& st, const std::string& source) {
  for (std::size_t v = 1; v < st.nodes.size(); v++)
    if (st.id[v] == kKept && (st.id[st.nodes[v].a] == kFolded || st.id[st.nodes[v].b] == kFolded))
      throw std::logic_error(source + ": stage 2: a folded node is referenced");
  throw std::runtime_error(source + ": the lowered schedule's DAG has a cycle");
}

// emit()'s nodes (those not folded) renumbered in a topological order (the one Kahn walk, core/util/graph.h) into
// the shape's cls and pred. st.id holds each node's mark (fold_joins) until it is numbered, then its new id: a node's
// predecessors are numbered before it, so their new ids are read as it is taken. The start (node 0, its own
// predecessors) is the only node ready at once: it is numbered 0.
void number_emitted(ShapeBuilder::Storage& st, DagShape& sh, std::uint32_t kept, const std::string& source) {
  const auto n = static_cast<std::uint32_t>(st.nodes.size());
  successor_lists(st);
  const Node* node = st.nodes.data();
  std::uint32_t* id = st.id.data();
  sh.cls.resize(kept);
  sh.pred.resize(2 * static_cast<std::size_t>(kept));
  std::uint32_t* cls = sh.cls.data();
  std::uint32_t* pred = sh.pred.data();
  std::uint32_t k = 0;
  const std::size_t done = kahn_walk(
      n, st.succ_begin, st.succ, st.pending, st.ready,
      [&](std::uint32_t u) {
        id[u] = k;
        cls[k] = node[u].cls;
        pred[2 * k] = id[node[u].a], pred[2 * k + 1] = id[node[u].b];
        k++;
      },
      [](std::uint32_t, std::uint32_t) {});
  if (done != kept) unwalked(st, source);
}

// A shape with the scenario's settings and nothing else, in the storage of a shape dropped from the cache where there
// is one (a fresh shape's arrays are fresh pages to fault in, megabytes per structure).
DagShapePtr fresh_shape(ShapeBuilder::Storage& st, const Scenario& s, const ShapeKey& key) {
  DagShapePtr sh = st.spare ? std::move(st.spare) : DagShapePtr(new DagShape);
  sh->ops.clear();
  sh->need.clear();
  sh->recipes.clear();
  sh->groups.clear();
  sh->pred.clear();
  sh->key = key.words;
  sh->seq_len = s.model.seq_len;
  sh->scatter_gather = uses_scatter_gather(s) && s.parallel.tp > 1;
  sh->o = grad_sync_options(s.training);
  sh->dp = s.parallel.dp > 1;
  return sh;
}

// Check: every recipe re-costed with `cost` equals its first node's lowered values (and so every node's: each was
// compared with its recipe's first node as it was classed). Sets the shape's fingerprints.
void check_recipes(DagShape& sh, const ShapeBuilder::Storage& st, const Scenario& s, const CostModel& cost,
                   const ShapeKey& key) {
  for (const Op& op : sh.ops) {
    const Op want = with_tokens(op, key.slice_begin, sh.seq_len);
    if (want.tok_begin != op.tok_begin || want.tok_end != op.tok_end)
      throw std::logic_error(s.source + ": stage 2: " + op_text(op) + " does not take its slice's tokens");
  }
  Retimer::Values v;
  ask(sh, s, key.slice_begin, cost, v);
  sh.fingerprint = v.fingerprint;
  sh.tp_fingerprint = v.tp_fingerprint;
  for (std::size_t x = 0; x < st.first.size(); x++)
    if (!same(costed(sh, sh.recipes[x], v, s.parallel.tp), st.first[x])) {
      const ShapeBuilder::Storage::At& f = st.first_at[x];
      throw std::logic_error(s.source + ": stage 2: re-costing node " + std::to_string(f.node) + " (" +
                             op_at(f.op, f.worker, f.index) +
                             ") differs from its lowering (core/plan/search_retime.cc)");
    }
}

}  // namespace

ShapeBuilder::ShapeBuilder() : st_(std::make_unique<Storage>()) {}
ShapeBuilder::~ShapeBuilder() = default;

DagShapePtr ShapeBuilder::build(const LoweredSchedule& ls, const Placement& replica, const Scenario& s,
                                const CostModel& cost, const ShapeKey& key) {
  Storage& st = *st_;
  DagShapePtr sh = fresh_shape(st, s, key);
  sh->p = ls.p;
  sh->groups = ls.groups;
  OpClasses op_classes(*sh, ls.schedule.stages(), static_cast<int>(key.slice_begin.size()));
  dag_build::check_and_match(ls, replica, st.scratch);
  NodeClasses classes(ls, s, *sh, op_classes, st);
  GraphSink sink{classes, st.node_cls};
  dag_build::build_graph(ls, st.dag, st.scratch, sink);
  stage_counts(st.stages, ls.p, *sh);
  number_topologically(st.dag, st.node_cls, *sh, s.source, st.pending, st.ready, st.id);
  check_recipes(*sh, st, s, cost, key);
  return sh;
}

bool ShapeBuilder::emits(const Scenario& s) {
  const GradSyncOptions o = grad_sync_options(s.training);
  return s.sim.p2p != "blocking" && !(s.parallel.dp > 1 && (o.overlap_grad_reduce || o.overlap_param_gather));
}

DagShapePtr ShapeBuilder::emit(const Scenario& s, const CostModel& cost, const ShapeKey& key, const LowerTo& lower) {
  Storage& st = *st_;
  DagShapePtr sh = fresh_shape(st, s, key);
  LoweredSchedule ls;
  EmitSink sink(s, key, *sh, st);
  lower(ls, sink);
  sink.finish();
  sh->p = ls.p;
  sh->groups = std::move(ls.groups);
  stage_counts(st.stages, ls.p, *sh);
  const std::uint32_t kept = fold_joins(st, *sh);
  number_emitted(st, *sh, kept, s.source);
  check_recipes(*sh, st, s, cost, key);
  return sh;
}

void ShapeBuilder::recycle(DagShapePtr shape) { st_->spare = std::move(shape); }

bool Retimer::load(const DagShape& shape, const Scenario& s, const ShapeKey& key, const CostModel& cost) {
  ask(shape, s, key.slice_begin, cost, *v_);
  return v_->fingerprint == shape.fingerprint && (s.parallel.tp == 1 || v_->tp_fingerprint == shape.tp_fingerprint);
}

namespace {

// The critical path of an emitted shape: each node's start the latest finish of its two predecessors (node 0, the
// start, finished at 0): the same maxima and sums as the push over successor lists below.
double pulled_path_s(const DagShape& sh, Retimer::Values& v) {
  const std::size_t n = sh.cls.size();
  v.start.resize(n);  // finish times here
  double* finish = v.start.data();
  const std::uint32_t* cls = sh.cls.data();
  const std::uint32_t* pred = sh.pred.data();
  const double* dur = v.dur.data();
  finish[0] = 0.0;
  double makespan = 0;
  for (std::size_t u = 1; u < n; u++) {
    const double f = std::max(std::max(0.0, finish[pred[2 * u]]), finish[pred[2 * u + 1]]) + dur[cls[u]];
    finish[u] = f;
    makespan = std::max(makespan, f);
  }
  return makespan;
}

}  // namespace

double Retimer::critical_path_s(const DagShape& sh, const Scenario& s) {
  Values& v = *v_;
  const Placement full = scenario_placement(s);
  ReplicaTiming timing(s, full, sh.groups);
  v.dur.resize(sh.recipes.size());
  for (std::size_t k = 0; k < sh.recipes.size(); k++)
    v.dur[k] = timing.duration_s(costed(sh, sh.recipes[k], v, s.parallel.tp));
  if (!sh.pred.empty()) return pulled_path_s(sh, v);
  const std::size_t n = sh.cls.size();
  v.start.assign(n, 0.0);
  double makespan = 0;
  const std::uint32_t* cls = sh.cls.data();
  const std::uint32_t* begin = sh.succ_begin.data();
  const std::uint32_t* succ = sh.succ.data();
  double* start = v.start.data();
  const double* dur = v.dur.data();
  for (std::size_t u = 0; u < n; u++) {
    const double f = start[u] + dur[cls[u]];
    makespan = std::max(makespan, f);
    for (std::uint32_t e = begin[u]; e < begin[u + 1]; e++) start[succ[e]] = std::max(start[succ[e]], f);
  }
  return makespan;
}

}  // namespace pipescope
