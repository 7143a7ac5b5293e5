// Memory model: activation peaks walked from generated schedules against the closed forms of
// spec/megatron.md 2.4-2.6 (GPipe m, 1F1B p - r, interleaved (2(p-r-1) + (v-1)p + 1)/v stage equivalents),
// token-weighted units for sliced schedules, static state, recomputation and the OOM flag.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/analytic_cost.h"
#include "core/memory_model.h"
#include "core/presets.h"

namespace pipescope {
namespace {

Scenario scenario(const std::string& model, const std::string& cluster, int pp, int tp, int v = 1) {
  Scenario s;
  s.name = "test";
  s.source = "<test>";
  s.model = *model_preset(model);
  s.cluster = *cluster_preset(cluster);
  s.parallel.pp = pp;
  s.parallel.tp = tp;
  s.parallel.v = v;
  return s;
}

TEST(MemoryModel, LayerActivationBytesKorthikanti) {
  Scenario s = scenario("megatron-1.7b", "dgx-a100", 1, 1);  // h 2304, a 24
  const double h = 2304, a = 24, S = 2048;
  // t = 1, full sequence: s*b*h*(34 + 5*a*s/h).
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 2, 2048), S * 2 * h * (34 + 5 * a * S / h));
  // t = 8 without sequence parallelism: s*b*h*(10 + 24/t + 5*a*s/(h*t)).
  s.parallel.tp = 8;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 1, 2048), S * h * (10 + 24.0 / 8 + 5 * a * S / (h * 8)));
  // A slice of l tokens after c: the score rectangle is l x (c + l).
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 1, 256, 1024), 256 * h * (10 + 3.0) + 5 * a * 256 * 1280 / 8);
  EXPECT_GT(layer_activation_bytes(s, 1, 256, 1024), layer_activation_bytes(s, 1, 256, 0));
  s.training.dtype = "fp32";
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, 1, 2048), 2 * S * h * (10 + 24.0 / 8 + 5 * a * S / (h * 8)));
  EXPECT_THROW(layer_activation_bytes(s, 0, 10), std::invalid_argument);
  EXPECT_THROW(layer_activation_bytes(s, 1, 0), std::invalid_argument);
}

TEST(MemoryModel, GPipeHoldsEveryMicroBatch) {
  for (int m : {1, 3, 8}) {
    const Scenario s = scenario("megatron-1.7b", "dgx-a100", 4, 1);
    const Schedule g = make_gpipe(4, uniform_microbatches(m, 1, 2048, 1), 2048);
    const MemoryReport rep = memory_report(s, g);
    ASSERT_EQ(rep.ranks.size(), 4u);
    for (int r = 0; r < 4; r++) {
      EXPECT_DOUBLE_EQ(rep.ranks[r].peak_in_flight, m) << "m " << m << " rank " << r;
      EXPECT_DOUBLE_EQ(rep.ranks[r].max_in_flight, m);
    }
  }
}

TEST(MemoryModel, OneFOneBHoldsPMinusR) {
  struct Case {
    int p, m;
  };
  for (const Case c : {Case{4, 8}, Case{8, 16}, Case{8, 4}, Case{2, 1}}) {
    const Scenario s = scenario("megatron-1.7b", "dgx-a100", c.p, 1);
    const MemoryReport rep = memory_report(s, make_1f1b(c.p, uniform_microbatches(c.m, 1, 2048, 1), 2048));
    for (int r = 0; r < c.p; r++) {
      SCOPED_TRACE("p " + std::to_string(c.p) + " m " + std::to_string(c.m) + " rank " + std::to_string(r));
      EXPECT_DOUBLE_EQ(rep.ranks[r].peak_in_flight, std::min(c.p - r, c.m));
      EXPECT_DOUBLE_EQ(rep.ranks[r].max_in_flight, std::min(c.p - r, c.m));
    }
  }
  // Bytes: rank 0 (not the last stage) holds p micro-batches of its layers plus the embedding dropout mask.
  const int p = 4;
  const Scenario s = scenario("megatron-1.7b", "dgx-a100", p, 1);
  const MemoryReport rep = memory_report(s, make_1f1b(p, uniform_microbatches(8, 2, 2048, 1), 2048));
  const double per_mb = 6 * layer_activation_bytes(s, 2, 2048) + 2.0 * 2048 * 2304;
  EXPECT_NEAR(rep.ranks[0].activation_peak_bytes, p * per_mb, 1e-6 * p * per_mb);
  // The last stage holds one micro-batch, with the final LayerNorm and the fp32 cross-entropy softmax.
  const double last = 6 * layer_activation_bytes(s, 2, 2048) + 2.0 * 2 * 2048 * 2304 * 2 + 4.0 * 2 * 2048 * 51200;
  EXPECT_NEAR(rep.ranks[3].activation_peak_bytes, last, 1e-6 * last);
}

