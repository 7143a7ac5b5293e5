// The caching-allocator replay (core/memory/caching_allocator.h): PyTorch's size rounding and segment sizes, best fit,
// splitting, merging within a segment only, cache release at the capacity and the figure at a failure, 0-byte
// requests, computed by hand; and through the memory model, reserved
// bytes never below the live bytes, equal for 1F1B's one-size tensors and above them for Seq1F1B's segments.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/memory/caching_allocator.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/model/schedule_registry.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

constexpr double MiB = 1048576.0;

TEST(CachingAllocator, RoundsRequestsAndSizesSegmentsAsPyTorch) {
  EXPECT_EQ(CachingAllocatorModel::round_size(0), 512u);
  EXPECT_EQ(CachingAllocatorModel::round_size(1), 512u);
  EXPECT_EQ(CachingAllocatorModel::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocatorModel::segment_size(1048576), 2097152u);         // 1 MiB: small pool, 2 MiB
  EXPECT_EQ(CachingAllocatorModel::segment_size(1048576 + 512), 20971520u);  // just large: a 20 MiB segment
  EXPECT_EQ(CachingAllocatorModel::segment_size(10485760), 10485760u);       // 10 MiB: its own size
  EXPECT_EQ(CachingAllocatorModel::segment_size(11 * 1048576), 12582912u);   // rounded up to 2 MiB
}

TEST(CachingAllocator, ReusesAFreedBlockOfTheSameSize) {
  CachingAllocatorModel a(1e12);
  for (int i = 0; i < 5; i++) a.free(a.allocate(100 * MiB));
  EXPECT_DOUBLE_EQ(a.peak_reserved_bytes(), 100 * MiB);
  EXPECT_DOUBLE_EQ(a.allocated_bytes(), 0);
}

TEST(CachingAllocator, ASplitBlockCannotServeALargerRequest) {
  CachingAllocatorModel a(1e12);
  const int x = a.allocate(60 * MiB);
  a.allocate(40 * MiB);
  a.free(x);
  const int y = a.allocate(30 * MiB);  // best fit: the 60 MiB block, split into 30 used + 30 cached
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 100 * MiB);
  a.allocate(50 * MiB);  // no cached block of 50: a new segment although 30 MiB are free
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 150 * MiB);
  EXPECT_DOUBLE_EQ(a.allocated_bytes(), 120 * MiB);
  // Freeing the 30 merges the two halves again: 60 MiB fit without a new segment.
  a.free(y);
  a.allocate(60 * MiB);
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 150 * MiB);
}

TEST(CachingAllocator, BestFitTakesTheSmallestBlockThatFits) {
  CachingAllocatorModel a(1e12);
  const int big = a.allocate(80 * MiB), mid = a.allocate(40 * MiB);
  a.free(big);
  a.free(mid);
  a.allocate(40 * MiB);  // the 40 MiB block, not a piece of the 80
  a.allocate(80 * MiB);
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 120 * MiB);
}

TEST(CachingAllocator, SmallRequestsShareTwoMiBSegments) {
  CachingAllocatorModel a(1e12);
  a.allocate(614400);  // 600 KiB, twice: one 2 MiB segment
  a.allocate(614400);
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 2 * MiB);
  a.allocate(MiB);  // 848 KiB are left in the first segment: a second one
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 4 * MiB);
}

TEST(CachingAllocator, MidSizedRequestsSplitATwentyMiBSegment) {
  CachingAllocatorModel a(1e12);
  a.allocate(5 * MiB);
  a.allocate(5 * MiB);
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 20 * MiB);
  a.allocate(12 * MiB);  // 10 MiB are left in it: too small
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 32 * MiB);
}

TEST(CachingAllocator, ALargeBlockIsNotSplitForOneMiBOrLess) {
  CachingAllocatorModel a(1e12);
  a.free(a.allocate(12 * MiB));
  a.allocate(11.5 * MiB);  // 0.5 MiB over: the whole block is used
  EXPECT_DOUBLE_EQ(a.allocated_bytes(), 12 * MiB);
  a.allocate(0.5 * MiB);
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 14 * MiB);  // the small request has a segment of its own
}

