// Placement layouts: Megatron (stage-major), replica-major and TeraPipe's cube-mesh-aware layout; layer
// placement (even and parallel.stage_layers) and what the cost and memory models make of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/lower/dag.h"
#include "core/memory/memory_model.h"
#include "core/model/placement.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

// docs/cost-model.md ("aws-p3.16xlarge's NVLink mesh", `nvidia-smi topo -m`): 0 = SYS, 1 = NV1, 2 = NV2.
// Written out here from that table, independently of core/model/placement.cc.
constexpr int kTopo[8][8] = {
    {0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0}, {1, 2, 0, 2, 0, 0, 1, 0}, {2, 1, 2, 0, 0, 0, 0, 1},
    {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1}, {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0},
};

ClusterSpec cluster(const char* preset, int nodes) {
  ClusterSpec c = *cluster_preset(preset);
  c.nodes = nodes;
  return c;
}

// Every (d, r, t) gets a distinct GPU inside the cluster.
void expect_bijective(const Placement& pl, int total) {
  std::set<int> seen;
  for (int g : pl.gpu) {
    EXPECT_GE(g, 0);
    EXPECT_LT(g, total);
    seen.insert(g);
  }
  EXPECT_EQ(seen.size(), pl.gpu.size());
}

int links(const Placement& pl, int ga, int gb) {
  if (pl.node_of_gpu(ga) != pl.node_of_gpu(gb)) return -1;  // different nodes
  return kTopo[ga % pl.gpus_per_node][gb % pl.gpus_per_node];
}

TEST(Placement, MegatronFormula) {
  // docs/papers.md#megatron: rank = r * (n / p) + d * tp + t.
  const int dp = 2, p = 4, tp = 2, n = 16;
  for (const char* layout : {"megatron", "stage-major"}) {
    Placement pl = make_placement(layout, dp, p, tp, cluster("dgx-a100", 2));
    ASSERT_EQ(pl.gpu.size(), 16u);
    EXPECT_EQ(pl.gpus_per_node, 8);
    for (int d = 0; d < dp; d++)
      for (int r = 0; r < p; r++)
        for (int t = 0; t < tp; t++) EXPECT_EQ(pl.gpu_of(d * p + r, t), r * (n / p) + d * tp + t) << layout;
    expect_bijective(pl, 16);
  }
  // Spot values: (d 1, r 2, t 1) -> 2 * 4 + 1 * 2 + 1 = 11, on node 1.
  Placement pl = make_placement("megatron", 2, 4, 2, cluster("dgx-a100", 2));
  EXPECT_EQ(pl.gpu_of(1 * 4 + 2, 1), 11);
  EXPECT_EQ(pl.node_of_gpu(pl.gpu_of(1 * 4 + 2, 1)), 1);
  // TP groups are consecutive GPUs; pipeline neighbours n/p = 4 apart.
  EXPECT_EQ(pl.gpu_of(0 * 4 + 1, 0) - pl.gpu_of(0 * 4 + 0, 0), 4);
}

TEST(Placement, ReplicaMajorFormula) {
  const int dp = 2, p = 4, tp = 2;
  Placement pl = make_placement("replica-major", dp, p, tp, cluster("dgx-a100", 2));
  for (int d = 0; d < dp; d++)
    for (int r = 0; r < p; r++)
      for (int t = 0; t < tp; t++) EXPECT_EQ(pl.gpu_of(d * p + r, t), d * (p * tp) + r * tp + t);
  // A replica's pipeline is contiguous: replica 1 lives on node 1.
  for (int r = 0; r < p; r++) EXPECT_EQ(pl.node_of_gpu(pl.gpu_of(1 * p + r, 0)), 1);
}

TEST(Placement, UsesOnlyTheFirstGpusWhenTheLayoutIsSmaller) {
  Placement pl = make_placement("megatron", 1, 2, 2, cluster("dgx-a100", 1));
  EXPECT_EQ(pl.gpu, (std::vector<std::int32_t>{0, 1, 2, 3}));
}

TEST(Placement, TerapipeOnNvSwitchIsReplicaMajor) {
  Placement a = make_placement("terapipe", 2, 8, 2, cluster("dgx-a100", 4));
  Placement b = make_placement("replica-major", 2, 8, 2, cluster("dgx-a100", 4));
  EXPECT_EQ(a.gpu, b.gpu);
}

