// The run-result record (sim/run_result.h): its fields described once, and every view made from that list.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "sim/run_result.h"

namespace pipescope::sim {
namespace {

// A result whose every field differs from its default, with doubles that need all 17 digits.
RunResult sample() {
  RunResult r;
  r.scenario = "a \"quoted\", name";
  r.schedule = "1f1b";
  r.gpus = 16, r.dp = 2, r.pp = 4, r.tp = 2, r.v = 3, r.m = 17;
  r.micro_batch_size = 2, r.global_batch = 68, r.seq_len = 2048, r.slices = 4;
  r.slice_tokens = "512 512 512 512";
  r.iteration_s = 0.1 + 0.2, r.pipeline_end_s = 1.0 / 3, r.idle_fraction = std::sqrt(0.02);
  r.idle_ratio = 2.0 / 7, r.bubble_fraction = 1.0 / 7, r.mfu = std::sqrt(0.3), r.tflops_per_gpu = 123.456789012345,
  r.model_tflops_per_gpu = 99.000000000000014;
  r.tokens_per_s = 153688.12345678901, r.peak_memory_bytes = 9548123456.789, r.oom = true;
  double x = 0.1;
  for (const TimePart& p : time_parts()) r.breakdown.*p.member = (x += 1.0 / 3);
  r.report_json = "{\"x\": 1}", r.trace_json = "[]";
  r.wall_s = 1e-3 / 3, r.sim_wall_s = 2e-4 / 7, r.activities = 12345, r.dag_nodes = 678, r.peak_rss_kb = 4096;
  return r;
}

TEST(RunResult, EveryFieldCrossesTheEncodingExactly) {
  const RunResult a = sample();
  const RunResult b = decode(encode(a));
  for (const ResultField& f : result_fields())
    std::visit([&](auto m) { EXPECT_EQ(field_ref(a, m), field_ref(b, m)) << f.name; }, f.member);
}

TEST(RunResult, EveryMemberIsAField) {
  // A member left out of the list would not cross the pipe: the listed members fill the record but for its padding
  // (less than one double).
  std::size_t bytes = 0;
  for (const ResultField& f : result_fields())
    std::visit([&](auto m) { bytes += sizeof(std::decay_t<decltype(field_ref(RunResult{}, m))>); }, f.member);
  EXPECT_LT(sizeof(RunResult) - bytes, sizeof(double)) << "RunResult has a member that result_fields() does not list";
  std::set<std::string> names;
  for (const ResultField& f : result_fields()) EXPECT_TRUE(names.insert(f.name).second) << f.name;
}

TEST(RunResult, TheCsvRowHasTheHeadersColumns) {
  const std::string header = result_csv_header();
  EXPECT_EQ(header.rfind("scenario,schedule,gpus,", 0), 0u);
  EXPECT_NE(header.find(",peak_memory_GB,oom"), std::string::npos);
  EXPECT_EQ(header.find("report_json"), std::string::npos);  // carried between processes only
  const std::string row = result_csv_row(sample());
  EXPECT_EQ(row.rfind("\"a \"\"quoted\"\", name\",1f1b,16,2,4,2,3,17,", 0), 0u) << row;
  EXPECT_NE(row.find(",9.54812346,1"), std::string::npos) << row;  // GB, %.9g; the flag as 1
}

// The simulate report's figures are the RunFigures fields of result_fields(), under their columns, with the values:
// the keys a report and a sweep row share are one list.
TEST(RunResult, TheReportFiguresAreTheSharedFields) {
  const RunResult r = sample();
  nlohmann::ordered_json j;
  put_figures(j, r);
  const nlohmann::ordered_json row = result_json(r);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) {
    keys.push_back(key);
    EXPECT_EQ(value, row.at(key)) << key;
  }
  const std::vector<std::string> want = {"scenario",
                                         "schedule",
                                         "gpus",
                                         "dp",
                                         "pp",
                                         "tp",
                                         "v",
                                         "m",
                                         "micro_batch_size",
                                         "global_batch",
                                         "seq_len",
                                         "iteration_s",
                                         "pipeline_end_s",
                                         "bubble_fraction",
                                         "idle_fraction",
                                         "idle_ratio",
                                         "tflops_per_gpu",
                                         "model_tflops_per_gpu",
                                         "mfu",
                                         "tokens_per_s"};
  EXPECT_EQ(keys, want);
}

TEST(RunResult, TheJsonRowHasTheColumnsInOrder) {
  const nlohmann::ordered_json j = result_json(sample());
  std::string keys;
  for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ",") + k;
  EXPECT_EQ(keys, result_csv_header());
  EXPECT_EQ(j["peak_memory_GB"].get<double>(), sample().peak_memory_bytes / 1e9);
  EXPECT_EQ(j["m"].get<int>(), 17);
  EXPECT_TRUE(j["oom"].get<bool>());
}

TEST(RunResult, TheSweepSchemaDescribesEveryColumn) {
  std::ifstream in(std::string(PIPESCOPE_SOURCE_DIR) + "/docs/schemas/sweep.schema.json");
  ASSERT_TRUE(in) << "docs/schemas/sweep.schema.json";
  const nlohmann::json schema = nlohmann::json::parse(in);
  const nlohmann::json& result = schema["properties"]["rows"]["items"]["properties"]["result"];
  std::set<std::string> described, columns;
  for (const auto& [k, v] : result["properties"].items()) described.insert(k);
  for (const ResultField& f : result_fields())
    if (f.column) columns.insert(f.column);
  EXPECT_EQ(described, columns);
}

TEST(RunResult, MalformedAnswersAreRefused) {
  EXPECT_THROW(decode("not json"), std::runtime_error);
  EXPECT_THROW(decode("{}"), std::runtime_error);  // a field missing
  EXPECT_THROW(result_field("no_such_column"), std::logic_error);
}

}  // namespace
}  // namespace pipescope::sim