TEST(CachingAllocator, ReleasesItsCacheAtTheCapacityAndFailsWhenThatIsNotEnough) {
  CachingAllocatorModel a(100 * MiB);
  a.free(a.allocate(60 * MiB));
  a.allocate(70 * MiB);  // 60 + 70 > 100: the free 60 MiB segment is released first
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 70 * MiB);
  EXPECT_FALSE(a.failed());
  a.allocate(40 * MiB);  // nothing cached to release: PyTorch's out-of-memory error
  EXPECT_TRUE(a.failed());
  EXPECT_DOUBLE_EQ(a.peak_reserved_bytes(), 70 * MiB);  // the figure at the failure, never above the capacity
}

TEST(CachingAllocator, SegmentsNeverMergeEvenWhenBothAreFree) {
  CachingAllocatorModel a(1e12);
  const int x = a.allocate(30 * MiB), y = a.allocate(30 * MiB);
  a.free(x);
  a.free(y);
  a.allocate(60 * MiB);  // two free 30 MiB segments are not one 60 MiB block
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 120 * MiB);
}

TEST(CachingAllocator, AZeroByteRequestGetsNoBlock) {
  CachingAllocatorModel a(1e12);
  const int h = a.allocate(0);
  EXPECT_DOUBLE_EQ(a.reserved_bytes(), 0);
  EXPECT_DOUBLE_EQ(a.allocated_bytes(), 0);
  a.free(h);
  EXPECT_THROW(a.free(h), std::logic_error);
}

TEST(CachingAllocator, RejectsBadRequestsAndHandles) {
  CachingAllocatorModel a(1e12);
  EXPECT_THROW(a.allocate(-1), std::invalid_argument);
  EXPECT_THROW(a.allocate(1e19), std::invalid_argument);
  EXPECT_THROW(a.allocate(std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
  const int h = a.allocate(MiB);
  a.free(h);
  EXPECT_THROW(a.free(h), std::logic_error);
  EXPECT_THROW(a.free(7), std::logic_error);
}

MemoryReport replayed(const std::string& file, ScheduleKind kind) {
  const Scenario s = with_schedule(load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/" + file), kind);
  return memory_report(s, make_schedule(s), AllocatorReplay::On);
}

TEST(CachingAllocator, ReservedNeverBelowLiveBytesUnlessTheAllocatorRunsOut) {
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::Seq1F1B,
                         ScheduleKind::Seq1F1BInterleaved}) {
    const MemoryReport rep = replayed("seq1f1b/2.7b-s16384-m16-seq1f1b.yaml", k);
    EXPECT_TRUE(rep.allocator_replayed);
    // Where the allocator runs out (1F1B-I and GPipe do not fit here), the figure is the one at the failure.
    for (const RankMemory& r : rep.ranks)
      if (r.allocator_failed)
        EXPECT_LE(r.reserved_peak_bytes, rep.device_bytes) << schedule_entry(k).name;
      else
        EXPECT_GE(r.reserved_peak_bytes, r.peak_bytes) << schedule_entry(k).name;
  }
  const MemoryReport off = [] {
    const Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml");
    return memory_report(s, make_schedule(s));
  }();
  EXPECT_FALSE(off.allocator_replayed);
  EXPECT_EQ(off.ranks.at(0).reserved_peak_bytes, 0.0);
}

TEST(CachingAllocator, OneSizeTensorsReuseTheirBlocksSegmentsOfManySizesFragment) {
  // 7B, s = 32768, t = 8: every 1F1B tensor is a multiple of 2 MiB and of one micro-batch's size, so blocks are
  // reused exactly; Seq1F1B's four cwp segment lengths and the K/V copies growing by segment are not.
  const MemoryReport one = replayed("seq1f1b/7b-s32768-m8-1f1b.yaml", ScheduleKind::OneFOneB);
  const MemoryReport seq = replayed("seq1f1b/7b-s32768-m8-seq1f1b.yaml", ScheduleKind::Seq1F1B);
  for (const RankMemory& r : one.ranks) EXPECT_DOUBLE_EQ(r.reserved_peak_bytes, r.peak_bytes);
  for (const RankMemory& r : seq.ranks) {
    EXPECT_GT(r.reserved_peak_bytes, 1.05 * r.peak_bytes);
    EXPECT_LT(r.reserved_peak_bytes, 1.35 * r.peak_bytes);
  }
}

}  // namespace
}  // namespace pipescope
