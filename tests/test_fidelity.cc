// `pipescope fidelity` (sim/fidelity.h, core/plan/dev_sets.h): the gate's comparison (a set worse by 0.6 points
// fails, by 0.4 passes, a ranking drop, fewer rows or a missing set fails), the baseline's errors, the paper's
// slicing notation, and every shipped development set read into rows, none lost without a reason.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/presets.h"
#include "core/plan/dev_sets.h"
#include "sim/device_fidelity.h"
#include "sim/fidelity.h"

namespace pipescope {
namespace {

using sim::gate_regressions;
using sim::SetFigures;

const std::vector<SetFigures> kBaseline = {{"a", 10, 0.100, 20, 18}, {"b", 5, 0.200, 0, 0}};

std::vector<std::string> gate(const std::vector<SetFigures>& now, const std::vector<std::string>& selected = {}) {
  return gate_regressions(now, kBaseline, selected, 0.005);
}

TEST(FidelityGate, SameFiguresPass) { EXPECT_TRUE(gate(kBaseline).empty()); }

TEST(FidelityGate, MapeWorseByMoreThanHalfAPointFails) {
  const auto r = gate({{"a", 10, 0.106, 20, 18}, {"b", 5, 0.200, 0, 0}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], "a: MAPE 10.00% -> 10.60% (+0.60 points, tolerance 0.50)");
}

TEST(FidelityGate, MapeWorseByLessThanHalfAPointPasses) {
  EXPECT_TRUE(gate({{"a", 10, 0.104, 20, 18}, {"b", 5, 0.200, 0, 0}}).empty());
  EXPECT_TRUE(gate({{"a", 10, 0.050, 20, 18}, {"b", 5, 0.100, 0, 0}}).empty());  // better is no regression
}

TEST(FidelityGate, RankingDropFails) {
  const auto r = gate({{"a", 10, 0.100, 20, 17}, {"b", 5, 0.200, 0, 0}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], "a: pair ranking 18/20 = 90.00% -> 17/20 = 85.00% (-5.00 points)");
  EXPECT_TRUE(gate({{"a", 10, 0.100, 20, 19}, {"b", 5, 0.200, 0, 0}}).empty());  // a rise is fine
}

TEST(FidelityGate, MissingSetOrFewerRowsFails) {
  const auto missing = gate({{"a", 10, 0.100, 20, 18}});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0], "b: in the baseline but not run");
  // Fewer rows would lower a MAPE without any model change: a row that stopped running is a regression.
  const auto fewer = gate({{"a", 10, 0.100, 20, 18}, {"b", 4, 0.150, 0, 0}});
  ASSERT_EQ(fewer.size(), 1u);
  EXPECT_EQ(fewer[0], "b: 4 rows run, 5 in the baseline");
}

TEST(FidelityGate, OnlySelectedSetsCompareAndNewSetsPass) {
  EXPECT_TRUE(gate({{"a", 10, 0.100, 20, 18}}, {"a"}).empty());
  EXPECT_TRUE(gate({{"a", 10, 0.100, 20, 18}, {"b", 5, 0.2, 0, 0}, {"c", 3, 0.9, 2, 0}}).empty());
}

TEST(FidelityGate, BaselineErrorsNameFileAndKey) {
  auto error_of = [](const std::string& text) {
    try {
      sim::parse_fidelity_baseline(text, "b.json");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("{\"schema\": \"pipescope.repro.vtrain/1\"}"),
            "b.json: schema: expected \"pipescope.fidelity/1\" (a pipescope fidelity --json)");
  EXPECT_EQ(error_of("{\"schema\": \"pipescope.fidelity/1\", \"sets\": [{\"name\": \"a\", \"rows_run\": 3}]}"),
            "b.json: sets[0].mape: missing");
  EXPECT_EQ(error_of("{\"schema\": \"pipescope.fidelity/1\", \"sets\": [{\"name\": 7}]}"),
            "b.json: sets[0].name: wrong type");
  EXPECT_NE(error_of("{").find("b.json: not JSON"), std::string::npos);
  const auto ok = sim::parse_fidelity_baseline(
      "{\"schema\": \"pipescope.fidelity/1\", \"sets\": [{\"name\": \"a\", \"rows_run\": 3, \"mape\": 0.25, "
      "\"pairs\": 4, \"pairs_ordered_right\": 3}]}",
      "b.json");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].name, "a");
  EXPECT_DOUBLE_EQ(ok[0].ranking(), 0.75);
}

