#include "core/search_retime.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/cost_model.h"
#include "core/dag.h"
#include "core/dag_build.h"
#include "core/grad_sync.h"
#include "core/megatron_p2p.h"
#include "core/pipeline.h"
#include "core/schedule_deps.h"
#include "core/schedule_registry.h"
#include "core/search_timing.h"
#include "core/seq1f1b.h"

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
                    s.sim.p2p == "blocking"});
  // tp = 1 lowers without tensor-parallel collectives and scatter/gather; a tp > 1 shape has them after ops and
  // receives, where with tp = 1 they would be rings of one GPU taking no time: such a shape times it too.
  key.tp_words.clear();
  if (par.tp == 1) {
    key.tp_words = key.words;
    key.tp_words[kTpWord] = 1;
  }
  return true;
}

namespace {

enum Need : std::uint8_t { kCompute = 1, kP2p = 2, kTp = 4 };

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

// How one node's duration is made from the candidate's cost values (core/lowering.cc and core/grad_sync.cc give
// each lowered op its values this way).
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
  std::vector<std::uint8_t> need;            // per op class: Need bits
  std::vector<int> grad_spans, param_spans;  // per rank: virtual stages with a backward, with any op
  std::vector<Recipe> recipes;               // duration classes
  std::vector<CollGroup> groups;             // the lowering's collective groups
  U32s cls;                                  // per node (topological numbering): its recipe
  U32s succ_begin, succ;                     // successors, CSR, topological numbering (build())
  // compile()'s shapes: node u >= 1 starts after nodes pred[2u] and pred[2u + 1]; node 0 is the start (finished at
  // 0, a missing predecessor). Empty for build()'s.
  U32s pred;
};

void DagShapeDelete::operator()(DagShape* p) const { delete p; }
const std::vector<std::int64_t>& shape_key_of(const DagShape& shape) { return shape.key; }
std::size_t shape_nodes(const DagShape& shape) { return shape.cls.size() - (shape.pred.empty() ? 0 : 1); }

struct Retimer::Values {
  std::vector<double> compute, p2p, tp_bytes;  // per op class (where asked)
  std::vector<int> tp_calls;
  std::vector<double> grad, param, opt;  // per rank
  std::vector<int> n_grad, n_param;      // buckets per virtual stage, per rank (0: not bucketed)
  double emb = 0;
  bool dist_opt = false;                                  // the candidate's distributed optimizer
  std::vector<std::int64_t> fingerprint, tp_fingerprint;  // the latter: the tensor-parallel answers
  std::vector<double> dur, start;
};

Retimer::Retimer() : v_(std::make_unique<Values>()) {}
Retimer::~Retimer() = default;

