// The paper tables (sim/repro*.h) on small selections: the shared simulation call and scheme, --json checks, each
// table's text and JSON, a row that fails without stopping the table, and plan's TeraPipe batch and Seq1F1B reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/model/scenario.h"
#include "core/util/atomic_file.h"
#include "sim/repro.h"
#include "sim/repro_megatron.h"
#include "sim/repro_seq1f1b.h"
#include "sim/repro_terapipe.h"
#include "sim/repro_vtrain.h"
#include "tests/printed.h"

namespace pipescope::sim {
namespace {

namespace fs = std::filesystem;
using testing_print::printed;

const std::string kSource = PIPESCOPE_SOURCE_DIR;

std::string temp_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("repro_" + std::to_string(getpid()) + "_" + name);
  fs::create_directories(d);
  return d.string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ReproTables, SimulateFiguresAndTokenSlices) {
  const SimFigures f = simulate_figures(default_scenario());
  EXPECT_GT(f.iteration_s, 0);
  EXPECT_GT(f.tflops_per_gpu, 0);
  EXPECT_GT(f.peak_mem_GB, 0);
  const Scenario s = with_token_slices(default_scenario(), {1024, 512, 512});
  EXPECT_EQ(s.schedule.kind, ScheduleKind::TeraPipe);
  EXPECT_EQ(s.schedule.slicing, "explicit");
  EXPECT_EQ(s.schedule.seq_slices, 3);
  EXPECT_EQ(s.parallel.micro_batch_size, 1);
}

TEST(ReproTables, JsonFileChecksAndWrite) {
  EXPECT_THROW(check_repro_json("-"), std::invalid_argument);  // standard output carries the table
  EXPECT_THROW(check_repro_json("/nonexistent-dir/x.json"), OutputPathError);
  const std::string path = temp_dir("json") + "/t.json";
  check_repro_json(path);
  write_repro_json(path, R"({"a": 1})");
  EXPECT_EQ(read_text(path), "{\"a\": 1}\n");
}

TEST(ReproTables, TerapipeMaxBatchTableWithoutSimulation) {
  ReproTerapipeOptions o;
  o.dir = kSource + "/scenarios/terapipe";
  o.settings = {1, 4};
  o.max_batch_only = true;
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_terapipe(o, f); });
  EXPECT_FALSE(failed);
  EXPECT_TRUE(has(out, "Table 1 batch vs the largest batch that fits")) << out;
  EXPECT_TRUE(has(out, "\n  1 GPT3-1B ")) << out;
  EXPECT_TRUE(has(out, "\n  4 GPT3-13B ")) << out;
  EXPECT_TRUE(has(out, "B_r fit = paper's in ")) << out;
  EXPECT_FALSE(has(out, "TeraPipe Table 2"));
}

TEST(ReproTables, TerapipeMissingScenariosThrow) {
  ReproTerapipeOptions o;
  o.dir = "/nonexistent/terapipe";
  o.settings = {2};
  EXPECT_ANY_THROW(printed([&](std::FILE* f) { repro_terapipe(o, f); }));
}

TEST(ReproTables, TerapipeOneSettingSimulated) {
  ReproTerapipeOptions o;
  o.dir = kSource + "/scenarios/terapipe";
  o.settings = {4};
  o.json = temp_dir("terapipe") + "/t.json";
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_terapipe(o, f); });
  EXPECT_FALSE(failed);
  EXPECT_TRUE(has(out, "TeraPipe Table 2")) << out;
  EXPECT_TRUE(has(out, "\n  4 GPT3-13B  |    2.637 ")) << out;
  EXPECT_TRUE(has(out, "MAPE over 2 latencies: ")) << out;
  EXPECT_TRUE(has(out, "The paper's scheme vs the DP's")) << out;
  EXPECT_TRUE(has(out, "Table 1 batch vs the largest batch that fits")) << out;
  const auto j = nlohmann::json::parse(read_text(o.json));
  EXPECT_EQ(j["schema"], "pipescope.repro.terapipe/1");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["paper_slices"], 2);
}

TEST(ReproTables, PlanMaxBatch) {
  const Scenario s = load_scenario(kSource + "/scenarios/terapipe/setting-4-gpipe.yaml");
  const std::string out = printed([&](std::FILE* f) { print_max_batch_plan(s, 0, f); });
  EXPECT_TRUE(has(out, "memory per GPU ")) << out;
  EXPECT_TRUE(has(out, "max batch         ")) << out;
  const std::string tiny = printed([&](std::FILE* f) { print_max_batch_plan(s, 0.001, f); });
  EXPECT_TRUE(has(tiny, "max batch         none: one sequence per replica already needs")) << tiny;
}

TEST(ReproTables, MegatronAblationSetUp) {
  const Scenario s = megatron_gpt3_175b(24, true, false);
  EXPECT_EQ(s.schedule.kind, ScheduleKind::Interleaved);
  EXPECT_EQ(s.parallel.v, 2);
  EXPECT_EQ(s.parallel.global_batch, 24);
  EXPECT_FALSE(s.schedule.scatter_gather);
  EXPECT_EQ(s.sim.p2p, "blocking");
  EXPECT_EQ(s.parallel.dp * s.parallel.pp * s.parallel.tp, 96);
}

TEST(ReproTables, MegatronOneRowAndJson) {
  ReproMegatronOptions o;
  o.dir = kSource + "/scenarios/megatron";
  o.rows = {1};
  o.ablation = false;
  o.json = temp_dir("megatron") + "/m.json";
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_megatron(o, f); });
  EXPECT_FALSE(failed);
  EXPECT_TRUE(has(out, "\n1.7B       32 ")) << out;
  EXPECT_TRUE(has(out, "MAPE over 1 rows: ")) << out;
  EXPECT_FALSE(has(out, "GPT-3 175B, 96 GPUs"));
  const auto j = nlohmann::json::parse(read_text(o.json));
  EXPECT_EQ(j["schema"], "pipescope.repro.megatron/1");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["params"], "1.7B");
  EXPECT_TRUE(j["ablation"].empty());
}

TEST(ReproTables, MegatronRowWithAnotherGpuCountIsRefused) {
  const std::string dir = temp_dir("megatron_bad");
  fs::copy_file(kSource + "/scenarios/megatron/3.6b.yaml", dir + "/1.7b.yaml", fs::copy_options::overwrite_existing);
  ReproMegatronOptions o;
  o.dir = dir;
  o.rows = {1};
  o.ablation = false;
  try {
    printed([&](std::FILE* f) { repro_megatron(o, f); });
    FAIL() << "accepted a row with another GPU count";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "but the paper's row 1.7B uses 32 GPUs")) << e.what();
  }
}

TEST(ReproTables, Seq1f1bMemoryOnly) {
  ReproSeq1f1bOptions o;
  o.dir = kSource + "/scenarios/seq1f1b";
  o.models = {"30b"};
  o.memory_only = true;
  o.json = temp_dir("seq1f1b") + "/s.json";
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_seq1f1b(o, f); });
  EXPECT_FALSE(failed);
  EXPECT_FALSE(has(out, "TFLOP/s per GPU"));  // no simulation
  EXPECT_TRUE(has(out, "Peak memory per GPU")) << out;
  EXPECT_TRUE(has(out, "Seq1F1B-I so in 3 cells")) << out;
  EXPECT_TRUE(has(out, "Reserved memory per GPU")) << out;
  const auto j = nlohmann::json::parse(read_text(o.json));
  EXPECT_EQ(j["memory_only"], true);
  ASSERT_EQ(j["cells"].size(), 6u);  // 3 sequence lengths x 2 micro-batch counts
  EXPECT_FALSE(j["cells"][0]["methods"]["1f1b"].contains("iteration_s"));
}

