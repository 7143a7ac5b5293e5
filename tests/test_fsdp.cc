// Fully sharded data parallelism beside pipelining (training.fsdp, core/model/config.h): the time of the distributed
// optimizer with both overlaps (a stage's parameters gathered before its first op, its gradients reduce-scattered
// after its last backward), the memory of FSDP2 (the fp32 gradient accumulator whole, master weights, moments and
// the fp32 gradient shard over dp), and the places that must know it: validation, the search, the runtime.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "core/cost/scenario_cost.h"
#include "core/ir/schedule.h"
#include "core/ir/schedule_csv.h"
#include "core/ir/shard_actions.h"
#include "core/lower/grad_sync.h"
#include "core/memory/memory_model.h"
#include "core/model/model_shape.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/search.h"
#include "runtime/scenario_fit.h"
#include "sim/run_scenario.h"

namespace pipescope {
namespace {

// The default layout (dp 2 x pp 4 x tp 2 on 2 DGX A100) in bf16 with the given sharding.
Scenario with_training(const std::string& training) {
  return parse_scenario(
      "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 2}\n"
      "parallel: {dp: 2, pp: 4, tp: 2, micro_batch_size: 1, global_batch: 32}\nschedule: {kind: 1f1b}\n"
      "training: {dtype: bf16, grad_fp32: true, " +
          training + "}\n",
      "fsdp.yaml");
}

TEST(Fsdp, TimesAsTheDistributedOptimizerWithBothOverlaps) {
  const Scenario fsdp = with_training("fsdp: true");
  const Scenario zero1 =
      with_training("distributed_optimizer: true, overlap_grad_reduce: true, overlap_param_gather: true");
  const GradSyncOptions a = grad_sync_options(fsdp.training), b = grad_sync_options(zero1.training);
  EXPECT_TRUE(a.distributed_optimizer && a.overlap_grad_reduce && a.overlap_param_gather);
  EXPECT_EQ(a.bucket_bytes, b.bucket_bytes);
  const sim::RunResult f = sim::run_isolated(fsdp), z = sim::run_isolated(zero1);
  EXPECT_EQ(f.iteration_s, z.iteration_s);
  // Without the overlaps the distributed optimizer gathers after the step: FSDP differs from it.
  EXPECT_NE(f.iteration_s, sim::run_isolated(with_training("distributed_optimizer: true")).iteration_s);
}

TEST(Fsdp, MemoryShardsStateAndKeepsTheFp32AccumulatorWhole) {
  const Scenario fsdp = with_training("fsdp: true"), zero1 = with_training("distributed_optimizer: true");
  const Scenario plain = with_training("distributed_optimizer: false");
  const MemoryReport f = memory_report(fsdp, make_schedule(fsdp)), z = memory_report(zero1, make_schedule(zero1));
  const MemoryReport p = memory_report(plain, make_schedule(plain));
  for (int r = 0; r < 4; r++) {
    SCOPED_TRACE(r);
    const double params = rank_parameter_count(fsdp, r);
    EXPECT_DOUBLE_EQ(f.ranks[r].weights_bytes, z.ranks[r].weights_bytes);      // the bf16 working copy, whole
    EXPECT_DOUBLE_EQ(f.ranks[r].optimizer_bytes, z.ranks[r].optimizer_bytes);  // master + moments over dp 2
    EXPECT_DOUBLE_EQ(z.ranks[r].optimizer_bytes * 2, p.ranks[r].optimizer_bytes);
    EXPECT_DOUBLE_EQ(f.ranks[r].grads_bytes, params * 4 + params * 4 / 2);  // accumulator + shard
  }
}

TEST(Fsdp, RefusedBesideTheDistributedOptimizerAndByTheRuntime) {
  try {
    with_training("fsdp: true, distributed_optimizer: true");
    ADD_FAILURE() << "fsdp with the distributed optimizer: accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("training.fsdp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("leave distributed_optimizer off"), std::string::npos) << e.what();
  }
  try {
    runtime::fit_scenario(with_training("fsdp: true"), {});
    ADD_FAILURE() << "the runtime accepted fsdp";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("training.fsdp: the runtime does not execute"), std::string::npos) << e.what();
  }
}

