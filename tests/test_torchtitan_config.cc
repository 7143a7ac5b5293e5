// TorchTitan's job configuration both ways (core/model/torchtitan_config.h): the TOML and the --section.key flags give
// the same scenario, TorchTitan's layer split and stages per rank, what is not modelled (FSDP, async TP, op-level
// checkpointing) listed, import -> emit -> import the same scenario, errors naming the file, line and key.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/scenario.h"
#include "core/model/torchtitan_config.h"

namespace pipescope {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream f(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/torchtitan/" + name);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string without_comments(const std::string& yaml) {
  std::istringstream in(yaml);
  std::string out, line;
  while (std::getline(in, line))
    if (line.rfind("#", 0) != 0) out += line.substr(0, line.find("  #")) + "\n";
  return out;
}

bool listed(const std::vector<std::string>& v, const std::string& part) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x.find(part) != std::string::npos; });
}

TEST(TorchTitanImport, FsdpAndTensorParallelJob) {
  const TorchTitanImport r =
      import_torchtitan_toml(fixture("llama3_70b.toml"), "llama3_70b.toml", {"t", "dgx-h100", 8, ""});
  const Scenario s = parse_scenario(r.yaml, "i.yaml");
  EXPECT_EQ(s.model.name, "llama3-70b");
  EXPECT_EQ(s.model.seq_len, 8192);
  EXPECT_EQ(s.parallel.tp, 8);
  EXPECT_EQ(s.parallel.dp, 8);  // shard -1: the rest of 64 GPUs
  EXPECT_EQ(s.parallel.pp, 1);
  EXPECT_EQ(s.parallel.micro_batch_size, 8);  // no pipeline: the local batch is one step
  EXPECT_EQ(s.parallel.global_batch, 64);     // local 8 x dp 8
  EXPECT_EQ(s.schedule.recompute, Recompute::Full);
  EXPECT_EQ(s.training.dtype, "bf16");
  EXPECT_TRUE(s.training.fsdp);
  EXPECT_FALSE(s.training.distributed_optimizer);
  // No pipelining: TorchTitan's default reshards after every forward (training.fsdp_reshard_after_forward).
  EXPECT_TRUE(s.training.fsdp_reshard_after_forward);
  EXPECT_FALSE(listed(r.unsupported, "fsdp_reshard"));
  EXPECT_TRUE(listed(r.ignored, "optimizer.lr"));
  EXPECT_TRUE(r.unknown.empty());
}

TEST(TorchTitanImport, PipelineSplitFloat8AndWhatIsNotModelled) {
  const TorchTitanImport r =
      import_torchtitan_toml(fixture("llama3_8b_pp.toml"), "llama3_8b_pp.toml", {"t", "dgx-h100", 2, ""});
  const Scenario s = parse_scenario(r.yaml, "i.yaml");
  EXPECT_EQ(s.schedule.kind, ScheduleKind::Interleaved);
  EXPECT_EQ(s.parallel.v, 2);  // a multi-stage schedule: two stages per rank
  // 32 layers + embedding + output = 34 over 8 stages: 4 each and 2 over to the first two; the first less 1, the
  // last less 1 (TorchTitan's generate_llm_fqn_per_model_part).
  EXPECT_EQ(s.parallel.stage_layers, (std::vector<int>{4, 5, 4, 4, 4, 4, 4, 3}));
  EXPECT_EQ(s.parallel.global_batch, 32);
  EXPECT_EQ(s.training.dtype, "fp8");
  EXPECT_EQ(s.schedule.recompute, Recompute::Selective);
  EXPECT_FALSE(listed(r.unsupported, "enable_async_tensor_parallel"));
  EXPECT_TRUE(s.training.tp_comm_overlap);  // async tensor parallelism: the collectives beside their matmuls
  EXPECT_TRUE(listed(r.unsupported, "selective_ac_option = op"));
  EXPECT_TRUE(r.unknown.empty());
  // A key of no known section is unknown, listed and written as a comment.
  const TorchTitanImport u = import_torchtitan_toml(fixture("llama3_8b_pp.toml") + "\n[my_section]\nwhat = 1\n",
                                                    "u.toml", {"t", "dgx-h100", 2, ""});
  EXPECT_TRUE(listed(u.unknown, "my_section.what = 1"));
  EXPECT_NE(u.yaml.find("# unknown key: my_section.what = 1"), std::string::npos);
}

