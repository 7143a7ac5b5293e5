// Measured runs (core/plan/measured_runs.h): CSV reading and its errors, the scenario of a row, and the fidelity
// figures (MAPE, worst rows, pair ranking) on hand-made predictions; the layout-only reference fit
// (core/plan/layout_fit.h) on rows of its own form and on the shipped development set.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/plan/layout_fit.h"
#include "core/plan/measured_runs.h"

namespace pipescope {
namespace {

const std::string kHeader =
    "model,layers,hidden,heads,ffn_hidden,vocab,seq_len,gpus,gpus_per_node,hardware,tp,pp,dp,vp,mbs,"
    "num_microbatches,global_batch,schedule,value,unit\n";
std::string row(const std::string& model, int tp, int pp, int dp, int mbs, int m, const std::string& ms) {
  return model + ",30,3072,32,,,2048," + std::to_string(tp * pp * dp) + ",8,\"A100, 8 per node\"," +
         std::to_string(tp) + "," + std::to_string(pp) + "," + std::to_string(dp) + ",1," + std::to_string(mbs) + "," +
         std::to_string(m) + "," + std::to_string(mbs * m * dp) + ",1f1b," + ms + ",ms\n";
}

TEST(MeasuredRuns, ReadsRowsAndQuotedCells) {
  const auto runs = parse_measured_runs(
      kHeader + row("GPT 3.6B", 2, 2, 16, 4, 8, "4000") + row("GPT 3.6B", 4, 1, 16, 2, 16, "6228.3"), "t.csv");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].line, 2);
  EXPECT_EQ(runs[0].tp, 2);
  EXPECT_EQ(runs[0].ffn_hidden, 0);  // empty: filled by vtrain_scenario
  EXPECT_EQ(runs[0].global_batch, 512);
  EXPECT_DOUBLE_EQ(runs[1].measured_s, 6.2283);
  EXPECT_EQ(runs[1].layout(), "t4 p1 d16 b2 m16");
  EXPECT_EQ(runs[0].group(), runs[1].group());
}