TEST(DevSets, SlicingSchemeNotation) {
  EXPECT_EQ(parse_slicing_scheme("[(1, [2048])] * 8"), std::vector<int>{2048});
  EXPECT_EQ(parse_slicing_scheme("[(1, [512] * 4)] * 8"), (std::vector<int>{512, 512, 512, 512}));
  EXPECT_EQ(parse_slicing_scheme("[(1, [120] * 2 + [64, 32])] * 2"), (std::vector<int>{120, 120, 64, 32}));
  EXPECT_THROW(parse_slicing_scheme("[(1, [abc])] * 2"), std::invalid_argument);
  EXPECT_THROW(parse_slicing_scheme("2048"), std::invalid_argument);
}

TEST(DevSets, UnknownSetNamesTheSets) {
  try {
    dev_set("nope");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--set nope: no such development set (vtrain-a100, "), std::string::npos);
  }
}

// Every shipped set reads; each row runs, is skipped or is excluded, with a reason for the last two.
TEST(DevSets, EveryRowRunsOrSaysWhy) {
  std::set<std::string> names;
  for (const DevSet& s : dev_sets()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    const std::vector<DevRow> rows = dev_set_rows(s);
    EXPECT_FALSE(rows.empty()) << s.name;
    for (const DevRow& d : rows) {
      const int outcomes = (d.scenario ? 1 : 0) + !d.skipped.empty() + !d.excluded.empty();
      EXPECT_EQ(outcomes, 1) << s.name << " line " << d.run.line;
      if (d.scenario) {
        EXPECT_GT(d.run.measured_s, 0) << s.name << " line " << d.run.line;
      }
    }
  }
}

TEST(DevSets, CountsOfTheShippedSets) {
  auto count = [](const char* name) {
    int run = 0, skipped = 0, excluded = 0;
    for (const DevRow& d : dev_set_rows(dev_set(name)))
      run += d.scenario.has_value(), skipped += !d.skipped.empty(), excluded += !d.excluded.empty();
    return std::vector<int>{run, skipped, excluded};
  };
  EXPECT_EQ(count("vtrain-a100"), (std::vector<int>{78, 0, 0}));
  EXPECT_EQ(count("seq1f1b-a100"), (std::vector<int>{38, 0, 10}));  // 10 runs out of memory in the paper
  EXPECT_EQ(count("terapipe-table3"), (std::vector<int>{13, 0, 0}));
  EXPECT_EQ(count("h100-dense"), (std::vector<int>{17, 37, 0}));  // 7 table rows + 10 weak-scaling step times
  EXPECT_EQ(count("megatron-table1"), (std::vector<int>{10, 0, 0}));
  EXPECT_EQ(count("terapipe-table2"), (std::vector<int>{20, 0, 0}));
  EXPECT_EQ(count("moe-h100"), (std::vector<int>{9, 1, 0}));  // FSDP: skipped
}

// tokens/s become iteration times once: the 2.7B 1F1B row at s = 16384, M = 16 ran 32,000 tokens/s.
TEST(DevSets, ThroughputBecomesIterationTime) {
  for (const DevRow& d : dev_set_rows(dev_set("seq1f1b-a100"))) {
    if (d.run.line == 2) {
      EXPECT_DOUBLE_EQ(d.run.measured_s, 16.0 * 16384 / 32000);
    }
  }
  for (const DevRow& d : dev_set_rows(dev_set("h100-dense"))) {
    if (d.run.line == 2) {
      EXPECT_DOUBLE_EQ(d.run.measured_s, 256.0 * 2048 / (726.0 * 128));  // tokens/s per GPU
    }
  }
}

// The report's confidence line: the shipped baseline's sets per device preset, a preset no set checks, and a changed
// description.
TEST(DeviceFidelity, TheBaselineNamesTheSetsOfEachShippedDevice) {
  const DeviceSpec h100 = *device_preset("H100-SXM");
  const std::vector<sim::DeviceFidelity> sets = sim::device_fidelity(h100);
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.front().set, "h100-dense");
  EXPECT_GT(sets.front().runs, 0);
  EXPECT_GT(sets.front().mape, 0.0);
  EXPECT_NE(sim::describe_fidelity(h100).find("h100-dense 17 runs, MAPE "), std::string::npos);
  EXPECT_GE(sim::device_fidelity(*device_preset("A100-SXM4-80GB")).size(), 3u);  // vTrain, Seq1F1B, Megatron
  EXPECT_NE(sim::describe_fidelity(*device_preset("H200-SXM")).find("no measured set"), std::string::npos);
  DeviceSpec renamed = h100;  // the same figures under another name: still the shipped description
  renamed.name = "custom";
  EXPECT_EQ(sim::shipped_device(renamed), "H100-SXM");
  DeviceSpec changed = h100;
  changed.gemm_efficiency = 0.9;
  EXPECT_TRUE(sim::device_fidelity(changed).empty());
  EXPECT_NE(sim::describe_fidelity(changed).find("not a shipped device description"), std::string::npos);
}

}  // namespace
}  // namespace pipescope