// A scenario with FSDP keeps it in every candidate; the distributed optimizer is then no dimension of the search.
TEST(Fsdp, SearchKeepsItAndDropsTheDistributedOptimizerDimension) {
  SearchSpace space;
  space.schedules = {"1f1b"};
  space.micro_batch_sizes = {1};
  const Stage1 st = enumerate_candidates(with_training("fsdp: true"), space);
  ASSERT_FALSE(st.survivors.empty());
  for (const Candidate& c : st.survivors) {
    EXPECT_TRUE(c.scenario.training.fsdp) << c.label;
    EXPECT_FALSE(c.scenario.training.distributed_optimizer) << c.label;
    EXPECT_NE(c.label.find(" fsdp"), std::string::npos) << c.label;
    EXPECT_EQ(c.label.find(" do"), std::string::npos) << c.label;
  }
}

// --fsdp off,on makes it a dimension: both where dp > 1, never beside the distributed optimizer, off at dp = 1.
TEST(Fsdp, SearchDimension) {
  SearchSpace space;
  space.schedules = {"1f1b"};
  space.micro_batch_sizes = {1};
  space.fsdp = {false, true};
  const Stage1 st = enumerate_candidates(with_training("flash_attention: false"), space);
  int fsdp = 0, distributed = 0, plain = 0;
  for (const Candidate& c : st.survivors) {
    const TrainingSpec& t = c.scenario.training;
    EXPECT_FALSE(t.fsdp && t.distributed_optimizer) << c.label;
    if (c.scenario.parallel.dp == 1) {
      EXPECT_FALSE(t.fsdp) << c.label;
    }
    (t.fsdp ? fsdp : t.distributed_optimizer ? distributed : plain)++;
    EXPECT_EQ(c.label.find(" fsdp") != std::string::npos, t.fsdp) << c.label;
  }
  EXPECT_GT(fsdp, 0);
  EXPECT_GT(distributed, 0);
  EXPECT_GT(plain, 0);
  // Every layout with dp > 1 comes three ways: plain, ZeRO-1, FSDP (when each fits).
  space.fsdp = {true};
  space.distributed_optimizer = {false};
  for (const Candidate& c : enumerate_candidates(with_training("flash_attention: false"), space).survivors)
    EXPECT_EQ(c.scenario.training.fsdp, c.scenario.parallel.dp > 1) << c.label;
}