TEST(Placement, TerapipeCubeMeshPipelineOnNv2Ring) {
  // Setting (1)-like: one stage per GPU, 8 stages per node. Rank order alone would put stage 3 -> 4 on
  // GPU3 -> GPU4 (no NVLink); the TeraPipe layout keeps every in-node hop on an NV2 pair.
  const int p = 24;
  Placement pl = make_placement("terapipe", 1, p, 1, cluster("aws-p3.16xlarge", 3));
  expect_bijective(pl, 24);
  EXPECT_EQ(std::vector<std::int32_t>(pl.gpu.begin(), pl.gpu.begin() + 8),
            (std::vector<std::int32_t>{0, 3, 2, 1, 5, 6, 7, 4}));
  int crossings = 0;
  for (int r = 0; r + 1 < p; r++) {
    const int k = links(pl, pl.gpu_of(r), pl.gpu_of(r + 1));
    if (k < 0)
      crossings++;
    else
      EXPECT_EQ(k, 2) << "stage " << r << " -> " << r + 1;
    // Each stage stays on the node of its rank (stages 0-7 on node 0, ...).
    EXPECT_EQ(pl.node_of_gpu(pl.gpu_of(r)), r / 8);
  }
  EXPECT_EQ(crossings, 2);
  // The replica-major layout on the same node does hit a SYS pair.
  Placement rm = make_placement("replica-major", 1, p, 1, cluster("aws-p3.16xlarge", 3));
  EXPECT_EQ(links(rm, rm.gpu_of(3), rm.gpu_of(4)), 0);
}

TEST(Placement, TerapipeCubeMeshTensorGroupsOnNvlink) {
  // tp 2 and tp 4: every pair inside a TP group is NVLink-connected, and each group stays in one node.
  for (int tp : {2, 4}) {
    const int p = 16 / tp;
    Placement pl = make_placement("terapipe", 1, p, tp, cluster("aws-p3.16xlarge", 2));
    expect_bijective(pl, 16);
    for (int r = 0; r < p; r++) {
      for (int a = 0; a < tp; a++)
        for (int b = a + 1; b < tp; b++)
          EXPECT_GT(links(pl, pl.gpu_of(r, a), pl.gpu_of(r, b)), 0) << "tp " << tp << " stage " << r;
    }
  }
  // tp 2: pipeline hops of the same TP rank are NVLink too, inside a node.
  Placement pl = make_placement("terapipe", 1, 8, 2, cluster("aws-p3.16xlarge", 2));
  for (int r = 0; r + 1 < 8; r++)
    for (int t = 0; t < 2; t++) {
      const int k = links(pl, pl.gpu_of(r, t), pl.gpu_of(r + 1, t));
      if (k >= 0) {
        EXPECT_GT(k, 0) << "stage " << r << " tp rank " << t;
      }
    }
}

TEST(Placement, TerapipeIsDeterministic) {
  const ClusterSpec c = cluster("aws-p3.16xlarge", 6);
  EXPECT_EQ(make_placement("terapipe", 2, 12, 2, c).gpu, make_placement("terapipe", 2, 12, 2, c).gpu);
}

TEST(Placement, Errors) {
  const ClusterSpec c = cluster("dgx-a100", 1);
  try {
    make_placement("megatron", 2, 4, 2, c);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "placement: dp * pp * tp = 2 * 4 * 2 = 16 GPUs, but the cluster has 8");
  }
  try {
    make_placement("diagonal", 1, 2, 2, c);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "placement: unknown layout \"diagonal\"; valid: megatron, stage-major, replica-major, terapipe");
  }
  EXPECT_THROW(make_placement("megatron", 0, 2, 2, c), std::invalid_argument);
  // TeraPipe keeps TP groups inside a node: tp 3 does not divide 8 GPUs.
  EXPECT_THROW(make_placement("terapipe", 1, 2, 3, c), std::invalid_argument);
  EXPECT_NO_THROW(make_placement("megatron", 1, 2, 3, c));
}

// ---------------------------------------------------------------- layer placement

