#pragma once
// Stage 2's structure cache (core/plan/search_estimate.h): one replica's lowered DAG kept per structure and re-timed
// for every candidate of that structure WITHOUT lowering it again. A candidate's node durations come from a few
// duration classes (one per distinct cost question: a compute op's (kind, virtual stage, slice), a transfer's
// (link, message), a collective's (group, size, calls, lead)), each computed once from the candidate's own cost
// model, token slices and placement with the same arithmetic the lowering passes and the estimate use; then one
// pass over the nodes in a stored topological numbering (flat arrays, nothing allocated per candidate once the
// buffers have grown). The values are bit-identical to lowering the candidate: the longest path takes the same sums
// (a zero-duration node adds exactly nothing), and the candidate a structure is built for checks every re-costed node
// against that lowering (a mismatch throws). The candidates a superset shape times (below) are not checked at run
// time; tests/test_search.cc re-times every candidate of whole searches against fresh lowerings. A structure's DAG
// is made while its candidate is lowered (ShapeBuilder::emit: the lowering's sink makes each op's node with its at
// most two predecessors), or from the kept programs where nodes have more (ShapeBuilder::build).
//
// What a structure is: ShapeKey (the scenario fields the lowered programs' shape follows: schedule kind, pp, v,
// micro-batch count, number of token slices, whether tp and dp exceed 1, scatter/gather, the gradient-sync options,
// the p2p mode) plus a fingerprint of the cost values the shape depends on (which messages and collectives have
// bytes, which ops issue tensor-parallel all-reduces, which buckets have a lead, the bucket counts). Two supersets:
// a shape lowered with the distributed optimizer also times the candidates without it (no overlap_param_gather), and
// a tp > 1 shape the tp = 1 candidates (shape_key in the .cc says why the extra nodes take no time).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/lower/lowering.h"
#include "core/model/config.h"
#include "core/model/placement.h"

namespace pipescope {

class CostModel;
struct Dag;

// The scenario fields a one-replica lowering's shape depends on (with the fingerprint below), and the token slices
// every micro-batch gets (only their number is in the key: the generators order ops by slice, not by token). False
// when the scenario cannot be keyed: a schedule file, TeraPipe's joint plan (micro-batches of different sizes),
// context parallelism (not in the one-replica lowering).
struct ShapeKey {
  std::vector<std::int64_t> words;
  std::vector<std::int32_t> slice_begin;
  bool lower_with_do = false;  // the shape is the scenario's with training.distributed_optimizer on (see the .cc)
  std::vector<std::int64_t> tp_words;  // tp = 1: the key of the tp > 1 shapes that time it too (see the .cc)
};
bool shape_key(const Scenario& s, ShapeKey& key);
// The op with the token range of its slice (make_op's rule, core/ir/schedule.cc), `slice_begin` a ShapeKey's.
Op with_tokens(Op op, const std::vector<std::int32_t>& slice_begin, int seq_len);

struct DagShape;  // core/plan/search_retime.cc
struct DagShapeDelete {
  void operator()(DagShape* p) const;
};
using DagShapePtr = std::unique_ptr<DagShape, DagShapeDelete>;

// The cost values of one candidate for a shape, and scratch buffers for re-timing; reused across candidates.
class Retimer {
 public:
  Retimer();
  ~Retimer();
  Retimer(const Retimer&) = delete;
  Retimer& operator=(const Retimer&) = delete;

  // Asks the candidate's cost model every question of the shape (once per class); false when the answers would
  // give the lowering another shape (its fingerprint differs): the candidate needs a shape of its own.
  bool load(const DagShape& shape, const Scenario& s, const ShapeKey& key, const CostModel& cost);
  // The critical path (seconds) of the shape with the loaded values on the scenario's placement.
  double critical_path_s(const DagShape& shape, const Scenario& s);

  struct Values;  // core/plan/search_retime.cc

 private:
  std::unique_ptr<Values> v_;
};

// Builds shapes, keeping its storage (the DAG's successor lists, the build's scratch) from one structure to the next.
class ShapeBuilder {
 public:
  ShapeBuilder();
  ~ShapeBuilder();
  ShapeBuilder(const ShapeBuilder&) = delete;
  ShapeBuilder& operator=(const ShapeBuilder&) = delete;

  // The shape of `ls` (one replica of `s`, lowered with `cost`) on `replica` (replica 0's GPUs): build_dag's nodes and
  // edges (core/lower/dag_build.h, the same code), each node classed into its duration class as it is made (no DagNode
  // kept), then numbered topologically. Checked: every node re-costed from the shape's classes with `cost` equals
  // the lowered op's value (std::logic_error otherwise). Throws CheckError as build_dag does, std::runtime_error
  // when the DAG has a cycle.
  DagShapePtr build(const LoweredSchedule& ls, const Placement& replica, const Scenario& s, const CostModel& cost,
                    const ShapeKey& key);
  // The shape of candidate `s` made while its one replica is lowered: lower(ls, sink) runs the lowering
  // (lower_one_replica_to) into a sink that turns each op into its node as it comes (build_dag's node kind, classed
  // and checked as build() does) with its at most two predecessors; no program kept, no message matched (the
  // lowering numbers each Send and its Recv), no successor lists; then numbered topologically. For what emits()
  // accepts: eager sends, no overlapped gradient or parameter collectives (build() takes the rest).
  using LowerTo = std::function<void(LoweredSchedule& ls, LoweringSink& sink)>;
  DagShapePtr emit(const Scenario& s, const CostModel& cost, const ShapeKey& key, const LowerTo& lower);
  static bool emits(const Scenario& s);
  // A shape no longer used: the next build writes into its storage (what it holds is overwritten).
  void recycle(DagShapePtr shape);

  struct Storage;  // core/plan/search_retime.cc

 private:
  std::unique_ptr<Storage> st_;
};
const std::vector<std::int64_t>& shape_key_of(const DagShape& shape);
std::size_t shape_nodes(const DagShape& shape);

}  // namespace pipescope
