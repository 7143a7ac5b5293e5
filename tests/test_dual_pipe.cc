// DeepSeek's two-direction DualPipe (core/ir/dual_pipe.cc, StageStyle::Dual): the micro-batches' routes, the model
// stages behind the virtual ones (layers, embedding, head, twice the parameters), the copies' shared gradient
// groups, and the scenario's refusals. Its closed forms are in tests/test_conformance.cc.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "core/ir/schedule.h"
#include "core/ir/schedule_check.h"
#include "core/lower/cost_model.h"
#include "core/lower/grad_sync.h"
#include "core/lower/lowering.h"
#include "core/model/model_shape.h"
#include "core/model/placement.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

TEST(DualPipe, EachMicroBatchTakesOneDirection) {
  const int p = 4, m = 12;
  const Schedule s = make_dualpipe(p, uniform_microbatches(m, 1, 16, 1), 16);
  EXPECT_EQ(s.style, StageStyle::Dual);
  EXPECT_NO_THROW(check_schedule(s));
  for (int r = 0; r < p; r++) {
    EXPECT_EQ(s.stage_of(r, 0), r);
    EXPECT_EQ(s.stage_of(r, 1), 2 * p - 1 - r);  // the second copy of model stage p-1-r
    EXPECT_EQ(model_stage_of(StageStyle::Dual, p, s.stage_of(r, 1)), p - 1 - r);
    std::set<int> seen_mb;
    for (const Op& op : s.per_rank[r]) {
      const bool first_direction = op.microbatch < m / 2;
      EXPECT_EQ(op.stage < p, first_direction) << op_text(op);
      seen_mb.insert(op.microbatch);
    }
    EXPECT_EQ(seen_mb.size(), static_cast<std::size_t>(m));  // every rank works on both directions
  }
  // The second direction enters at the last rank: its first forward needs no earlier stage.
  EXPECT_TRUE(op_dependencies(s, OpKey{OpKind::Forward, p, m / 2, 0}).empty());
  const auto last = op_dependencies(s, OpKey{OpKind::Backward, p - 1, 0, 0});
  ASSERT_EQ(last.size(), 1u);  // the first direction's last stage: its own forward only (the loss)
  EXPECT_EQ(last[0].kind, OpKind::Forward);
  // Off its route, a key is off the grid.
  EXPECT_LT(OpKeyIndex(s).slot(OpKey{OpKind::Forward, p, 0, 0}), 0);
  EXPECT_THROW(make_dualpipe(3, uniform_microbatches(6, 1, 16, 1), 16), std::invalid_argument);  // odd p
  EXPECT_THROW(make_dualpipe(4, uniform_microbatches(9, 1, 16, 1), 16), std::invalid_argument);  // odd m
  EXPECT_THROW(make_dualpipe(4, uniform_microbatches(6, 1, 16, 1), 16), std::invalid_argument);  // m < 2p
}

Scenario dual_scenario(const std::string& kind) {
  return parse_scenario(
      "model: {preset: gpt3-1b}\n"
      "cluster: {preset: dgx-a100, nodes: 1}\n"
      "parallel: {dp: 2, pp: 4, tp: 1, v: 2, micro_batch_size: 1, global_batch: 16}\n"
      "schedule: {kind: " +
          kind + "}\n",
      "dual.yaml");
}

TEST(DualPipe, VirtualStagesRunTheirModelStagesAndRanksHoldTwo) {
  const Scenario s = dual_scenario("dualpipe"), v = dual_scenario("dualpipev");
  const int p = 4;
  EXPECT_EQ(scenario_model_stages(s), p);
  EXPECT_EQ(stage_copies(s), 2);
  EXPECT_EQ(stage_copies(v), 1);
  for (int g = 0; g < p; g++) {
    EXPECT_EQ(stage_layer_range(s, g).first, stage_layer_range(s, g + p).first);
    EXPECT_EQ(stage_layer_range(s, g).count, s.model.layers / p);
  }
  EXPECT_TRUE(holds_embedding(s, 0) && holds_embedding(s, p));
  EXPECT_TRUE(holds_head(s, p - 1) && holds_head(s, 2 * p - 1));
  EXPECT_FALSE(holds_head(s, 1) || holds_embedding(s, 1));
  // A middle rank holds two model stages of layers: twice DualPipeV's two half-size chunks.
  EXPECT_DOUBLE_EQ(rank_parameter_count(s, 1), 2 * rank_parameter_count(v, 1));
  // Ranks 0 and p-1 both hold the embedding and the head (tied: one copy each).
  EXPECT_DOUBLE_EQ(rank_parameter_count(s, 0), rank_parameter_count(s, p - 1));
}

TEST(DualPipe, CopiesReduceTheirGradientsInOneGroup) {
  const int p = 4;
  ConstantCosts cc;
  cc.v = 2;
  cc.seq_len = 16;
  cc.grad_bytes = 1e6;
  const ConstantCostModel cost(cc);
  for (int dp : {1, 2}) {
    SCOPED_TRACE("dp " + std::to_string(dp));
    const LoweredSchedule ls = lower(make_dualpipe(p, uniform_microbatches(8, 1, 16, 1), 16), dp, 1, cost);
    std::set<std::set<std::int32_t>> groups;
    for (const CollGroup& g : ls.groups)
      if (g.tag == CollTag::DataParallel) groups.insert(std::set<std::int32_t>(g.workers.begin(), g.workers.end()));
    std::set<std::set<std::int32_t>> want;
    for (int r = 0; r < p / 2; r++) {
      std::set<std::int32_t> w;
      for (int d = 0; d < dp; d++)
        w.insert(LoweredSchedule::worker(d, r, p)), w.insert(LoweredSchedule::worker(d, p - 1 - r, p));
      want.insert(w);
    }
    EXPECT_EQ(groups, want);
    for (const CollGroup& g : ls.groups) EXPECT_NE(g.tag, CollTag::Embedding);  // ranks 0 and p-1 hold both ends
  }
}

std::string validation_error(const std::string& parallel) {
  try {
    parse_scenario("model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 1}\nparallel: " + parallel +
                       "\nschedule: {kind: dualpipe}\n",
                   "dual.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(DualPipe, ScenarioNeedsAnEvenPipelineAndMicroBatchCount) {
  EXPECT_NE(validation_error("{dp: 8, pp: 1, tp: 1, v: 2, micro_batch_size: 1, global_batch: 16}")
                .find("needs an even pp and an even micro-batch count, got pp = 1, m = 2"),
            std::string::npos);
  EXPECT_EQ(validation_error("{dp: 2, pp: 2, tp: 2, v: 2, micro_batch_size: 1, global_batch: 8}"), "");
  EXPECT_NE(validation_error("{dp: 1, pp: 8, tp: 1, v: 2, micro_batch_size: 1, global_batch: 17}").find("m = 17"),
            std::string::npos);
  EXPECT_NE(validation_error("{dp: 1, pp: 8, tp: 1, v: 2, micro_batch_size: 1, global_batch: 16, "
                             "stage_layers: [3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0]}")
                .find("needs one entry per model stage: pp = 8"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