// megatron.md 2.4 memory / 2.6: rank r peaks at min(W_r + 1, m*v) chunk-micro-batches, each 1/v of a stage.
TEST(MemoryModel, InterleavedClosedForm) {
  struct Case {
    int p, m, v;
  };
  for (const Case c : {Case{4, 8, 2}, Case{8, 16, 2}, Case{8, 64, 4}, Case{4, 4, 2}}) {
    const Scenario s = scenario("megatron-1t", "dgx-a100", c.p, 8, c.v);  // 128 layers
    const Schedule sched = make_interleaved(c.p, c.v, uniform_microbatches(c.m, 1, 2048, 1), 2048);
    const MemoryReport rep = memory_report(s, sched);
    for (int r = 0; r < c.p; r++) {
      SCOPED_TRACE("p " + std::to_string(c.p) + " m " + std::to_string(c.m) + " v " + std::to_string(c.v) + " rank " +
                   std::to_string(r));
      const double expect =
          c.m == c.p ? c.m : (2.0 * (c.p - r - 1) + (c.v - 1.0) * c.p + 1) / c.v;  // m == p: all warm-up
      EXPECT_DOUBLE_EQ(rep.ranks[r].max_in_flight, expect);
      EXPECT_DOUBLE_EQ(rep.ranks[r].peak_in_flight, expect);
    }
    if (c.m != c.p) {
      EXPECT_DOUBLE_EQ(rep.ranks[0].peak_in_flight, c.p + (c.p - 1.0) / c.v);
    }
  }
  // The worked examples: p = 4, v = 2 gives 5.5; p = 8, v = 2 gives 11.5; p = 8, v = 4 gives 9.75.
  const MemoryReport rep = memory_report(scenario("megatron-1t", "dgx-a100", 8, 8, 4),
                                         make_interleaved(8, 4, uniform_microbatches(64, 1, 2048, 1), 2048));
  EXPECT_DOUBLE_EQ(rep.ranks[0].peak_in_flight, 9.75);
}

TEST(MemoryModel, SlicedSchedulesCountPartialUnits) {
  // TeraPipe (GPipe over token slices): every slice of every micro-batch is in flight at the end of the
  // forwards; k slices of s/k tokens make one unit per micro-batch.
  const Scenario s = scenario("gpt3-1b", "aws-p3.16xlarge", 4, 1);
  const Schedule tp = make_gpipe(4, sliced_microbatches(3, 1, {776, 640, 632}), 2048);
  const MemoryReport rep = memory_report(s, tp);
  for (const auto& r : rep.ranks) {
    EXPECT_DOUBLE_EQ(r.max_in_flight, 3);
    EXPECT_DOUBLE_EQ(r.peak_in_flight, 3);
  }
  // A hand-ordered sliced 1F1B-like program on one rank (Seq1F1B style: the next micro-batch's first slice
  // enters as soon as the last slice of the previous one is done): a slice of l tokens counts l/s.
  Scenario s1 = scenario("gpt3-1b", "aws-p3.16xlarge", 1, 1);
  Schedule hand = make_gpipe(1, sliced_microbatches(2, 1, {1024, 512, 512}), 2048);
  hand.per_rank[0].clear();
  for (const char* t :
       {"0F0", "0F0s1", "0F0s2", "0B0s2", "0F1", "0B0s1", "0F1s1", "0B0", "0F1s2", "0B1s2", "0B1s1", "0B1"})
    hand.per_rank[0].push_back(parse_op(t, hand));
  const MemoryReport rh = memory_report(s1, hand);
  EXPECT_DOUBLE_EQ(rh.ranks[0].max_in_flight, 1.25);  // 1024 + 512 of mb 0 and 1024 of mb 1
  // The byte peak is at one of the 1.25-unit points or at the full first micro-batch (1 unit, all its context).
  EXPECT_GE(rh.ranks[0].peak_in_flight, 1.0);
  EXPECT_LE(rh.ranks[0].peak_in_flight, 1.25);

  Schedule one = make_gpipe(1, uniform_microbatches(1, 1, 2048, 4), 2048);  // slices of 512
  EXPECT_DOUBLE_EQ(memory_report(s1, one).ranks[0].max_in_flight, 1.0);
  // Sliced bytes exceed the unsliced ones by the context part of the score rectangles only.
  const Schedule whole = make_gpipe(1, uniform_microbatches(1, 1, 2048, 1), 2048);
  const double sliced = memory_report(s1, one).ranks[0].activation_peak_bytes;
  const double unsliced = memory_report(s1, whole).ranks[0].activation_peak_bytes;
  EXPECT_LT(sliced, unsliced);  // 4 rectangles 512 x (c + 512) cover less than the full 2048 x 2048 square
  double expect = 0;
  for (int i = 0; i < 4; i++) expect += 24 * layer_activation_bytes(s1, 1, 512, 512 * i);
  expect += 2048.0 * 2048 + 2.0 * 2048 * 2048 * 2 + 4.0 * 2048 * 51200;  // embedding mask, head
  EXPECT_NEAR(sliced, expect, 1e-9 * expect);
}

