// `pipescope import megatron`: a Megatron-LM pretrain_gpt.py command line as a scenario (core/model/megatron_import.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "core/model/megatron_emit.h"
#include "core/model/megatron_import.h"
#include "core/model/scenario.h"

namespace pipescope {
namespace {

// The launch behind scenarios/megatron/39.1b.yaml (Megatron's Table 1 row 39.1B: t 8, p 2, 64 DGX A100 nodes,
// B 1536, interleaved with 2 chunks of 12 layers, full recomputation), plus training flags that change nothing.
const std::vector<std::string> k39b = {"--num-layers",
                                       "48",
                                       "--hidden-size",
                                       "8192",
                                       "--num-attention-heads",
                                       "64",
                                       "--seq-length",
                                       "2048",
                                       "--max-position-embeddings",
                                       "2048",
                                       "--micro-batch-size",
                                       "1",
                                       "--global-batch-size",
                                       "1536",
                                       "--tensor-model-parallel-size",
                                       "8",
                                       "--pipeline-model-parallel-size",
                                       "2",
                                       "--num-layers-per-virtual-pipeline-stage=12",
                                       "--recompute-granularity",
                                       "full",
                                       "--fp16",
                                       "--lr",
                                       "1.5e-4",
                                       "--data-path",
                                       "/data/my-gpt_text_document",
                                       "--DDP-impl",
                                       "local",
                                       "--use-distributed-optimizer"};

// Llama-3-70B's shape and a tp 8 x pp 4 layout (NVIDIA's Megatron-LM Llama recipes).
const std::vector<std::string> kLlama3 = {"--num-layers",
                                          "80",
                                          "--hidden-size",
                                          "8192",
                                          "--num-attention-heads",
                                          "64",
                                          "--ffn-hidden-size",
                                          "28672",
                                          "--seq-length",
                                          "8192",
                                          "--vocab-size",
                                          "128256",
                                          "--micro-batch-size",
                                          "1",
                                          "--global-batch-size",
                                          "64",
                                          "--tensor-model-parallel-size",
                                          "8",
                                          "--pipeline-model-parallel-size",
                                          "4",
                                          "--group-query-attention",
                                          "--num-query-groups",
                                          "8",
                                          "--swiglu",
                                          "--normalization",
                                          "RMSNorm",
                                          "--position-embedding-type",
                                          "rope",
                                          "--disable-bias-linear",
                                          "--untie-embeddings-and-output-weights"};

TEST(MegatronImport, TheShippedScenarioFromItsLaunch) {
  MegatronImportOptions o;
  o.nodes = 64;
  const MegatronImport r = import_megatron(k39b, o);
  const Scenario got = parse_scenario(r.yaml, "import.yaml");
  const Scenario want = load_scenario(PIPESCOPE_SOURCE_DIR "/scenarios/megatron/39.1b.yaml");
  EXPECT_EQ(got.model.layers, want.model.layers);
  EXPECT_EQ(got.model.hidden, want.model.hidden);
  EXPECT_EQ(got.model.heads, want.model.heads);
  EXPECT_EQ(got.model.ffn_hidden, want.model.ffn_hidden);
  EXPECT_EQ(got.model.vocab, want.model.vocab);
  EXPECT_EQ(got.model.seq_len, want.model.seq_len);
  EXPECT_EQ(got.model.tied_embeddings, want.model.tied_embeddings);
  EXPECT_EQ(got.cluster.total_gpus(), want.cluster.total_gpus());
  EXPECT_EQ(got.parallel.dp, want.parallel.dp);
  EXPECT_EQ(got.parallel.pp, want.parallel.pp);
  EXPECT_EQ(got.parallel.tp, want.parallel.tp);
  EXPECT_EQ(got.parallel.v, want.parallel.v);
  EXPECT_EQ(got.parallel.micro_batch_size, want.parallel.micro_batch_size);
  EXPECT_EQ(got.parallel.global_batch, want.parallel.global_batch);
  EXPECT_EQ(got.schedule.kind, want.schedule.kind);
  EXPECT_EQ(got.schedule.recompute, want.schedule.recompute);
  EXPECT_EQ(got.schedule.scatter_gather, want.schedule.scatter_gather);
  EXPECT_EQ(got.training.dtype, want.training.dtype);
  EXPECT_EQ(got.sim.p2p, want.sim.p2p);
  // Nothing dropped silently: the unknown flag with its value, the harmless ones; the distributed optimizer is
  // modelled (the shipped scenario does not use it).
  EXPECT_EQ(r.unknown, (std::vector<std::string>{"--DDP-impl local"}));
  EXPECT_TRUE(r.unsupported.empty());
  EXPECT_TRUE(got.training.distributed_optimizer);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"--max-position-embeddings 2048", "--lr 1.5e-4",
                                                 "--data-path /data/my-gpt_text_document"}));
  EXPECT_NE(r.yaml.find("# unknown argument: --DDP-impl local"), std::string::npos);
}

