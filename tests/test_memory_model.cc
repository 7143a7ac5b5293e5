// Memory model: activation peaks walked from generated schedules against the closed forms of
// docs/papers.md#megatron (GPipe m, 1F1B p - r, interleaved (2(p-r-1) + (v-1)p + 1)/v stage equivalents),
// token-weighted units for sliced schedules, static state, recomputation and the OOM flag; flash attention and
// sequence parallelism, K/V caches and dK/dV buffers of sliced schedules, and the largest batch that fits.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/cost/analytic_cost.h"
#include "core/memory/memory_model.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/model/seq1f1b.h"
#include "core/plan/pipeline.h"

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

// docs/papers.md#megatron: rank r peaks at min(W_r + 1, m*v) chunk-micro-batches, each 1/v of a stage.
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
  // Bytes per parameter from the dtypes: fp32 gradients do not eat into the state (fp32 master 4 + Adam 8).
  EXPECT_DOUBLE_EQ(g32.ranks[1].optimizer_bytes, 12 * rank_parameter_count(s, 1));
  s.training.optimizer_bytes_per_param = 16;  // an explicit total: the state is what weights and gradients leave
  EXPECT_DOUBLE_EQ(memory_report(s, sched).ranks[1].optimizer_bytes, 10 * rank_parameter_count(s, 1));
  s.training.optimizer_bytes_per_param = -1;
  s.training.grad_fp32 = false;

  // Recompute: the same p units in flight, only layer inputs kept, plus one layer's activations transiently.
  s.schedule.recompute = Recompute::Full;
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

// ---------------------------------------------------------------- flash attention, sequence parallelism

TEST(MemoryModel, FlashAttentionDropsExactlyTheScoreTerm) {
  for (const bool sp : {false, true})
    for (const int t : {1, 2, 8}) {
      Scenario s = scenario("seq1f1b-13b", "dgx-a100", 4, t);  // h 5120, a 40
      s.parallel.sequence_parallel = sp;
      s.training.dtype = "bf16";
      const double h = 5120, a = 40, r = sp ? t : 1;
      struct Case {
        int b, l, c;
      };
      for (const Case k : {Case{1, 32768, 0}, Case{2, 4096, 0}, Case{1, 6000, 12000}}) {
        SCOPED_TRACE("t " + std::to_string(t) + " sp " + std::to_string(sp) + " b " + std::to_string(k.b) + " l " +
                     std::to_string(k.l) + " c " + std::to_string(k.c));
        const double bl = static_cast<double>(k.b) * k.l;
        s.training.flash_attention = false;
        const double plain = layer_activation_bytes(s, k.b, k.l, k.c);
        const double score = 5.0 * a * bl * (k.c + k.l) / t;  // 5*a*s^2*b / t at c = 0
        EXPECT_DOUBLE_EQ(layer_score_bytes(s, k.b, k.l, k.c), score);
        s.training.flash_attention = true;
        const double flash = layer_activation_bytes(s, k.b, k.l, k.c);
        EXPECT_DOUBLE_EQ(layer_score_bytes(s, k.b, k.l, k.c), 0.0);
        EXPECT_NEAR(plain - flash, score, 1e-12 * plain);
        // Megatron's 34*s*b*h (+ 5*a*s^2*b) over t with sequence parallelism; 10 of the 34 replicated without.
        EXPECT_NEAR(flash, bl * h * (10.0 / r + 24.0 / t), 1e-12 * flash);
        if (sp) {
          EXPECT_NEAR(plain, (34.0 * bl * h + 5.0 * a * bl * (k.c + k.l)) / t, 1e-12 * plain);
        }
        // The context only enters through the score rectangle.
        EXPECT_DOUBLE_EQ(flash, layer_activation_bytes(s, k.b, k.l, 0));
      }
    }
  Scenario s = scenario("seq1f1b-7b", "dgx-a100", 4, 8);
  EXPECT_DOUBLE_EQ(layer_kv_bytes(s, 1, 1024), 2.0 * 1024 * 4096 / 8 * 2);
  EXPECT_THROW(layer_score_bytes(s, 1, 0), std::invalid_argument);
  EXPECT_THROW(layer_kv_bytes(s, 0, 8), std::invalid_argument);
}

// A known configuration whose OOM flag flips: 2.7B, s = 16384, 8 stages of 4 layers, 1F1B (8 micro-batches in
// flight on stage 0). With the l x l score matrices (5*a*s^2 B per layer and sequence, ~43 GB) it cannot fit in
// 80 GiB; with flash attention stage 0 holds exactly p * (4 * 34*s*h + s*h) bytes of activations.
TEST(MemoryModel, FlashAttentionFlipsTheOomFlag) {
  Scenario s = scenario("seq1f1b-2.7b", "dgx-a100", 8, 1);
  s.model.seq_len = 16384;
  s.training.dtype = "bf16";
  const Schedule sched = make_1f1b(8, uniform_microbatches(16, 1, 16384, 1), 16384);
  const MemoryReport plain = memory_report(s, sched);
  EXPECT_TRUE(plain.any_oom());
  EXPECT_TRUE(plain.ranks[0].oom);
  s.training.flash_attention = true;
  const MemoryReport flash = memory_report(s, sched);
  EXPECT_FALSE(flash.any_oom());
  const double S = 16384, h = 2560;
  EXPECT_NEAR(flash.ranks[0].activation_peak_bytes, 8 * (4 * 34 * S * h + S * h), 1e-9 * 8 * 4 * 34 * S * h);
  EXPECT_DOUBLE_EQ(flash.ranks[0].peak_in_flight, 8);
  const double gap = plain.ranks[0].activation_peak_bytes - flash.ranks[0].activation_peak_bytes;
  EXPECT_NEAR(gap, 8 * 4 * 5 * 32 * S * S, 1e-9 * gap);  // p micro-batches x 4 layers x the s^2 term
}

// The paper's claim (docs/papers.md#seq1f1b): Seq1F1B fits where 1F1B does not. 30B, s = 65536, PP 8, TP 8 with
// sequence parallelism and flash attention, M = 16: 1F1B keeps 8 micro-batches on stage 0 (> 80 GiB),
// Seq1F1B about (p + k - 1)/k = 2.75.
TEST(MemoryModel, Seq1F1BFitsWhere1F1BDoesNot) {
  auto make = [](ScheduleKind kind) {
    Scenario s = scenario("seq1f1b-30b", "dgx-a100", 8, 8);
    s.cluster.nodes = 8;
    s.model.seq_len = 65536;
    s.parallel.global_batch = 16;
    s.parallel.sequence_parallel = true;
    s.training.dtype = "bf16";
    s.training.flash_attention = true;
    s.schedule.kind = kind;
    if (kind == ScheduleKind::Seq1F1B) s.schedule.seq_slices = 4, s.schedule.slicing = "cwp";
    return s;
  };
  const Scenario one = make(ScheduleKind::OneFOneB), seq = make(ScheduleKind::Seq1F1B);
  const MemoryReport r1 = memory_report(one, make_schedule(one)), rs = memory_report(seq, make_schedule(seq));
  EXPECT_TRUE(r1.ranks[0].oom);
  EXPECT_FALSE(rs.any_oom());
  EXPECT_LT(rs.ranks[0].activation_peak_bytes, 0.5 * r1.ranks[0].activation_peak_bytes);
  // Without flash attention neither fits: the score matrices of one 65536-token segment alone are too big.
  Scenario plain = seq;
  plain.training.flash_attention = false;
  EXPECT_TRUE(memory_report(plain, make_schedule(plain)).any_oom());
}