// A schedule file runs as PyTorch's runtime runs it: a compute-only file under FSDP gets its loader's actions
// (core/ir/shard_actions.h), each UNSHARD one parameter all-gather of the stage (in buckets) awaited by the stage's
// next op, each REDUCE_GRAD the stage's reduce-scatter after its last backward; a file that names actions needs FSDP.
std::string write_csv(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// dp 4 x pp 2 x tp 2, six chunks per rank; `schedule` the scenario's schedule map.
Scenario six_chunks(const std::string& schedule, bool fsdp) {
  return parse_scenario(
      "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 2}\n"
      "parallel: {dp: 4, pp: 2, tp: 2, v: 6, micro_batch_size: 1, global_batch: 32}\nschedule: " +
          schedule + "\ntraining: {dtype: bf16, grad_fp32: true, fsdp: " + (fsdp ? "true" : "false") + "}\n",
      "six.yaml");
}
Scenario file_scenario(const std::string& csv, bool fsdp) {
  return six_chunks("{kind: file, file: " + csv + "}", fsdp);
}
Scenario interleaved_scenario() { return six_chunks("{kind: interleaved}", true); }

TEST(Fsdp, ScheduleFileRunsThePytorchActions) {
  const Schedule compute = make_schedule(interleaved_scenario());
  ASSERT_TRUE(compute.shard_actions.empty());
  const Scenario s = file_scenario(write_csv("fsdp_compute_only.csv", schedule_to_csv(compute)), true);
  const Schedule sch = make_schedule(s);
  EXPECT_EQ(sch.per_rank, compute.per_rank);
  EXPECT_EQ(sch.shard_actions, with_fsdp_actions(compute).shard_actions);
  const LoweredSchedule ls = lower_scenario(s, sch, *make_cost_model(s));
  for (int w = 0; w < ls.workers(); w++) {
    SCOPED_TRACE(w);
    const auto& acts = sch.shard_actions[w % ls.p];
    const auto& prog = ls.per_worker[w];
    const auto count = [&](ShardKind k) {
      return std::count_if(acts.begin(), acts.end(), [&](const ShardAction& a) { return a.kind == k; });
    };
    long gathers = 0, reductions = 0;
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].tag == CollTag::ParamGather) {
        gathers++;
        EXPECT_TRUE(prog[i].async);
        // Awaited by the stage's next compute op: one of that stage comes later.
        EXPECT_TRUE(std::any_of(prog.begin() + static_cast<long>(i), prog.end(), [&](const LoweredOp& l) {
          return l.kind == LOpKind::Compute && l.op.stage == prog[i].op.stage;
        }));
      }
      if (prog[i].tag == CollTag::DataParallel) {
        reductions++;
        EXPECT_EQ(prog[i].kind, LOpKind::ReduceScatter);
        // After the stage's last backward.
        EXPECT_FALSE(std::any_of(prog.begin() + static_cast<long>(i), prog.end(), [&](const LoweredOp& l) {
          return l.kind == LOpKind::Compute && l.op.stage == prog[i].op.stage;
        }));
      }
    }
    EXPECT_GT(count(ShardKind::Unshard), 6);  // six stages, some gathered again
    EXPECT_EQ(gathers % count(ShardKind::Unshard), 0);
    EXPECT_EQ(reductions % count(ShardKind::ReduceGrad), 0);
    EXPECT_EQ(count(ShardKind::ReduceGrad), 6);
  }
  EXPECT_GT(sim::run_isolated(s).iteration_s, 0);
}

TEST(Fsdp, ScheduleFileActionsNeedFsdp) {
  const std::string path =
      write_csv("fsdp_actions.csv", schedule_to_csv(with_fsdp_actions(make_schedule(interleaved_scenario()))));
  EXPECT_FALSE(make_schedule(file_scenario(path, true)).shard_actions.empty());
  try {
    make_schedule(file_scenario(path, false));
    ADD_FAILURE() << "actions without fsdp: accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "names FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD), which need training.fsdp: true"),
              std::string::npos)
        << e.what();
  }
}

// Memory with actions: the working copy sharded, a stage's whole copy from its UNSHARD to its RESHARD. A window of
// one stage holds one copy at the peak; the whole window holds the rank's weights whole besides the shards.
TEST(Fsdp, ActionsHoldTheGatheredStagesOnly) {
  const Scenario s = interleaved_scenario();
  const Schedule base = make_schedule(s);
  for (int r = 0; r < 2; r++) {
    SCOPED_TRACE(r);
    const double params = rank_parameter_count(s, r), w = 2;  // bf16
    const RankMemory one = memory_report(s, with_fsdp_actions(base, 1)).ranks[r];
    const RankMemory all = memory_report(s, with_fsdp_actions(base, 6)).ranks[r];
    const RankMemory none = memory_report(s, base).ranks[r];
    EXPECT_NEAR(one.weights_bytes, params * w / 4 + params * w / 6, 1e-3 * params);
    EXPECT_NEAR(all.weights_bytes, params * w / 4 + params * w, 1e-3 * params);
    EXPECT_DOUBLE_EQ(none.weights_bytes, params * w);
    for (const RankMemory& m : {one, all, none})
      EXPECT_NEAR(m.peak_bytes, m.weights_bytes + m.grads_bytes + m.optimizer_bytes + m.activation_peak_bytes, 1.0);
  }
}