namespace {

// The op with the token range of its slice (make_op's rule, core/schedule.cc).
Op with_tokens(Op op, const std::vector<std::int32_t>& slice_begin, int seq_len) {
  const auto k = static_cast<std::size_t>(op.slice);
  op.tok_begin = slice_begin[k];
  op.tok_end = k + 1 < slice_begin.size() ? slice_begin[k + 1] : seq_len;
  return op;
}

// The cost questions of the shape, asked once per class as the passes ask them (core/lowering.cc,
// core/grad_sync.cc), and the fingerprint of the answers that the lowering's shape depends on.
void ask(const DagShape& sh, const Scenario& s, const std::vector<std::int32_t>& slice_begin, const CostModel& cost,
         Retimer::Values& v) {
  const std::size_t n = sh.ops.size();
  const int seqs = s.parallel.micro_batch_size;
  v.dist_opt = s.training.distributed_optimizer;
  v.compute.assign(n, 0.0);
  v.p2p.assign(n, 0.0);
  v.tp_bytes.assign(n, 0.0);
  v.tp_calls.assign(n, 0);
  auto& fp = v.fingerprint;
  fp.clear();
  v.tp_fingerprint.clear();
  // A candidate with tp = 1 on a tp > 1 shape asks no tensor-parallel question: its TP and scatter/gather
  // collectives are rings of one GPU (no time, so the shape's extra nodes change no path).
  const bool ask_tp = s.parallel.tp > 1;
  for (std::size_t c = 0; c < n; c++) {
    const Op op = with_tokens(sh.ops[c], slice_begin, sh.seq_len);
    if (sh.need[c] & kCompute) fp.push_back((v.compute[c] = cost.compute_seconds(op, seqs)) > 0);
    if (sh.need[c] & kP2p) fp.push_back((v.p2p[c] = cost.p2p_bytes(op, seqs)) > 0);
    if ((sh.need[c] & kTp) && ask_tp) {
      v.tp_fingerprint.push_back((v.tp_calls[c] = cost.tp_allreduce_calls(op)) > 0);
      if (v.tp_calls[c] > 0) v.tp_fingerprint.push_back((v.tp_bytes[c] = cost.tp_allreduce_bytes(op, seqs)) > 0);
    }
  }
  v.grad.assign(static_cast<std::size_t>(sh.p), 0.0);
  v.param = v.grad;
  v.opt = v.grad;
  v.n_grad.assign(static_cast<std::size_t>(sh.p), 0);
  v.n_param = v.n_grad;
  for (int r = 0; r < sh.p; r++) {
    const auto k = static_cast<std::size_t>(r);
    v.opt[k] = cost.optimizer_seconds(r);
    if (!sh.dp) continue;
    v.grad[k] = cost.grad_bytes(r);
    if (sh.o.overlap_grad_reduce && sh.grad_spans[k] > 0)
      v.n_grad[k] = bucket_count(v.grad[k] / static_cast<double>(sh.grad_spans[k]), sh.o.bucket_bytes);
    fp.push_back(v.grad[k] > 0);
    fp.push_back(v.n_grad[k]);
    if (!sh.o.distributed_optimizer) continue;
    if (!v.dist_opt) {  // a shape with the parameter gather timing a candidate without it: nothing to ask
      fp.insert(fp.end(), {cost.param_bytes(r) > 0, 0});  // as the shape's own candidates answer (no overlap)
      continue;
    }
    v.param[k] = cost.param_bytes(r);
    if (sh.o.overlap_param_gather && sh.param_spans[k] > 0)
      v.n_param[k] = bucket_count(v.param[k] / static_cast<double>(sh.param_spans[k]), sh.o.bucket_bytes);
    fp.push_back(v.param[k] > 0);
    fp.push_back(v.n_param[k]);
  }
  v.emb = cost.embedding_grad_bytes();
  fp.push_back(v.emb > 0);
}

// The lowered op's values that a recipe gives with the loaded answers (the same expressions as the passes).
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
      c.seconds = v.compute[k];
      break;
    case Recipe::What::Optimizer:
      c.dag = DagKind::Compute;
      c.seconds = v.opt[r];
      break;
    case Recipe::What::Transfer:
      c.dag = DagKind::Transfer;
      c.bytes = sh.scatter_gather ? v.p2p[k] / tp : v.p2p[k];
      break;
    case Recipe::What::Collective:
      c.dag = DagKind::Collective;
      switch (x.tag) {
        case CollTag::TensorParallel:
          c.count = v.tp_calls[k];
          c.bytes = v.tp_bytes[k];
          break;
        case CollTag::ScatterGather:
          c.bytes = v.p2p[k];
          break;
        case CollTag::DataParallel:
        case CollTag::ParamGather: {
          const bool grads = x.tag == CollTag::DataParallel;
          // A shape shared with and without the distributed optimizer (ShapeKey): the gradients' collective is the
          // candidate's; without it the parameter gather (a sink after the optimizer step) takes no time.
          if (grads) c.kind = v.dist_opt ? LOpKind::ReduceScatter : LOpKind::AllReduce;
          if (!grads && !v.dist_opt) {
            c.dag = DagKind::Join;
            break;
          }
          const double bytes = grads ? v.grad[r] : v.param[r];
          if (!x.async) {
            c.bytes = bytes;
            break;
          }
          const int n = grads ? v.n_grad[r] : v.n_param[r];
          const double per_stage = bytes / static_cast<double>(grads ? sh.grad_spans[r] : sh.param_spans[r]);
          c.bytes = per_stage / n;
          if (grads) c.lead_s = v.compute[k] * (x.j + 1) / n;
          break;
        }
        case CollTag::Embedding:
          c.bytes = v.emb;
          break;
        case CollTag::None:
        case CollTag::ContextParallel:
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
        x.cls = classes.of(l.op, kCompute);
      }
      return x;
    case DagKind::Transfer:
      x.what = Recipe::What::Transfer;
      x.cls = classes.of(l.op, kP2p);
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
      x.cls = classes.of(l.op, kTp);
      break;
    case CollTag::ScatterGather:
      x.cls = classes.of(l.op, kP2p);
      break;
    case CollTag::DataParallel:
      x.rank = ls.groups[static_cast<std::size_t>(l.group)].workers.front() % ls.p;
      if (l.async) x.cls = classes.of(l.op, kCompute), x.j = j;
      break;
    case CollTag::ParamGather:
      x.rank = ls.groups[static_cast<std::size_t>(l.group)].workers.front() % ls.p;
      break;
    case CollTag::Embedding:
      break;
    case CollTag::None:
    case CollTag::ContextParallel:
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
  ready.resize(n);  // a stack
  id.resize(n);
  sh.cls.resize(n);
  sh.succ_begin.resize(n + 1);
  sh.succ.resize(dag.succ.size());
  std::size_t top = 0;
  for (std::uint32_t i = 0; i < n; i++)
    if (pending[i] == 0) ready[top++] = i;
  std::uint32_t k = 0, fill = 0;
  sh.succ_begin[0] = 0;
  while (top > 0) {
    const std::uint32_t u = ready[--top];
    id[u] = k;
    sh.cls[k] = node_cls[u];
    for (std::uint32_t e = dag.succ_begin[u]; e < dag.succ_begin[u + 1]; e++) {
      const std::uint32_t v = dag.succ[e];
      sh.succ[fill++] = v;
      if (--pending[v] == 0) ready[top++] = v;
    }
    sh.succ_begin[++k] = fill;
  }
  if (k != n) throw std::runtime_error(source + ": the lowered schedule's DAG has a cycle");
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
  };
  std::vector<At> first_at;  // per recipe: its first node and that node's lowered op
  DagShapePtr spare;         // a shape no longer used, whose storage the next build takes (recycle)

  // compile()'s: ops numbered rank by rank (op_base: each rank's first), each op's class, the p2p pass's tables
  // per op slot, the messages in the order the pass makes them and, per op, those received before it and sent
  // after it (offsets into the lists by op number).
  Retimer::Values values;
  std::vector<std::uint32_t> op_base, op_cls;
  std::vector<std::int32_t> at_worker, at_index, received_on;
  struct Message {
    std::int32_t from, to, cls;
    std::uint32_t from_op, to_op;
  };
  std::vector<Message> msgs;
  std::vector<std::uint32_t> recv_off, recv_list, send_off, send_list, send_node;
  std::vector<std::int32_t> waiter;
};