TEST(MegatronImport, SwitchesAndDefaults) {
  const MegatronImport r = import_megatron({"--num-layers",
                                            "32",
                                            "--hidden-size",
                                            "2560",
                                            "--num-attention-heads",
                                            "32",
                                            "--seq-length",
                                            "32768",
                                            "--micro-batch-size",
                                            "1",
                                            "--global-batch-size",
                                            "8",
                                            "--pipeline-model-parallel-size",
                                            "8",
                                            "--bf16",
                                            "--sequence-parallel",
                                            "--use-flash-attn",
                                            "--untie-embeddings-and-output-weights",
                                            "--vocab-size",
                                            "32000",
                                            "--context-parallel-size",
                                            "1",
                                            "--recompute-activations"});
  const Scenario s = parse_scenario(r.yaml, "import.yaml");
  EXPECT_EQ(s.parallel.dp, 1);  // one DGX A100 node holds pp 8
  EXPECT_EQ(s.cluster.total_gpus(), 8);
  EXPECT_EQ(s.training.dtype, "bf16");
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_TRUE(s.training.flash_attention);
  EXPECT_FALSE(s.model.tied_embeddings);
  EXPECT_EQ(s.model.vocab, 32000);
  EXPECT_EQ(s.schedule.recompute, Recompute::Selective);  // --recompute-activations is selective recomputation
  EXPECT_TRUE(r.unsupported.empty());
  // bf16: Megatron-LM accumulates and all-reduces gradients in fp32 (arguments.py), without the flag.
  EXPECT_TRUE(s.training.grad_fp32);
  const std::vector<std::string> shape = {"--num-layers",          "2", "--hidden-size",       "64",
                                          "--num-attention-heads", "2", "--seq-length",        "64",
                                          "--micro-batch-size",    "1", "--global-batch-size", "8"};
  std::vector<std::string> fp16 = shape;
  fp16.push_back("--fp16");
  EXPECT_FALSE(parse_scenario(import_megatron(fp16).yaml, "i.yaml").training.grad_fp32);
  fp16.push_back("--bf16");
  EXPECT_THROW(import_megatron(fp16), std::invalid_argument);  // Megatron refuses both
  std::vector<std::string> off = shape;
  off.push_back("--bf16=false");  // was read as bf16 on
  EXPECT_THROW(import_megatron(off), std::invalid_argument);
  // Megatron-Core's uneven first / last stages are stage_layers (they were "not modelled", then a located error in
  // the generated YAML).
  std::vector<std::string> uneven = {"--num-layers",
                                     "30",
                                     "--hidden-size",
                                     "64",
                                     "--num-attention-heads",
                                     "2",
                                     "--seq-length",
                                     "64",
                                     "--micro-batch-size",
                                     "1",
                                     "--global-batch-size",
                                     "8",
                                     "--pipeline-model-parallel-size",
                                     "4",
                                     "--decoder-first-pipeline-num-layers",
                                     "6",
                                     "--decoder-last-pipeline-num-layers",
                                     "6"};
  EXPECT_EQ(parse_scenario(import_megatron(uneven).yaml, "u.yaml").parallel.stage_layers,
            (std::vector<int>{6, 9, 9, 6}));
  uneven[15] = "5";  // 25 layers over 3 stages
  EXPECT_THROW(import_megatron(uneven), std::invalid_argument);
  // The tokenizer's vocabulary padded as Megatron pads it: to make-vocab-size-divisible-by (128) x tp.
  std::vector<std::string> v = shape;
  for (const char* a : {"--vocab-size", "50257", "--tensor-model-parallel-size", "2"}) v.push_back(a);
  EXPECT_NE(import_megatron(v).yaml.find("vocab: 50432,"), std::string::npos) << import_megatron(v).yaml;
  for (const char* a : {"--make-vocab-size-divisible-by", "64"}) v.push_back(a);
  EXPECT_NE(import_megatron(v).yaml.find("vocab: 50304,"), std::string::npos) << import_megatron(v).yaml;
}

