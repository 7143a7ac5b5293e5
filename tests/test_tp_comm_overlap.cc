// Transformer Engine's userbuffers overlap (training.tp_comm_overlap, core/cost/tp_overlap.h): with sequence
// parallelism each dense linear's all-gather or reduce-scatter runs beside its GEMM, so the forward's and the fused
// backward's collectives leave the exposed list and their GEMMs last max(GEMM, collective); it needs tp > 1 and
// sequence parallelism; the shipped 70B scenario gains what its exposed tensor-parallel time was.
#include <gtest/gtest.h>

#include <string>

#include "core/cost/scenario_cost.h"
#include "core/ir/schedule.h"
#include "core/model/scenario.h"
#include "sim/run_scenario.h"

namespace pipescope {
namespace {

Scenario llama(const std::string& training) {
  return parse_scenario(
      "model: {preset: llama3-70b, seq_len: 4096}\ncluster: {preset: dgx-h100, nodes: 2}\n"
      "parallel: {dp: 1, pp: 2, tp: 8, micro_batch_size: 1, global_batch: 8, sequence_parallel: true}\n"
      "schedule: {kind: 1f1b, recompute: full}\ntraining: {dtype: bf16, flash_attention: true" +
          training + "}\n",
      "ub.yaml");
}

TEST(TpCommOverlap, CollectivesLeaveTheExposedListAndTheirGemmsCarryThem) {
  const Scenario off = llama(""), on = llama(", tp_comm_overlap: true");
  const auto a = make_cost_model(off), b = make_cost_model(on);
  Op f;  // stage 0's forward (the embedding's collective stays)
  f.kind = OpKind::Forward, f.tok_end = 4096;
  Op bw = f;
  bw.kind = OpKind::Backward;
  EXPECT_GT(a->tp_allreduce_calls(f), 1);
  EXPECT_EQ(b->tp_allreduce_calls(f), 1);   // the vocab-parallel embedding's output
  EXPECT_EQ(b->tp_allreduce_calls(bw), 0);  // recomputed forward and the dgrads' all-gathers beside their GEMMs
  // Each overlapped GEMM lasts at least as long as before; over NVLink at h 8192 the collectives mostly hide.
  EXPECT_GE(b->compute_seconds(f, 1), a->compute_seconds(f, 1));
  EXPECT_GE(b->compute_seconds(bw, 1), a->compute_seconds(bw, 1));
  const sim::RunResult ra = sim::run_isolated(off), rb = sim::run_isolated(on);
  EXPECT_LT(rb.iteration_s, ra.iteration_s);
  EXPECT_LT(rb.breakdown.tp_comm_s, 0.1 * ra.breakdown.tp_comm_s);
}

TEST(TpCommOverlap, NeedsTensorAndSequenceParallelism) {
  for (const char* bad : {"dp: 1, tp: 8, sequence_parallel: false", "dp: 8, tp: 1, sequence_parallel: false"}) {
    try {
      parse_scenario(
          std::string("model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 1}\nparallel: {pp: 1, ") + bad +
              ", micro_batch_size: 1, global_batch: 8}\ntraining: {tp_comm_overlap: true}\n",
          "bad.yaml");
      ADD_FAILURE() << bad << ": accepted";
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find("training.tp_comm_overlap"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("sequence_parallel: true"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pipescope