TEST(MemoryModel, StaticStateAndRecompute) {
  const int p = 4;
  Scenario s = scenario("megatron-7.5b", "dgx-a100", p, 4);  // 36 layers, h 4096
  const Schedule sched = make_1f1b(p, uniform_microbatches(8, 1, 2048, 1), 2048);
  const MemoryReport rep = memory_report(s, sched);
  for (int r = 0; r < p; r++) {
    const double params = rank_parameter_count(s, r);
    EXPECT_DOUBLE_EQ(rep.ranks[r].weights_bytes, 2 * params);
    EXPECT_DOUBLE_EQ(rep.ranks[r].grads_bytes, 2 * params);
    EXPECT_DOUBLE_EQ(rep.ranks[r].optimizer_bytes, 12 * params);
    EXPECT_DOUBLE_EQ(rep.ranks[r].peak_bytes, 16 * params + rep.ranks[r].activation_peak_bytes);
    EXPECT_FALSE(rep.ranks[r].oom);
  }
  EXPECT_NEAR(rank_parameter_count(s, 1), 9 * (12.0 * 4096 * 4096 + 13 * 4096) / 4, 1e-3);
  EXPECT_GT(rank_parameter_count(s, 0), rank_parameter_count(s, 1));  // embeddings
  EXPECT_GT(rank_parameter_count(s, 3), rank_parameter_count(s, 1));  // tied copy + final LayerNorm
  s.training.grad_fp32 = true;
  const MemoryReport g32 = memory_report(s, sched);
  EXPECT_DOUBLE_EQ(g32.ranks[1].grads_bytes, 4 * rank_parameter_count(s, 1));
  EXPECT_DOUBLE_EQ(g32.ranks[1].optimizer_bytes, 10 * rank_parameter_count(s, 1));
  s.training.grad_fp32 = false;

  // Recompute: the same p units in flight, only layer inputs kept, plus one layer's activations transiently.
  s.schedule.recompute = true;
  const MemoryReport rc = memory_report(s, sched);
  const double h = 4096;
  for (int r = 0; r < p; r++) EXPECT_DOUBLE_EQ(rc.ranks[r].peak_in_flight, p - r);
  const double expect1 = (p - 1) * 9 * 2048 * h * 2 + layer_activation_bytes(s, 1, 2048);
  EXPECT_NEAR(rc.ranks[1].activation_peak_bytes, expect1, 1e-9 * expect1);
  EXPECT_LT(rc.ranks[1].activation_peak_bytes, rep.ranks[1].activation_peak_bytes / 3);
}

TEST(MemoryModel, OutOfMemoryFlag) {
  // GPT-3 175B on 16 GB V100s with only 8 stages: 12 layers per GPU need ~43 GB of weights and Adam state.
  const Scenario big = scenario("gpt3-175b", "aws-p3.16xlarge", 8, 8);
  const MemoryReport rep = memory_report(big, make_1f1b(8, uniform_microbatches(8, 1, 2048, 1), 2048));
  EXPECT_TRUE(rep.any_oom());
  EXPECT_TRUE(rep.ranks[4].oom);
  EXPECT_GT(rep.ranks[4].peak_bytes, rep.device_bytes);
  EXPECT_DOUBLE_EQ(rep.device_bytes, 16 * 1073741824.0);
  // GPT3-1B, 24 stages of one layer, 8 sequences in flight: fits.
  const Scenario small = scenario("gpt3-1b", "aws-p3.16xlarge", 24, 1);
  const MemoryReport ok = memory_report(small, make_gpipe(24, uniform_microbatches(8, 1, 2048, 1), 2048));
  EXPECT_FALSE(ok.any_oom());
  for (const auto& r : ok.ranks) EXPECT_LT(r.peak_bytes, ok.device_bytes);
  // Enough micro-batches in flight under GPipe runs out: activations grow with m.
  const MemoryReport many = memory_report(small, make_gpipe(24, uniform_microbatches(128, 1, 2048, 1), 2048));
  EXPECT_TRUE(many.any_oom());
}

TEST(MemoryModel, RejectsMismatchedSchedules) {
  const Scenario s = scenario("megatron-1.7b", "dgx-a100", 4, 1);
  EXPECT_THROW(memory_report(s, make_1f1b(2, uniform_microbatches(4, 1, 2048, 1), 2048)), std::invalid_argument);
  EXPECT_THROW(memory_report(s, make_1f1b(4, uniform_microbatches(4, 1, 1024, 1), 1024)), std::invalid_argument);
  Schedule bad = make_1f1b(4, uniform_microbatches(4, 1, 2048, 1), 2048);
  std::swap(bad.per_rank[3][0], bad.per_rank[3][1]);  // B0 before F0 on the last rank
  try {
    memory_report(s, bad);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("before its forward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipescope
