// Mixtures of experts (docs/moe.md): the presets' parameter counts against the published ones, the MoE keys'
// errors, the expert-parallel all-to-alls and expert gradients of the lowering, their groups' GPUs, the NCCL
// all-to-all model with DeepEP's per-node deduplication, and a simulated step with the all-to-all in its breakdown.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/expert_parallel.h"
#include "core/cost/moe_load.h"
#include "core/cost/nccl_model.h"
#include "core/lower/dag.h"
#include "core/memory/memory_model.h"
#include "core/model/model_shape.h"
#include "core/model/placement.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "sim/run_scenario.h"

namespace pipescope {
namespace {

Scenario load(const std::string& text) { return parse_scenario(text, "moe.yaml"); }

std::string error_of(const std::string& text) {
  try {
    load(text);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

// Qwen3-30B-A3B on 2 DGX H100 nodes: 48 layers over pp 2, ep 8 = the 8 data-parallel replicas of a stage.
std::string qwen30(const std::string& parallel = "dp: 8, pp: 2, tp: 1, ep: 8", const std::string& extra = "") {
  return "model: {preset: qwen3-30b-a3b}\n"
         "cluster: {preset: dgx-h100, nodes: 2}\n"
         "parallel: {" +
         parallel +
         ", micro_batch_size: 1, global_batch: 16}\n"
         "training: {dtype: bf16, flash_attention: true, distributed_optimizer: true}\n" +
         extra;
}

// The published totals and active counts (Mistral's paper, the Qwen3 model cards): within 0.5%.
TEST(Moe, PresetParametersMatchThePublishedCounts) {
  struct Case {
    const char* preset;
    double total_b, active_b;
  };
  // DeepSeek-V3: 671B; its README's 37B active leaves out one of the embedding and the head (0.9B each): 37.55B.
  // GPT-OSS-120B: 116.83B; its model card's 5.13B active leaves out the embedding (0.58B): 5.71B.
  for (const Case& c :
       {Case{"mixtral-8x7b", 46.7, 12.9}, Case{"mixtral-8x22b", 140.6, 39.2}, Case{"qwen3-30b-a3b", 30.5, 3.35},
        Case{"qwen3-235b-a22b", 235.1, 22.2}, Case{"deepseek-v3", 671.0, 37.55}, Case{"gpt-oss-120b", 116.83, 5.71}}) {
    const ModelSpec m = *model_preset(c.preset);
    EXPECT_NEAR(parameter_count(m) / 1e9, c.total_b, 0.005 * c.total_b) << c.preset;
    EXPECT_NEAR(active_parameter_count(m) / 1e9, c.active_b, 0.005 * c.active_b) << c.preset;
  }
  // Qwen3's heads are 128 wide on a hidden size of 4096: Q is 8192 wide.
  const LayerDims d = layer_dims(*model_preset("qwen3-235b-a22b"));
  EXPECT_EQ(d.q, 8192);
  EXPECT_EQ(d.kv, 512);
}

// GPT-OSS's sliding windows: every other layer (the first, third, ...) attends to at most 128 tokens. A whole
// sequence of 4096: (128 * 129 / 2 + 128 * 3968 + 4096 * 4097 / 2) / 2 pairs a layer; a slice of 1024 after 2048
// tokens: (128 * 1024 + 1024 * 2048 + 1024 * 1025 / 2) / 2. The fused attention kernels do that work; the FLOP
// counts take the same share.
TEST(Moe, SlidingWindowAttention) {
  const ModelSpec m = *model_preset("gpt-oss-120b");
  EXPECT_TRUE(m.sliding_layer(0));
  EXPECT_FALSE(m.sliding_layer(1));
  EXPECT_DOUBLE_EQ(attended_pairs(m, 4096, 0), (8256.0 + 507904 + 8390656) / 2);
  EXPECT_DOUBLE_EQ(attended_pairs(m, 1024, 2048), (131072.0 + 2097152 + 524800) / 2);
  EXPECT_DOUBLE_EQ(attended_pairs(m, 100, 0), 5050);  // inside the window: every layer alike
  ModelSpec full = m;
  full.sliding_window = 0, full.sliding_window_pattern = 0;
  EXPECT_DOUBLE_EQ(attended_pairs(full, 4096, 0), 8390656);
  const LayerFlops a = layer_forward_flops(m, 1, 1, 4096, 0, true), b = layer_forward_flops(full, 1, 1, 4096, 0, true);
  EXPECT_DOUBLE_EQ(a.attn / b.attn, attended_share(m));
  EXPECT_DOUBLE_EQ(a.mlp, b.mlp);
  const std::string run =
      "cluster: {preset: dgx-h100, nodes: 1}\nparallel: {dp: 8, ep: 8, global_batch: 8}\n"
      "training: {dtype: bf16, flash_attention: true}\n";
  const Scenario s = load("model: {preset: gpt-oss-120b}\n" + run);
  const Scenario f = load("model: {preset: gpt-oss-120b, sliding_window: 0, sliding_window_pattern: 0}\n" + run);
  const AnalyticCostModel cs(s), cf(f);
  EXPECT_LT(cs.layer_forward_seconds(1, 4096, 0), cf.layer_forward_seconds(1, 4096, 0));
  EXPECT_NE(error_of("model: {preset: llama3-8b, sliding_window_pattern: 2}\n" + run).find("model.sliding_window"),
            std::string::npos);
  EXPECT_NE(
      error_of("model: {preset: gpt-oss-120b, sliding_window_pattern: 1}\n" + run).find("model.sliding_window_pattern"),
      std::string::npos);
  EXPECT_NE(error_of("model: {preset: gpt-oss-120b}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                     "parallel: {dp: 4, cp: 2, ep: 8, global_batch: 8}\ntraining: {flash_attention: true}\n")
                .find("parallel.cp"),
            std::string::npos);
}

// DeepSeek-V3's multi-head latent attention: Q and K heads of 128 + 64, V heads of 128, the latents' widths; its
// attention FLOPs count Q.K^T over 192-wide and P.V over 128-wide heads.
TEST(Moe, LatentAttentionShapes) {
  const ModelSpec m = *model_preset("deepseek-v3");
  const LayerDims d = layer_dims(m);
  EXPECT_TRUE(d.mla);
  EXPECT_EQ(d.hd, 192);
  EXPECT_EQ(d.q, 128 * 192);
  EXPECT_EQ(d.o, 128 * 128);
  EXPECT_EQ(d.kv_up_out, 128 * 256);
  const LayerFlops f = layer_forward_flops(m, 1, 1, 4096, 0);
  EXPECT_DOUBLE_EQ(f.attn, 2.0 * (d.q + d.o) * 4096.0 * 4097 / 2);
  EXPECT_DOUBLE_EQ(f.proj, 2.0 * 4096 * d.o * d.h);
  // The first three layers are dense, the rest MoE.
  EXPECT_FALSE(m.moe_layer(2));
  EXPECT_TRUE(m.moe_layer(3));
  // MLA sizes without kv_lora_rank, or with grouped-query attention, are refused naming the key.
  const std::string rest =
      "cluster: {preset: dgx-h100, nodes: 1}\nparallel: {dp: 8, global_batch: 8}\n"
      "training: {flash_attention: true}\n";
  EXPECT_NE(error_of("model: {preset: llama3-8b, v_head_dim: 128}\n" + rest).find("model.v_head_dim"),
            std::string::npos);
  EXPECT_NE(error_of("model: {preset: deepseek-v3, query_groups: 8}\n" + rest).find("grouped-query"),
            std::string::npos);
  EXPECT_NE(error_of("model: {preset: deepseek-v3}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                     "parallel: {dp: 8, global_batch: 8}\n")
                .find("training.flash_attention"),
            std::string::npos);
}

// Which layers route: the dense first layers, then every moe_layer_freq-th.
TEST(Moe, LayerPattern) {
  ModelSpec m = *model_preset("mixtral-8x7b");
  m.moe_dense_layers = 3;
  m.moe_layer_freq = 2;
  EXPECT_FALSE(m.moe_layer(0));
  EXPECT_FALSE(m.moe_layer(2));
  EXPECT_TRUE(m.moe_layer(3));
  EXPECT_FALSE(m.moe_layer(4));
  EXPECT_TRUE(m.moe_layer(5));
}

TEST(Moe, BadInputNamesFileLineAndKey) {
  EXPECT_NE(error_of(qwen30("dp: 8, pp: 2, tp: 1, ep: 3")).find("moe.yaml:3"), std::string::npos);
  EXPECT_NE(error_of(qwen30("dp: 8, pp: 2, tp: 1, ep: 3")).find("parallel.ep"), std::string::npos);
  // top-k above the experts; MoE keys on a dense preset; ep on a dense model; tp > 1 without sequence parallelism.
  const std::string one_node = "cluster: {preset: dgx-h100, nodes: 1}\nparallel: {dp: 8, ep: 8, global_batch: 8}\n";
  EXPECT_NE(error_of("model: {preset: qwen3-30b-a3b, moe_top_k: 129}\n" + one_node).find("model.moe_top_k"),
            std::string::npos);
  EXPECT_NE(error_of("model: {preset: llama3-8b, moe_top_k: 2}\n" + one_node).find("mixture-of-experts key"),
            std::string::npos);
  EXPECT_NE(error_of("model: {preset: llama3-8b}\n" + one_node).find("parallel.ep"), std::string::npos);
  EXPECT_NE(error_of(qwen30("dp: 4, pp: 2, tp: 2, ep: 8")).find("sequence_parallel"), std::string::npos);
  EXPECT_NE(error_of("model: {preset: qwen3-30b-a3b, num_experts: -1}\ncluster: {preset: dgx-h100, nodes: 1}\n")
                .find("model.num_experts"),
            std::string::npos);
}

int count_kind(const std::vector<LoweredOp>& prog, LOpKind k, CollTag t) {
  int n = 0;
  for (const LoweredOp& l : prog) n += l.kind == k && l.tag == t ? 1 : 0;
  return n;
}

// Every F and B of an MoE stage is followed by its all-to-alls: 2 per layer each way, T/t k h e bytes per call.
TEST(Moe, LoweringAddsTheAllToAllsAndTheExpertGradients) {
  const Scenario s = load(qwen30());
  const auto p = prepare(s);
  EXPECT_EQ(p->lowered.ep, 8);
  const std::vector<LoweredOp>& prog = p->lowered.per_worker[0];
  int calls = 0;
  for (std::size_t i = 0; i + 1 < prog.size(); i++) {
    if (prog[i].kind != LOpKind::Compute) continue;
    const LoweredOp& x = prog[i + 1];
    ASSERT_EQ(x.kind, LOpKind::AllToAll) << lowered_text(prog[i]);
    EXPECT_EQ(x.tag, CollTag::ExpertParallel);
    EXPECT_EQ(x.count, 2 * 24);  // 24 MoE layers per stage
    EXPECT_DOUBLE_EQ(x.bytes, 4096.0 * 8 * 2048 * 2);
    calls++;
  }
  EXPECT_EQ(calls, 2 * 2);  // m = 2 micro-batches per replica: F and B each
  // The experts' gradients: edp = 8 / 8 = 1 here, so none; with ep 4 two groups of 4 and a reduce-scatter.
  EXPECT_EQ(count_kind(prog, LOpKind::ReduceScatter, CollTag::ExpertData), 0);
  const auto q = prepare(load(qwen30("dp: 8, pp: 2, tp: 1, ep: 4")));
  EXPECT_EQ(count_kind(q->lowered.per_worker[0], LOpKind::ReduceScatter, CollTag::ExpertData), 1);
  EXPECT_EQ(count_kind(q->lowered.per_worker[0], LOpKind::AllGather, CollTag::ExpertData), 1);
  // The dense gradients no longer carry the experts.
  const AnalyticCostModel cm(s);
  EXPECT_NEAR(cm.grad_bytes(0) + cm.expert_grad_bytes(0), rank_parameter_count(s, 0) * 2, 1.0);
}

// The groups' GPUs: an expert-parallel group of ep consecutive ranks, an expert-data-parallel ring across them.
TEST(Moe, GroupsHoldTheFoldedRanks) {
  const auto p = prepare(load(qwen30("dp: 8, pp: 2, tp: 1, ep: 4")));
  const Dag dag = build_dag(p->lowered, p->placement);
  int ep_rings = 0, edp_rings = 0;
  for (std::size_t g = 0; g < p->lowered.groups.size(); g++) {
    for (const auto& ring : dag.rings[g]) {
      if (p->lowered.groups[g].tag == CollTag::ExpertParallel) {
        ep_rings++;
        ASSERT_EQ(ring.size(), 4u);
        for (std::size_t i = 1; i < ring.size(); i++)
          EXPECT_EQ(ring[i], ring[0] + static_cast<int>(i));  // megatron order
      }
      if (p->lowered.groups[g].tag == CollTag::ExpertData) {
        edp_rings++;
        ASSERT_EQ(ring.size(), 2u);
        EXPECT_EQ(ring[1] - ring[0], 4);
      }
    }
  }
  EXPECT_EQ(ep_rings, 2 * 2);   // per rank, 8 replicas / 4
  EXPECT_EQ(edp_rings, 2 * 4);  // per rank, one per place in a group
}

// Expert tensor parallelism: each expert's MLP split etp ways over the GPUs of an etp * ep group (etp innermost). Per
// GPU the experts' parameters and the expert-data-parallel group shrink etp times, the all-to-all carries each copy to
// the etp GPUs of its expert, the grouped GEMMs take etp times the rows at 1/etp of the width (the same FLOPs), and the
// gathered expert input is held etp times.
TEST(Moe, ExpertTensorParallel) {
  const std::string layout = "dp: 4, pp: 2, tp: 2, sequence_parallel: true, ep: 4";
  const Scenario one = load(qwen30(layout)), two = load(qwen30(layout + ", etp: 2"));
  EXPECT_EQ(two.parallel.expert_group_gpus(), 8);
  EXPECT_EQ(one.parallel.expert_data_gpus(), 2);
  EXPECT_EQ(two.parallel.expert_data_gpus(), 1);
  EXPECT_DOUBLE_EQ(rank_expert_parameter_count(two, 0) * 2, rank_expert_parameter_count(one, 0));
  const auto p1 = prepare(one), p2 = prepare(two);
  EXPECT_EQ(p1->lowered.ep, 4);
  EXPECT_EQ(p2->lowered.ep, 8);
  const auto alltoall = [](const std::vector<LoweredOp>& prog) {
    for (const LoweredOp& l : prog)
      if (l.kind == LOpKind::AllToAll) return l.bytes;
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(alltoall(p2->lowered.per_worker[0]), 2 * alltoall(p1->lowered.per_worker[0]));
  EXPECT_EQ(count_kind(p1->lowered.per_worker[0], LOpKind::ReduceScatter, CollTag::ExpertData), 1);
  EXPECT_EQ(count_kind(p2->lowered.per_worker[0], LOpKind::ReduceScatter, CollTag::ExpertData), 0);  // edp 1
  // The expert GEMMs: twice the rows, half the inner size, the same FLOPs.
  const AnalyticCostModel c1(one), c2(two);
  const std::vector<KernelCost> k1 = c1.moe_forward_kernels(1, 4096), k2 = c2.moe_forward_kernels(1, 4096);
  ASSERT_EQ(k1.size(), k2.size());
  double f1 = 0, f2 = 0;
  for (std::size_t i = 0; i < k1.size(); i++) {
    f1 += k1[i].flops, f2 += k2[i].flops;
    if (k1[i].gemm && k1[i].batch > 1) {  // a grouped expert GEMM: batch = local experts, m = rows of each
      EXPECT_DOUBLE_EQ(k2[i].m, 2 * k1[i].m);
      EXPECT_DOUBLE_EQ(k2[i].batch, k1[i].batch);
    }
  }
  EXPECT_NEAR(f2, f1, 1e-9 * f1);
  const MemoryReport m1 = memory_report(one, make_schedule(one)), m2 = memory_report(two, make_schedule(two));
  EXPECT_LT(m2.ranks[0].weights_bytes, m1.ranks[0].weights_bytes);
  EXPECT_GT(m2.ranks[0].activation_peak_bytes, m1.ranks[0].activation_peak_bytes);
  EXPECT_GT(sim::run_isolated(two).iteration_s, 0);
  // An expert split over GPUs needs experts, an inner size etp divides and a group that fits the stage.
  EXPECT_NE(error_of("model: {preset: llama3-8b}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                     "parallel: {dp: 4, tp: 2, sequence_parallel: true, etp: 2, global_batch: 8}\n")
                .find("parallel.etp"),
            std::string::npos);
  EXPECT_NE(error_of(qwen30("dp: 4, pp: 2, tp: 2, sequence_parallel: true, ep: 4, etp: 5")).find("moe_ffn_hidden"),
            std::string::npos);
  EXPECT_NE(error_of(qwen30("dp: 4, pp: 2, tp: 2, sequence_parallel: true, ep: 8, etp: 2")).find("parallel.etp"),
            std::string::npos);
}

// NCCL's all-to-all: inside a node the NVLink term, across nodes the NICs; DeepEP crosses once per node.
TEST(Moe, AllToAllModel) {
  const ClusterSpec c = *cluster_preset("dgx-h100");
  NcclGroup one = nccl_group(c, 8, 1, 8, c.nvlink_bw_Bps);
  const double bytes = 64e6;
  const double nv = 7.0 / 8 * bytes / (c.nvlink_bw_Bps * nccl_nvlink_efficiency());
  EXPECT_GT(nccl_alltoall_seconds(one, bytes), nv);
  EXPECT_LT(nccl_alltoall_seconds(one, bytes), nv + 50e-6);
  NcclGroup four = nccl_group(c, 32, 4, 8, c.nvlink_bw_Bps);
  const double net = 8.0 * 24 / 32 * bytes / (four.inter_bw_Bps * nccl_nic_efficiency());
  EXPECT_NEAR(nccl_alltoall_seconds(four, bytes), net, 50e-6);
  // 128 experts over 4 nodes, top-8: 4 (1 - C(96, 8) / C(128, 8)) - ... = 2.72 other nodes of 6 copies.
  four.dedup = {128, 8, 0, 0};
  double miss = 1;
  for (int i = 0; i < 8; i++) miss *= (96.0 - i) / (128.0 - i);
  EXPECT_NEAR(node_dedup_share(four), 3 * (1 - miss) / 6.0, 1e-12);
  EXPECT_NEAR(nccl_alltoall_seconds(four, bytes), net * node_dedup_share(four), 50e-6);
  // DeepSeek-V3's node-limited routing: 256 experts in 8 groups, one per node, a token's 8 picks from the best 4. A
  // node is picked with probability 1/2 and then missed with C(96, 8) / C(128, 8) (the miss above): 8 (1 - 1/2 -
  // miss / 2) nodes of the 8 picks, at most 4.
  NcclGroup eight = nccl_group(c, 64, 8, 8, c.nvlink_bw_Bps);
  eight.dedup = {256, 8, 8, 4};
  EXPECT_NEAR(node_dedup_share(eight), (1 - miss) / 2, 1e-12);
  EXPECT_LE(8 * node_dedup_share(eight), 4);
  // No limit (all 8 groups): the formula without groups; two groups a node (16 of them, 8 picked) limit less.
  eight.dedup = {256, 8, 8, 8};
  const double unlimited = node_dedup_share(eight);
  eight.dedup = {256, 8, 0, 0};
  EXPECT_DOUBLE_EQ(node_dedup_share(eight), unlimited);
  eight.dedup = {256, 8, 16, 8};
  EXPECT_GT(node_dedup_share(eight), (1 - miss) / 2);
  EXPECT_LT(node_dedup_share(eight), unlimited);
}

// The router's groups: both keys, whole experts in each, enough of them in the picked groups; the import reads
// Megatron-Core's flags; DeepEP's all-to-all moves less with them.
TEST(Moe, GroupLimitedRouting) {
  const auto with = [](const std::string& keys) {
    return "model: {preset: qwen3-30b-a3b}\ncluster: {preset: dgx-h100, nodes: 2}\n"
           "parallel: {dp: 8, pp: 2, tp: 1, ep: 8, micro_batch_size: 1, global_batch: 16}\n"
           "training: {dtype: bf16, flash_attention: true, " +
           keys + "}\n";
  };
  EXPECT_NE(error_of(with("moe_router_groups: 8")).find("moe_router_group_topk"), std::string::npos);
  EXPECT_NE(error_of(with("moe_router_groups: 3, moe_router_group_topk: 1")).find("training.moe_router_groups"),
            std::string::npos);
  EXPECT_NE(error_of(with("moe_router_groups: 64, moe_router_group_topk: 2")).find("training.moe_router_group_topk"),
            std::string::npos);  // 2 groups of 2 experts hold fewer than the 8 picks
  EXPECT_EQ(error_of(with("moe_router_groups: 8, moe_router_group_topk: 4")), "no error");
  EXPECT_NE(error_of("model: {preset: llama3-8b}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                     "parallel: {dp: 8, global_batch: 8}\n"
                     "training: {moe_router_groups: 8, moe_router_group_topk: 4}\n")
                .find("mixture-of-experts key"),
            std::string::npos);
  // ep 16 over 2 nodes, DeepEP; 2 groups (one per node), 1 picked: a token's 8 picks on one node, crossing at most
  // once.
  const std::string two = "dp: 16, pp: 1, tp: 1, ep: 16";
  const std::string deepep = "training: {dtype: bf16, flash_attention: true, moe_dispatcher: deepep";
  const Scenario free = load("model: {preset: qwen3-30b-a3b}\ncluster: {preset: dgx-h100, nodes: 2}\nparallel: {" +
                             two + ", global_batch: 16}\n" + deepep + "}\n");
  const Scenario one = load("model: {preset: qwen3-30b-a3b}\ncluster: {preset: dgx-h100, nodes: 2}\nparallel: {" + two +
                            ", global_batch: 16}\n" + deepep + ", moe_router_groups: 2, moe_router_group_topk: 1}\n");
  EXPECT_EQ(node_dedup(one).group_picks, 1);
  Op f;
  f.tok_end = 4096;
  EXPECT_LT(moe_alltoall_estimate_s(one, f, 1), moe_alltoall_estimate_s(free, f, 1));
  NcclGroup g = nccl_group(one.cluster, 16, 2, 8, one.cluster.nvlink_bw_Bps);
  g.dedup = node_dedup(one);
  EXPECT_DOUBLE_EQ(node_dedup_share(g), 2 * 0.5 / 8);  // one node of the two hit, over 8 picks
  EXPECT_LT(sim::run_isolated(one).breakdown.ep_comm_s, sim::run_isolated(free).breakdown.ep_comm_s);
}

// A step: the all-to-alls show in the breakdown, which still sums to the iteration; ep 1 moves nothing and computes
// more.
TEST(Moe, SimulatedStepShowsTheAllToAll) {
  const sim::RunResult r = sim::run_isolated(load(qwen30()));
  EXPECT_GT(r.breakdown.ep_comm_s, 0.01 * r.iteration_s);
  EXPECT_NEAR(r.breakdown.total_s(), r.iteration_s, 1e-9 * r.iteration_s);
  const sim::RunResult local = sim::run_isolated(load(qwen30("dp: 8, pp: 2, tp: 1, ep: 1")));
  EXPECT_EQ(local.breakdown.ep_comm_s, 0);
  // The same token copies per GPU either way, but at ep 1 every GPU holds all 128 experts: its grouped GEMMs load
  // eight times the weights (and accumulate eight times the gradients) for them.
  EXPECT_LT(r.breakdown.forward_s + r.breakdown.backward_s, local.breakdown.forward_s + local.breakdown.backward_s);
}

// Megatron's recompute modules: listed with selective only, each once, and only modules the model has.
TEST(Moe, RecomputeModulesKeys) {
  const std::string sel = "schedule: {recompute: selective, recompute_modules: [layernorm, moe]}\n";
  const Scenario s = load(qwen30("dp: 8, pp: 2, tp: 1, ep: 8", sel));
  EXPECT_EQ(s.schedule.recompute_modules, module_bit(RecomputeModule::LayerNorm) | module_bit(RecomputeModule::Moe));
  EXPECT_TRUE(s.schedule.recomputes(RecomputeModule::Moe));
  EXPECT_FALSE(s.schedule.recomputes(RecomputeModule::CoreAttn));
  EXPECT_TRUE(load(qwen30()).schedule.recompute_modules == module_bit(RecomputeModule::CoreAttn));  // the default
  auto err = [&](const std::string& schedule) { return error_of(qwen30("dp: 8, pp: 2, tp: 1, ep: 8", schedule)); };
  EXPECT_NE(err("schedule: {recompute: full, recompute_modules: [moe]}\n").find("schedule.recompute_modules"),
            std::string::npos);
  EXPECT_NE(err("schedule: {recompute: selective, recompute_modules: [moe, moe]}\n").find("listed twice"),
            std::string::npos);
  EXPECT_NE(err("schedule: {recompute: selective, recompute_modules: [attn]}\n").find("recompute_modules[0]"),
            std::string::npos);
  EXPECT_NE(err("schedule: {recompute: selective, recompute_modules: []}\n").find("lists no module"),
            std::string::npos);
  // Qwen3-30B has no shared experts, no latent attention and no dense layer.
  for (const char* m : {"shared_experts", "mla_up_proj", "mlp"})
    EXPECT_NE(err(std::string("schedule: {recompute: selective, recompute_modules: [") + m + "]}\n").find(m),
              std::string::npos)
        << m;
  EXPECT_NE(
      error_of("model: {preset: llama3-8b}\ncluster: {preset: dgx-h100, nodes: 1}\nparallel: {dp: 8, global_batch: 8}\n"
               "schedule: {recompute: selective, recompute_modules: [moe_act]}\n")
          .find("no experts"),
      std::string::npos);
}

// Recomputing the MoE layer stores less, reruns its kernels and its two all-to-alls per layer in every backward.
TEST(Moe, RecomputedMoeLayer) {
  const Scenario plain = load(qwen30("dp: 8, pp: 2, tp: 1, ep: 8", "schedule: {recompute: selective}\n"));
  const Scenario moe =
      load(qwen30("dp: 8, pp: 2, tp: 1, ep: 8", "schedule: {recompute: selective, recompute_modules: [moe]}\n"));
  const Scenario act =
      load(qwen30("dp: 8, pp: 2, tp: 1, ep: 8", "schedule: {recompute: selective, recompute_modules: [moe_act]}\n"));
  const Schedule sched = make_schedule(plain);
  const double m0 = memory_report(plain, sched).ranks[0].peak_bytes, m1 = memory_report(moe, sched).ranks[0].peak_bytes,
               m2 = memory_report(act, sched).ranks[0].peak_bytes;
  EXPECT_LT(m1, m2);
  EXPECT_LT(m2, m0);
  Op b;
  b.kind = OpKind::Backward;
  b.tok_end = plain.model.seq_len;
  EXPECT_EQ(moe_alltoall_calls(plain, b), 2 * 24);
  EXPECT_EQ(moe_alltoall_calls(moe, b), 4 * 24);
  EXPECT_EQ(moe_alltoall_calls(act, b), 2 * 24);
  const AnalyticCostModel c0(plain), c1(moe), c2(act);
  EXPECT_EQ(c0.recompute_seconds(b, 1), 0.0);
  EXPECT_GT(c2.recompute_seconds(b, 1), 0.0);
  EXPECT_GT(c1.recompute_seconds(b, 1), 5 * c2.recompute_seconds(b, 1));
  EXPECT_GT(c1.op_flops(b, 1), c0.op_flops(b, 1));  // the experts' GEMMs again
}

// Expert loads: balanced = 1; a trained router's shares have mean 1, are the same on every call and for every
// layout, and weigh more on fewer experts per GPU; capacity caps them (dropping) or fixes them (padding).
TEST(Moe, ExpertLoad) {
  const Scenario bal = load(qwen30());
  EXPECT_EQ(layer_expert_overload(bal, 5), 1.0);
  EXPECT_FALSE(expert_load_varies(bal));
  const std::string trained = "training: {dtype: bf16, moe_routing: trained}\n";
  auto with = [&](const std::string& parallel, const std::string& training) {
    std::string y = qwen30(parallel);
    y.replace(y.find("training:"), y.find("\n", y.find("training:")) - y.find("training:") + 1, training);
    return load(y);
  };
  const Scenario t8 = with("dp: 8, pp: 2, tp: 1, ep: 8", trained), t2 = with("dp: 8, pp: 2, tp: 1, ep: 2", trained);
  const std::vector<double> p = expert_shares(t8, 7);
  double sum = 0;
  for (double x : p) sum += x;
  EXPECT_NEAR(sum / p.size(), 1.0, 1e-12);
  EXPECT_EQ(p, expert_shares(t2, 7));  // the router does not depend on the layout
  EXPECT_EQ(layer_expert_overload(t8, 7), layer_expert_overload(t8, 7));
  EXPECT_GT(layer_expert_overload(t8, 7), layer_expert_overload(t2, 7));
  EXPECT_GT(layer_expert_overload(t2, 7), 1.0);
  EXPECT_NE(expert_shares(t8, 7), expert_shares(t8, 8));  // each layer its own
  const StageExpertLoad st = stage_expert_load(t8, 0);
  EXPECT_GT(st.time, 1.0);
  EXPECT_LE(st.memory, st.time);  // the busiest GPU changes from layer to layer
  const Scenario drop = with("dp: 8, pp: 2, tp: 1, ep: 8",
                             "training: {dtype: bf16, moe_routing: trained, "
                             "moe_expert_load_cv: 1, moe_capacity_factor: 1.1}\n");
  for (double x : expert_shares(drop, 3)) EXPECT_LE(x, 1.1);
  const Scenario pad = with("dp: 8, pp: 2, tp: 1, ep: 8",
                            "training: {dtype: bf16, moe_routing: trained, "
                            "moe_capacity_factor: 1.5, moe_pad_to_capacity: true}\n");
  EXPECT_EQ(layer_expert_overload(pad, 3), 1.5);
}

// The busiest GPU sets the step: a trained router is slower than forced balance, padding to a capacity of 1 under
// forced balance changes nothing (the stage-keyed memo included), padding to 2 is slower still.
TEST(Moe, ImbalanceSlowsTheStep) {
  auto step = [&](const std::string& training) {
    std::string y = qwen30();
    y.replace(y.find("training:"), y.find("\n", y.find("training:")) - y.find("training:") + 1, training);
    return sim::run_isolated(load(y)).iteration_s;
  };
  const std::string base = "training: {dtype: bf16, flash_attention: true, distributed_optimizer: true";
  const double balanced = step(base + "}\n");
  EXPECT_GT(step(base + ", moe_routing: trained}\n"), 1.01 * balanced);
  EXPECT_EQ(step(base + ", moe_capacity_factor: 1, moe_pad_to_capacity: true}\n"), balanced);
  EXPECT_GT(step(base + ", moe_capacity_factor: 2, moe_pad_to_capacity: true}\n"), 1.05 * balanced);
}

TEST(Moe, BadLoadKeys) {
  auto err = [&](const std::string& training) {
    std::string y = qwen30();
    y.replace(y.find("training:"), y.find("\n", y.find("training:")) - y.find("training:") + 1, training);
    return error_of(y);
  };
  EXPECT_NE(err("training: {moe_capacity_factor: 0}\n").find("training.moe_capacity_factor"), std::string::npos);
  EXPECT_NE(err("training: {moe_capacity_factor: -1}\n").find("moe.yaml:4"), std::string::npos);
  EXPECT_NE(err("training: {moe_pad_to_capacity: true}\n").find("training.moe_capacity_factor"), std::string::npos);
  EXPECT_NE(err("training: {moe_expert_load_cv: 0.5}\n").find("moe_routing: trained"), std::string::npos);
  EXPECT_NE(err("training: {moe_routing: skewed}\n").find("training.moe_routing"), std::string::npos);
  EXPECT_NE(
      error_of("model: {preset: llama3-8b}\ncluster: {preset: dgx-h100, nodes: 1}\nparallel: {dp: 8, global_batch: 8}\n"
               "training: {moe_routing: trained}\n")
          .find("mixture-of-experts key"),
      std::string::npos);
}

// DeepSeek-V3's FP8 dispatch: a forward's all-to-alls move (1 + 4/128 + 2) / 2 bytes per element on average, a
// backward's stay 16-bit unless it recomputes the MoE layer; 16-bit training only.
TEST(Moe, Fp8Dispatch) {
  const std::string fp8 = "training: {dtype: bf16, flash_attention: true, moe_dispatch_fp8: true}\n";
  auto with = [&](const std::string& training, const std::string& schedule = "") {
    std::string y = qwen30();
    y.replace(y.find("training:"), y.find("\n", y.find("training:")) - y.find("training:") + 1, training + schedule);
    return load(y);
  };
  const Scenario plain = load(qwen30()), f8 = with(fp8);
  Op f;
  f.tok_end = plain.model.seq_len;
  Op b = f;
  b.kind = OpKind::Backward;
  EXPECT_NEAR(moe_alltoall_bytes(f8, f, 1) / moe_alltoall_bytes(plain, f, 1), (1 + 4.0 / 128 + 2) / 4, 1e-12);
  EXPECT_EQ(moe_alltoall_bytes(f8, b, 1), moe_alltoall_bytes(plain, b, 1));
  const Scenario rc = with(fp8, "schedule: {recompute: selective, recompute_modules: [moe]}\n");
  EXPECT_NEAR(moe_alltoall_bytes(rc, b, 1) / moe_alltoall_bytes(plain, b, 1), (1 + (1 + 4.0 / 128 + 2) / 4) / 2, 1e-12);
  EXPECT_LT(sim::run_isolated(f8).breakdown.ep_comm_s, sim::run_isolated(plain).breakdown.ep_comm_s);
  std::string y = qwen30();
  y.replace(y.find("training:"), y.find("\n", y.find("training:")) - y.find("training:") + 1,
            "training: {dtype: fp32, moe_dispatch_fp8: true}\n");
  EXPECT_NE(error_of(y).find("training.moe_dispatch_fp8"), std::string::npos);
}

// sim.collectives ring or aggregate run the all-to-alls as the engine's own flows (every pair of the group at once,
// through NVLink and the NICs with the rest of the traffic); the NCCL model (auto) stays the default. Both move the
// same bytes: the flows' time lies within a factor of two of the model's.
TEST(Moe, AllToAllAsFlows) {
  const sim::RunResult model = sim::run_isolated(load(qwen30()));
  for (const char* algo : {"aggregate", "ring"}) {
    const sim::RunResult flows = sim::run_isolated(
        load(qwen30("dp: 8, pp: 2, tp: 1, ep: 8", std::string("sim: {collectives: ") + algo + "}\n")));
    EXPECT_GT(flows.breakdown.ep_comm_s, 0.5 * model.breakdown.ep_comm_s) << algo;
    EXPECT_LT(flows.breakdown.ep_comm_s, 2.0 * model.breakdown.ep_comm_s) << algo;
    EXPECT_NEAR(flows.breakdown.total_s(), flows.iteration_s, 1e-9 * flows.iteration_s) << algo;
  }
}

}  // namespace
}  // namespace pipescope
