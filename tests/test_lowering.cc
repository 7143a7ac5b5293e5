// Lowering passes (p2p, TP all-reduce, DP/embedding grad sync, optimizer), the DAG built from them and
// the constant cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/lower/op_price.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

// GPU ids offset by 100: they are not worker ids.
Placement flat_placement(int dp, int p, int tp) { return test::flat_placement(dp, p, tp, 8, 100); }

std::string program(const LoweredSchedule& ls, int w) {
  std::string out;
  for (const LoweredOp& op : ls.per_worker[w]) out += (out.empty() ? "" : " ") + lowered_text(op);
  return out;
}

int count(const LoweredSchedule& ls, int w, LOpKind kind) {
  return static_cast<int>(std::count_if(ls.per_worker[w].begin(), ls.per_worker[w].end(),
                                        [&](const LoweredOp& o) { return o.kind == kind; }));
}

ConstantCosts costs(int v = 1) {
  ConstantCosts cc;
  cc.forward_s = 1.0;
  cc.backward_s = 2.0;
  cc.p2p_bytes = 1000.0;
  cc.v = v;
  return cc;
}

// A cost model with tied embeddings (the constant model has none).
class EmbeddingCosts final : public CostModel {
 public:
  explicit EmbeddingCosts(double emb) : base_(costs()), emb_(emb) {}
  double compute_seconds(const Op& op, int b) const override { return base_.compute_seconds(op, b); }
  double p2p_bytes(const Op& op, int b) const override { return base_.p2p_bytes(op, b); }
  int tp_allreduce_calls(const Op&) const override { return 0; }
  double tp_allreduce_bytes(const Op&, int) const override { return 0; }
  double grad_bytes(int rank) const override { return 1e6 * (rank + 1); }
  double optimizer_seconds(int rank) const override { return 0.5 + rank; }
  double embedding_grad_bytes() const override { return emb_; }
  double expert_grad_bytes(int) const override { return 0; }
  double expert_param_bytes(int) const override { return 0; }

 private:
  ConstantCostModel base_;
  double emb_;
};

// ------------------------------------------------------------------------------------------ cost model

TEST(LoweringCostModel, ConstantCosts) {
  ConstantCosts cc;
  cc.forward_s = 3.0;
  cc.backward_s = 6.0;
  cc.p2p_bytes = 800;
  cc.tp_bytes = 400;
  cc.tp_calls_fwd = 2;
  cc.v = 3;
  cc.seq_len = 8;
  cc.grad_bytes = 7;
  cc.optimizer_s = 0.5;
  const ConstantCostModel m(cc);
  Op op;
  op.tok_begin = 0;
  op.tok_end = 8;
  EXPECT_DOUBLE_EQ(m.compute_seconds(op, 4), 1.0);  // 3 s per stage / 3 chunks
  op.kind = OpKind::Backward;
  op.tok_begin = 6;  // a quarter of the sequence
  EXPECT_DOUBLE_EQ(m.compute_seconds(op, 4), 0.5);
  EXPECT_DOUBLE_EQ(m.p2p_bytes(op, 4), 200);
  EXPECT_DOUBLE_EQ(m.tp_allreduce_bytes(op, 4), 100);
  EXPECT_EQ(m.tp_allreduce_calls(op), 2);
  EXPECT_DOUBLE_EQ(m.grad_bytes(1), 7);
  EXPECT_DOUBLE_EQ(m.optimizer_seconds(1), 0.5);
  EXPECT_DOUBLE_EQ(m.embedding_grad_bytes(), 0);
  ConstantCosts bad = cc;
  bad.v = 0;
  EXPECT_THROW(ConstantCostModel{bad}, std::invalid_argument);
  bad = cc;
  bad.seq_len = 0;
  EXPECT_THROW(ConstantCostModel{bad}, std::invalid_argument);
  bad = cc;
  bad.forward_s = -1;
  EXPECT_THROW(ConstantCostModel{bad}, std::invalid_argument);
}

// ------------------------------------------------------------------------------------------ passes

TEST(LoweringPasses, ComputeReplicatesWithDurations) {
  const Schedule s = make_interleaved(2, 2, uniform_microbatches(2, 1, 1, 1), 1);
  const ConstantCostModel cost(costs(2));
  const LoweredSchedule ls = lower_compute(s, 3, 1, cost);
  ASSERT_EQ(ls.per_worker.size(), 6u);
  EXPECT_EQ(ls.workers(), 6);
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 2; r++) {
      const auto& prog = ls.per_worker[LoweredSchedule::worker(d, r, 2)];
      ASSERT_EQ(prog.size(), s.per_rank[r].size());
      for (std::size_t i = 0; i < prog.size(); i++) {
        EXPECT_EQ(prog[i].kind, LOpKind::Compute);
        EXPECT_EQ(prog[i].op, s.per_rank[r][i]);
        EXPECT_DOUBLE_EQ(prog[i].seconds, is_backward(prog[i].op.kind) ? 1.0 : 0.5);
      }
    }
  EXPECT_TRUE(ls.groups.empty());
  EXPECT_THROW(lower_compute(s, 0, 1, cost), std::invalid_argument);
  EXPECT_THROW(lower_compute(s, 1, 0, cost), std::invalid_argument);
}

TEST(LoweringPasses, P2POneFOneBPositions) {
  const Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(costs()));
  EXPECT_EQ(program(ls, 0), "0F0 send(0F0->1) 0F1 send(0F1->1) recv(1B0<-1) 0B0 recv(1B1<-1) 0B1 opt");
  EXPECT_EQ(program(ls, 1), "recv(0F0<-0) 1F0 1B0 send(1B0->0) recv(0F1<-0) 1F1 1B1 send(1B1->0) opt");
  for (const auto& prog : ls.per_worker)
    for (const LoweredOp& op : prog)
      if (op.kind == LOpKind::Send || op.kind == LOpKind::Recv) {
        EXPECT_DOUBLE_EQ(op.bytes, 1000.0);
      }
}

TEST(LoweringPasses, P2PCountsAndAdjacency) {
  for (int p : {1, 2, 3, 5}) {
    const int m = 7;
    const Schedule s = make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1);
    const LoweredSchedule ls = add_p2p(lower_compute(s, 2, 1, ConstantCostModel(costs())), ConstantCostModel(costs()));
    for (int w = 0; w < 2 * p; w++) {
      const int r = w % p;
      const int expect = (r > 0 ? m : 0) + (r + 1 < p ? m : 0);  // F to the next, B to the previous rank
      EXPECT_EQ(count(ls, w, LOpKind::Send), expect) << "p=" << p << " w=" << w;
      EXPECT_EQ(count(ls, w, LOpKind::Recv), expect) << "p=" << p << " w=" << w;
      const auto& prog = ls.per_worker[w];
      for (std::size_t i = 0; i < prog.size(); i++) {
        const LoweredOp& o = prog[i];
        if (o.kind == LOpKind::Send) {  // right after its producer (or after a sibling send)
          std::size_t j = i;
          while (j > 0 && prog[j - 1].kind == LOpKind::Send) j--;
          ASSERT_GT(j, 0u);
          EXPECT_EQ(prog[j - 1].op, o.op);
          EXPECT_EQ(o.peer / p, w / p) << "sends stay in the replica";
          EXPECT_EQ(o.peer % p, is_backward(o.op.kind) ? r - 1 : r + 1);
        }
        if (o.kind == LOpKind::Recv) {  // right before the op that consumes it
          ASSERT_LT(i + 1, prog.size());
          EXPECT_EQ(prog[i + 1].kind, LOpKind::Compute);
          EXPECT_EQ(prog[i + 1].op.microbatch, o.op.microbatch);
          EXPECT_EQ(prog[i + 1].op.kind, o.op.kind);
          EXPECT_EQ(o.peer, w + (is_backward(o.op.kind) ? 1 : -1));
        }
      }
    }
  }
}