// What changes the answer, read whole: multi-value arguments, the old full-recomputation switch, the attention
// backend, gradients reduced in bf16, the recompute method only where it means something, the overlap flags that are
// not modelled named as such, and Megatron-Core's combined 1F1B.
TEST(MegatronImport, ArgumentsThatChangeTheAnswer) {
  const std::vector<std::string> shape = {"--num-layers",          "4", "--hidden-size",       "64",
                                          "--num-attention-heads", "2", "--seq-length",        "64",
                                          "--micro-batch-size",    "1", "--global-batch-size", "8"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = shape;
    a.insert(a.end(), extra.begin(), extra.end());
    return import_megatron(a);
  };
  const MegatronImport multi =
      with({"--rampup-batch-size", "16", "16", "5859375", "--data-path", "0.2", "A", "0.3", "B", "--bf16"});
  EXPECT_TRUE(multi.unknown.empty()) << multi.unknown.front();
  EXPECT_NE(std::find(multi.ignored.begin(), multi.ignored.end(), "--rampup-batch-size 16 16 5859375"),
            multi.ignored.end());
  EXPECT_NE(std::find(multi.ignored.begin(), multi.ignored.end(), "--data-path 0.2 A 0.3 B"), multi.ignored.end());
  const MegatronImport unknown = with({"--some-new-flag", "1", "2", "--bf16"});
  EXPECT_EQ(unknown.unknown, (std::vector<std::string>{"--some-new-flag 1 2"}));
  EXPECT_EQ(parse_scenario(with({"--checkpoint-activations"}).yaml, "i.yaml").schedule.recompute, Recompute::Full);
  EXPECT_TRUE(parse_scenario(with({"--attention-backend", "fused", "--bf16"}).yaml, "i.yaml").training.flash_attention);
  EXPECT_FALSE(parse_scenario(with({"--attention-backend", "unfused"}).yaml, "i.yaml").training.flash_attention);
  EXPECT_THROW(with({"--attention-backend", "fast"}), std::invalid_argument);
  EXPECT_FALSE(parse_scenario(with({"--bf16", "--grad-reduce-in-bf16"}).yaml, "i.yaml").training.grad_fp32);
  // Selective recomputation ignores the method; full with uniform is what the scenario models; block is partial.
  const MegatronImport sel = with({"--recompute-granularity", "selective", "--recompute-method", "uniform"});
  EXPECT_TRUE(sel.unsupported.empty());
  EXPECT_TRUE(with({"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"})
                  .unsupported.empty());
  EXPECT_EQ(with({"--recompute-granularity", "full", "--recompute-method", "block"}).unsupported.size(), 1u);
  // --tp-comm-overlap: the userbuffers overlap with sequence parallelism at tp > 1, off at tp 1 (as Megatron-LM does).
  const MegatronImport overlap = with({"--fp8-param-gather", "--tp-comm-overlap"});
  EXPECT_EQ(overlap.unsupported.size(), 1u);  // the FP8 parameter gather
  EXPECT_NE(std::find(overlap.ignored.begin(), overlap.ignored.end(), "--tp-comm-overlap (off at tp 1)"),
            overlap.ignored.end());
  EXPECT_TRUE(
      parse_scenario(with({"--tensor-model-parallel-size", "2", "--sequence-parallel", "--tp-comm-overlap"}).yaml,
                     "i.yaml")
          .training.tp_comm_overlap);
  EXPECT_THROW(with({"--tensor-model-parallel-size", "2", "--tp-comm-overlap"}), std::invalid_argument);
  EXPECT_TRUE(parse_scenario(with({"--overlap-moe-expert-parallel-comm"}).yaml, "i.yaml").schedule.overlap_moe_a2a);
}

