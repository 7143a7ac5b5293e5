// Traces Perfetto can show faithfully (core/util/trace_check.h): the checker itself, then `pipescope simulate --trace`
// over shipped scenarios: no overlapping events on any track (ts and dur were rounded separately: 4 / 31 / 1,758
// overlaps in the default, a Seq1F1B and TeraPipe setting 4), every flow send -> receive with both ends, a
// compute track for every GPU of every TP rank, and the args keys the measured trace also carries.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/lower/trace_json.h"
#include "core/util/atomic_file.h"
#include "core/util/trace_check.h"
#include "sim/report.h"

namespace pipescope {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(TraceCheck, FindsOverlapsAndBrokenFlows) {
  const std::string ok = R"({"traceEvents":[
    {"name":"a","ph":"X","pid":0,"tid":1,"ts":0.000,"dur":1.500},
    {"name":"b","ph":"X","pid":0,"tid":1,"ts":1.500,"dur":1.000},
    {"name":"r","ph":"X","pid":1,"tid":1,"ts":0.000,"dur":2.000},
    {"name":"p2p","ph":"s","id":1,"pid":0,"tid":1,"ts":0.000},
    {"name":"p2p","ph":"f","bp":"e","id":1,"pid":1,"tid":1,"ts":0.000}]})";
  const TraceCheck c = check_trace(ok);
  EXPECT_TRUE(c.problems.empty()) << c.problems.front();
  EXPECT_EQ(c.events, 3u);
  EXPECT_EQ(c.flows, 1u);
  // b starts 1 ns before a ends; the flow's finish is on a track with no event.
  const std::string bad = R"({"traceEvents":[
    {"name":"a","ph":"X","pid":0,"tid":1,"ts":0.000,"dur":1.500},
    {"name":"b","ph":"X","pid":0,"tid":1,"ts":1.499,"dur":1.000},
    {"name":"p2p","ph":"s","id":1,"pid":0,"tid":1,"ts":0.000},
    {"name":"p2p","ph":"f","bp":"e","id":1,"pid":1,"tid":1,"ts":0.000},
    {"name":"p2p","ph":"s","id":2,"pid":0,"tid":1,"ts":0.000}]})";
  const TraceCheck d = check_trace(bad);
  ASSERT_EQ(d.problems.size(), 3u);
  EXPECT_NE(d.problems[0].find("a [0, 1500) ns overlaps b starting at 1499 ns"), std::string::npos) << d.problems[0];
  EXPECT_NE(d.problems[1].find("flow 1: finish outside"), std::string::npos) << d.problems[1];
  EXPECT_NE(d.problems[2].find("flow 2: 1 start(s), 0 finish(es)"), std::string::npos) << d.problems[2];
  EXPECT_THROW(check_trace("[1, 2]"), std::invalid_argument);
}

struct Case {
  const char* scenario;  // relative to the source tree
  int gpus;              // compute tracks: every GPU of every TP rank
  bool flows = true;     // pp > 1: stage-to-stage transfers
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.scenario; }

class ShippedTrace : public ::testing::TestWithParam<Case> {};

TEST_P(ShippedTrace, NoOverlapsFlowsCompleteEveryGpuCommonArgs) {
  const Case c = GetParam();
  std::string name = c.scenario;
  for (char& ch : name)
    if (ch == '/' || ch == '.') ch = '_';
  const std::string out = std::string(PIPESCOPE_BINARY_DIR) + "/tests/trace_" + name + ".json";
  const std::string cmd = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope simulate " + PIPESCOPE_SOURCE_DIR + "/" +
                          c.scenario + " --trace " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string text = slurp(out);
  const TraceCheck r = check_trace(text);
  for (const auto& p : r.problems) ADD_FAILURE() << c.scenario << ": " << p;
  if (c.flows) {
    EXPECT_GT(r.flows, 0u) << "no send -> receive flows";
  }

  const auto j = nlohmann::json::parse(text);
  std::set<std::pair<int, int>> compute_tracks;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    for (const char* key :
         {"op", "kind", "worker", "pp_rank", "dp_replica", "micro_batch", "chunk", "slice", "tp_rank", "dag_node"})
      ASSERT_TRUE(e["args"].contains(key)) << key << " missing in " << e.dump();
    if (e["cat"] == "compute") compute_tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
  }
  EXPECT_EQ(static_cast<int>(compute_tracks.size()), c.gpus);
  std::remove(out.c_str());
}