TEST(LoweringPasses, P2PInterleavedWrapAround) {
  const int p = 2, v = 2, m = 2;
  const Schedule s = make_interleaved(p, v, uniform_microbatches(m, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(costs(v)));
  // Each micro-batch crosses p*v - 1 boundaries per direction.
  int sends = 0;
  for (int w = 0; w < p; w++) sends += count(ls, w, LOpKind::Send);
  EXPECT_EQ(sends, 2 * m * (p * v - 1));
  // The last rank's chunk-0 forward goes back to rank 0 (stage 1 -> stage 2), and the gradient of rank 0's
  // chunk 1 backward goes to the last rank.
  const std::string r0 = program(ls, 0), r1 = program(ls, 1);
  EXPECT_NE(r1.find("1F0 send(1F0->0)"), std::string::npos) << r1;
  EXPECT_NE(r0.find("recv(1F0<-1) 0F0c1"), std::string::npos) << r0;
  EXPECT_NE(r0.find("0B0c1 send(0B0c1->1)"), std::string::npos) << r0;
  EXPECT_NE(r1.find("recv(0B0c1<-0) 1B0"), std::string::npos) << r1;
  // p = 1 with chunks: everything stays on the rank.
  const LoweredSchedule one =
      lower(make_interleaved(1, 3, uniform_microbatches(2, 1, 1, 1), 1), 1, 1, ConstantCostModel(costs(3)));
  EXPECT_EQ(count(one, 0, LOpKind::Send), 0);
  EXPECT_EQ(count(one, 0, LOpKind::Recv), 0);
}

TEST(LoweringPasses, P2PSlicedBytesAndOneMessagePerConsumer) {
  ConstantCosts cc = costs();
  cc.seq_len = 8;
  const Schedule s = make_gpipe(2, sliced_microbatches(1, 1, {2, 6}), 8);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(cc));
  EXPECT_EQ(program(ls, 0), "0F0 send(0F0->1) 0F0s1 send(0F0s1->1) recv(1B0s1<-1) 0B0s1 recv(1B0<-1) 0B0 opt");
  EXPECT_EQ(program(ls, 1), "recv(0F0<-0) 1F0 recv(0F0s1<-0) 1F0s1 1B0s1 send(1B0s1->0) 1B0 send(1B0->0) opt");
  EXPECT_DOUBLE_EQ(ls.per_worker[0][1].bytes, 250.0);  // 2 of 8 tokens
  EXPECT_DOUBLE_EQ(ls.per_worker[0][3].bytes, 750.0);
}

TEST(LoweringPasses, TensorParallelAllReduce) {
  ConstantCosts cc = costs();
  cc.tp_calls_fwd = 2;
  cc.tp_bytes = 3e6;
  const ConstantCostModel cost(cc);
  const Schedule s = make_1f1b(2, uniform_microbatches(3, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 2, 4, cost);
  ASSERT_EQ(ls.tp, 4);
  for (int w = 0; w < 4; w++) {
    const auto tp_ars = std::count_if(ls.per_worker[w].begin(), ls.per_worker[w].end(),
                                      [](const LoweredOp& o) { return o.tag == CollTag::TensorParallel; });
    EXPECT_EQ(tp_ars, 6);  // one after each compute op
    const auto& prog = ls.per_worker[w];
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].kind != LOpKind::Compute) continue;
      ASSERT_LT(i + 1, prog.size());
      const LoweredOp& ar = prog[i + 1];
      EXPECT_EQ(ar.kind, LOpKind::AllReduce);
      EXPECT_EQ(ar.tag, CollTag::TensorParallel);
      EXPECT_EQ(ar.count, 2);
      EXPECT_DOUBLE_EQ(ar.bytes, 3e6);
      EXPECT_EQ(ar.op, prog[i].op);
      ASSERT_GE(ar.group, 0);
      EXPECT_EQ(ls.groups[ar.group].tag, CollTag::TensorParallel);
      EXPECT_EQ(ls.groups[ar.group].workers, (std::vector<std::int32_t>{w}));
    }
  }
  EXPECT_EQ(ls.groups.size(), 6u);  // a TP group per worker, then a DP group per rank
  // The send of an activation waits for the TP all-reduce that completes it.
  EXPECT_EQ(program(ls, 0).rfind("0F0 allreduce[tp g0 2x3.0MB 0F0] send(0F0->1) 0F1 ", 0), 0u) << program(ls, 0);
  // tp = 1 or zero calls: nothing to add.
  EXPECT_EQ(count(lower(s, 1, 1, cost), 0, LOpKind::AllReduce), 0);
  const LoweredSchedule none = lower(s, 1, 4, ConstantCostModel(costs()));
  EXPECT_EQ(count(none, 0, LOpKind::AllReduce), 0);
  EXPECT_TRUE(none.groups.empty());
}

