// Scenario variants (core/model/scenario_vary.h), the grid of `pipescope sweep`: --vary parsing, values set at YAML
// paths, errors pointed at the original file, and relative paths kept relative to the scenario file (not to the
// variant's message tag, whose values may hold a '/').
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/ir/schedule_csv.h"
#include "core/model/placement.h"
#include "core/model/scenario_vary.h"
#include "core/plan/pipeline.h"

namespace pipescope {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string vary_error(const std::string& arg) {
  try {
    parse_vary_axis(arg);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(ScenarioVary, AxesSplitOutsideBracketsAndNameBadArguments) {
  const VaryAxis a = parse_vary_axis("schedule.slice_tokens=[8,8], [4,12]");
  EXPECT_EQ(a.path, (std::vector<std::string>{"schedule", "slice_tokens"}));
  EXPECT_EQ(a.values, (std::vector<std::string>{"[8,8]", "[4,12]"}));
  EXPECT_EQ(parse_vary_axis("name=\"a,b\",'c,d',e").values, (std::vector<std::string>{"\"a,b\"", "'c,d'", "e"}));
  EXPECT_EQ(vary_error("name=\"a,b"), "--vary name: unterminated quote");
  EXPECT_EQ(vary_error("pp"), "--vary pp: expected key=v1,v2,... with key a scenario path such as schedule.seq_slices");
  EXPECT_EQ(vary_error("parallel..pp=2"), "--vary parallel..pp=2: malformed key 'parallel..pp'");
  EXPECT_EQ(vary_error("parallel.pp=[2"), "--vary parallel.pp: unbalanced brackets");
  EXPECT_EQ(vary_error("parallel.pp=2,"), "--vary parallel.pp: empty value (expected key=v1,v2,...)");
  EXPECT_THROW(parse_vary_axes({"parallel.pp=2", "parallel.pp=4"}), std::invalid_argument);
  EXPECT_THROW(parse_vary_axes({}), std::invalid_argument);
}

TEST(ScenarioVary, CombinationErrorsAreRowsAndKeyErrorsPointIntoTheFile) {
  const std::string src = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml";
  const std::string text = read(src);
  const auto pp = parse_vary_axes({"parallel.pp=3,4"});
  const ScenarioVariant bad = make_scenario_variant(src, text, pp, {0});
  EXPECT_NE(bad.invalid.find("(with --vary parallel.pp=3)"), std::string::npos) << bad.invalid;
  const ScenarioVariant good = make_scenario_variant(src, text, pp, {1});
  EXPECT_EQ(good.invalid, "");
  EXPECT_EQ(good.scenario.parallel.pp, 4);
  EXPECT_EQ(good.scenario.source, src);
  try {
    make_scenario_variant(src, text, parse_vary_axes({"parallel.pp=x"}), {0});
    ADD_FAILURE() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(src + ":", 0), 0u) << e.what();
  }
}

// A swept schedule kind gets the chunk count simulate --compare gives it, unless parallel.v is swept as well.
TEST(ScenarioVary, SweptKindTakesTheCompareChunkCount) {
  const std::string src = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml";
  const std::string text = read(src);
  const auto kinds = parse_vary_axes({"schedule.kind=1f1b,interleaved"});
  const ScenarioVariant inter = make_scenario_variant(src, text, kinds, {1});
  EXPECT_EQ(inter.invalid, "");
  EXPECT_EQ(inter.scenario.parallel.v,
            with_schedule(make_scenario_variant(src, text, kinds, {0}).scenario, ScheduleKind::Interleaved).parallel.v);
  EXPECT_EQ(inter.scenario.parallel.v, 2);
  const auto both = parse_vary_axes({"schedule.kind=interleaved", "parallel.v=1,3"});
  EXPECT_NE(make_scenario_variant(src, text, both, {0, 0}).invalid.find("needs v > 1"), std::string::npos);
  EXPECT_EQ(make_scenario_variant(src, text, both, {0, 1}).scenario.parallel.v, 3);
}

// A schedule file and a profile given relative to a scenario in a sub-directory: the variant finds them where
// `simulate` of the same file does (before, "f.yaml [schedule.file=csvs/s.csv]" made the tag's own '/' the base).
TEST(ScenarioVary, RelativePathsAreRelativeToTheScenarioFile) {
  const fs::path dir = fs::path(testing::TempDir()) / "scenario_vary" / "w";
  fs::create_directories(dir / "csvs");
  const std::string text = read(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml");
  const Scenario base = parse_scenario(text, "default.yaml");
  write((dir / "csvs" / "s.csv").string(), schedule_to_csv(make_schedule(base)));
  fs::copy_file(std::string(PIPESCOPE_SOURCE_DIR) + "/calib/profiles/dgx-a100.analytic.yaml", dir / "p.yaml",
                fs::copy_options::overwrite_existing);
  const std::string file = (dir / "f.yaml").string();
  write(file, text);
  const ScenarioVariant v =
      make_scenario_variant(file, text, parse_vary_axes({"schedule.kind=file", "schedule.file=csvs/s.csv"}), {0, 0});
  ASSERT_EQ(v.invalid, "");
  EXPECT_EQ(v.scenario.schedule.file, (dir / "csvs" / "s.csv").string());
  const ScenarioVariant p = make_scenario_variant(file, text, parse_vary_axes({"sim.profile=p.yaml"}), {0});
  ASSERT_EQ(p.invalid, "");
  EXPECT_EQ(p.scenario.sim.profile, (dir / "p.yaml").string());
  // The file-kind scenario compared with a generated kind (simulate --compare): the file goes with the kind.
  const Scenario other = with_schedule(v.scenario, ScheduleKind::GPipe);
  EXPECT_EQ(other.schedule.file, "");
  EXPECT_NO_THROW(validate_scenario(other));
  EXPECT_EQ(with_schedule(v.scenario, ScheduleKind::File).schedule.file, v.scenario.schedule.file);
}

// Without a name: key a scenario is named after its file, also as a variant (its message tag was cut at a dot:
// "one.yaml [parallel.micro_batch_size=1 schedule").
TEST(ScenarioVary, UnnamedVariantIsNamedAfterTheFile) {
  const std::string text =
      "model: {preset: gpt3-1b}\ncluster: {preset: dgx-a100, nodes: 1}\nparallel: {global_batch: 8, "
      "dp: 8}\n";
  const ScenarioVariant v =
      make_scenario_variant("dir/one.yaml", text, parse_vary_axes({"parallel.micro_batch_size=1"}), {0});
  ASSERT_EQ(v.invalid, "");
  EXPECT_EQ(v.scenario.name, "one");
}

TEST(ScenarioVary, WithScheduleFitsVAndSlicing) {
  Scenario s = parse_scenario(read(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml"), "default.yaml");
  const Scenario il = with_schedule(s, ScheduleKind::Interleaved);
  EXPECT_EQ(il.parallel.v, 2);
  s.schedule.kind = ScheduleKind::TeraPipe, s.schedule.seq_slices = 4;
  const Scenario g = with_schedule(s, ScheduleKind::OneFOneB);
  EXPECT_EQ(g.schedule.seq_slices, 1);
  EXPECT_EQ(g.schedule.slicing, "uniform");
  EXPECT_EQ(with_schedule(s, ScheduleKind::Seq1F1B).schedule.seq_slices, 4);
}

// A layer list written for one chunk count is re-split over another (Qwen3-235B's 94 layers over 8 x 4 stages, compared
// with v = 2 kinds), the ends lighter as Megatron splits; the overlap option leaves with a kind that has no steady
// state.
TEST(ScenarioVary, WithScheduleReSplitsStageLayersAndDropsTheOverlapOption) {
  Scenario s =
      parse_scenario(read(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/moe/qwen3-235b-a22b.yaml"), "q.yaml");
  s.schedule.overlap_moe_a2a = true;
  ASSERT_EQ(s.parallel.stage_layers.size(), 32u);
  const Scenario v2 = with_schedule(s, ScheduleKind::DualPipeV);
  EXPECT_EQ(v2.parallel.stage_layers, (std::vector<int>{5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5}));
  EXPECT_FALSE(v2.schedule.overlap_moe_a2a);
  EXPECT_NO_THROW(validate_scenario(v2));
  const Scenario same = with_schedule(s, ScheduleKind::Interleaved);  // v 4 kept: the list as written
  EXPECT_EQ(same.parallel.stage_layers, s.parallel.stage_layers);
  EXPECT_TRUE(same.schedule.overlap_moe_a2a);
  EXPECT_EQ(ends_lighter_split(12, 4), std::vector<int>{});
  EXPECT_EQ(ends_lighter_split(10, 4), (std::vector<int>{2, 3, 3, 2}));
}

}  // namespace
}  // namespace pipescope