// K/V caches and dK/dV buffers of sliced schedules (one rank, so stage 0 is also the last stage).
TEST(MemoryModel, SlicedKvCacheAndGradientBuffers) {
  Scenario s = scenario("gpt3-1b", "aws-p3.16xlarge", 1, 1);  // 24 layers, h 2048
  s.model.vocab = 8;
  const int L = 2048, layers = 24;
  const double h = 2048, e = 2, V = 8;
  auto extras = [&](int l) { return l * h + 2.0 * l * h * e + 4.0 * l * V; };  // first and last stage
  const Schedule gp = make_gpipe(1, uniform_microbatches(2, 1, L, 2), L);      // two micro-batches, slices of 1024
  const Schedule whole = make_gpipe(1, uniform_microbatches(2, 1, L, 1), L);
  // Without flash (TeraPipe's preallocated cache): at the end of the forwards the cache holds exactly the K/V the
  // slices would have saved, so the peak is the sum of the slices' activations.
  const double sliced_plain = memory_report(s, gp).ranks[0].activation_peak_bytes;
  const double slices = layer_activation_bytes(s, 1, 1024, 0) + layer_activation_bytes(s, 1, 1024, 1024);
  EXPECT_NEAR(sliced_plain, 2 * (layers * slices + 2 * extras(1024)), 1e-9 * sliced_plain);
  // With flash (Seq1F1B's concatenated cache): the full-sequence cache comes on top, one per micro-batch, and the
  // first backward (the last slice, 2048 keys) adds its one-layer transient dK/dV (the prefix K/V it reads are views
  // of the cache at b = 1).
  s.training.flash_attention = true;
  const double sliced_flash = memory_report(s, gp).ranks[0].activation_peak_bytes;
  const double unsliced_flash = memory_report(s, whole).ranks[0].activation_peak_bytes;
  EXPECT_NEAR(sliced_flash - unsliced_flash, 2 * layers * layer_kv_bytes(s, 1, L) + layer_kv_bytes(s, 1, L),
              1e-9 * sliced_flash);
  EXPECT_NEAR(unsliced_flash, 2 * (layers * layer_activation_bytes(s, 1, L) + extras(L)), 1e-9 * unsliced_flash);

  // Hand order: micro-batch 0's last slice runs its backward (leaving its dK/dV buffer, a view of the slice's whole
  // dK/dV over all 2048 keys with flash, and its cache) before micro-batch 1 enters. The peak is at 1's last-slice
  // backward: three slices, two full caches, one buffer, and that backward's transient dK/dV (one layer, 2048
  // keys).
  Schedule hand = gp;
  hand.per_rank[0].clear();
  for (const char* t : {"0F0", "0F0s1", "0B0s1", "0F1", "0F1s1", "0B1s1", "0B1", "0B0"})
    hand.per_rank[0].push_back(parse_op(t, hand));
  const RankMemory rm = memory_report(s, hand).ranks[0];
  const double per_slice = layers * layer_activation_bytes(s, 1, 1024) + extras(1024);
  const double expect = 3 * per_slice + 3 * layers * layer_kv_bytes(s, 1, L) + layer_kv_bytes(s, 1, L);
  EXPECT_NEAR(rm.activation_peak_bytes, expect, 1e-9 * expect);
  EXPECT_DOUBLE_EQ(rm.peak_in_flight, 1.5);
  EXPECT_DOUBLE_EQ(rm.max_in_flight, 1.5);
  // Without the hand-over (micro-batch 0 runs to the end first) the peak is at 0's last-slice backward: two slices,
  // one cache and the transient.
  Schedule seq = gp;
  seq.per_rank[0].clear();
  for (const char* t : {"0F0", "0F0s1", "0B0s1", "0B0", "0F1", "0F1s1", "0B1s1", "0B1"})
    seq.per_rank[0].push_back(parse_op(t, seq));
  const double alone = 2 * per_slice + layers * layer_kv_bytes(s, 1, L) + layer_kv_bytes(s, 1, L);
  EXPECT_NEAR(memory_report(s, seq).ranks[0].activation_peak_bytes, alone, 1e-9 * alone);
  // A micro-batch with only its first segment forwarded has no cache copy (its K/V is the cache): micro-batch 1
  // enters before 0's backwards, and the peak at 0's last-slice backward holds three slices, 0's cache, the
  // transient and no copy for 1.
  Schedule early = gp;
  early.per_rank[0].clear();
  for (const char* t : {"0F0", "0F0s1", "0F1", "0B0s1", "0B0", "0F1s1", "0B1s1", "0B1"})
    early.per_rank[0].push_back(parse_op(t, early));
  const double first_only = 3 * per_slice + layers * layer_kv_bytes(s, 1, L) + layer_kv_bytes(s, 1, L);
  EXPECT_NEAR(memory_report(s, early).ranks[0].activation_peak_bytes, first_only, 1e-9 * first_only);
  // Two sequences per micro-batch: the prefix K/V slices are strided, so the backward copies them (twice the
  // transient).
  const Schedule b2 = make_gpipe(1, uniform_microbatches(1, 2, L, 2), L);
  const double per_slice_b2 = layers * layer_activation_bytes(s, 2, 1024) + 2 * extras(1024);
  const double two_seq = 2 * per_slice_b2 + layers * layer_kv_bytes(s, 2, L) + 2 * layer_kv_bytes(s, 2, L);
  EXPECT_NEAR(memory_report(s, b2).ranks[0].activation_peak_bytes, two_seq, 1e-9 * two_seq);
}