// lower() runs add_p2p, add_scatter_gather and add_tp_allreduce in one sweep over each program
// (core/lower/lowering.cc): the same programs and groups, numbered alike, as the passes called one by one.
TEST(LoweringPasses, FusedSweepIsThePassesOneByOne) {
  ConstantCosts cc = costs(2);
  cc.tp_calls_fwd = 2;
  cc.tp_bytes = 3e6;
  const ConstantCostModel cost(cc);
  const Schedule s = make_interleaved(2, 2, uniform_microbatches(4, 1, 1, 1), 1);
  for (int dp : {1, 2})
    for (int tp : {1, 4})
      for (bool sg : {false, true}) {
        SCOPED_TRACE("dp " + std::to_string(dp) + " tp " + std::to_string(tp) + (sg ? " scatter/gather" : ""));
        const LoweredSchedule got = lower(s, dp, tp, cost, sg);
        LoweredSchedule want = add_p2p(lower_compute(s, dp, tp, cost), cost);
        if (sg) want = add_scatter_gather(want);
        want = add_optimizer(add_grad_sync(add_tp_allreduce(want, cost), cost), cost);
        ASSERT_EQ(got.groups.size(), want.groups.size());
        for (std::size_t g = 0; g < got.groups.size(); g++) {
          EXPECT_EQ(got.groups[g].tag, want.groups[g].tag);
          EXPECT_EQ(got.groups[g].workers, want.groups[g].workers);
        }
        for (int w = 0; w < dp * 2; w++) EXPECT_EQ(program(got, w), program(want, w));
        if (sg && tp > 1) {
          EXPECT_NE(program(got, 1).find("allgather[sg"), std::string::npos) << program(got, 1);
        }
      }
}

// Every lowered op's values are its price rule (core/lower/op_price.h) applied to the answer to its question: the
// statement the search's re-timing and bound re-price with.
TEST(LoweringPasses, EveryOpIsPricedByItsRule) {
  ConstantCosts cc = costs(2);
  cc.tp_calls_fwd = 2;
  cc.tp_bytes = 3e6;
  cc.grad_bytes = 1e8;
  const ConstantCostModel cost(cc);
  const Schedule s = make_interleaved(2, 2, uniform_microbatches(4, 1, 1, 1), 1);
  GradSyncOptions o;
  o.overlap_grad_reduce = true;
  o.bucket_bytes = 2e7;
  const int tp = 4;
  const LoweredSchedule ls = lower(s, 2, tp, cost, true, o);
  int buckets = 0;
  for (const auto& prog : ls.per_worker)
    for (const LoweredOp& l : prog) {
      SCOPED_TRACE(lowered_text(l));
      const std::uint8_t q = question_of(l);
      const OpAnswers a = ask_op(cost, l.op, 1, q);
      if (l.kind == LOpKind::Compute) {
        EXPECT_EQ(l.seconds, a.compute_s);
      }
      if (l.kind == LOpKind::Send || l.kind == LOpKind::Recv) {
        EXPECT_EQ(l.bytes, message_bytes(a.p2p_bytes, true, tp));
      }
      if (l.tag == CollTag::TensorParallel) {
        EXPECT_EQ(q, kAskTp);
        EXPECT_EQ(l.count, a.tp_calls);
        EXPECT_EQ(l.bytes, a.tp_bytes);
      }
      if (l.tag == CollTag::ScatterGather) {
        EXPECT_EQ(l.bytes, a.p2p_bytes);
      }
      if (l.tag == CollTag::DataParallel && l.async) {
        const BucketSplit b = split_buckets(cc.grad_bytes, 2, o.bucket_bytes);  // two virtual stages per rank
        EXPECT_EQ(l.bytes, b.bytes_each);
        EXPECT_GT(l.lead_s, 0.0);
        EXPECT_LE(l.lead_s, a.compute_s);
        buckets++;
      }
    }
  // 1e8 bytes over 2 stages: 5e7 per stage in buckets of at most 2e7, so 3 per stage, on each of the 4 workers.
  EXPECT_EQ(split_buckets(1e8, 2, 2e7).n, 3);
  EXPECT_EQ(buckets, 4 * 2 * 3);
  EXPECT_EQ(bucket_lead_s(3.0, 2, 3), 3.0);
  EXPECT_EQ(bucket_count(1.0, 0.0), 1);
  EXPECT_EQ(bucket_count(1e12, 1.0), 1024);
}

