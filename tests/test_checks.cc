// Static checker: accepts every generated schedule, rejects broken ones with a message naming the ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

using test::flat_placement;

ConstantCosts costs(int v = 1) {
  ConstantCosts cc;
  cc.p2p_bytes = 1000;
  cc.grad_bytes = 1e6;
  cc.tp_bytes = 100;
  cc.tp_calls_fwd = 2;
  cc.v = v;
  return cc;
}

LoweredSchedule lowered_1f1b(int p, int m, int dp = 1, int tp = 1) {
  return lower(make_1f1b(p, uniform_microbatches(m, 1, 1, 1), 1), dp, tp, ConstantCostModel(costs()));
}

// Position of the op with this canonical text on worker w.
std::size_t find_op(const LoweredSchedule& ls, int w, const std::string& text) {
  const auto& prog = ls.per_worker[w];
  for (std::size_t i = 0; i < prog.size(); i++)
    if (lowered_text(prog[i]) == text) return i;
  ADD_FAILURE() << text << " not found on worker " << w;
  return 0;
}

// check() must throw a CheckError whose message contains every fragment and whose ops() list `ops`.
void expect_rejected(const LoweredSchedule& ls, const Placement& pl, const std::vector<std::string>& fragments,
                     const std::vector<std::string>& ops = {}) {
  try {
    check(ls, pl);
    ADD_FAILURE() << "accepted; expected an error mentioning " << fragments.front();
  } catch (const CheckError& e) {
    const std::string what = e.what();
    for (const auto& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' not in: " << what;
    for (const auto& o : ops)
      EXPECT_NE(std::find(e.ops().begin(), e.ops().end(), o), e.ops().end()) << o << " not in ops() of: " << what;
  }
}

void expect_schedule_rejected(const Schedule& s, const std::vector<std::string>& fragments) {
  try {
    check_schedule(s);
    ADD_FAILURE() << "accepted; expected an error mentioning " << fragments.front();
  } catch (const CheckError& e) {
    const std::string what = e.what();
    for (const auto& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' not in: " << what;
  }
}

// ------------------------------------------------------------------------------------------ accepted

TEST(Checks, AcceptsGeneratedSchedules) {
  for (int dp : {1, 2})
    for (int tp : {1, 2}) {
      const Placement pl2 = flat_placement(dp, 4, tp);
      const ConstantCostModel c1(costs()), c2(costs(2));
      EXPECT_NO_THROW(check(lower(make_gpipe(4, uniform_microbatches(5, 1, 1, 1), 1), dp, tp, c1), pl2));
      EXPECT_NO_THROW(check(lower(make_1f1b(4, uniform_microbatches(5, 2, 1, 1), 1), dp, tp, c1), pl2));
      EXPECT_NO_THROW(check(lower(make_interleaved(4, 2, uniform_microbatches(8, 1, 1, 1), 1), dp, tp, c2), pl2));
      EXPECT_NO_THROW(check(lower(make_gpipe(4, uniform_microbatches(3, 1, 9, 3), 9), dp, tp, c1), pl2));
    }
  const LoweredSchedule ls = lowered_1f1b(3, 4, 2, 2);
  const Placement pl = flat_placement(2, 3, 2);
  const CheckedSchedule cs = check(ls, pl);
  EXPECT_EQ(&cs.schedule(), &ls);
  EXPECT_EQ(&cs.placement(), &pl);
  EXPECT_EQ(dry_run(cs.dag()), cs.dag().size());
}

// ------------------------------------------------------------------------------------------ send / recv

TEST(Checks, DroppedRecv) {
  LoweredSchedule ls = lowered_1f1b(2, 2);
  auto& w1 = ls.per_worker[1];
  w1.erase(w1.begin() + static_cast<std::ptrdiff_t>(find_op(ls, 1, "recv(0F1<-0)")));
  expect_rejected(ls, flat_placement(1, 2, 1), {"send(0F1->1)", "worker 0", "no matching recv on worker 1"},
                  {"send(0F1->1)"});
}

TEST(Checks, DroppedSend) {
  LoweredSchedule ls = lowered_1f1b(2, 2);
  auto& w1 = ls.per_worker[1];
  w1.erase(w1.begin() + static_cast<std::ptrdiff_t>(find_op(ls, 1, "send(1B0->0)")));
  expect_rejected(ls, flat_placement(1, 2, 1), {"recv(1B0<-1)", "no matching send on worker 1"}, {"recv(1B0<-1)"});
}

TEST(Checks, DuplicatedSend) {
  LoweredSchedule ls = lowered_1f1b(2, 3);
  auto& w0 = ls.per_worker[0];
  const std::size_t i = find_op(ls, 0, "send(0F2->1)");
  w0.insert(w0.begin() + static_cast<std::ptrdiff_t>(i), w0[i]);
  expect_rejected(ls, flat_placement(1, 2, 1), {"duplicate send", "send(0F2->1)", "worker 0"}, {"send(0F2->1)"});
}

TEST(Checks, ChangedMessageSize) {
  LoweredSchedule ls = lowered_1f1b(3, 2);
  ls.per_worker[2][find_op(ls, 2, "recv(1F1<-1)")].bytes = 999;
  expect_rejected(ls, flat_placement(1, 3, 1), {"send(1F1->2)", "recv(1F1<-1)", "1000", "999"},
                  {"send(1F1->2)", "recv(1F1<-1)"});
}

TEST(Checks, RecvAfterItsConsumer) {
  LoweredSchedule ls = lowered_1f1b(2, 2);
  const std::size_t i = find_op(ls, 1, "recv(0F1<-0)");
  std::swap(ls.per_worker[1][i], ls.per_worker[1][i + 1]);  // 1F1 now runs before its activation arrives
  expect_rejected(ls, flat_placement(1, 2, 1), {"1F1", "needs 0F1", "receives it only later"}, {"1F1", "0F1"});
}

TEST(Checks, MissingRecvForADependency) {
  // A matched pair that carries the wrong op leaves 1F1 without its input.
  LoweredSchedule ls = lowered_1f1b(2, 2);
  ls.per_worker[1].erase(ls.per_worker[1].begin() + static_cast<std::ptrdiff_t>(find_op(ls, 1, "recv(0F1<-0)")));
  ls.per_worker[0].erase(ls.per_worker[0].begin() + static_cast<std::ptrdiff_t>(find_op(ls, 0, "send(0F1->1)")));
  expect_rejected(ls, flat_placement(1, 2, 1), {"1F1", "needs 0F1", "has no recv(0F1<-0)"});
}

TEST(Checks, SendBeforeItsProducer) {
  LoweredSchedule ls = lowered_1f1b(2, 2);
  const std::size_t i = find_op(ls, 0, "send(0F0->1)");
  std::swap(ls.per_worker[0][i - 1], ls.per_worker[0][i]);
  expect_rejected(ls, flat_placement(1, 2, 1), {"send(0F0->1)", "not preceded by its producer 0F0"});
}

TEST(Checks, BadPeer) {
  LoweredSchedule ls = lowered_1f1b(2, 2);
  ls.per_worker[0][find_op(ls, 0, "send(0F0->1)")].peer = 0;
  expect_rejected(ls, flat_placement(1, 2, 1), {"send(0F0->0)", "its own worker"});
  ls = lowered_1f1b(2, 2);
  ls.per_worker[0][find_op(ls, 0, "send(0F0->1)")].peer = 7;
  expect_rejected(ls, flat_placement(1, 2, 1), {"send(0F0->7)", "peer worker 7"});
}

// ------------------------------------------------------------------------------------------ compute ops

TEST(Checks, BackwardBeforeItsForward) {
  LoweredSchedule ls = lowered_1f1b(1, 2);  // p = 1: 0F0 0B0 0F1 0B1 opt
  auto& w = ls.per_worker[0];
  std::swap(w[2], w[3]);
  expect_rejected(ls, flat_placement(1, 1, 1), {"0B1", "runs before its forward 0F1", "worker 0"}, {"0B1", "0F1"});
}

TEST(Checks, DuplicatedAndMissingComputeOps) {
  LoweredSchedule ls = lowered_1f1b(2, 2);
  auto& w0 = ls.per_worker[0];
  w0.insert(w0.begin() + 1, w0[0]);
  expect_rejected(ls, flat_placement(1, 2, 1), {"0F0 runs twice"});
  ls = lowered_1f1b(2, 2);
  ls.per_worker[1].erase(ls.per_worker[1].begin() + static_cast<std::ptrdiff_t>(find_op(ls, 1, "1B1")));
  expect_rejected(ls, flat_placement(1, 2, 1), {"1B1 is missing from worker 1"});
  ls = lowered_1f1b(2, 2);
  ls.per_worker[0][0].op.rank = 1;  // an op of another rank
  expect_rejected(ls, flat_placement(1, 2, 1), {"not an op of rank 0"});
  ls = lowered_1f1b(2, 2);
  ls.per_worker[0][0].seconds = -1;
  expect_rejected(ls, flat_placement(1, 2, 1), {"0F0", "negative or non-finite"});
}

// ------------------------------------------------------------------------------------------ collectives

TEST(Checks, CollectiveMismatches) {
  // A dropped DP all-reduce on one member.
  LoweredSchedule ls = lowered_1f1b(2, 2, 2);
  auto& w2 = ls.per_worker[2];
  w2.erase(w2.end() - 2);
  expect_rejected(ls, flat_placement(2, 2, 1), {"group g0", "worker 0 makes 1", "worker 2 makes 0", "allreduce[dp"});
  // Different sizes.
  ls = lowered_1f1b(2, 2, 2);
  ls.per_worker[3][ls.per_worker[3].size() - 2].bytes = 5;
  expect_rejected(ls, flat_placement(2, 2, 1), {"does not match", "allreduce[dp g1 1.0MB]", "allreduce[dp g1 5B]"});
  // A worker outside the group.
  ls = lowered_1f1b(2, 2, 2);
  ls.per_worker[1][ls.per_worker[1].size() - 2].group = 0;
  expect_rejected(ls, flat_placement(2, 2, 1), {"not a member of group g0"});
  // TP all-reduce with a different fold count cannot be matched inside its own group? It is one member: fine.
  ls = lowered_1f1b(2, 2, 1, 2);
  EXPECT_NO_THROW(check(ls, flat_placement(1, 2, 2)));
  ls.per_worker[0][1].group = 99;
  expect_rejected(ls, flat_placement(1, 2, 2), {"group 99"});
}

TEST(Checks, CollectiveOrderCycle) {
  // Two groups over the same two workers, entered in opposite orders: each call waits for the other.
  LoweredSchedule ls = lowered_1f1b(1, 1, 2);  // workers 0, 1 (p = 1), DP group g0
  ls.groups.push_back(CollGroup{CollTag::DataParallel, {0, 1}});
  LoweredOp extra = ls.per_worker[0][ls.per_worker[0].size() - 2];
  extra.group = 1;
  extra.bytes = 2e6;
  auto& w0 = ls.per_worker[0];
  auto& w1 = ls.per_worker[1];
  w0.insert(w0.end() - 1, extra);  // w0: ... g0 g1 opt
  w1.insert(w1.end() - 2, extra);  // w1: ... g1 g0 opt
  expect_rejected(ls, flat_placement(2, 1, 1),
                  {"deadlocks", "cycle: ", "allreduce[dp g0 1.0MB]", "allreduce[dp g1 2.0MB]"},
                  {"allreduce[dp g0 1.0MB]", "allreduce[dp g1 2.0MB]"});
}

// ------------------------------------------------------------------------------------------ cycles

TEST(Checks, CrossRankCycle) {
  // Rank 0 posts its activation only after receiving the gradient that depends on it.
  LoweredSchedule ls = lowered_1f1b(2, 1);  // w0: 0F0 send(0F0->1) recv(1B0<-1) 0B0 opt
  auto& w0 = ls.per_worker[0];
  const std::size_t s = find_op(ls, 0, "send(0F0->1)");
  std::swap(w0[s], w0[s + 1]);
  try {
    check(ls, flat_placement(1, 2, 1));
    FAIL() << "cycle accepted";
  } catch (const CheckError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cycle: "), std::string::npos) << what;
    for (const char* op : {"send(0F0->1)", "recv(0F0<-0)", "1F0", "1B0", "send(1B0->0)", "recv(1B0<-1)"}) {
      EXPECT_NE(what.find(op), std::string::npos) << op << " not in: " << what;
      EXPECT_NE(std::find(e.ops().begin(), e.ops().end(), op), e.ops().end()) << op;
    }
    // The cycle closes on the op it started from, and lists each op once.
    const std::string list = what.substr(what.find("cycle: ") + 7);
    EXPECT_EQ(list.substr(0, list.find(" -> ")), list.substr(list.rfind(" -> ") + 4)) << list;
    EXPECT_EQ(e.ops().size(), 6u) << what;
    // Listed in dependency direction: a transfer before the receive it completes, an op before its successor.
    EXPECT_NE(what.find("send(0F0->1) -> recv(0F0<-0) -> 1F0 -> 1B0"), std::string::npos) << what;
  }
}

TEST(Checks, LongCycleIsAbbreviated) {
  // Rank 0 delays every activation send until after its last backward: a cycle through many ops.
  LoweredSchedule ls = lower(make_gpipe(2, uniform_microbatches(12, 1, 1, 1), 1), 1, 1, ConstantCostModel(costs()));
  auto& w0 = ls.per_worker[0];
  std::vector<LoweredOp> sends;
  std::vector<LoweredOp> rest;
  for (const LoweredOp& o : w0) (o.kind == LOpKind::Send ? sends : rest).push_back(o);
  rest.insert(rest.end() - 1, sends.begin(), sends.end());
  w0 = rest;
  // Sends now follow their producers only after the whole backward, which waits for rank 1.
  try {
    check(ls, flat_placement(1, 2, 1));
    FAIL() << "cycle accepted";
  } catch (const CheckError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cycle: "), std::string::npos) << what;
    EXPECT_GE(e.ops().size(), 3u);
  }
}

// ------------------------------------------------------------------------------------------ compute-only

TEST(CheckSchedule, AcceptsGenerators) {
  EXPECT_NO_THROW(check_schedule(make_gpipe(3, uniform_microbatches(4, 1, 8, 4), 8)));
  EXPECT_NO_THROW(check_schedule(make_1f1b(5, uniform_microbatches(7, 1, 8, 1), 8)));
  EXPECT_NO_THROW(check_schedule(make_interleaved(4, 3, uniform_microbatches(8, 1, 8, 1), 8)));
}

TEST(CheckSchedule, RejectsBrokenOrders) {
  Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);  // r1: 1F0 1B0 1F1 1B1
  std::swap(s.per_rank[1][0], s.per_rank[1][1]);
  expect_schedule_rejected(s, {"1B0", "runs before its forward 1F0", "rank 1"});

  s = make_gpipe(2, uniform_microbatches(1, 1, 8, 2), 8);  // r0: 0F0 0F0s1 0B0s1 0B0
  std::swap(s.per_rank[0][0], s.per_rank[0][1]);
  expect_schedule_rejected(s, {"0F0s1", "needs 0F0", "runs later on the same rank"});
  s = make_gpipe(2, uniform_microbatches(1, 1, 8, 2), 8);
  std::swap(s.per_rank[1][2], s.per_rank[1][3]);  // backward slices in forward order: dK/dV not ready
  expect_schedule_rejected(s, {"1B0", "needs 1B0s1"});

  s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.per_rank[0].push_back(s.per_rank[0][0]);
  expect_schedule_rejected(s, {"0F0 appears twice"});
  s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.per_rank[1].pop_back();
  expect_schedule_rejected(s, {"1B1 is missing from rank 1"});
  s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.per_rank[1][0].stage = 0;
  expect_schedule_rejected(s, {"1F0", "is not an op of schedule"});
  s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.per_rank[0][0].rank = 1;
  expect_schedule_rejected(s, {"rank 0 runs 1F0"});
  s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.m = 3;
  expect_schedule_rejected(s, {"micro-batches for m = 3"});
}

TEST(CheckSchedule, SplitBackward) {
  // r0 of ZB-H1 p=2 m=2: 0F0 0F1 0I0 0W0 0I1 0W1; r1: 1F0 1I0 1F1 1I1 1W0 1W1.
  EXPECT_NO_THROW(check_schedule(make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1)));
  EXPECT_NO_THROW(check_schedule(make_zb_v(3, uniform_microbatches(6, 1, 1, 1), 1)));
  Schedule s = make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1);
  auto at = [&](int r, const std::string& text) {
    const auto& ops = s.per_rank[r];
    return static_cast<std::size_t>(
        std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return op_text(o) == text; }) - ops.begin());
  };
  std::swap(s.per_rank[0][at(0, "0I0")], s.per_rank[0][at(0, "0W0")]);  // W before its I
  expect_schedule_rejected(s, {"0W0", "needs 0I0", "runs later on the same rank"});
  s = make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.per_rank[1].erase(s.per_rank[1].begin() + static_cast<std::ptrdiff_t>(at(1, "1W1")));
  expect_schedule_rejected(s, {"1W1 is missing from rank 1"});
  s = make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1);
  s.per_rank[1][at(1, "1I0")].kind = OpKind::Backward;  // B and W of the same key: both forms at once
  expect_schedule_rejected(s, {"1B0", "both fused (B) and split (I and W)"});
  s = make_zb_h1(2, uniform_microbatches(2, 1, 1, 1), 1);
  std::swap(s.per_rank[1][at(1, "1I0")], s.per_rank[1][at(1, "1W1")]);  // 1W1 ahead of its forward
  expect_schedule_rejected(s, {"1W1", "runs before its forward 1F1"});
}