// Scenario keys: training.flash_attention and parallel.sequence_parallel parse, default off, and reject bad input.
TEST(MemoryModel, ScenarioKeys) {
  const std::string base =
      "model: {preset: seq1f1b-2.7b}\ncluster: {preset: dgx-a100}\nparallel: {pp: 8, global_batch: 8";
  const Scenario off = parse_scenario(base + "}\n", "t.yaml");
  EXPECT_FALSE(off.training.flash_attention);
  EXPECT_FALSE(off.parallel.sequence_parallel);
  const Scenario on =
      parse_scenario(base + ", sequence_parallel: true}\ntraining: {dtype: bf16, flash_attention: true}\n", "t.yaml");
  EXPECT_TRUE(on.training.flash_attention);
  EXPECT_TRUE(on.parallel.sequence_parallel);
  auto error_of = [&](const std::string& text) {
    try {
      parse_scenario(text, "t.yaml");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of(base + "}\ntraining: {dtype: fp32, flash_attention: true}\n"),
            "t.yaml:4:42: training.flash_attention: flash attention needs dtype fp16 or bf16, got fp32");
  const std::string typo = error_of(base + "}\ntraining: {flash_attention: yes please}\n");
  EXPECT_NE(typo.find("t.yaml:4:29: training.flash_attention:"), std::string::npos) << typo;
  const std::string sp = error_of(base + ", sequence_parallel: 3}\n");
  EXPECT_NE(sp.find("t.yaml:3:"), std::string::npos) << sp;
  EXPECT_NE(sp.find("parallel.sequence_parallel"), std::string::npos) << sp;
  EXPECT_NE(error_of(base + "}\ntraining: {flash_atention: true}\n").find("flash_attention"), std::string::npos);
}

// ---------------------------------------------------------------- largest batch that fits (TeraPipe)

TEST(MemoryModel, MaxBatchClosedForm) {
  // GPT3-13B on 4 stages of 10 layers, tp 8, 2 replicas: every stage holds B_r sequences of its layers (GPipe);
  // B_r max = min over ranks of floor((limit - static_r) / per-sequence_r).
  Scenario s = scenario("gpt3-13b", "aws-p3.16xlarge", 4, 8);
  s.cluster.nodes = 8;
  s.parallel.dp = 2;
  s.parallel.global_batch = 2;
  s.model.vocab = 8;
  const double limit = s.cluster.device.memory_bytes, h = 5120, L = 2048, V = 8;
  int expect = 1 << 30;
  double worst_static = 0;
  for (int r = 0; r < 4; r++) {
    const double stat = 16 * rank_parameter_count(s, r);
    double per_seq = 10 * layer_activation_bytes(s, 1, 2048);
    if (r == 0) per_seq += L * h;
    if (r == 3) per_seq += 2 * L * h * 2 + 4 * L * V / 8;
    expect = std::min(expect, static_cast<int>(std::floor((limit - stat) / per_seq)));
    worst_static = std::max(worst_static, stat);
  }
  const MaxBatch mb = max_batch_gpipe(s);
  EXPECT_EQ(mb.per_replica, expect);
  EXPECT_EQ(mb.global, 2 * expect);
  EXPECT_DOUBLE_EQ(mb.limit_bytes, limit);
  EXPECT_NEAR(mb.static_bytes, worst_static, 1e-6 * worst_static);
  EXPECT_LE(mb.peak_bytes, limit);
  // One more sequence does not fit.
  const MemoryReport more = memory_report(s, make_gpipe(4, uniform_microbatches(expect + 1, 1, 2048, 1), 2048));
  EXPECT_TRUE(more.any_oom());
  // A smaller capacity gives a smaller batch; one below a single sequence's peak gives none.
  EXPECT_LT(max_batch_gpipe(s, 0.5 * limit).per_replica, expect);
  const MaxBatch none = max_batch_gpipe(s, worst_static);
  EXPECT_EQ(none.per_replica, 0);
  EXPECT_EQ(none.global, 0);
  s.parallel.v = 2;
  EXPECT_THROW(max_batch_gpipe(s), std::invalid_argument);
}

// TeraPipe Table 1 (docs/papers.md#terapipe): the paper's batch must fit in the model's memory (the model allows
// more: see `pipescope repro terapipe --max-batch`), and flash attention would allow still more.
TEST(MemoryModel, TeraPipeTable1BatchesFit) {
  for (int setting = 1; setting <= 10; setting++) {
    SCOPED_TRACE("setting " + std::to_string(setting));
    Scenario s = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/terapipe/setting-" +
                               std::to_string(setting) + "-gpipe.yaml");
    const MaxBatch mb = max_batch_gpipe(s);
    EXPECT_GE(mb.per_replica, s.parallel.global_batch / s.parallel.dp);
    EXPECT_EQ(mb.global, mb.per_replica * s.parallel.dp);
    s.training.flash_attention = true;
    EXPECT_GT(max_batch_gpipe(s).per_replica, mb.per_replica);
  }
}