TEST(ReproTables, Seq1f1bSimulatedCellAndFailedCells) {
  // One cell's four scenarios; the model's other five cells have no files and fail, each on its own line.
  const std::string dir = temp_dir("seq1f1b_one");
  for (const char* m : {"1f1b", "interleaved", "seq1f1b", "seq1f1b-i"}) {
    const std::string f = std::string("2.7b-s16384-m16-") + m + ".yaml";
    fs::copy_file(kSource + "/scenarios/seq1f1b/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  }
  ReproSeq1f1bOptions o;
  o.dir = dir;
  o.models = {"2.7b"};
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_seq1f1b(o, f); });
  EXPECT_TRUE(failed);
  EXPECT_TRUE(has(out, "2.7b   24576  16 | error: ")) << out;
  EXPECT_TRUE(has(out, "TFLOP/s per GPU")) << out;
  EXPECT_TRUE(has(out, "Seq1F1B-I ahead of Seq1F1B in ")) << out;
  EXPECT_TRUE(has(out, "claims: [a] holds in ")) << out;
  EXPECT_TRUE(has(out, " of 1 cells")) << out;
}

TEST(ReproTables, Seq1f1bPlan) {
  const Scenario s = load_scenario(kSource + "/scenarios/seq1f1b/2.7b-s16384-m16-seq1f1b.yaml");
  const std::string out = printed([&](std::FILE* f) { print_seq1f1b_plan(s, f); });
  EXPECT_TRUE(has(out, "split points      ")) << out;
  EXPECT_TRUE(has(out, "segment FLOPs     ")) << out;
  for (const char* m : {"\n1f1b ", "\ninterleaved ", "\nseq1f1b ", "\nseq1f1b-i "}) EXPECT_TRUE(has(out, m)) << m;
}

// The vTrain CSV's header and its first `rows` rows, `from` replaced by `to` in the last one.
std::string vtrain_csv(const std::string& name, int rows, const std::string& from = "", const std::string& to = "") {
  std::ifstream in(kSource + "/tests/data/vtrain_a100_dev.csv");
  std::string line, text;
  for (int i = 0; i <= rows && std::getline(in, line); i++) {
    if (i == rows && !from.empty()) line.replace(line.find(from), from.size(), to);
    text += line + "\n";
  }
  const std::string path = temp_dir("vtrain") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ReproTables, VtrainSmallCsv) {
  ReproVtrainOptions o;
  o.csv = vtrain_csv("three.csv", 3);
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_vtrain(o, f); });
  EXPECT_FALSE(failed);
  EXPECT_TRUE(has(out, "vTrain measured runs (" + o.csv + ") on cluster preset vtrain-a100")) << out;
  EXPECT_TRUE(has(out, "MAPE over 3 rows: ")) << out;
  EXPECT_TRUE(has(out, "pair ranking: ")) << out;
  EXPECT_TRUE(has(out, "worst rows:\n")) << out;
  o.cluster = "no-such-cluster";
  EXPECT_THROW(repro_vtrain(o, stdout), std::invalid_argument);
}

TEST(ReproTables, VtrainRowThatFailsIsReportedAndTheTableGoesOn) {
  ReproVtrainOptions o;
  // Row 2 as GPipe: its scenario is refused (only 1F1B rows are read), the other row still runs.
  o.csv = vtrain_csv("bad.csv", 2, ",512,1f1b,", ",512,gpipe,");
  o.json = temp_dir("vtrain_json") + "/v.json";
  std::exception_ptr failed;
  const std::string out = printed([&](std::FILE* f) { failed = repro_vtrain(o, f); });
  EXPECT_TRUE(failed);
  EXPECT_TRUE(has(out, "| error: ")) << out;
  EXPECT_TRUE(has(out, "MAPE over 1 rows: ")) << out;
  const auto j = nlohmann::json::parse(read_text(o.json));
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_TRUE(j["rows"][1].contains("error"));
  EXPECT_TRUE(j["rows"][0].contains("simulated_s"));
}

}  // namespace
}  // namespace pipescope::sim
