// FSDP's actions in the IR (core/ir/shard_actions.h): PyTorch's placement passes (_add_unshard_reshard with its
// window, _add_reduce_grad), the rules every named action keeps (each broken once, naming the action or the op), the
// text and CSV forms and their round trip.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/ir/schedule_check.h"
#include "core/ir/schedule_csv.h"
#include "core/ir/shard_actions.h"

namespace pipescope {
namespace {

std::vector<std::string> texts(const std::vector<ShardAction>& acts) {
  std::vector<std::string> out;
  for (const ShardAction& a : acts) out.push_back(shard_action_text(a) + "@" + std::to_string(a.before));
  return out;
}

std::string violation(const Schedule& s) {
  try {
    check_schedule(s);
  } catch (const CheckError& e) {
    return e.what();
  }
  return "";
}

// One stage per rank, three in the window: each rank unshards its stage before its first op, reduces after its last
// backward and reshards at the end.
TEST(ShardActions, OneStagePerRankIsGatheredOnce) {
  const Schedule s = with_fsdp_actions(make_1f1b(2, uniform_microbatches(4, 1, 8, 1), 8));
  EXPECT_EQ(schedule_text(s),
            "r0: 0UNSHARD 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3 0REDUCE_GRAD 0RESHARD\n"
            "r1: 1UNSHARD 1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3 1REDUCE_GRAD 1RESHARD\n");
  EXPECT_EQ(violation(s), "");
}

// Six chunks per rank, a window of three stages: a stage leaves the window when three others come first, and comes
// back with a new UNSHARD (PyTorch's eviction); the rules hold at every window size.
TEST(ShardActions, AWindowEvictsAndGathersAgain) {
  const Schedule base = make_interleaved(2, 6, uniform_microbatches(4, 1, 8, 1), 8);
  const Schedule s = with_fsdp_actions(base);
  const auto r0 = texts(s.shard_actions[0]);
  ASSERT_GE(r0.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(r0.begin(), r0.begin() + 4),
            (std::vector<std::string>{"0UNSHARD@0", "2UNSHARD@0", "4UNSHARD@0", "0RESHARD@2"}));
  int unshards = 0;
  for (const ShardAction& a : s.shard_actions[0]) unshards += a.kind == ShardKind::Unshard;
  EXPECT_GT(unshards, 6);  // some stage gathered twice
  for (int window : {1, 2, 3, 6, 12}) {
    SCOPED_TRACE(window);
    const Schedule w = with_fsdp_actions(base, window);
    EXPECT_EQ(violation(w), "");
    int most = 0, now = 0;  // unsharded stages at once: at most the window
    for (const ShardAction& a : w.shard_actions[1]) {
      now += a.kind == ShardKind::Unshard ? 1 : a.kind == ShardKind::Reshard ? -1 : 0;
      most = std::max(most, now);
    }
    EXPECT_EQ(most, std::min(window, 6));
  }
  EXPECT_THROW(with_fsdp_actions(base, 0), std::invalid_argument);
}

// An overlapped pair is one unit: both stages unsharded before it, nothing between its two ops, the reduction after it.
TEST(ShardActions, PairsAreOneUnit) {
  const Schedule s = with_fsdp_actions(make_dualpipev(2, uniform_microbatches(8, 1, 8, 1), 8));
  EXPECT_EQ(violation(s), "");
  for (std::size_t r = 0; r < s.per_rank.size(); r++)
    for (const ShardAction& a : s.shard_actions[r]) {
      if (a.before < static_cast<std::int32_t>(s.per_rank[r].size())) {
        EXPECT_NE(s.per_rank[r][a.before].overlap, Overlap::Second) << shard_action_text(a);
      }
    }
}

TEST(ShardActions, EveryRuleNamesWhatBreaksIt) {
  const Schedule good = with_fsdp_actions(make_1f1b(2, uniform_microbatches(2, 1, 8, 1), 8));
  ASSERT_EQ(schedule_text(good),
            "r0: 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD 0RESHARD\nr1: 1UNSHARD 1F0 1B0 1F1 1B1 1REDUCE_GRAD 1RESHARD\n");
  auto edit = [&](auto change) {
    Schedule s = good;
    change(s.shard_actions[0]);
    return violation(s);
  };
  using Acts = std::vector<ShardAction>;
  EXPECT_EQ(edit([](Acts& a) { a.erase(a.begin()); }),
            "rank 0: 0F0 computes on stage 0, which is sharded there (no UNSHARD of it since its last RESHARD)");
  EXPECT_EQ(edit([](Acts& a) {
              a.insert(a.begin() + 1, ShardAction{ShardKind::Unshard, 0, 0});
            }),
            "rank 0: 0UNSHARD unshards a stage already unsharded (no RESHARD since its UNSHARD)");
  EXPECT_EQ(edit([](Acts& a) {
              a.push_back(ShardAction{ShardKind::Reshard, 0, 4});
            }),
            "rank 0: 0RESHARD reshards a stage that is not unsharded");
  EXPECT_EQ(edit([](Acts& a) { a.erase(a.begin() + 1); }),
            "rank 0: stage 0 has no REDUCE_GRAD after its last backward");
  EXPECT_EQ(edit([](Acts& a) { a[1].before = 3; }), "rank 0: 0REDUCE_GRAD comes before the stage's last backward 0B1");
  EXPECT_EQ(edit([](Acts& a) {
              a.push_back(ShardAction{ShardKind::ReduceGrad, 0, 4});
            }),
            "rank 0: 0REDUCE_GRAD reduces the stage's gradients a second time");
  EXPECT_EQ(edit([](Acts& a) { a[0].stage = 1; }), "rank 0: 1UNSHARD names a stage this rank does not hold");
  EXPECT_EQ(edit([](Acts& a) { a[2].before = 5; }), "rank 0: 0RESHARD sits after the rank's last op (position 5)");
  EXPECT_EQ(edit([](Acts& a) { std::swap(a[1], a[2]), a[1].before = 4, a[2].before = 3; }),
            "rank 0: 0REDUCE_GRAD is out of order (before op 3)");
  // Resharded after its last op, unsharded again, never used: PyTorch's "unused unshard".
  EXPECT_EQ(edit([](Acts& a) {
              a.push_back(ShardAction{ShardKind::Unshard, 0, 4});
            }),
            "rank 0: 0UNSHARD: no op of the stage runs after it (PyTorch's runtime refuses an unused unshard)");
  EXPECT_EQ(edit([](Acts& a) {
              a.insert(a.begin() + 3, {ShardAction{ShardKind::Unshard, 0, 4}, ShardAction{ShardKind::Reshard, 0, 4}});
            }),
            "rank 0: 0RESHARD reshards the stage before any op used its UNSHARD");
}

// PyTorch's text in the CSV, each action before the compute action it precedes; the file loads back to the same
// schedule, and a file that names them keeps them (the reader checks their rules with the file's name).
TEST(ShardActions, CsvRoundTrip) {
  const Schedule s = with_fsdp_actions(make_gpipe(2, uniform_microbatches(2, 1, 8, 2), 8));
  const std::string csv = schedule_to_csv(s);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "0UNSHARD,0F0@0,0F0@1,0F1@0,0F1@1,0B1@1,0B1@0,0B0@1,0B0@0,0REDUCE_GRAD,0RESHARD");
  const Schedule back = schedule_from_csv(csv, "t.csv", {s.p, s.v, s.microbatches, s.seq_len});
  EXPECT_EQ(back.per_rank, s.per_rank);
  EXPECT_EQ(back.shard_actions, s.shard_actions);
  EXPECT_EQ(schedule_to_csv(back), csv);
  try {
    schedule_from_csv("0F0,0B0,0REDUCE_GRAD\n", "t.csv", {1, 1, uniform_microbatches(1, 1, 8, 1), 8});
    ADD_FAILURE() << "a stage computed on while sharded: accepted";
  } catch (const CheckError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.csv: rank 0: 0F0 computes on stage 0, which is sharded there (no UNSHARD of it since its last "
              "RESHARD)");
  }
  // A compute-only file stays without actions.
  EXPECT_TRUE(
      schedule_from_csv("0F0,0B0\n", "t.csv", {1, 1, uniform_microbatches(1, 1, 8, 1), 8}).shard_actions.empty());
}

}  // namespace
}  // namespace pipescope