TEST(MegatronImport, Llama3ShapeAndDistributedOptimizer) {
  std::vector<std::string> args = kLlama3;
  args.insert(args.end(), {"--bf16", "--accumulate-allreduce-grads-in-fp32", "--use-distributed-optimizer",
                           "--overlap-grad-reduce", "--overlap-param-gather", "--recompute-granularity", "selective"});
  const MegatronImport r = import_megatron(args, MegatronImportOptions{"llama", "dgx-h100-superpod", 8});
  EXPECT_TRUE(r.unknown.empty());
  EXPECT_TRUE(r.unsupported.empty());
  const Scenario s = parse_scenario(r.yaml, "import.yaml");
  EXPECT_EQ(s.model.query_groups, 8);
  EXPECT_EQ(s.model.ffn, FfnKind::SwiGlu);
  EXPECT_EQ(s.model.norm, NormKind::RmsNorm);
  EXPECT_FALSE(s.model.linear_bias);
  EXPECT_TRUE(s.training.distributed_optimizer);
  EXPECT_TRUE(s.training.overlap_grad_reduce);
  EXPECT_TRUE(s.training.overlap_param_gather);
  EXPECT_TRUE(s.training.grad_fp32);
  EXPECT_EQ(s.schedule.recompute, Recompute::Selective);
  EXPECT_EQ(s.parallel.dp, 2);
}

