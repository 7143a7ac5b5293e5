// Mixtures of experts (docs/moe.md): the presets' parameter counts against the published ones, the MoE keys'
// errors, the expert-parallel all-to-alls and expert gradients of the lowering, their groups' GPUs, the NCCL
// all-to-all model with DeepEP's per-node deduplication, and a simulated step with the all-to-all in its breakdown.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/cost/expert_parallel.h"
#include "core/cost/nccl_model.h"
#include "core/lower/dag.h"
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
  for (const Case& c :
       {Case{"mixtral-8x7b", 46.7, 12.9}, Case{"mixtral-8x22b", 140.6, 39.2}, Case{"qwen3-30b-a3b", 30.5, 3.35},
        Case{"qwen3-235b-a22b", 235.1, 22.2}, Case{"deepseek-v3", 671.0, 37.55}}) {
    const ModelSpec m = *model_preset(c.preset);
    EXPECT_NEAR(parameter_count(m) / 1e9, c.total_b, 0.005 * c.total_b) << c.preset;
    EXPECT_NEAR(active_parameter_count(m) / 1e9, c.active_b, 0.005 * c.active_b) << c.preset;
  }
  // Qwen3's heads are 128 wide on a hidden size of 4096: Q is 8192 wide.
  const LayerDims d = layer_dims(*model_preset("qwen3-235b-a22b"));
  EXPECT_EQ(d.q, 8192);
  EXPECT_EQ(d.kv, 512);
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
  four.dedup_items = 128, four.dedup_picks = 8;
  double miss = 1;
  for (int i = 0; i < 8; i++) miss *= (96.0 - i) / (128.0 - i);
  EXPECT_NEAR(node_dedup_share(four), 3 * (1 - miss) / 6.0, 1e-12);
  EXPECT_NEAR(nccl_alltoall_seconds(four, bytes), net * node_dedup_share(four), 50e-6);
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

}  // namespace
}  // namespace pipescope