std::string layer_error(int layers, const std::vector<int>& stage_layers, int stages) {
  try {
    check_stage_layers(layers, stage_layers, stages);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(LayerPlacement, EvenSplitAndExplicitLayout) {
  for (int g = 0; g < 4; g++) {
    EXPECT_EQ(stage_layer_range(8, {}, 4, g).first, 2 * g);
    EXPECT_EQ(stage_layer_range(8, {}, 4, g).count, 2);
  }
  const std::vector<int> uneven = {1, 3, 3, 1};
  const int first[] = {0, 1, 4, 7};
  for (int g = 0; g < 4; g++) {
    EXPECT_EQ(stage_layer_range(8, uneven, 4, g).first, first[g]);
    EXPECT_EQ(stage_layer_range(8, uneven, 4, g).count, uneven[g]);
  }
  // Seven layers: no even split, but any layout that sums to 7.
  EXPECT_EQ(stage_layer_range(7, {2, 2, 2, 1}, 4, 3).first, 6);
  EXPECT_THROW(stage_layer_range(8, uneven, 4, 4), std::invalid_argument);
  EXPECT_THROW(stage_layer_range(8, uneven, 4, -1), std::invalid_argument);
}

TEST(LayerPlacement, ErrorsSayWhichCountOrSumIsWrong) {
  EXPECT_EQ(layer_error(7, {}, 4),
            "model.layers = 7 cannot be split evenly over pp * v = 4 virtual stages (give parallel.stage_layers for "
            "an uneven split)");
  EXPECT_EQ(layer_error(8, {4, 4}, 4),
            "parallel.stage_layers lists 2 stages, but pp * v = 4 (one entry per virtual stage)");
  EXPECT_EQ(layer_error(8, {2, 2, 2, 1}, 4), "parallel.stage_layers sums to 7 layers, but model.layers = 8");
  EXPECT_EQ(layer_error(8, {4, 0, 2, 2}, 4),
            "parallel.stage_layers[1] = 0; a stage between the first and the last needs at least one layer");
  EXPECT_EQ(layer_error(8, {0, 4, 4, 0}, 4), "");
  EXPECT_EQ(layer_error(8, {2, 2, 2, 2}, 4), "");
}

// 16 layers of gpt3-1b over pp 4 on 4 A100s, a 128k vocabulary: the LM head (2*T*h*V FLOPs forward) costs about
// five layers, so the last stage of the even split is the bottleneck.
Scenario head_heavy(const std::string& stage_layers) {
  const std::string text =
      "model: {preset: gpt3-1b, layers: 16, vocab: 128000}\n"
      "cluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 4}\n"
      "parallel: {dp: 1, pp: 4, tp: 1, global_batch: 8" +
      (stage_layers.empty() ? std::string() : ", stage_layers: " + stage_layers) + "}\n";
  return parse_scenario(text, "head-heavy.yaml");
}

TEST(LayerPlacement, CostAndMemoryFollowTheLayout) {
  const Scenario even = head_heavy(""), uneven = head_heavy("[5, 5, 5, 1]");
  EXPECT_EQ(uneven.parallel.stage_layers, (std::vector<int>{5, 5, 5, 1}));
  EXPECT_EQ(rank_layer_count(uneven, 0), 5);
  EXPECT_EQ(rank_layer_count(uneven, 3), 1);
  const AnalyticCostModel ce(even), cu(uneven);
  EXPECT_EQ(cu.layers_of_stage(1), 5);
  EXPECT_EQ(cu.layers_of_stage(3), 1);
  Op f;
  f.kind = OpKind::Forward;
  f.stage = f.rank = 1;
  f.tok_end = even.model.seq_len;
  // A middle stage is pure layers: 5 layers do 5/4 of the work of 4 and take about 5/4 of the time.
  EXPECT_NEAR(cu.op_flops(f, 1), 1.25 * ce.op_flops(f, 1), 1e-9 * ce.op_flops(f, 1));
  EXPECT_NEAR(cu.compute_seconds(f, 1), 1.25 * ce.compute_seconds(f, 1), 0.01 * ce.compute_seconds(f, 1));
  f.stage = f.rank = 3;  // the head's stage: 3 layers fewer, the head unchanged
  const double layer_flops = layer_forward_flops(even.model, 1, 1, f.tok_end, 0).total();
  EXPECT_NEAR(ce.op_flops(f, 1) - cu.op_flops(f, 1), 3 * layer_flops, 1e-9 * ce.op_flops(f, 1));
  EXPECT_NEAR(ce.compute_seconds(f, 1) - cu.compute_seconds(f, 1), 3 * ce.layer_forward_seconds(1, f.tok_end, 0),
              0.05 * ce.compute_seconds(f, 1));
  const double lp = layer_parameter_count(even.model);
  EXPECT_DOUBLE_EQ(rank_parameter_count(uneven, 1) - rank_parameter_count(even, 1), lp);
  EXPECT_DOUBLE_EQ(rank_parameter_count(even, 3) - rank_parameter_count(uneven, 3), 3 * lp);
  // Memory: the rank with more layers stores more activations per micro-batch and more static state.
  const MemoryReport me = memory_report(even, make_schedule(even)), mu = memory_report(uneven, make_schedule(uneven));
  EXPECT_GT(mu.ranks[0].activation_peak_bytes, me.ranks[0].activation_peak_bytes);
  EXPECT_LT(mu.ranks[3].activation_peak_bytes, me.ranks[3].activation_peak_bytes);
  EXPECT_GT(mu.ranks[0].weights_bytes, me.ranks[0].weights_bytes);
  EXPECT_LT(mu.ranks[3].weights_bytes, me.ranks[3].weights_bytes);
  // 1F1B keeps p - r micro-batches in flight on rank r; rank 0 holds 4 of 5 layers' activations each.
  EXPECT_NEAR(mu.ranks[0].activation_peak_bytes / me.ranks[0].activation_peak_bytes, 5.0 / 4.0, 0.02);
}

// The communication-free critical path of the scenario with its analytic costs (simulate --engine analytic).
double makespan(const Scenario& s) {
  const auto prep = prepare(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  const auto f = earliest_finish(cs.dag());
  return *std::max_element(f.begin(), f.end());
}

// The first and last stages may hold the embedding or the head alone (Megatron's account-for-embedding / loss split):
// every schedule lowers and times them, their ops cost the embedding or the head only, and a rank holding them
// stores no layer's activations for them.
TEST(LayerPlacement, EndStagesWithoutLayers) {
  const Scenario ends = head_heavy("[0, 8, 8, 0]");
  const AnalyticCostModel c(ends);
  EXPECT_EQ(c.layers_of_stage(0), 0);
  Op f;
  f.kind = OpKind::Forward;
  f.tok_end = ends.model.seq_len;
  const double embedding = c.compute_seconds(f, 1);
  f.stage = f.rank = 1;
  EXPECT_GT(embedding, 0);
  EXPECT_LT(embedding, 0.1 * c.compute_seconds(f, 1));
  f.stage = f.rank = 3;
  EXPECT_NEAR(c.op_flops(f, 1), 2.0 * ends.model.seq_len * ends.model.hidden * ends.model.vocab,
              0.01 * c.op_flops(f, 1));  // the logits GEMM and little else
  EXPECT_EQ(rank_layer_count(ends, 0), 0);
  EXPECT_GT(makespan(ends), 0);
  for (const char* kind : {"gpipe", "interleaved", "zb-h1", "zb-v"}) {
    SCOPED_TRACE(kind);
    const bool two = std::string(kind) == "interleaved" || std::string(kind) == "zb-v";
    const Scenario s = parse_scenario(
        std::string("model: {preset: gpt3-1b, layers: 16, vocab: 128000}\n"
                    "cluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 4}\n"
                    "parallel: {dp: 1, pp: 4, tp: 1, global_batch: 8") +
            (two ? ", v: 2, stage_layers: [0, 3, 3, 2, 2, 3, 3, 0]}\n" : ", stage_layers: [0, 8, 8, 0]}\n") +
            "schedule: {kind: " + kind + "}\n",
        "ends.yaml");
    EXPECT_GT(makespan(s), 0);
    const MemoryReport m = memory_report(s, make_schedule(s));
    for (const RankMemory& r : m.ranks) EXPECT_GT(r.peak_bytes, 0);
  }
}

TEST(LayerPlacement, LighterLastStageIsFasterWhenTheHeadDominates) {
  const double even = makespan(head_heavy("")), light_last = makespan(head_heavy("[5, 5, 5, 1]"));
  const double heavy_last = makespan(head_heavy("[3, 3, 3, 7]"));
  EXPECT_LT(light_last, 0.9 * even);
  EXPECT_GT(heavy_last, even);
}

}  // namespace
}  // namespace pipescope