// Megatron-LM's Mixtral 8x7B example (examples/mixtral): the MoE and parallel flags become the model's experts and ep.
TEST(MegatronImport, MixtureOfExperts) {
  const std::vector<std::string> mixtral = {"--disable-bias-linear",
                                            "--seq-length",
                                            "4096",
                                            "--num-layers",
                                            "32",
                                            "--hidden-size",
                                            "4096",
                                            "--ffn-hidden-size",
                                            "14336",
                                            "--num-attention-heads",
                                            "32",
                                            "--normalization",
                                            "RMSNorm",
                                            "--position-embedding-type",
                                            "rope",
                                            "--swiglu",
                                            "--untie-embeddings-and-output-weights",
                                            "--group-query-attention",
                                            "--num-query-groups",
                                            "8",
                                            "--vocab-size",
                                            "32000",
                                            "--num-experts",
                                            "8",
                                            "--moe-router-topk",
                                            "2",
                                            "--moe-router-load-balancing-type",
                                            "aux_loss",
                                            "--moe-aux-loss-coeff",
                                            "1e-2",
                                            "--moe-grouped-gemm",
                                            "--moe-token-dispatcher-type",
                                            "alltoall",
                                            "--micro-batch-size",
                                            "1",
                                            "--global-batch-size",
                                            "256",
                                            "--bf16",
                                            "--tensor-model-parallel-size",
                                            "1",
                                            "--pipeline-model-parallel-size",
                                            "4",
                                            "--expert-model-parallel-size",
                                            "8",
                                            "--use-distributed-optimizer"};
  const MegatronImport r = import_megatron(mixtral, MegatronImportOptions{"mixtral", "dgx-h100", 8});
  EXPECT_TRUE(r.unknown.empty());
  EXPECT_TRUE(r.unsupported.empty());
  const Scenario s = parse_scenario(r.yaml, "import.yaml");
  EXPECT_EQ(s.training.moe_routing, "trained");  // no forced balance: a trained router's load imbalance
  EXPECT_EQ(s.model.moe_experts, 8);
  EXPECT_EQ(s.model.moe_top_k, 2);
  EXPECT_EQ(s.model.moe_ffn_hidden, 14336);  // --ffn-hidden-size when no --moe-ffn-hidden-size
  EXPECT_EQ(s.parallel.ep, 8);
  EXPECT_EQ(s.parallel.dp, 16);
  EXPECT_EQ(s.training.moe_dispatcher, "alltoall");
  EXPECT_EQ(s.parallel.etp, 1);
  // Expert tensor parallelism: Megatron-Core's default is the tensor-parallel size; the flag overrides it.
  std::vector<std::string> tp2 = mixtral;
  *(std::find(tp2.begin(), tp2.end(), "--tensor-model-parallel-size") + 1) = "2";
  tp2.push_back("--sequence-parallel");
  EXPECT_EQ(parse_scenario(import_megatron(tp2, MegatronImportOptions{"m", "dgx-h100", 8}).yaml, "i.yaml").parallel.etp,
            2);
  tp2.insert(tp2.end(), {"--expert-tensor-parallel-size", "1"});
  const MegatronImport etp1 = import_megatron(tp2, MegatronImportOptions{"m", "dgx-h100", 8});
  EXPECT_TRUE(etp1.unsupported.empty());
  EXPECT_EQ(parse_scenario(etp1.yaml, "i.yaml").parallel.etp, 1);
  // Megatron-Core's virtual stages per rank and the embedding and loss counted as layers: 30 layers + 2 over
  // pp 4 x v 8 = 32 virtual stages, the first and last without a transformer layer.
  std::vector<std::string> split = mixtral;
  *(std::find(split.begin(), split.end(), "--num-layers") + 1) = "30";
  split.insert(split.end(), {"--num-virtual-stages-per-pipeline-rank", "8", "--account-for-embedding-in-pipeline-split",
                             "--account-for-loss-in-pipeline-split"});
  const MegatronImport acc = import_megatron(split, MegatronImportOptions{"m", "dgx-h100", 8});
  EXPECT_TRUE(acc.unknown.empty());
  const Scenario a = parse_scenario(acc.yaml, "i.yaml");
  EXPECT_EQ(a.parallel.v, 8);
  ASSERT_EQ(a.parallel.stage_layers.size(), 32u);
  EXPECT_EQ(a.parallel.stage_layers.front(), 0);
  EXPECT_EQ(a.parallel.stage_layers.back(), 0);
  EXPECT_EQ(a.parallel.stage_layers[1], 1);
  split.push_back("--account-for-loss-in-pipeline-split");  // repeated: still 32 stages; now one that does not divide
  *(std::find(split.begin(), split.end(), "--num-layers") + 1) = "31";
  EXPECT_THROW(import_megatron(split, MegatronImportOptions{"m", "dgx-h100", 8}), std::invalid_argument);
  // DeepSeek-V3's layer pattern and DeepEP; a pattern the scenario cannot say is refused.
  std::vector<std::string> ds = mixtral;
  auto set = [&](const char* flag, const char* value) { *(std::find(ds.begin(), ds.end(), flag) + 1) = value; };
  set("--num-layers", "61");
  set("--pipeline-model-parallel-size", "1");  // 61 layers split no further
  set("--moe-token-dispatcher-type", "flex");
  for (const char* x :
       {"--moe-layer-freq", "([0]*3+[1]*58)", "--moe-ffn-hidden-size", "2048", "--moe-shared-expert-intermediate-size",
        "2048", "--moe-enable-deepep", "--moe-router-force-load-balancing"})
    ds.push_back(x);
  const MegatronImport d = import_megatron(ds, MegatronImportOptions{"ds", "dgx-h100", 8});
  EXPECT_TRUE(d.unsupported.empty());
  const Scenario t = parse_scenario(d.yaml, "import.yaml");
  EXPECT_EQ(t.model.moe_dense_layers, 3);
  EXPECT_EQ(t.model.moe_layer_freq, 1);
  EXPECT_EQ(t.model.moe_shared_ffn_hidden, 2048);
  EXPECT_EQ(t.training.moe_dispatcher, "deepep");
  EXPECT_EQ(t.training.moe_routing, "balanced");  // --moe-router-force-load-balancing
  EXPECT_EQ(t.training.moe_router_groups, 0);
  std::vector<std::string> groups = ds;
  groups.insert(groups.end(), {"--moe-router-num-groups", "8", "--moe-router-group-topk", "4"});
  const Scenario gl =
      parse_scenario(import_megatron(groups, MegatronImportOptions{"ds", "dgx-h100", 8}).yaml, "g.yaml");
  EXPECT_EQ(gl.training.moe_router_groups, 8);
  EXPECT_EQ(gl.training.moe_router_group_topk, 4);
  groups.resize(groups.size() - 2);  // the group count alone
  EXPECT_THROW(import_megatron(groups, MegatronImportOptions{"ds", "dgx-h100", 8}), std::invalid_argument);
  // Capacity with padding; Megatron's MoE recompute modules (a list-valued flag).
  std::vector<std::string> cap = ds;
  for (const char* x : {"--moe-expert-capacity-factor", "1.25", "--moe-pad-expert-input-to-capacity",
                        "--recompute-granularity", "selective", "--recompute-modules", "moe_act", "layernorm"})
    cap.push_back(x);
  const Scenario c = parse_scenario(import_megatron(cap, MegatronImportOptions{"ds", "dgx-h100", 8}).yaml, "i.yaml");
  EXPECT_EQ(c.training.moe_capacity_factor, 1.25);
  EXPECT_TRUE(c.training.moe_pad_to_capacity);
  EXPECT_EQ(c.schedule.recompute, Recompute::Selective);
  EXPECT_EQ(c.schedule.recompute_modules, module_bit(RecomputeModule::MoeAct) | module_bit(RecomputeModule::LayerNorm));
  for (const auto& [flags, what] :
       {std::pair<std::vector<const char*>, const char*>{{"--moe-expert-capacity-factor", "0"},
                                                         "--moe-expert-capacity-factor"},
        {{"--moe-pad-expert-input-to-capacity"}, "--moe-pad-expert-input-to-capacity"},
        {{"--recompute-modules", "moe"}, "--recompute-granularity selective"},
        {{"--recompute-granularity", "selective", "--recompute-modules", "attn"}, "'attn'"}}) {
    std::vector<std::string> bad = ds;
    bad.insert(bad.end(), flags.begin(), flags.end());
    try {
      import_megatron(bad, MegatronImportOptions{"ds", "dgx-h100", 8});
      ADD_FAILURE() << "expected a refusal naming " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  // DeepSeek-V3's attention.
  std::vector<std::string> mla = ds;
  for (const char* x : {"--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim",
                        "128", "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128"})
    mla.push_back(x);
  *(std::find(mla.begin(), mla.end(), "--num-query-groups") + 1) = "32";  // no GQA with MLA
  mla.erase(std::find(mla.begin(), mla.end(), "--group-query-attention"));
  const MegatronImport lat = import_megatron(mla, MegatronImportOptions{"ds", "dgx-h100", 8});
  EXPECT_TRUE(lat.unsupported.empty());
  const Scenario u = parse_scenario(lat.yaml, "import.yaml");
  EXPECT_TRUE(u.model.mla());
  EXPECT_EQ(u.model.q_lora_rank, 1536);
  EXPECT_EQ(u.model.kv_lora_rank, 512);
  EXPECT_EQ(u.model.head_dim, 128);
  EXPECT_TRUE(u.training.flash_attention);
  std::vector<std::string> odd = mixtral;
  odd.insert(odd.end(), {"--moe-layer-freq", "[1,0,0,1]*8"});
  try {
    import_megatron(odd, MegatronImportOptions{"x", "dgx-h100", 8});
    ADD_FAILURE() << "expected the pattern refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--moe-layer-freq"), std::string::npos) << e.what();
  }
}

TEST(MegatronImport, BadArgumentsNameTheFlag) {
  auto msg = [](const std::vector<std::string>& a, MegatronImportOptions o = {}) -> std::string {
    try {
      import_megatron(a, o);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  const std::vector<std::string> base = {"--num-layers",          "4", "--hidden-size",       "64",
                                         "--num-attention-heads", "4", "--seq-length",        "128",
                                         "--micro-batch-size",    "1", "--global-batch-size", "8"};
  EXPECT_EQ(msg({"--num-layers", "4"}), "--hidden-size is required (the model or batch size)");
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_EQ(msg(with({"--tensor-model-parallel-size", "x"})),
            "--tensor-model-parallel-size: 'x' is not a positive integer");
  EXPECT_EQ(msg(with({"--pipeline-model-parallel-size"})), "--pipeline-model-parallel-size: missing value");
  EXPECT_NE(msg(with({"--pipeline-model-parallel-size", "3"}), MegatronImportOptions{"x", "dgx-a100", 1})
                .find("do not divide"),
            std::string::npos);
  EXPECT_NE(msg(with({"--recompute-granularity", "some"})).find("not full or selective"), std::string::npos);
  // The loader's own checks apply: 4 layers over pp 2 x chunks of 3 layers.
  EXPECT_NE(msg(with({"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "3"}))
                .find("do not split"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope

namespace pipescope {
namespace {

// The generated scenario without its comments (what the import says it ignored differs: the emitted arguments have
// nothing to ignore).
std::string without_comments(const std::string& yaml) {
  std::string out, line;
  for (char c : yaml + "\n") {
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.rfind("#", 0) != 0) {
      const std::size_t hash = line.find("  #");
      out += line.substr(0, hash) + "\n";
    }
    line.clear();
  }
  return out;
}

// import -> emit -> import gives the same scenario (core/model/megatron_emit.h), and the emitted arguments are all
// known to the importer.
void expect_round_trip(const std::vector<std::string>& args, const MegatronImportOptions& o) {
  const MegatronImport first = import_megatron(args, o);
  const std::vector<std::string> emitted = megatron_arguments(parse_scenario(first.yaml, "first.yaml"));
  const MegatronImport second = import_megatron(emitted, o);
  EXPECT_TRUE(second.unknown.empty()) << second.unknown.front();
  EXPECT_EQ(second.unsupported, first.unsupported);
  EXPECT_EQ(without_comments(second.yaml), without_comments(first.yaml));
}

TEST(MegatronEmit, ImportEmitImportIsTheSameScenario) {
  MegatronImportOptions o;
  o.nodes = 64;
  // Interleaved, full recomputation, fp16, the distributed optimizer (the MLP's size written out: the emitter always
  // writes it, the importer leaves it to the loader's default when absent).
  std::vector<std::string> gpt = k39b;
  gpt.insert(gpt.end(), {"--ffn-hidden-size", "32768"});
  expect_round_trip(gpt, o);
  std::vector<std::string> llama = kLlama3;
  llama.insert(llama.end(), {"--num-layers-per-virtual-pipeline-stage", "4", "--bf16", "--use-distributed-optimizer",
                             "--overlap-grad-reduce", "--overlap-param-gather", "--recompute-granularity", "selective",
                             "--sequence-parallel", "--attention-backend", "fused", "--context-parallel-size", "2",
                             "--fp8-format", "hybrid", "--grad-reduce-in-bf16", "--tp-comm-overlap"});
  expect_round_trip(llama, MegatronImportOptions{"llama", "dgx-h100-superpod", 16});
  // PyTorch FSDP2 in place of the distributed optimizer (which it replaces: listed as ignored).
  std::vector<std::string> fsdp = kLlama3;
  fsdp.insert(fsdp.end(), {"--bf16", "--use-torch-fsdp2", "--use-distributed-optimizer"});
  const MegatronImport f = import_megatron(fsdp, MegatronImportOptions{"llama", "dgx-h100-superpod", 8});
  const Scenario fs = parse_scenario(f.yaml, "fsdp.yaml");
  EXPECT_TRUE(fs.training.fsdp);
  EXPECT_FALSE(fs.training.distributed_optimizer);
  EXPECT_TRUE(std::any_of(f.ignored.begin(), f.ignored.end(),
                          [](const std::string& x) { return x.rfind("--use-distributed-optimizer (with", 0) == 0; }));
  const std::vector<std::string> emitted = megatron_arguments(fs);
  EXPECT_NE(std::find(emitted.begin(), emitted.end(), "--use-torch-fsdp2"), emitted.end());
  EXPECT_EQ(std::find(emitted.begin(), emitted.end(), "--use-distributed-optimizer"), emitted.end());
  fsdp.pop_back();
  expect_round_trip(fsdp, MegatronImportOptions{"llama", "dgx-h100-superpod", 8});
  // A mixture of experts with latent attention, dense first layers, DeepEP, capacity, selective modules and an
  // uneven last stage.
  const std::vector<std::string> moe = {"--num-layers",
                                        "13",
                                        "--hidden-size",
                                        "1024",
                                        "--num-attention-heads",
                                        "16",
                                        "--ffn-hidden-size",
                                        "4096",
                                        "--seq-length",
                                        "4096",
                                        "--vocab-size",
                                        "32000",
                                        "--micro-batch-size",
                                        "1",
                                        "--global-batch-size",
                                        "64",
                                        "--tensor-model-parallel-size",
                                        "2",
                                        "--pipeline-model-parallel-size",
                                        "4",
                                        "--sequence-parallel",
                                        "--decoder-last-pipeline-num-layers",
                                        "1",
                                        "--num-experts",
                                        "16",
                                        "--moe-router-topk",
                                        "4",
                                        "--moe-ffn-hidden-size",
                                        "512",
                                        "--moe-shared-expert-intermediate-size",
                                        "512",
                                        "--moe-layer-freq",
                                        "([0]*1+[1]*12)",
                                        "--expert-model-parallel-size",
                                        "4",
                                        "--expert-tensor-parallel-size",
                                        "1",
                                        "--moe-token-dispatcher-type",
                                        "flex",
                                        "--moe-enable-deepep",
                                        "--moe-expert-capacity-factor",
                                        "1.25",
                                        "--multi-latent-attention",
                                        "--q-lora-rank",
                                        "384",
                                        "--kv-lora-rank",
                                        "128",
                                        "--qk-head-dim",
                                        "64",
                                        "--qk-pos-emb-head-dim",
                                        "32",
                                        "--v-head-dim",
                                        "64",
                                        "--bf16",
                                        "--recompute-granularity",
                                        "selective",
                                        "--recompute-modules",
                                        "layernorm",
                                        "moe_act",
                                        "--overlap-moe-expert-parallel-comm"};
  expect_round_trip(moe, MegatronImportOptions{"moe", "dgx-h100", 4});
  // Megatron-Core's split with the embedding and the loss counted as layers.
  std::vector<std::string> split = kLlama3;
  *(std::find(split.begin(), split.end(), "--num-layers") + 1) = "78";
  split.insert(split.end(), {"--num-virtual-stages-per-pipeline-rank", "5", "--account-for-embedding-in-pipeline-split",
                             "--account-for-loss-in-pipeline-split", "--bf16"});
  expect_round_trip(split, MegatronImportOptions{"split", "dgx-h100-superpod", 16});
}

TEST(MegatronEmit, WhatMegatronCannotRunIsRefused) {
  Scenario s = load_scenario(PIPESCOPE_SOURCE_DIR "/scenarios/default.yaml");
  s.schedule.kind = ScheduleKind::ZeroBubbleV;
  try {
    megatron_arguments(s);
    ADD_FAILURE() << "expected zb-v refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a Megatron-LM schedule"), std::string::npos) << e.what();
  }
  s = load_scenario(PIPESCOPE_SOURCE_DIR "/scenarios/default.yaml");
  const std::string cmd = megatron_command(s);
  EXPECT_EQ(cmd.rfind("# ", 0), 0u);
  EXPECT_NE(cmd.find("pretrain_gpt.py \\\n    --num-layers "), std::string::npos) << cmd;
}

}  // namespace
}  // namespace pipescope