TEST(LoweringPasses, GradSyncEmbeddingAndOptimizerAtTheEnd) {
  const int p = 3, dp = 2;
  const Schedule s = make_1f1b(p, uniform_microbatches(3, 1, 1, 1), 1);
  const EmbeddingCosts cost(5e5);
  const LoweredSchedule ls = lower(s, dp, 1, cost);
  // DP groups first (one per rank), then one embedding group per replica.
  ASSERT_EQ(ls.groups.size(), static_cast<std::size_t>(p + dp));
  for (int r = 0; r < p; r++) {
    EXPECT_EQ(ls.groups[r].tag, CollTag::DataParallel);
    EXPECT_EQ(ls.groups[r].workers, (std::vector<std::int32_t>{r, p + r}));
  }
  for (int d = 0; d < dp; d++) {
    EXPECT_EQ(ls.groups[p + d].tag, CollTag::Embedding);
    EXPECT_EQ(ls.groups[p + d].workers, (std::vector<std::int32_t>{d * p, d * p + p - 1}));
  }
  for (int w = 0; w < p * dp; w++) {
    const int r = w % p, d = w / p;
    const auto& prog = ls.per_worker[w];
    const bool emb = r == 0 || r == p - 1;
    const std::size_t n = prog.size();
    ASSERT_GE(n, 3u);
    EXPECT_EQ(prog[n - 1].kind, LOpKind::Optimizer);
    EXPECT_DOUBLE_EQ(prog[n - 1].seconds, 0.5 + r);
    const LoweredOp& dpar = prog[n - (emb ? 3 : 2)];
    EXPECT_EQ(dpar.kind, LOpKind::AllReduce);
    EXPECT_EQ(dpar.tag, CollTag::DataParallel);
    EXPECT_EQ(dpar.group, r);
    EXPECT_DOUBLE_EQ(dpar.bytes, 1e6 * (r + 1));
    if (emb) {
      EXPECT_EQ(prog[n - 2].tag, CollTag::Embedding);
      EXPECT_EQ(prog[n - 2].group, p + d);
      EXPECT_DOUBLE_EQ(prog[n - 2].bytes, 5e5);
    }
    EXPECT_EQ(count(ls, w, LOpKind::AllReduce), emb ? 2 : 1);
    for (std::size_t i = 0; i + (emb ? 3 : 2) < n; i++)  // grad sync after the whole pipeline
      EXPECT_TRUE(prog[i].kind == LOpKind::Compute || prog[i].kind == LOpKind::Send || prog[i].kind == LOpKind::Recv);
  }
  EXPECT_EQ(lowered_text(ls.per_worker[0][ls.per_worker[0].size() - 3]), "allreduce[dp g0 1.0MB]");
  EXPECT_EQ(lowered_text(ls.per_worker[0][ls.per_worker[0].size() - 2]), "allreduce[emb g3 500.0kB]");
  EXPECT_NO_THROW(check(ls, flat_placement(dp, p, 1)));
  // dp = 1 and p = 1: neither DP nor embedding groups.
  const LoweredSchedule single = lower(make_1f1b(1, uniform_microbatches(2, 1, 1, 1), 1), 1, 1, cost);
  EXPECT_TRUE(single.groups.empty());
  EXPECT_EQ(program(single, 0), "0F0 0B0 0F1 0B1 opt");
  EXPECT_EQ(lowered_op_name(single, 0, 4), "opt@w0");
  EXPECT_EQ(lowered_op_name(single, 0, 0), "0F0");
  EXPECT_EQ(lowered_op_name(ls, 4, 0), "recv(0F0<-3)@w4");  // with dp > 1 the text names the worker
  EXPECT_EQ(lowered_op_name(ls, 4, 1), "1F0@w4");
}

TEST(LoweringPasses, PassesArePure) {
  const Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  const ConstantCostModel cost(costs());
  const LoweredSchedule a = lower_compute(s, 1, 1, cost);
  const std::string before = program(a, 0) + "|" + program(a, 1);
  const LoweredSchedule b = add_optimizer(add_grad_sync(add_p2p(a, cost), cost), cost);
  EXPECT_EQ(program(a, 0) + "|" + program(a, 1), before);
  EXPECT_NE(program(b, 0), program(a, 0));
}

TEST(LoweringText, Formats) {
  LoweredOp op;
  op.kind = LOpKind::Send;
  op.op.rank = 2;
  op.peer = 3;
  EXPECT_EQ(lowered_text(op), "send(2F0->3)");
  op.kind = LOpKind::Recv;
  op.peer = 2;
  EXPECT_EQ(lowered_text(op), "recv(2F0<-2)");
  op.kind = LOpKind::AllReduce;
  op.tag = CollTag::DataParallel;
  op.group = 1;
  op.bytes = 25e6;
  EXPECT_EQ(lowered_text(op), "allreduce[dp g1 25.0MB]");
  op.kind = LOpKind::AllGather;
  op.tag = CollTag::ScatterGather;
  op.bytes = 2.5e9;
  EXPECT_EQ(lowered_text(op), "allgather[sg g1 2.5GB 2F0]");
  op.kind = LOpKind::Optimizer;
  EXPECT_EQ(lowered_text(op), "opt");
}

// ------------------------------------------------------------------------------------------ DAG

TEST(LoweringDag, NodesEdgesAndTransfers) {
  const Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(costs()));
  const Placement pl = flat_placement(1, 2, 1);
  const Dag dag = build_dag(ls, pl);
  // 8 compute + 2 optimizer + 4 transfers + 4 receive joins.
  ASSERT_EQ(dag.size(), 18u);
  std::map<DagKind, int> kinds;
  for (const DagNode& n : dag.nodes) kinds[n.kind]++;
  EXPECT_EQ(kinds[DagKind::Compute], 10);
  EXPECT_EQ(kinds[DagKind::Transfer], 4);
  EXPECT_EQ(kinds[DagKind::Join], 4);
  EXPECT_EQ(dry_run(dag), dag.size());
  ASSERT_EQ(dag.succ_begin.size(), dag.size() + 1);
  std::size_t in = 0;
  for (auto x : dag.preds) in += x;
  EXPECT_EQ(in, dag.succ.size());
  // Worker 0: 0F0 send(0F0->1) 0F1 ...: the send folds into a transfer node that depends on 0F0; 0F1 depends
  // on 0F0 directly (sends do not block).
  const auto f0 = static_cast<std::uint32_t>(dag.node_of[0][0]);
  EXPECT_EQ(dag.node_of[0][1], -1);
  const auto f1 = static_cast<std::uint32_t>(dag.node_of[0][2]);
  std::vector<std::uint32_t> succ(dag.succ.begin() + dag.succ_begin[f0], dag.succ.begin() + dag.succ_begin[f0 + 1]);
  ASSERT_EQ(succ.size(), 2u);
  EXPECT_NE(std::find(succ.begin(), succ.end(), f1), succ.end());
  const std::uint32_t xfer = succ[0] == f1 ? succ[1] : succ[0];
  const DagNode& t = dag.nodes[xfer];
  EXPECT_EQ(t.kind, DagKind::Transfer);
  EXPECT_EQ(t.gpu, 100);
  EXPECT_EQ(t.gpu2, 101);
  EXPECT_DOUBLE_EQ(t.amount, 1000.0);
  EXPECT_EQ(dag_node_text(dag, ls, xfer), "send(0F0->1)");
  // The transfer feeds worker 1's receive join, which 1F0 waits for.
  const auto join = static_cast<std::uint32_t>(dag.node_of[1][0]);
  EXPECT_EQ(dag.nodes[join].kind, DagKind::Join);
  EXPECT_EQ(dag_node_text(dag, ls, join), "recv(0F0<-0)");
  EXPECT_EQ(dag.succ[dag.succ_begin[xfer]], join);
  EXPECT_EQ(dag.preds[join], 1u);  // the first op of its worker: only the transfer
  const auto c = static_cast<std::uint32_t>(dag.node_of[1][1]);
  EXPECT_EQ(dag.nodes[c].kind, DagKind::Compute);
  EXPECT_EQ(dag.nodes[c].gpu, 101);
  EXPECT_DOUBLE_EQ(dag.nodes[c].amount, 1.0);
  EXPECT_EQ(dag.preds[c], 1u);
  EXPECT_EQ(dag_node_text(dag, ls, c), "1F0");
  EXPECT_LE(sizeof(DagNode), 64u);
}

TEST(LoweringDag, FreeCommunicationBecomesJoins) {
  const Schedule s = make_1f1b(3, uniform_microbatches(3, 1, 1, 1), 1);
  ConstantCosts cc = costs();
  cc.p2p_bytes = 0;
  const LoweredSchedule ls = lower(s, 2, 1, ConstantCostModel(cc));  // DP all-reduce of 0 bytes
  const Dag dag = build_dag(ls, flat_placement(2, 3, 1));
  for (const DagNode& n : dag.nodes) {
    EXPECT_NE(n.kind, DagKind::Transfer);
    EXPECT_NE(n.kind, DagKind::Collective);
  }
  EXPECT_EQ(dry_run(dag), dag.size());
}

TEST(LoweringDag, CollectivesAndRings) {
  const int p = 2, dp = 3, tp = 2;
  ConstantCosts cc = costs();
  cc.tp_calls_fwd = 1;
  cc.tp_bytes = 10;
  cc.grad_bytes = 1e6;
  const Schedule s = make_gpipe(p, uniform_microbatches(2, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, dp, tp, ConstantCostModel(cc));
  const Placement pl = flat_placement(dp, p, tp);
  const Dag dag = build_dag(ls, pl);
  ASSERT_EQ(dag.rings.size(), ls.groups.size());
  int tp_groups = 0, dp_groups = 0;
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    const auto& ws = ls.groups[g].workers;
    if (ls.groups[g].tag == CollTag::TensorParallel) {
      tp_groups++;
      ASSERT_EQ(dag.rings[g].size(), 1u);
      EXPECT_EQ(dag.rings[g][0], (std::vector<std::int32_t>{pl.gpu_of(ws[0], 0), pl.gpu_of(ws[0], 1)}));
    } else {
      dp_groups++;
      EXPECT_EQ(ls.groups[g].tag, CollTag::DataParallel);
      ASSERT_EQ(dag.rings[g].size(), static_cast<std::size_t>(tp));
      for (int t = 0; t < tp; t++) {
        ASSERT_EQ(dag.rings[g][t].size(), static_cast<std::size_t>(dp));
        for (int d = 0; d < dp; d++) EXPECT_EQ(dag.rings[g][t][d], pl.gpu_of(ws[d], t));
      }
    }
  }
  EXPECT_EQ(tp_groups, dp * p);
  EXPECT_EQ(dp_groups, p);
  // One collective node per call: per worker 4 TP calls; per rank one DP call shared by dp workers.
  int colls = 0;
  for (const DagNode& n : dag.nodes)
    if (n.kind == DagKind::Collective) {
      colls++;
      const int members = static_cast<int>(ls.groups[n.group].workers.size());
      if (members > 1) {
        EXPECT_EQ(dag.preds[static_cast<std::size_t>(&n - dag.nodes.data())], static_cast<std::uint32_t>(members));
        EXPECT_DOUBLE_EQ(n.amount, 1e6);
      }
    }
  EXPECT_EQ(colls, dp * p * 4 + p);
  // Every member maps its op to the same node.
  const int g0 = ls.per_worker[0][ls.per_worker[0].size() - 2].group;
  EXPECT_EQ(dag.node_of[0][ls.per_worker[0].size() - 2], dag.node_of[p][ls.per_worker[p].size() - 2]);
  EXPECT_EQ(ls.groups[g0].tag, CollTag::DataParallel);
  EXPECT_EQ(dry_run(dag), dag.size());
}

TEST(LoweringDag, EarliestFinishChainsComputeOnly) {
  ConstantCosts cc = costs();
  cc.p2p_bytes = 1e9;  // transfers are free in the communication-free critical path
  cc.optimizer_s = 0.5;
  const Schedule s = make_gpipe(2, uniform_microbatches(1, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(cc));
  const Dag dag = build_dag(ls, flat_placement(1, 2, 1));
  const auto f = earliest_finish(dag);
  // 0F0 [0,1] 1F0 [1,2] 1B0 [2,4] 0B0 [4,6], optimizers at 6.5 and 4.5.
  EXPECT_DOUBLE_EQ(f[dag.node_of[1][1]], 2.0);
  EXPECT_DOUBLE_EQ(f[dag.node_of[0].back()], 6.5);
  EXPECT_DOUBLE_EQ(f[dag.node_of[1].back()], 4.5);
}

TEST(LoweringDag, PlacementMustFit) {
  const Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(costs()));
  EXPECT_THROW(build_dag(ls, flat_placement(2, 2, 1)), CheckError);
  EXPECT_THROW(build_dag(ls, flat_placement(1, 2, 2)), CheckError);
}

// ---------------------------------------------------------------- split backward

TEST(Lowering, InputGradientIsSentAfterTheInputBackward) {
  // ZB-H1 p=2 m=2, r1: 1F0 1I0 1F1 1I1 1W0 1W1: the gradient of stage 1 goes to rank 0 right after each I.
  const Schedule s = make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1);
  const LoweredSchedule ls = lower(s, 1, 1, ConstantCostModel(costs()));
  EXPECT_EQ(program(ls, 1), "recv(0F0<-0) 1F0 1I0 send(1I0->0) recv(0F1<-0) 1F1 1I1 send(1I1->0) 1W0 1W1 opt");
  EXPECT_NO_THROW(check(ls, flat_placement(1, 2, 1)));
}

TEST(Lowering, FuseAdjacentInputAndWeightBackward) {
  const Schedule s = make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1);
  const Schedule f = fuse_adjacent_iw(s);
  // r0: 0F0 0F1 0I0 0W0 0I1 0W1 -> both pairs adjacent; r1: 1F0 1I0 1F1 1I1 1W0 1W1 -> none.
  EXPECT_EQ(schedule_text(f), "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1I0 1F1 1I1 1W0 1W1\n");
  EXPECT_NO_THROW(check_schedule(f));
  const ConstantCostModel cost(costs());
  const auto span = [&](const Schedule& x) {
    const LoweredSchedule ls = lower(x, 1, 1, cost);
    const CheckedSchedule cs = check(ls, flat_placement(1, 2, 1));
    const auto fin = earliest_finish(cs.dag());
    return *std::max_element(fin.begin(), fin.end());
  };
  EXPECT_GT(span(s), 0.0);
  EXPECT_GE(span(f), span(s));  // a fused B sends its gradient only after its W part
}
TEST(Lowering, VShapeNeedsNoEmbeddingAllReduce) {
  // ZB-V puts the first and the last virtual stage on rank 0: the tied embedding has one owner.
  const EmbeddingCosts cost(5e5);
  const LoweredSchedule v = lower(make_zb_v(2, uniform_microbatches(4, 1, 1, 1), 1), 1, 1, cost);
  const LoweredSchedule loop = lower(make_1f1b(2, uniform_microbatches(4, 1, 1, 1), 1), 1, 1, cost);
  EXPECT_EQ(count(v, 0, LOpKind::AllReduce), 0);
  EXPECT_EQ(count(loop, 0, LOpKind::AllReduce), 1);
  EXPECT_NO_THROW(check(v, flat_placement(1, 2, 1)));
}
}  // namespace
}  // namespace pipescope
