// Megatron-LM's p2p order (core/lower/megatron_p2p.h): with blocking p2p and Megatron's interleaving, a steady-state
// forward's send leaves after the backward that follows it and that backward's receive comes before the forward;
// warm-up forwards, 1F1B, ZB-V and eager p2p keep the lowering's order.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "core/lower/megatron_p2p.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

std::unique_ptr<Prepared> prepared(const std::string& p2p, int v, int m, std::string kind = "") {
  if (kind.empty()) kind = v > 1 ? "interleaved" : "1f1b";
  const std::string yaml =
      "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 1}\n"
      "parallel: {dp: 1, pp: 4, tp: 2, v: " +
      std::to_string(v) + ", micro_batch_size: 1, global_batch: " + std::to_string(m) + "}\nschedule: {kind: " + kind +
      "}\ntraining: {dtype: bf16}\nsim: {p2p: " + p2p + "}\n";
  return prepare(parse_scenario(yaml, "<test>"));
}

// Index of the first op of `kind` carrying compute op `text` (op_text) on worker w.
std::size_t find(const LoweredSchedule& ls, int w, LOpKind kind, const std::string& text) {
  const auto& prog = ls.per_worker[static_cast<std::size_t>(w)];
  for (std::size_t i = 0; i < prog.size(); i++)
    if (prog[i].kind == kind && op_text(prog[i].op) == text) return i;
  ADD_FAILURE() << "no " << text << " on worker " << w;
  return 0;
}

// Worker 0 of interleaved-small (p 4, v 2, m 16): steady state "0F7, 0B0c1": 0F7's send follows 0B0c1.
TEST(MegatronP2p, SteadyStateForwardSendFollowsTheBackward) {
  const auto blocking = prepared("blocking", 2, 16);
  const LoweredSchedule& ls = blocking->lowered;
  EXPECT_TRUE(ls.blocking_sends);
  EXPECT_GT(find(ls, 0, LOpKind::Send, "0F7"), find(ls, 0, LOpKind::Compute, "0B0c1"));
  // 0B1c1's gradient is received before 0F7 (posted in the batch after 0B0c1), not between 0F7 and 0B1c1.
  EXPECT_LT(find(ls, 0, LOpKind::Recv, "1B1c1"), find(ls, 0, LOpKind::Compute, "0F7"));
  EXPECT_GT(find(ls, 0, LOpKind::Recv, "1B1c1"), find(ls, 0, LOpKind::Send, "0F6"));
  // A warm-up forward (followed by a forward) sends at once.
  EXPECT_EQ(find(ls, 0, LOpKind::Send, "0F0"), find(ls, 0, LOpKind::Compute, "0F0") + 2);  // after its all-reduce
  // Eager p2p keeps the lowering's order: the send right after the forward's all-reduce.
  const auto eager = prepared("eager", 2, 16);
  EXPECT_FALSE(eager->lowered.blocking_sends);
  EXPECT_EQ(find(eager->lowered, 0, LOpKind::Send, "0F7"), find(eager->lowered, 0, LOpKind::Compute, "0F7") + 2);
  // Same ops, only moved.
  for (std::size_t w = 0; w < ls.per_worker.size(); w++)
    EXPECT_EQ(ls.per_worker[w].size(), eager->lowered.per_worker[w].size());
}

// Megatron's M == p case (every micro-batch in the warm-up), plain 1F1B and ZB-V keep the lowering's order.
TEST(MegatronP2p, AllWarmupOneFOneBAndZbvUnchanged) {
  for (const auto& [v, m, kind] : {std::tuple{2, 4, ""}, std::tuple{1, 16, ""}, std::tuple{2, 16, "zb-v"}}) {
    const auto blocking = prepared("blocking", v, m, kind), eager = prepared("eager", v, m, kind);
    for (std::size_t w = 0; w < blocking->lowered.per_worker.size(); w++) {
      const auto& a = blocking->lowered.per_worker[w];
      const auto& b = eager->lowered.per_worker[w];
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); i++) EXPECT_EQ(lowered_text(a[i]), lowered_text(b[i])) << "v " << v;
    }
  }
}

// every_forward_first: Megatron's interleaved schedules (1F1B-I, Seq1F1B-I) at m == p run every unit as warm-up;
// at m = 2p, and 1F1B / Seq1F1B at m == p, backwards start before the last forward.
TEST(MegatronP2p, EveryForwardFirstOnlyWhenInterleavedAtMEqualsP) {
  EXPECT_TRUE(every_forward_first(prepared("blocking", 2, 4)->schedule));
  EXPECT_FALSE(every_forward_first(prepared("blocking", 2, 8)->schedule));
  EXPECT_FALSE(every_forward_first(prepared("blocking", 1, 4)->schedule));
  EXPECT_TRUE(every_forward_first(prepared("blocking", 1, 4, "gpipe")->schedule));
  const auto sliced = [](int v, int m) {
    const std::string yaml =
        "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 1}\n"
        "parallel: {dp: 1, pp: 4, tp: 2, v: " +
        std::to_string(v) + ", micro_batch_size: 1, global_batch: " + std::to_string(m) +
        "}\nschedule: {kind: " + (v > 1 ? "seq1f1b-i" : "seq1f1b") +
        ", seq_slices: 4}\ntraining: {dtype: bf16, flash_attention: true}\n";
    return prepare(parse_scenario(yaml, "<test>"))->schedule;
  };
  EXPECT_TRUE(every_forward_first(sliced(2, 4)));
  EXPECT_FALSE(every_forward_first(sliced(2, 8)));
  EXPECT_FALSE(every_forward_first(sliced(1, 4)));
}

// Sequence parallelism: each TP rank sends its own sequence shard (p2p bytes / t) and nothing is gathered after the
// receive; without it, scatter/gather splits the message and all-gathers it on arrival.
TEST(MegatronP2p, SequenceParallelSendsShardsWithoutGather) {
  const std::string base =
      "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 1}\nschedule: {kind: 1f1b}\n"
      "training: {dtype: bf16}\nparallel: {dp: 1, pp: 4, tp: 2, micro_batch_size: 1, "
      "global_batch: 8, sequence_parallel: ";
  const auto sp = prepare(parse_scenario(base + "true}\n", "<sp>"));
  const auto plain = prepare(parse_scenario(base + "false}\n", "<plain>"));
  EXPECT_FALSE(uses_scatter_gather(sp->scenario));
  EXPECT_TRUE(uses_scatter_gather(plain->scenario));
  auto count = [](const LoweredSchedule& ls, CollTag tag) {
    int n = 0;
    for (const auto& prog : ls.per_worker)
      for (const LoweredOp& l : prog) n += l.kind == LOpKind::AllGather && l.tag == tag;
    return n;
  };
  EXPECT_EQ(count(sp->lowered, CollTag::ScatterGather), 0);
  EXPECT_GT(count(plain->lowered, CollTag::ScatterGather), 0);
  // Same bytes per TP lane either way: the shard (sequence parallel) or the scattered share (scatter/gather).
  const std::size_t i = find(sp->lowered, 0, LOpKind::Send, "0F0"), j = find(plain->lowered, 0, LOpKind::Send, "0F0");
  EXPECT_DOUBLE_EQ(sp->lowered.per_worker[0][i].bytes, plain->lowered.per_worker[0][j].bytes);
  EXPECT_DOUBLE_EQ(sp->cost->p2p_bytes(sp->lowered.per_worker[0][i].op, 1) * 2,
                   plain->cost->p2p_bytes(plain->lowered.per_worker[0][j].op, 1));
}

}  // namespace
}  // namespace pipescope