TEST(CheckSchedule, CrossRankDeadlock) {
  // r0: F0 B0 F1 B1, r1: F1 B1 F0 B0: 1F1 waits for 0F1, which waits behind 0B0, which needs 1B0, which
  // runs after 1F1 on rank 1.
  Schedule s = make_1f1b(2, uniform_microbatches(2, 1, 1, 1), 1);
  auto op = [&](int r, OpKind k, int mb) { return op_of(s, OpKey{k, r, mb, 0}); };
  s.per_rank[0] = {op(0, OpKind::Forward, 0), op(0, OpKind::Backward, 0), op(0, OpKind::Forward, 1),
                   op(0, OpKind::Backward, 1)};
  s.per_rank[1] = {op(1, OpKind::Forward, 1), op(1, OpKind::Backward, 1), op(1, OpKind::Forward, 0),
                   op(1, OpKind::Backward, 0)};
  expect_schedule_rejected(s, {"deadlocks", "cycle: ", "0F1 -> 1F1 -> 1B1 -> 1F0 -> 1B0", "1B0 -> 0B0", "0B0 -> 0F1"});
  // The lowered form reports it too (check() runs check_schedule first).
  try {
    check(lower(s, 1, 1, ConstantCostModel(costs())), flat_placement(1, 2, 1));
    FAIL();
  } catch (const CheckError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle: "), std::string::npos) << e.what();
  }
}