TEST(TorchTitanImport, FlagsAreTheSameKeys) {
  const TorchTitanImportOptions o{"t", "dgx-h100", 2, ""};
  const std::string toml =
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 16\nseq_len = 4096\n"
      "[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2\npipeline_parallel_degree = 4\n"
      "pipeline_parallel_schedule = \"ZBVZeroBubble\"\npipeline_parallel_layers_per_stage = 4\n"
      "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n"
      "[activation_checkpoint]\nmode = \"none\"\n";
  const TorchTitanImport a = import_torchtitan_toml(toml, "a.toml", o);
  const TorchTitanImport b = import_torchtitan_flags({"--model.name",
                                                      "llama3",
                                                      "--model.flavor=8B",
                                                      "--training.local-batch-size",
                                                      "16",
                                                      "--training.seq_len",
                                                      "4096",
                                                      "--parallelism.data_parallel_shard_degree",
                                                      "2",
                                                      "--parallelism.tensor_parallel_degree",
                                                      "2",
                                                      "--parallelism.pipeline_parallel_degree",
                                                      "4",
                                                      "--parallelism.pipeline_parallel_schedule",
                                                      "ZBVZeroBubble",
                                                      "--parallelism.pipeline_parallel_layers_per_stage",
                                                      "4",
                                                      "--parallelism.pipeline_parallel_first_stage_less_layers",
                                                      "0",
                                                      "--parallelism.pipeline_parallel_last_stage_less_layers=0",
                                                      "--activation_checkpoint.mode",
                                                      "none"},
                                                     o);
  EXPECT_EQ(without_comments(a.yaml), without_comments(b.yaml));
  const Scenario s = parse_scenario(a.yaml, "a.yaml");
  EXPECT_TRUE(s.training.fsdp);  // shard 2 under pipelining: gathered once per iteration, as modelled
  EXPECT_FALSE(listed(a.unsupported, "fsdp_reshard"));
  EXPECT_FALSE(s.training.fsdp_reshard_after_forward);  // TorchTitan's default under pipelining
  const std::string always =
      std::string(toml).replace(toml.find("tensor_parallel_degree"), 0, "fsdp_reshard_after_forward = \"always\"\n");
  const TorchTitanImport r = import_torchtitan_toml(always, "n.toml", o);
  EXPECT_FALSE(listed(r.unsupported, "fsdp_reshard"));
  EXPECT_TRUE(parse_scenario(r.yaml, "r.yaml").training.fsdp_reshard_after_forward);
  EXPECT_EQ(s.schedule.kind, ScheduleKind::ZeroBubbleV);
  EXPECT_EQ(s.parallel.v, 2);  // 32 layers, 4 per stage, no allowance for the embedding and output: 8 stages
  EXPECT_TRUE(s.parallel.stage_layers.empty());  // even
}

TEST(TorchTitanEmit, ImportEmitImportIsTheSameScenario) {
  for (const auto& [file, nodes] : {std::pair{"llama3_70b.toml", 8}, std::pair{"llama3_8b_pp.toml", 2}}) {
    SCOPED_TRACE(file);
    const TorchTitanImportOptions o{"t", "dgx-h100", nodes, ""};
    const TorchTitanImport first = import_torchtitan_toml(fixture(file), file, o);
    const std::string toml = torchtitan_toml(parse_scenario(first.yaml, "first.yaml"));
    const TorchTitanImport second = import_torchtitan_toml(toml, "emitted.toml", o);
    EXPECT_TRUE(second.unknown.empty());
    EXPECT_EQ(without_comments(second.yaml), without_comments(first.yaml));
  }
}

TEST(TorchTitanImport, BadInputNamesTheFileLineAndKey) {
  auto message = [](const std::string& toml) -> std::string {
    try {
      import_torchtitan_toml(toml, "job.toml", {"t", "dgx-h100", 2, ""});
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message("[model\nname = 1\n").find("job.toml:1:"), std::string::npos);
  EXPECT_NE(message("[model]\nname = \"gpt9\"\nflavor = \"1T\"\n").find("'gpt9 1T' has no pipescope preset"),
            std::string::npos);
  const std::string llama = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n";
  EXPECT_NE(message(llama + "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = \"LoopedBFS\"\n")
                .find("parallelism.pipeline_parallel_schedule: 'LoopedBFS' has no pipescope schedule"),
            std::string::npos);
  EXPECT_NE(message(llama + "[parallelism]\ntensor_parallel_degree = \"eight\"\n")
                .find("parallelism.tensor_parallel_degree: 'eight' is not an integer"),
            std::string::npos);
  EXPECT_NE(message(llama + "[parallelism]\ndata_parallel_shard_degree = 3\n").find("give --nodes"), std::string::npos);
  EXPECT_THROW(import_torchtitan_flags({"--nodot", "1"}), std::invalid_argument);
  // What TorchTitan cannot run is refused by the emitter.
  Scenario s = parse_scenario(import_torchtitan_toml(llama, "j.toml", {"t", "dgx-h100", 1, ""}).yaml, "s.yaml");
  s.training.dtype = "fp16";
  EXPECT_THROW(torchtitan_toml(s), std::invalid_argument);
  s.training.dtype = "bf16", s.model.name = "gpt3-1b";
  EXPECT_THROW(torchtitan_toml(s), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope
