// GEMM model (core/cost/gemm_model.h) and NCCL model (core/cost/nccl_model.h): cases computed by hand.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/cost/gemm_model.h"
#include "core/cost/nccl_model.h"
#include "core/model/presets.h"

namespace pipescope {
namespace {

// 10 SMs at 1e12 FLOP/s each, unlimited memory: a 128 x 128 x 1000 tile takes 2*128*128*1000 / 1e12 s.
GemmDevice toy(double peak = 1e13) { return GemmDevice{peak, 1.0, 10, 0.0, 1e18, 1.0}; }
constexpr double kTile128 = 2.0 * 128 * 128 * 1000 / 1e12;  // 32.768 us

TEST(GemmModel, TileShareFollowsOperandReuse) {
  EXPECT_DOUBLE_EQ(gemm_tile_share(128, 128), 1.0);
  EXPECT_DOUBLE_EQ(gemm_tile_share(256, 128), 1.0);               // reuse 85.3, capped
  EXPECT_DOUBLE_EQ(gemm_tile_share(128, 64), 8192.0 / 192 / 64);  // 2/3
  EXPECT_DOUBLE_EQ(gemm_tile_share(64, 64), 0.5);
}

TEST(GemmModel, FewerTilesThanSmsPickSmallerTiles) {
  // 256 x 128: one 256 x 128 tile = 65.5 us on one SM; two 128 x 128 tiles run on two SMs at once: 32.8 us;
  // four 128 x 64 tiles (2 per SM): 2 * 16.4 us / (2/3) = 49.2 us; 64 x 64 (4 per SM): 4 * 8.2 / 0.5 = 65.5 us.
  const GemmTiming t = gemm_timing(toy(), 256, 128, 1000, 0);
  EXPECT_NEAR(t.seconds, kTile128, 1e-12);  // peak 1e13 over 10 SMs: 1e12 per SM
  EXPECT_EQ(t.tile_m, 128);
  EXPECT_EQ(t.tile_n, 128);
  EXPECT_DOUBLE_EQ(t.waves, 0.2);
  EXPECT_FALSE(t.memory_bound);
}

TEST(GemmModel, PartialLastWaveCostsAWholeWave) {
  // 10 tiles of 128 x 128 fill the 10 SMs once; 11 need a second wave (and 6 tiles of 256 x 128, one wave of
  // 65.5 us, tie): the time doubles for 10% more work.
  const double ten = gemm_timing(toy(), 128 * 10, 128, 1000, 0).seconds;
  const double eleven = gemm_timing(toy(), 128 * 11, 128, 1000, 0).seconds;
  EXPECT_NEAR(ten, kTile128, 1e-12);
  EXPECT_NEAR(eleven, 2 * kTile128, 1e-12);
  // 20 tiles: still two waves, the same time as 11.
  EXPECT_NEAR(gemm_timing(toy(), 128 * 20, 128, 1000, 0).seconds, eleven, 1e-12);
}

TEST(GemmModel, SkinnyGemmIsMemoryBound) {
  // 1 x 8192 x 8192 at 1 PFLOP/s: compute 21 us, reading the 8192 x 8192 fp16 weight at 1 TB/s: 134 us.
  GemmDevice d = toy(1e15);
  d.hbm_bw_Bps = 1e12;
  const double bytes = 2.0 * (8192.0 * 8192 + 8192 + 8192);
  const GemmTiming t = gemm_timing(d, 1, 8192, 8192, bytes);
  EXPECT_TRUE(t.memory_bound);
  EXPECT_DOUBLE_EQ(t.seconds, bytes / 1e12);
}

TEST(GemmModel, NoSmCountMeansNoQuantisation) {
  GemmDevice d = toy();
  d.sm_count = 0;
  d.efficiency = 0.5;
  d.fixed_s = 1e-6;
  EXPECT_DOUBLE_EQ(gemm_timing(d, 1000, 1000, 1000, 0).seconds, 2e9 / 5e12 + 1e-6);
}

TEST(GemmModel, BatchedGemmsShareTheWaves) {
  // 5 independent 128 x 128 products fill half of the SMs: one wave, the time of one.
  EXPECT_NEAR(gemm_timing(toy(), 128, 128, 1000, 0, 5).seconds, kTile128, 1e-12);
  EXPECT_NEAR(gemm_timing(toy(), 128, 128, 1000, 0, 11).seconds, 2 * kTile128, 1e-12);
}

TEST(GemmModel, EachWaveWritesItsTilesOverHbmUnlessTheEpilogueIsHidden) {
  // 11 tiles of 128 x 128 (fp16 out, 32 KiB each) at 1 GB/s: 2 waves of compute (65.5 us) + 11 * 32768 B / 1e9 =
  // 360.4 us of writes. 256 x 128 tiles (6, one wave of 65.5 us + 6 * 65536 B = 393.2 us) lose to them.
  GemmDevice d = toy();
  d.hbm_bw_Bps = 1e9;
  const GemmTiming t = gemm_timing(d, 128 * 11, 128, 1000, 0);
  EXPECT_NEAR(t.seconds, 2 * kTile128 + 11 * 32768 / 1e9, 1e-12);
  EXPECT_NEAR(t.epilogue_s, 11 * 32768 / 1e9, 1e-12);
  EXPECT_EQ(t.tile_m, 128);
  // 4-byte outputs (fp32) write twice the bytes; at half the memory efficiency, twice the time again.
  d.out_elem_bytes = 4;
  d.memory_efficiency = 0.5;
  EXPECT_NEAR(gemm_timing(d, 128 * 11, 128, 1000, 0).epilogue_s, 4 * 11 * 32768 / 1e9, 1e-12);
  // Persistent kernels (Hopper) write during the next tile's main loop: compute only.
  d.epilogue_hidden = true;
  const GemmTiming hidden = gemm_timing(d, 128 * 11, 128, 1000, 0);
  EXPECT_NEAR(hidden.seconds, 2 * kTile128, 1e-12);
  EXPECT_EQ(hidden.epilogue_s, 0.0);
  EXPECT_TRUE(device_preset("H100-SXM")->gemm_epilogue_hidden);
  EXPECT_FALSE(device_preset("A100-SXM4-80GB")->gemm_epilogue_hidden);
  EXPECT_FALSE(device_preset("V100-SXM2-16GB")->gemm_epilogue_hidden);
}

TEST(GemmModel, RejectsBadInput) {
  EXPECT_THROW(gemm_timing(toy(), 0, 1, 1, 0), std::invalid_argument);
  GemmDevice d = toy();
  d.peak_flops = 0;
  EXPECT_THROW(gemm_timing(d, 1, 1, 1, 0), std::invalid_argument);
}

TEST(GemmModel, DevicePresetsCarryTheirSmCounts) {
  EXPECT_EQ(device_preset("V100-SXM2-16GB")->sm_count, 80);
  EXPECT_EQ(device_preset("A100-SXM4-80GB")->sm_count, 108);
  EXPECT_EQ(device_preset("H100-SXM")->sm_count, 132);
}

// ---------------------------------------------------------------- NCCL

NcclGroup node8() { return nccl_group(*cluster_preset("dgx-a100"), 8, 1, 8, 300e9); }

TEST(NcclModel, LargeAllReduceInANodeIsSimpleRingAtNvlinkShare) {
  // 1 GB over 8 GPUs: 2*7/8 GB at 0.77 * 300 GB/s, + Simple's 8.4 + 14 * 3.4 us.
  const NcclChoice c = nccl_collective(node8(), 1e9);
  EXPECT_EQ(c.algo, NcclAlgo::Ring);
  EXPECT_EQ(c.proto, NcclProto::Simple);
  EXPECT_NEAR(c.seconds, 1e9 * 1.75 / 231e9 + 56e-6, 1e-9);
}

TEST(NcclModel, SmallAllReduceIsLatencyBoundLL) {
  // 1 kB: LL's 3.6 + 14 * 0.47 us = 10.18 us, + 1750 B at half of 231 GB/s.
  const NcclChoice c = nccl_collective(node8(), 1e3);
  EXPECT_EQ(c.proto, NcclProto::LL);
  EXPECT_NEAR(c.seconds, 10.18e-6 + 1750 / 115.5e9, 1e-12);
}

TEST(NcclModel, AcrossNodesTheNicsOfTheGroupLimit) {
  // 16 GPUs on 2 DGX A100 nodes: 8 HDR NICs per node (8 * 25 GB/s * 0.92 = 184 GB/s) below NVLink's 231 GB/s.
  const NcclGroup g = nccl_group(*cluster_preset("dgx-a100"), 16, 2, 8, 300e9);
  const NcclChoice c = nccl_collective(g, 1e9);
  EXPECT_EQ(c.algo, NcclAlgo::Ring);
  EXPECT_NEAR(c.bus_bw_Bps, 184e9, 1);
  // One GPU per node: one NIC.
  const NcclGroup one = nccl_group(*cluster_preset("dgx-a100"), 8, 8, 1, 300e9);
  EXPECT_NEAR(nccl_collective(one, 1e9).bus_bw_Bps, 23e9, 1);
}

TEST(NcclModel, ManyNodesSmallMessagesTakeTheTree) {
  // 64 nodes, one GPU each: ring LL pays 126 network hops (3.6 + 126 * 2.7 us), the tree 2 log2(64) (64.4 us).
  const NcclGroup g = nccl_group(*cluster_preset("dgx-a100"), 64, 64, 1, 300e9);
  const NcclChoice c = nccl_collective(g, 1e3);
  EXPECT_EQ(c.algo, NcclAlgo::Tree);
  EXPECT_EQ(c.proto, NcclProto::LL);
  EXPECT_NEAR(c.latency_s, 64.4e-6, 1e-12);
}

TEST(NcclModel, AllGatherMovesHalfTheRingSteps) {
  const double ar = nccl_collective(node8(), 1e9).seconds, ag = nccl_collective(node8(), 1e9, true).seconds;
  EXPECT_NEAR(ag, 1e9 * 0.875 / 231e9 + (8.4 + 7 * 3.4) * 1e-6, 1e-9);
  EXPECT_LT(ag, ar);
  EXPECT_EQ(nccl_collective_seconds(node8(), 0), 0.0);
}

}  // namespace
}  // namespace pipescope