// The top-level scenarios, three reference ones (default, Seq1F1B, TeraPipe setting 4) and one per folder and
// schedule kind whose trace stays small enough for the suite (Megatron's 1T row writes ~10 GB).
INSTANTIATE_TEST_SUITE_P(
    Scenarios, ShippedTrace,
    ::testing::Values(Case{"scenarios/default.yaml", 16}, Case{"scenarios/full-schema.yaml", 16},
                      Case{"scenarios/interleaved-small.yaml", 8}, Case{"scenarios/seq1f1b-2.7b.yaml", 8},
                      Case{"scenarios/calib/cpu-2rank.yaml", 2}, Case{"scenarios/terapipe/setting-4.yaml", 320},
                      Case{"scenarios/terapipe/setting-1.yaml", 192},
                      Case{"scenarios/seq1f1b/2.7b-s16384-m16-seq1f1b-i.yaml", 8},
                      Case{"scenarios/moe/qwen3-30b-a3b.yaml", 16}, Case{"scenarios/megatron/3.6b.yaml", 64, false}),
    [](const ::testing::TestParamInfo<Case>& i) {
      std::string n = i.param.scenario;
      n = n.substr(10);  // without "scenarios/"
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// --trace-ranks / --trace-replicas: the default scenario (dp 2 x pp 4 x tp 2) cut to ranks 1:2 of replica 0 keeps
// those four GPUs' compute tracks, the 1 -> 2 transfers with their arrows (both ends kept), the half arrows of
// 0 -> 1 and 2 -> 3 dropped (the checker would report them), and says which part it holds.
TEST(TraceSubset, KeepsTheGpusOfTheRanksAndReplicasAsked) {
  const std::string out = std::string(PIPESCOPE_BINARY_DIR) + "/tests/trace_subset.json";
  const std::string cmd = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope simulate --trace " + out +
                          " --trace-ranks 1:2 --trace-replicas 0:0 > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string text = slurp(out);
  const TraceCheck r = check_trace(text);
  for (const auto& p : r.problems) ADD_FAILURE() << p;
  EXPECT_GT(r.flows, 0u);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["otherData"]["subset"]["pp_ranks"], "1:2");
  EXPECT_EQ(j["otherData"]["subset"]["dp_replicas"], "0:0");
  std::set<std::pair<int, int>> compute_tracks;
  std::set<int> ranks;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "compute") continue;
    compute_tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    ranks.insert(e["args"]["pp_rank"].get<int>());
    EXPECT_EQ(e["args"]["dp_replica"], 0);
  }
  EXPECT_EQ(compute_tracks.size(), 4u);
  EXPECT_EQ(ranks, (std::set<int>{1, 2}));
  std::remove(out.c_str());
  // Ranks the run does not have: a bad-input exit naming them, no file.
  const std::string bad =
      std::string(PIPESCOPE_BINARY_DIR) + "/pipescope simulate --trace " + out + " --trace-ranks 2:9 > /dev/null 2>&1";
  const int rc = std::system(bad.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  EXPECT_FALSE(std::ifstream(out).good());
}

// --compare --trace: each variant's processes get their own pid range, also on clusters of more than 1000 nodes
// (with a fixed stride of 1000, variant 0's node 1000 and variant 1's node 0 shared pid 1000), and the traces are
// merged from the variants' files, streamed.
TEST(MergedTraces, VariantsNeverShareAPid) {
  const std::string dir = std::string(PIPESCOPE_BINARY_DIR) + "/tests";
  for (int nodes : {2, 1001}) {
    std::vector<std::pair<std::string, std::string>> files;
    for (std::size_t i = 0; i < 2; i++) {
      const std::string name = i == 0 ? "1f1b" : "gpipe";
      const std::string path = dir + "/merge_" + std::to_string(nodes) + "_" + name + ".json";
      std::ofstream f(path);
      TraceJsonWriter w(f, 1, "\"schedule\":\"" + name + "\"", sim::compare_trace_layout(i, nodes, name));
      std::map<std::pair<int, int>, std::string> tracks;
      for (int n = 0; n < nodes; n++) tracks[{n, 0}] = "gpu0 compute";
      w.tracks(tracks);
      w.event("a", "compute", nodes - 1, 0, 0, 1e-3) << "\"op\":\"x\"";
      w.close_event();
      w.flow(true, 1, nodes - 1, 0, 0);
      w.finish();
      files.emplace_back(name, path);
    }
    const std::string out = dir + "/merged.json";
    {
      AtomicFileWriter w(out, "--trace");
      sim::merge_trace_files(w, files);
      w.commit();
    }
    const auto merged = nlohmann::json::parse(slurp(out));
    std::set<long long> pids;
    std::set<std::uint64_t> flows;
    for (const auto& e : merged["traceEvents"]) {
      if (e["name"] == "process_name") {
        EXPECT_TRUE(pids.insert(e["pid"].get<long long>()).second) << e;
        const bool first = e["pid"].get<long long>() < sim::compare_trace_layout(1, nodes, "").pid_base;
        EXPECT_EQ(e["args"]["name"].get<std::string>().rfind(first ? "1f1b node" : "gpipe node", 0), 0u) << e;
      }
      if (e.contains("id")) flows.insert(e["id"].get<std::uint64_t>());
    }
    EXPECT_EQ(pids.size(), static_cast<std::size_t>(2 * nodes));
    EXPECT_EQ(flows.size(), 2u);
    EXPECT_EQ(merged["otherData"]["gpipe"]["schedule"], "gpipe");
    if (nodes == 1001) {
      EXPECT_EQ(sim::compare_trace_layout(1, nodes, "x").pid_base, 10000);
    }
  }
  // A file write_trace did not write: refused, and the target is not created.
  const std::string bad = dir + "/merge_bad.json", out = dir + "/merged_bad.json";
  std::ofstream(bad) << "{\"traceEvents\": [1]}\n";
  std::remove(out.c_str());
  {
    AtomicFileWriter w(out, "--trace");
    EXPECT_THROW(sim::merge_trace_files(w, {{"x", bad}}), std::runtime_error);
  }
  EXPECT_FALSE(std::ifstream(out).good());
}

// The command: a comparison's merged trace passes the checker, and no scratch file stays in TMPDIR.
TEST(MergedTraces, CompareTraceIsWholeAndLeavesNoScratch) {
  const std::string tmp = std::string(PIPESCOPE_BINARY_DIR) + "/tests/compare_tmp";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  const std::string out = std::string(PIPESCOPE_BINARY_DIR) + "/tests/compare_trace.json";
  const std::string cmd = "TMPDIR=" + tmp + " " + std::string(PIPESCOPE_BINARY_DIR) +
                          "/pipescope simulate --compare 1f1b,gpipe,interleaved --trace " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const TraceCheck r = check_trace(slurp(out));
  for (const auto& p : r.problems) ADD_FAILURE() << p;
  EXPECT_GT(r.flows, 0u);
  const auto j = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(j["otherData"].size(), 3u);
  EXPECT_TRUE(std::filesystem::is_empty(tmp));
}

}  // namespace
}  // namespace pipescope