TEST(MeasuredRuns, ErrorsNameFileLineAndColumn) {
  auto error_of = [](const std::string& text) {
    try {
      parse_measured_runs(text, "t.csv");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(kHeader + row("GPT", 2, 2, 16, 4, 8, "x")),
            "t.csv:2: column value: expected a positive number, got \"x\"");
  std::string bad = row("GPT", 2, 2, 16, 4, 8, "10");
  bad.replace(bad.find(",512,"), 5, ",500,");
  EXPECT_EQ(error_of(kHeader + bad),
            "t.csv:2: column global_batch: mbs * num_microbatches * dp = 512 but global_batch = 500");
  EXPECT_EQ(error_of("model,layers\nGPT,30\n"), "t.csv:1: missing column 'hidden'");
  EXPECT_EQ(error_of(""), "t.csv: empty file (expected a header line)");
}

TEST(MeasuredRuns, ScenarioFillsMegatronDefaults) {
  const auto runs = parse_measured_runs(kHeader + row("GPT", 2, 2, 16, 4, 8, "4000"), "t.csv");
  const Scenario s = vtrain_scenario(runs[0], "vtrain-a100");
  EXPECT_EQ(s.model.ffn_hidden, 4 * 3072);
  EXPECT_EQ(s.model.vocab, 50432);  // 50257 padded to a multiple of 128 * 2
  EXPECT_EQ(s.cluster.nodes, 8);
  EXPECT_EQ(s.schedule.recompute, Recompute::Full);
  EXPECT_EQ(s.sim.p2p, "blocking");
  EXPECT_EQ(s.parallel.micro_batches(), 8);
}

TEST(MeasuredRuns, ScenarioErrorsNameFileLineAndKey) {
  auto error_of = [](const std::string& r) {
    try {
      vtrain_scenario(parse_measured_runs(kHeader + r, "t.csv")[0], "vtrain-a100");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string gpipe = row("GPT", 2, 2, 16, 4, 8, "10");
  gpipe.replace(gpipe.find(",1f1b,"), 6, ",gpipe,");
  EXPECT_EQ(error_of(gpipe), "t.csv:2: schedule: only 1f1b without interleaving (vp 1) is read, got 'gpipe' vp 1");
  std::string odd = row("GPT", 2, 2, 3, 4, 8, "10");  // 12 GPUs on nodes of 8
  EXPECT_EQ(error_of(odd), "t.csv:2: gpus: 12 GPUs do not fill nodes of 8");
}

TEST(MeasuredRuns, FidelityMapeWorstAndPairRanking) {
  const auto runs = parse_measured_runs(kHeader + row("A", 1, 1, 8, 1, 1, "100") + row("A", 2, 1, 4, 1, 2, "200") +
                                            row("A", 4, 1, 2, 1, 4, "300") + row("B", 1, 1, 8, 1, 1, "50"),
                                        "t.csv");
  // Errors +10%, -10%, -50% (row 3 ranks below row 2: one wrong pair of the three in group A), row 4 missing.
  const Fidelity f = fidelity(runs, {0.110, 0.180, 0.150, 0.0});
  EXPECT_EQ(f.rows, 3);
  EXPECT_NEAR(f.mape, (0.1 + 0.1 + 0.5) / 3, 1e-12);
  EXPECT_NEAR(f.mean_err, (0.1 - 0.1 - 0.5) / 3, 1e-12);
  EXPECT_EQ(f.pairs, 3);
  EXPECT_EQ(f.pairs_right, 2);
  ASSERT_EQ(f.worst.size(), 3u);
  EXPECT_EQ(f.worst[0], 2);
  // All three pairs differ in tp (dp and m follow); the wrong one is rows 2 and 3.
  ASSERT_EQ(f.pairs_by_difference.size(), 1u);
  EXPECT_EQ(f.pairs_by_difference.at("tp").pairs, 3);
  EXPECT_EQ(f.pairs_by_difference.at("tp").wrong, 1);
  EXPECT_EQ(f.wrong_pairs_of_row, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_THROW(fidelity(runs, {1.0}), std::invalid_argument);
}

TEST(MeasuredRuns, ShippedDevSetReads) {
  const auto runs = read_measured_runs(std::string(PIPESCOPE_SOURCE_DIR) + "/tests/data/vtrain_a100_dev.csv");
  EXPECT_EQ(runs.size(), 78u);
  for (const auto& r : runs) EXPECT_NO_THROW(vtrain_scenario(r, "vtrain-a100")) << r.line;
}

// Rows that follow the form exactly (30 layers, x = 2 ms per sequence, y = 1 ms per micro-batch, per layer):
// iteration = (m + p - 1) * 30 / p * (2 b + 1) ms. The fit recovers x and y and every row.
TEST(LayoutFit, RecoversRowsOfItsOwnForm) {
  const auto runs = parse_measured_runs(kHeader + row("A", 2, 1, 12, 1, 4, "360") + row("A", 2, 2, 6, 2, 4, "375") +
                                            row("A", 2, 3, 4, 3, 4, "420") + row("A", 2, 6, 2, 4, 6, "495") +
                                            row("A", 4, 1, 6, 8, 1, "100"),
                                        "t.csv");
  const LayoutFit fit = fit_layout_only(runs);
  ASSERT_EQ(fit.cells.size(), 2u);
  EXPECT_EQ(fit.cells[0].tp, 2);
  EXPECT_EQ(fit.cells[0].rows, 4);
  EXPECT_NEAR(fit.cells[0].per_sequence_s, 0.002, 1e-12);
  EXPECT_NEAR(fit.cells[0].per_micro_batch_s, 0.001, 1e-12);
  // The tp 4 cell has one row: the minimum-norm solution reproduces it.
  EXPECT_EQ(fit.cells[1].tp, 4);
  EXPECT_EQ(fit.cells[1].rows, 1);
  for (std::size_t i = 0; i < runs.size(); i++) EXPECT_NEAR(fit.predicted_s[i], runs[i].measured_s, 1e-12) << i;
  const Fidelity f = fidelity(runs, fit.predicted_s);
  EXPECT_EQ(f.pairs, 10);
  EXPECT_EQ(f.pairs_right, 10);
  EXPECT_NEAR(f.mape, 0, 1e-12);
}

// Two rows of one cell that the form cannot both meet (same slots and b, different times): the fit splits the
// relative error evenly, and the pair ties, so it is not counted as ordered right.
TEST(LayoutFit, ScatterWithinACellIsLeftAsError) {
  const auto runs =
      parse_measured_runs(kHeader + row("A", 2, 1, 12, 1, 4, "300") + row("A", 2, 1, 12, 1, 4, "500"), "t.csv");
  const LayoutFit fit = fit_layout_only(runs);
  // Least squares on relative error: minimise (v/0.3 - 1)^2 + (v/0.5 - 1)^2, v = 0.3 * 0.5 * 0.8 / 0.34.
  const double v = 0.3 * 0.5 * (0.3 + 0.5) / (0.3 * 0.3 + 0.5 * 0.5);
  EXPECT_NEAR(fit.predicted_s[0], v, 1e-12);
  EXPECT_NEAR(fit.predicted_s[1], v, 1e-12);
  const Fidelity f = fidelity(runs, fit.predicted_s);
  EXPECT_EQ(f.pairs, 1);
  EXPECT_EQ(f.pairs_right, 0);
}

TEST(LayoutFit, RowsThatAreNotAPipelineAreRefused) {
  // 30 layers over pp 4.
  const auto runs = parse_measured_runs(kHeader + row("A", 2, 4, 3, 1, 4, "300"), "t.csv");
  try {
    fit_layout_only(runs);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("t.csv:2: layout fit"), std::string::npos) << e.what();
  }
}

// The reference the fidelity report prints (docs/cost-model.md "Fidelity"): on the shipped development set the
// layout alone, fitted to the measured times, orders 1259 of the 1406 pairs.
TEST(LayoutFit, ShippedDevSetReference) {
  const auto runs = read_measured_runs(std::string(PIPESCOPE_SOURCE_DIR) + "/tests/data/vtrain_a100_dev.csv");
  const Fidelity f = fidelity(runs, fit_layout_only(runs).predicted_s);
  EXPECT_EQ(f.pairs, 1406);
  EXPECT_EQ(f.pairs_right, 1259);
}

}  // namespace
}  // namespace pipescope
