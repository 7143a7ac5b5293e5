// Placement layouts: Megatron (stage-major), replica-major and TeraPipe's cube-mesh-aware layout.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "core/placement.h"
#include "core/presets.h"

namespace pipescope {
namespace {

// spec/calibration.md 8.2 (`nvidia-smi topo -m` of a p3.16xlarge): 0 = SYS, 1 = NV1, 2 = NV2. Written out
// here from the spec, independently of core/placement.cc.
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
  // spec/megatron.md 3.4: rank = r * (n / p) + d * tp + t.
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

}  // namespace
}  // namespace pipescope