namespace {

// build_graph's sink (core/dag_build.h) for a shape: each node classed into its recipe as it is numbered, and its
// lowered values compared with its recipe's first node's (the check; each recipe's first node is compared with the
// recipe re-costed once the classes are complete).
class ShapeSink {
 public:
  ShapeSink(const LoweredSchedule& ls, const Scenario& s, DagShape& sh, OpClasses& classes, ShapeBuilder::Storage& st)
      : ls_(ls), s_(s), sh_(sh), classes_(classes), st_(st), join_recipe_(kLOpKinds, -1) {
    // Every compute op asks the TP question when tp > 1 (core/lowering.cc, tp_pass), whether or not it issues one.
    compute_need_ = ls.tp > 1 ? kCompute | kTp : kCompute;
    st_.node_cls.clear();
    st_.first.clear();
    st_.first_at.clear();
    st_.stages.resize(static_cast<std::size_t>(ls.p));
    for (auto& x : st_.stages) x.clear();
  }
  void begin(std::size_t ops) { st_.node_cls.reserve(ops); }
  std::uint32_t size() const { return static_cast<std::uint32_t>(st_.node_cls.size()); }

  void add(DagKind kind, int w, std::size_t i, const LoweredOp& l, std::int32_t group) {
    DagNode n;
    n.kind = kind;
    n.worker = w;
    n.index = static_cast<std::int32_t>(i);
    n.group = group;
    // Compute ops and joins, most of the nodes, find their recipe by op class and op kind.
    if (kind == DagKind::Compute && l.kind == LOpKind::Compute) {
      const auto c = static_cast<std::size_t>(classes_.of(l.op, compute_need_));
      if (c >= compute_recipe_.size()) compute_recipe_.resize(c + 1, -1);
      if (compute_recipe_[c] < 0) compute_recipe_[c] = add_recipe(recipe_of(ls_, l, n, 0, classes_));
      if (w < ls_.p) mark_stage(w, l.op);
      const auto x = static_cast<std::uint32_t>(compute_recipe_[c]);
      // A compute node's values are its kind (the recipe's) and its seconds: the check compares the seconds.
      if (x < st_.first.size() && l.seconds == st_.first[x].seconds) return st_.node_cls.push_back(x);
      return assign(n, l, x);
    }
    if (kind == DagKind::Join) {
      std::int64_t& x = join_recipe_[static_cast<std::size_t>(l.kind)];
      if (x < 0) x = add_recipe(recipe_of(ls_, l, n, 0, classes_));
      // A join's values are its lowered kind alone, the recipe's: nothing to compare after its first node.
      if (static_cast<std::size_t>(x) < st_.first.size()) return st_.node_cls.push_back(static_cast<std::uint32_t>(x));
      return assign(n, l, static_cast<std::uint32_t>(x));
    }
    // Transfers and per-op collectives (TP, scatter/gather): by op class too, the class's last recipe reused when
    // equal.
    const int slot = kind == DagKind::Transfer                                         ? 0
                     : kind == DagKind::Collective && l.tag == CollTag::TensorParallel ? 1
                     : kind == DagKind::Collective && l.tag == CollTag::ScatterGather  ? 2
                                                                                       : -1;
    if (slot >= 0) {
      if (same_as_last(slot, w, l, group)) return;
      const Recipe x = recipe_of(ls_, l, n, 0, classes_);
      auto& last = per_class_[slot];
      const auto c = static_cast<std::size_t>(x.cls);
      if (c >= last.size()) last.resize(c + 1, -1);
      if (last[c] < 0 || !(sh_.recipes[static_cast<std::size_t>(last[c])] == x)) last[c] = add_recipe(x);
      return assign(n, l, static_cast<std::uint32_t>(last[c]));
    }
    int j = 0;
    // Bucket j of a stage is the j-th async gradient collective of that stage in the program (core/grad_sync.cc):
    // build_graph numbers a group's calls in member program order, and the check would catch it otherwise.
    if (kind == DagKind::Collective && l.tag == CollTag::DataParallel && l.async) j = buckets_[{w, l.op.stage}]++;
    assign(n, l, add_recipe(recipe_of(ls_, l, n, j, classes_)));
  }