// ---------------------------------------------------------------- split backward

TEST(MemoryModel, WeightBackwardHoldsTheActivations) {
  // Same op order with B replaced by I (W at the very end): nothing is freed until the W ops run.
  const Scenario s = scenario("megatron-1.7b", "dgx-a100", 2, 1);
  const auto mbs = uniform_microbatches(4, 1, 2048, 1);
  Schedule split = make_1f1b(2, mbs, 2048);
  for (auto& ops : split.per_rank) {
    std::vector<Op> ws;
    for (Op& o : ops)
      if (o.kind == OpKind::Backward) {
        o.kind = OpKind::BackwardInput;
        ws.push_back(o);
        ws.back().kind = OpKind::BackwardWeight;
      }
    ops.insert(ops.end(), ws.begin(), ws.end());
  }
  const MemoryReport fused = memory_report(s, make_1f1b(2, mbs, 2048)), held = memory_report(s, split);
  EXPECT_DOUBLE_EQ(fused.ranks[0].max_in_flight, 2);
  EXPECT_DOUBLE_EQ(held.ranks[0].max_in_flight, 4);  // every micro-batch in flight until the W ops
  EXPECT_NEAR(held.ranks[0].activation_peak_bytes, 2 * fused.ranks[0].activation_peak_bytes,
              1e-9 * fused.ranks[0].activation_peak_bytes);
  // ZB-H1 keeps 1F1B's worst-rank peak; ZB-H2 allows 2p - 1.
  const MemoryReport h1 = memory_report(s, make_zb_h1(2, mbs, 2048)), h2 = memory_report(s, make_zb_h2(2, mbs, 2048));
  EXPECT_DOUBLE_EQ(std::max(h1.ranks[0].max_in_flight, h1.ranks[1].max_in_flight), 2);
  EXPECT_DOUBLE_EQ(h2.ranks[0].max_in_flight, 3);
}
}  // namespace
}  // namespace pipescope