// build_dag matches messages through a hash table and falls back to the full report on any mismatch: these keep the
// counts of sends and receives equal, so only the fallback can find what is wrong.
TEST(Checks, DuplicatedSendWithAsManySendsAsRecvs) {
  LoweredSchedule ls = lowered_1f1b(2, 3);
  auto& w0 = ls.per_worker[0];
  const std::size_t i = find_op(ls, 0, "send(0F2->1)");
  w0.insert(w0.begin() + static_cast<std::ptrdiff_t>(i), w0[i]);
  w0.erase(w0.begin() + static_cast<std::ptrdiff_t>(find_op(ls, 0, "send(0F1->1)")));
  expect_rejected(ls, flat_placement(1, 2, 1), {"duplicate send", "send(0F2->1)", "worker 0"}, {"send(0F2->1)"});
}

TEST(Checks, DuplicatedRecvWithAsManyRecvsAsSends) {
  LoweredSchedule ls = lowered_1f1b(2, 3);
  auto& w1 = ls.per_worker[1];
  const std::size_t i = find_op(ls, 1, "recv(0F2<-0)");
  w1.insert(w1.begin() + static_cast<std::ptrdiff_t>(i), w1[i]);
  w1.erase(w1.begin() + static_cast<std::ptrdiff_t>(find_op(ls, 1, "recv(0F1<-0)")));
  expect_rejected(ls, flat_placement(1, 2, 1), {"duplicate receive", "recv(0F2<-0)", "worker 1"}, {"recv(0F2<-0)"});
}

TEST(Checks, ChangedMessageTag) {
  LoweredSchedule ls = lowered_1f1b(3, 2);
  ls.per_worker[2][find_op(ls, 2, "recv(1F1<-1)")].tag = CollTag::TensorParallel;
  expect_rejected(ls, flat_placement(1, 3, 1), {"send(1F1->2)", "recv(1F1<-1)", "their tags differ"},
                  {"send(1F1->2)", "recv(1F1<-1)"});
}

}  // namespace
}  // namespace pipescope