 private:
  // Whether a transfer (slot 0), TP (1) or scatter/gather (2) node takes its op class's last recipe with the values
  // of that recipe's first node; then the node is classed. The recipe's fields other than those compared here are
  // the slot's and the class's, and the node's values other than those compared are the recipe's (recipe_of,
  // costed_op): the same answer as building the node's recipe and comparing all fields.
  bool same_as_last(int slot, int w, const LoweredOp& l, std::int32_t group) {
    const auto c = static_cast<std::size_t>(classes_.of(l.op, slot == 1 ? kTp : kP2p));
    const auto& last = per_class_[slot];
    if (c >= last.size() || last[c] < 0) return false;
    const auto x = static_cast<std::uint32_t>(last[c]);
    const Recipe& r = sh_.recipes[x];
    const CostedOp& f = st_.first[x];
    const bool same_values = slot == 0
                                 ? r.kind == l.kind && r.worker == w && r.peer == l.peer && l.bytes == f.bytes
                                 : r.kind == l.kind && r.async == l.async && r.group == group && l.bytes == f.bytes &&
                                       l.count == f.count && (l.async ? l.lead_s : 0.0) == f.lead_s;
    if (same_values) st_.node_cls.push_back(x);
    return same_values;
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
  void assign(const DagNode& n, const LoweredOp& l, std::uint32_t x) {
    const auto u = static_cast<std::uint32_t>(st_.node_cls.size());
    st_.node_cls.push_back(x);
    const CostedOp got = costed_op(l, n);
    if (x == st_.first.size()) {
      st_.first.push_back(got);
      st_.first_at.push_back({u, n.worker, n.index});
    } else if (!same(got, st_.first[x])) {
      const ShapeBuilder::Storage::At& f = st_.first_at[x];
      throw std::logic_error(s_.source + ": stage 2: node " + std::to_string(u) + " (" +
                             lowered_op_name(ls_, n.worker, static_cast<std::size_t>(n.index)) + ") and node " +
                             std::to_string(f.node) + " (" +
                             lowered_op_name(ls_, f.worker, static_cast<std::size_t>(f.index)) +
                             ") share a duration class but differ in their lowering (core/search_retime.cc)");
    }
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

}  // namespace

namespace {

// A shape with the scenario's settings and nothing else: the storage of a shape dropped from the cache, where there
// is one (a fresh shape's arrays are fresh pages to fault in, megabytes per structure).
DagShapePtr fresh_shape(ShapeBuilder::Storage& st, const Scenario& s, const ShapeKey& key, int p) {
  DagShapePtr sh = st.spare ? std::move(st.spare) : DagShapePtr(new DagShape);
  sh->ops.clear();
  sh->need.clear();
  sh->recipes.clear();
  sh->groups.clear();
  sh->pred.clear();
  sh->key = key.words;
  sh->seq_len = s.model.seq_len;
  sh->p = p;
  sh->scatter_gather = uses_scatter_gather(s) && s.parallel.tp > 1;
  sh->o = grad_sync_options(s.training);
  sh->dp = s.parallel.dp > 1;
  return sh;
}

}  // namespace

ShapeBuilder::ShapeBuilder() : st_(std::make_unique<Storage>()) {}
ShapeBuilder::~ShapeBuilder() = default;

DagShapePtr ShapeBuilder::build(const LoweredSchedule& ls, const Placement& replica, const Scenario& s,
                                const CostModel& cost, const ShapeKey& key) {
  Storage& st = *st_;
  DagShapePtr sh = fresh_shape(st, s, key, ls.p);
  sh->groups = ls.groups;
  OpClasses classes(*sh, ls.schedule.stages(), static_cast<int>(key.slice_begin.size()));
  dag_build::check_and_match(ls, replica, st.scratch);
  ShapeSink sink(ls, s, *sh, classes, st);
  dag_build::build_graph(ls, st.dag, st.scratch, sink);
  stage_counts(st.stages, ls.p, *sh);
  number_topologically(st.dag, st.node_cls, *sh, s.source, st.pending, st.ready, st.id);

  // Check: every node re-costed from its recipe equals what the lowering gave it.
  for (const Op& op : sh->ops) {
    const Op want = with_tokens(op, key.slice_begin, sh->seq_len);
    if (want.tok_begin != op.tok_begin || want.tok_end != op.tok_end)
      throw std::logic_error(s.source + ": stage 2: " + op_text(op) + " does not take its slice's tokens");
  }
  Retimer::Values v;
  ask(*sh, s, key.slice_begin, cost, v);
  sh->fingerprint = v.fingerprint;
  sh->tp_fingerprint = v.tp_fingerprint;
  for (std::size_t x = 0; x < st.first.size(); x++)
    if (!same(costed(*sh, sh->recipes[x], v, s.parallel.tp), st.first[x])) {
      const Storage::At& f = st.first_at[x];
      throw std::logic_error(s.source + ": stage 2: re-costing node " + std::to_string(f.node) + " (" +
                             lowered_op_name(ls, f.worker, static_cast<std::size_t>(f.index)) +
                             ") differs from its lowering (core/search_retime.cc)");
    }
  return sh;
}

void ShapeBuilder::recycle(DagShapePtr shape) { st_->spare = std::move(shape); }

namespace {

// compile()'s steps, in the order of the lowering passes they stand for (core/lowering.cc, core/grad_sync.cc,
// core/search_estimate.cc lower_one_replica) and of build_dag's edges (core/dag_build.h build_graph).
class ShapeCompiler {
 public:
  ShapeCompiler(const Schedule& sch, const Scenario& s, const ShapeKey& key, DagShape& sh, ShapeBuilder::Storage& st)
      : sch_(sch),
        key_(key),
        sh_(sh),
        st_(st),
        v_(st.values),
        p_(sch.p),
        tp_(s.parallel.tp),
        classes_(sh, sch.stages(), static_cast<int>(key.slice_begin.size())) {}

  // Every op's class (what the cost model reads of it); false when an op is not what the classes assume (its
  // stage, slice or micro-batch outside the schedule's, a token range not its slice's).
  bool classify() {
    const std::size_t slices = key_.slice_begin.size();
    st_.op_base.assign(static_cast<std::size_t>(p_) + 1, 0);
    for (int r = 0; r < p_; r++)
      st_.op_base[r + 1] = st_.op_base[r] + static_cast<std::uint32_t>(sch_.per_rank[r].size());
    st_.op_cls.resize(st_.op_base.back());
    st_.stages.resize(static_cast<std::size_t>(p_));
    for (auto& x : st_.stages) x.clear();
    // Every compute op asks the TP question when tp > 1 (core/lowering.cc, TpRule), whether or not it issues one.
    const std::uint8_t need = tp_ > 1 ? kCompute | kTp : kCompute;
    for (int r = 0; r < p_; r++) {
      std::uint32_t* cls = st_.op_cls.data() + st_.op_base[r];
      auto& stages = st_.stages[static_cast<std::size_t>(r)];
      for (const Op& op : sch_.per_rank[r]) {
        if (op.stage < 0 || op.stage >= sch_.stages() || op.slice < 0 || static_cast<std::size_t>(op.slice) >= slices ||
            op.microbatch < 0 || static_cast<std::size_t>(op.microbatch) >= sch_.microbatches.size() ||
            static_cast<std::size_t>(op.kind) >= static_cast<std::size_t>(kOpKinds))
          return false;
        const Op want = with_tokens(op, key_.slice_begin, sh_.seq_len);
        if (want.tok_begin != op.tok_begin || want.tok_end != op.tok_end) return false;
        *cls++ = static_cast<std::uint32_t>(classes_.of(op, need));
        const auto g = static_cast<std::size_t>(op.stage);  // stage_counts' marks
        if (g >= stages.size()) stages.resize(g + 1, -1);
        stages[g] = std::max<std::int8_t>(stages[g], op.kind == OpKind::Backward || op.kind == OpKind::BackwardWeight);
      }
    }
    stage_counts(st_.stages, p_, sh_);
    return true;
  }

  // add_p2p's messages (p2p_inserts: the same tables and order), each op's received and sent ones listed.
  void match() {
    const OpKeyIndex index(sch_);
    st_.at_worker.assign(index.size(), -1);
    st_.at_index.resize(index.size());
    st_.received_on.assign(index.size(), -1);
    for (int r = 0; r < p_; r++)
      for (std::size_t i = 0; i < sch_.per_rank[r].size(); i++) {
        const std::int64_t slot = index.slot(key_of(sch_.per_rank[r][i]));
        if (slot >= 0 && st_.at_worker[slot] < 0)
          st_.at_worker[slot] = r, st_.at_index[slot] = static_cast<std::int32_t>(i);
      }
    st_.msgs.clear();
    for (int r = 0; r < p_; r++)
      for (std::size_t i = 0; i < sch_.per_rank[r].size(); i++) {
        OpKey deps[3];
        const int n_deps = op_dependencies(index, key_of(sch_.per_rank[r][i]), deps);
        for (int k = 0; k < n_deps; k++) {
          const std::int64_t slot = index.slot(deps[k]);
          if (slot < 0 || st_.at_worker[slot] < 0 || st_.at_worker[slot] == r || st_.received_on[slot] == r) continue;
          st_.received_on[slot] = r;
          const int pw = st_.at_worker[slot];
          const auto pi = static_cast<std::uint32_t>(st_.at_index[slot]);
          st_.msgs.push_back({pw, r, classes_.of(sch_.per_rank[pw][pi], kP2p), st_.op_base[pw] + pi,
                              st_.op_base[r] + static_cast<std::uint32_t>(i)});
        }
      }
    // Counting sorts (stable: the pass's order among the messages of one op).
    const std::size_t ops = st_.op_cls.size();
    st_.recv_off.assign(ops + 1, 0);
    st_.send_off.assign(ops + 1, 0);
    for (const auto& m : st_.msgs) st_.recv_off[m.to_op + 1]++, st_.send_off[m.from_op + 1]++;
    for (std::size_t g = 0; g < ops; g++)
      st_.recv_off[g + 1] += st_.recv_off[g], st_.send_off[g + 1] += st_.send_off[g];
    st_.recv_list.resize(st_.msgs.size());
    st_.send_list.resize(st_.msgs.size());
    st_.send_node.resize(st_.msgs.size());  // filled (0: not emitted yet) below
    for (std::size_t k = 0, n = st_.msgs.size(); k < n; k++) {
      st_.recv_list[st_.recv_off[st_.msgs[k].to_op]++] = static_cast<std::uint32_t>(k);
      st_.send_list[st_.send_off[st_.msgs[k].from_op]++] = static_cast<std::uint32_t>(k);
    }
    // The offsets were advanced to each op's end: shifted back.
    for (std::size_t g = ops; g > 0; g--) st_.recv_off[g] = st_.recv_off[g - 1], st_.send_off[g] = st_.send_off[g - 1];
    st_.recv_off[0] = st_.send_off[0] = 0;
  }

  // The collective groups in the lowering's order: scatter/gather (workers that gather anything), TP (workers with
  // a compute op that issues TP all-reduces), then the data-parallel ones, the embedding group and the parameter
  // gathers (lower_one_replica).
  void make_groups() {
    const auto P = static_cast<std::size_t>(p_);
    sg_group_.assign(P, -1);
    tp_group_.assign(P, -1);
    if (sh_.scatter_gather) {
      std::vector<char> gathers(P, 0);
      for (const auto& m : st_.msgs) gathers[static_cast<std::size_t>(m.to)] |= v_.p2p[m.cls] > 0;
      for (std::size_t w = 0; w < P; w++)
        if (gathers[w]) sg_group_[w] = add_group(CollTag::ScatterGather, {static_cast<std::int32_t>(w)});
    }
    if (tp_ > 1)
      for (std::size_t w = 0; w < P; w++)
        for (std::uint32_t g = st_.op_base[w]; g < st_.op_base[w + 1]; g++)
          if (v_.tp_calls[st_.op_cls[g]] > 0) {
            tp_group_[w] = add_group(CollTag::TensorParallel, {static_cast<std::int32_t>(w)});
            break;
          }
    dp_group_.assign(P, -1);
    pg_group_.assign(P, -1);
    if (sh_.dp)
      for (std::size_t r = 0; r < P; r++)
        dp_group_[r] = add_group(CollTag::DataParallel, {static_cast<std::int32_t>(r)});
    // The ranks of the first and the last virtual stage (core/lowering.cc grad_sync_pass).
    r_first_ = sch_.rank_of_stage(0);
    r_last_ = sch_.rank_of_stage(sch_.stages() - 1);
    if (v_.emb > 0 && r_first_ != r_last_) emb_group_ = add_group(CollTag::Embedding, {r_first_, r_last_});
    if (sh_.dp && sh_.o.distributed_optimizer)
      for (std::size_t r = 0; r < P; r++)
        pg_group_[r] = add_group(CollTag::ParamGather, {static_cast<std::int32_t>(r)});
  }

  // Every node in a topological order (each worker's program run until it waits for a message not yet sent or for
  // the embedding all-reduce's other member), with its predecessors; false on a cycle.
  bool emit() {
    const auto P = static_cast<std::size_t>(p_);
    sh_.cls.clear();
    sh_.pred.clear();
    const std::size_t ops = st_.op_cls.size(), msgs = st_.msgs.size();
    reserve_nodes(1 + ops * (tp_ > 1 ? 2 : 1) + msgs * (sh_.scatter_gather ? 3 : 2) + 4 * P);
    zero_ = recipe(Recipe{});
    node(zero_, 0, 0);  // the start
    std::fill(st_.send_node.begin(), st_.send_node.end(), 0u);
    st_.waiter.assign(msgs, -1);
    workers_.assign(P, Worker{});
    for (std::size_t w = 0; w < P; w++) workers_[w].rc = st_.recv_off[st_.op_base[w]];
    ready_.clear();
    for (std::size_t w = P; w > 0; w--) ready_.push_back(static_cast<std::int32_t>(w - 1));
    while (!ready_.empty()) {
      const std::int32_t w = ready_.back();
      ready_.pop_back();
      run(w);
    }
    for (const Worker& x : workers_)
      if (x.tail != kDone) return false;
    return true;
  }

 private:
  struct Worker {
    std::uint32_t pos = 0, rc = 0;  // the next op, the next message it receives (into recv_list)
    std::uint32_t prev = 0;         // its last node that is not a send (0: none yet)
    int tail = 0;                   // 0: program, 1: the embedding all-reduce, 2: the optimizer step, kDone
  };
  static constexpr int kDone = 3;

  std::int32_t add_group(CollTag tag, std::vector<std::int32_t> workers) {
    sh_.groups.push_back(CollGroup{tag, std::move(workers)});
    return static_cast<std::int32_t>(sh_.groups.size() - 1);
  }
  void reserve_nodes(std::size_t n) {
    auto grown = [](U32s& a, std::size_t k) {  // as dag_build::reserve_grown
      if (k > a.capacity()) a.reserve(std::max(k, 2 * a.capacity()));
    };
    grown(sh_.cls, n);
    grown(sh_.pred, 2 * n);
  }
  std::uint32_t node(std::uint32_t x, std::uint32_t a, std::uint32_t b) {
    const auto u = static_cast<std::uint32_t>(sh_.cls.size());
    sh_.cls.push_back(x);
    sh_.pred.push_back(a);
    sh_.pred.push_back(b);
    return u;
  }
  std::uint32_t recipe(const Recipe& x) {
    const auto [it, added] = ids_.emplace(x, static_cast<std::uint32_t>(ids_.size()));
    if (added) sh_.recipes.push_back(x);
    return it->second;
  }
  // A per-class recipe that also depends on a worker (or a worker pair): the class's last one when its key is the
  // same (a class is one stage's: almost always).
  std::uint32_t cached(std::vector<std::pair<std::int64_t, std::uint32_t>>& cache, std::int32_t cls, std::int64_t key,
                       const Recipe& x) {
    const auto c = static_cast<std::size_t>(cls);
    if (c >= cache.size()) cache.resize(c + 1, {-1, 0});
    if (cache[c].first != key) cache[c] = {key, recipe(x)};
    return cache[c].second;
  }
  static Recipe collective(LOpKind kind, CollTag tag, std::int32_t group) {
    Recipe x;
    x.what = Recipe::What::Collective;
    x.kind = kind;
    x.tag = tag;
    x.group = group;
    return x;
  }
  std::uint32_t compute_recipe(std::uint32_t c) {
    if (c >= compute_.size()) compute_.resize(c + 1, -1);
    if (compute_[c] < 0) {
      Recipe x;
      x.what = Recipe::What::Compute;
      x.cls = static_cast<std::int32_t>(c);
      compute_[c] = recipe(x);
    }
    return static_cast<std::uint32_t>(compute_[c]);
  }
  std::uint32_t tp_recipe(std::uint32_t c, std::int32_t w) {
    Recipe x = collective(LOpKind::AllReduce, CollTag::TensorParallel, tp_group_[static_cast<std::size_t>(w)]);
    x.cls = static_cast<std::int32_t>(c);
    return cached(tp_cache_, x.cls, w, x);
  }
  std::uint32_t sg_recipe(std::int32_t c, std::int32_t w) {
    Recipe x = collective(LOpKind::AllGather, CollTag::ScatterGather, sg_group_[static_cast<std::size_t>(w)]);
    x.cls = c;
    return cached(sg_cache_, c, w, x);
  }
  std::uint32_t transfer_recipe(const ShapeBuilder::Storage::Message& m) {
    Recipe x;
    x.what = Recipe::What::Transfer;
    x.kind = LOpKind::Send;
    x.cls = m.cls;
    x.worker = m.from;
    x.peer = m.to;
    return cached(transfer_cache_, m.cls, static_cast<std::int64_t>(m.from) << 32 | static_cast<std::uint32_t>(m.to),
                  x);
  }
  // A rank's data-parallel collective (lowered with the scenario's distributed optimizer; costed() takes the
  // candidate's), optimizer step and parameter gather.
  std::uint32_t rank_recipe(Recipe x, std::int32_t r) {
    x.rank = r;
    return recipe(x);
  }

  // Worker w's nodes until it waits or ends.
  void run(std::int32_t w) {
    Worker& me = workers_[static_cast<std::size_t>(w)];
    const auto& ops = sch_.per_rank[static_cast<std::size_t>(w)];
    const std::uint32_t base = st_.op_base[static_cast<std::size_t>(w)];
    while (me.pos < ops.size()) {
      const std::uint32_t g = base + me.pos;
      // Its receives (each followed by its scatter/gather all-gather), the op and its TP all-reduce, its sends
      // (after the last op that is not a send; none waits for them).
      for (; me.rc < st_.recv_off[g + 1]; me.rc++) {
        const std::uint32_t k = st_.recv_list[me.rc];
        if (st_.send_node[k] == 0) {
          st_.waiter[k] = w;
          return;
        }
        me.prev = node(zero_, me.prev, st_.send_node[k]);
        const std::int32_t c = st_.msgs[k].cls;
        if (sh_.scatter_gather && v_.p2p[static_cast<std::size_t>(c)] > 0) me.prev = node(sg_recipe(c, w), me.prev, 0);
      }
      const std::uint32_t c = st_.op_cls[g];
      me.prev = node(compute_recipe(c), me.prev, 0);
      if (tp_ > 1 && v_.tp_calls[c] > 0) me.prev = node(v_.tp_bytes[c] > 0 ? tp_recipe(c, w) : zero_, me.prev, 0);
      for (std::uint32_t e = st_.send_off[g]; e < st_.send_off[g + 1]; e++) {
        const std::uint32_t k = st_.send_list[e];
        const auto& m = st_.msgs[k];
        st_.send_node[k] = node(v_.p2p[static_cast<std::size_t>(m.cls)] > 0 ? transfer_recipe(m) : zero_, me.prev, 0);
        if (st_.waiter[k] >= 0) ready_.push_back(st_.waiter[k]), st_.waiter[k] = -1;
      }
      me.pos++;
    }
    run_tail(w, me);
  }

  // The program's tail (lower_one_replica): the data-parallel collective, the embedding all-reduce (one node shared
  // by its two members), the optimizer step, the parameter gather.
  void run_tail(std::int32_t w, Worker& me) {
    const auto r = static_cast<std::size_t>(w);
    if (me.tail == 0) {
      if (sh_.dp) {
        const LOpKind kind = sh_.o.distributed_optimizer ? LOpKind::ReduceScatter : LOpKind::AllReduce;
        const std::uint32_t x =
            v_.grad[r] > 0 ? rank_recipe(collective(kind, CollTag::DataParallel, dp_group_[r]), w) : zero_;
        me.prev = node(x, me.prev, 0);
      }
      me.tail = 1;
    }
    if (me.tail == 1) {
      if (emb_group_ >= 0 && (w == r_first_ || w == r_last_)) {
        if (emb_node_ == 0) {
          if (emb_waiting_ < 0) {
            emb_waiting_ = w;
            return;
          }
          Worker& other = workers_[static_cast<std::size_t>(emb_waiting_)];
          emb_node_ = node(recipe(collective(LOpKind::AllReduce, CollTag::Embedding, emb_group_)), other.prev, me.prev);
          ready_.push_back(emb_waiting_);
        }
        me.prev = emb_node_;
      }
      me.tail = 2;
    }
    if (me.tail == 2) {
      Recipe opt;
      opt.what = Recipe::What::Optimizer;
      opt.kind = LOpKind::Optimizer;
      me.prev = node(rank_recipe(opt, w), me.prev, 0);
      if (pg_group_[r] >= 0) {
        const std::uint32_t x = v_.param[r] > 0
                                    ? rank_recipe(collective(LOpKind::AllGather, CollTag::ParamGather, pg_group_[r]), w)
                                    : zero_;
        me.prev = node(x, me.prev, 0);
      }
      me.tail = kDone;
    }
  }

  const Schedule& sch_;
  const ShapeKey& key_;
  DagShape& sh_;
  ShapeBuilder::Storage& st_;
  const Retimer::Values& v_;
  const int p_, tp_;
  OpClasses classes_;
  std::unordered_map<Recipe, std::uint32_t, RecipeHash> ids_;
  std::uint32_t zero_ = 0;
  std::vector<std::int64_t> compute_;
  std::vector<std::pair<std::int64_t, std::uint32_t>> tp_cache_, sg_cache_, transfer_cache_;
  std::vector<std::int32_t> sg_group_, tp_group_, dp_group_, pg_group_;
  std::int32_t emb_group_ = -1, r_first_ = 0, r_last_ = 0;
  std::uint32_t emb_node_ = 0;
  std::int32_t emb_waiting_ = -1;
  std::vector<Worker> workers_;
  std::vector<std::int32_t> ready_;
};

}  // namespace

DagShapePtr ShapeBuilder::compile(const Schedule& sch, const Scenario& s, const CostModel& cost, const ShapeKey& key) {
  const ParallelSpec& par = s.parallel;
  const GradSyncOptions o = grad_sync_options(s.training);
  if (s.sim.p2p == "blocking" || (par.dp > 1 && (o.overlap_grad_reduce || o.overlap_param_gather))) return nullptr;
  if (sch.p != par.pp || sch.p < 1 || sch.per_rank.size() != static_cast<std::size_t>(sch.p)) return nullptr;
  // The structure's classes ask the cost model for micro-batches of micro_batch_size sequences (ask()).
  for (const MicroBatch& mb : sch.microbatches)
    if (mb.seq_count != par.micro_batch_size) return nullptr;
  Storage& st = *st_;
  DagShapePtr sh = fresh_shape(st, s, key, sch.p);
  ShapeCompiler c(sch, s, key, *sh, st);
  bool ok = c.classify();
  if (ok) {
    c.match();
    ask(*sh, s, key.slice_begin, cost, st.values);  // the answers the shape follows (bytes or none, TP calls or none)
    sh->fingerprint = st.values.fingerprint;
    sh->tp_fingerprint = st.values.tp_fingerprint;
    c.make_groups();
    ok = c.emit();
  }
  if (!ok) {
    st.spare = std::move(sh);
    return nullptr;
  }
  return sh;
}

namespace {

// The critical path of a compiled shape: each node's start the latest finish of its two predecessors (node 0, the
// start, finished at 0), the same maxima and sums as the push over successor lists below.
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
    const double start = std::max(std::max(0.0, finish[pred[2 * u]]), finish[pred[2 * u + 1]]);
    const double f = start + dur[cls[u]];
    finish[u] = f;
    makespan = std::max(makespan, f);
  }
  return makespan;
}

}  // namespace

bool Retimer::load(const DagShape& shape, const Scenario& s, const ShapeKey& key, const CostModel& cost) {
  ask(shape, s, key.slice_begin, cost, *v_);
  return v_->fingerprint == shape.fingerprint && (s.parallel.tp == 1 || v_->tp_fingerprint == shape.tp_fingerprint);
}

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