// Resharding after forward (FSDP2's reshard_after_forward, TorchTitan's "always"): every forward and backward gathers
// its stage again, the op waiting for the first bucket and the rank's next op for the rest; the working copy sharded
// but for about two blocks; dearer than keeping the stages gathered.
TEST(Fsdp, ReshardAfterForwardGathersForEveryOp) {
  const Scenario kept = with_training("fsdp: true");
  const Scenario again = with_training("fsdp: true, fsdp_reshard_after_forward: true");
  EXPECT_TRUE(grad_sync_options(again.training).reshard_after_forward);
  const Schedule sch = make_schedule(again);
  const LoweredSchedule ls = lower_scenario(again, sch, *make_cost_model(again));
  for (int w = 0; w < ls.workers(); w++) {
    SCOPED_TRACE(w);
    const auto& ops = sch.per_rank[w % ls.p];
    const auto& prog = ls.per_worker[w];
    std::size_t gathers = 0, next_compute = 0, awaited_here = 0;
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].tag == CollTag::ParamGather) {
        gathers++;
        awaited_here += next_compute < ops.size() && key_of(prog[i].op) == key_of(ops[next_compute]);
      }
      if (prog[i].kind == LOpKind::Compute) next_compute++;
    }
    EXPECT_EQ(gathers % ops.size(), 0u);  // 1F1B: no W, every op gathers, the same buckets each
    const std::size_t buckets = gathers / ops.size();
    EXPECT_GT(buckets, 1u);
    // One bucket per op is the op's own, the others the next op's; the last op waits for all of its own.
    EXPECT_EQ(awaited_here, ops.size() + buckets - 1);
  }
  const sim::RunResult a = sim::run_isolated(kept), b = sim::run_isolated(again);
  EXPECT_GT(b.iteration_s, a.iteration_s);
  const MemoryReport mk = memory_report(kept, make_schedule(kept)), ma = memory_report(again, sch);
  for (int r = 0; r < 4; r++) {
    SCOPED_TRACE(r);
    const double params = rank_parameter_count(again, r), w = 2;  // bf16; 6 layers a stage: two blocks of six
    EXPECT_NEAR(ma.ranks[r].weights_bytes, params * w / 2 + params * w * 2 / 6, 1e-3 * params);
    EXPECT_DOUBLE_EQ(mk.ranks[r].weights_bytes, params * w);
    EXPECT_LT(ma.ranks[r].peak_bytes, mk.ranks[r].peak_bytes);
  }
}

TEST(Fsdp, ReshardAfterForwardNeedsFsdpAndNoScheduleFile) {
  for (const char* bad : {"fsdp_reshard_after_forward: true", "fsdp: false, fsdp_reshard_after_forward: true"}) {
    try {
      with_training(bad);
      ADD_FAILURE() << bad << ": accepted";
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find("training.fsdp_reshard_after_forward"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("set fsdp: true"), std::string::npos) << e.what();
    }
  }
  const std::string csv = write_csv("fsdp_reshard.csv", schedule_to_csv(make_schedule(interleaved_scenario())));
  try {
    parse_scenario(
        "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 2}\n"
        "parallel: {dp: 4, pp: 2, tp: 2, v: 6, micro_batch_size: 1, global_batch: 32}\n"
        "schedule: {kind: file, file: " +
            csv + "}\ntraining: {dtype: bf16, fsdp: true, fsdp_reshard_after_forward: true}\n",
        "f.yaml");
    ADD_FAILURE() << "resharding after forward with a schedule file: accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("leave fsdp_reshard_after_forward off"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipescope
