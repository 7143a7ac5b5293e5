// Schedules as files in PyTorch pipelining's CSV format (core/ir/schedule_csv.h): every generated schedule
// round-trips (export, load, the same IR and the same text), and bad files are rejected naming the rank and
// the cell: malformed cells (input errors), a deadlock, an unmatched send, a stage on two ranks, duplicated and
// missing ops, PyTorch's counts (schedule rejections).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/ir/schedule.h"
#include "core/ir/schedule_csv.h"
#include "core/lower/checks.h"
#include "core/model/schedule_registry.h"

namespace pipescope {
namespace {

CsvScheduleShape shape(int p, int v, int m, int seq_len = 8, int k = 1) {
  return {p, v, uniform_microbatches(m, 1, seq_len, k), seq_len};
}

CsvScheduleShape shape_of(const Schedule& s) { return {s.p, s.v, s.microbatches, s.seq_len}; }

// Every registered generator, on a small shape (2 and 4 ranks, 4 micro-batches, 2 slices where the schedule
// slices): the file holds the same ops in the same order, on the same stage placement.
TEST(ScheduleCsv, EveryGeneratedScheduleRoundTrips) {
  int n = 0;
  for (const ScheduleEntry& e : schedule_registry()) {
    if (e.traits.from_file) continue;
    for (int p : {2, 4}) {
      SCOPED_TRACE(std::string(e.name) + " p " + std::to_string(p));
      const auto mbs = uniform_microbatches(4 * p / 2, 1, 12, e.traits.sliced() ? 2 : 1);
      const Schedule s = e.generate(p, e.traits.fit_v(1), mbs, 12);
      const std::string csv = schedule_to_csv(s);
      const Schedule back = schedule_from_csv(csv, "rt.csv", shape_of(s));
      ASSERT_EQ(back.per_rank.size(), s.per_rank.size());
      for (int r = 0; r < s.p; r++) EXPECT_EQ(back.per_rank[r], s.per_rank[r]) << "rank " << r;
      EXPECT_EQ(back.v, s.v);
      EXPECT_EQ(back.m, s.m);
      EXPECT_EQ(back.style, s.style);
      EXPECT_EQ(schedule_to_csv(back), csv);
      n++;
    }
  }
  EXPECT_GE(n, 18);
}

TEST(ScheduleCsv, PyTorchTextWithIdleCells) {
  // 1F1B on 2 ranks, 2 micro-batches, as PyTorch writes it (empty cells = idle steps, CRLF line ends).
  const Schedule s = schedule_from_csv("0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n", "t.csv", shape(2, 1, 2));
  EXPECT_EQ(schedule_text(s), "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1\n");
  // Slices: the @slice extension.
  const Schedule k = schedule_from_csv("0F0@0,0F0@1,0B0@1,0B0@0\n", "k.csv", shape(1, 1, 1, 8, 2));
  EXPECT_EQ(schedule_text(k), "r0: 0F0 0F0s1 0B0s1 0B0\n");
  EXPECT_EQ(k.per_rank[0][1].tok_begin, 4);
}

std::string input_error(const std::string& text, const CsvScheduleShape& sh) {
  try {
    schedule_from_csv(text, "t.csv", sh);
  } catch (const CheckError& e) {
    return std::string("CheckError: ") + e.what();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string rejection(const std::string& text, const CsvScheduleShape& sh) {
  try {
    schedule_from_csv(text, "t.csv", sh);
  } catch (const CheckError& e) {
    return e.what();
  } catch (const std::invalid_argument& e) {
    return std::string("invalid_argument: ") + e.what();
  }
  return "";
}

TEST(ScheduleCsv, MalformedFilesAreInputErrors) {
  const auto sh = shape(2, 1, 2);
  EXPECT_EQ(input_error("0F0,0X1\n1F0\n", sh),
            "t.csv: rank 0 (row 1, column 2): \"0X1\": unknown action type (an action is "
            "<stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>[@<slice>], e.g. 2F0, or FSDP's "
            "<stage><UNSHARD|RESHARD|REDUCE_GRAD>, e.g. 2UNSHARD)");
  EXPECT_EQ(input_error("0UNSHARD0,0F0\n", shape(1, 1, 1)).substr(0, 110),
            "t.csv: rank 0 (row 1, column 1): \"0UNSHARD0\": FSDP's actions name a stage only (no micro-batch), e.g. "
            "0UNSHARD");
  EXPECT_EQ(input_error("0F\n", shape(1, 1, 1)).substr(0, 60),
            "t.csv: rank 0 (row 1, column 1): \"0F\": no micro-batch number");
  EXPECT_EQ(input_error("0F0,0B0\n", sh),
            "t.csv: has 1 rows (ranks), but the scenario has parallel.pp = 2 (one row "
            "per pipeline rank)");
  EXPECT_EQ(input_error("0F0,0F1,0B0,0B1\n1F0,1B0,1F5,1B1\n", sh),
            "t.csv: rank 1 (row 2, column 3): \"1F5\": micro-batch 5 outside 0..1 (the scenario has 2 "
            "micro-batches per replica)");
  EXPECT_EQ(input_error("0F0,0F1,0B0,0B1\n2F0\n", sh),
            "t.csv: rank 1 (row 2, column 1): \"2F0\": stage 2 outside 0..1 (pp * v = 2 * 1 virtual stages)");
  EXPECT_EQ(input_error("0F0,0B0\n", shape(1, 1, 1, 8, 2)),
            "t.csv: rank 0 (row 1, column 1): \"0F0\": micro-batch 0 has 2 token slices; write the slice as "
            "@<slice>, e.g. \"0F0@0\"");
}

TEST(ScheduleCsv, HandWrittenDeadlockIsRejectedNamingRanksAndCells) {
  // Rank 0 runs micro-batch 0 through its backward before forwarding micro-batch 1; rank 1 insists on
  // micro-batch 1 first: 0B0 needs 1B0, which comes after 1F1, which needs 0F1, which comes after 0B0.
  const std::string csv = "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n";
  EXPECT_EQ(rejection(csv, shape(2, 1, 2)),
            "t.csv: deadlock: the ranks' orders form a cycle: \"0B0\" at rank 0 (row 1, column 2) waits for "
            "\"1B0\" at rank 1 (row 2, column 4); \"1F1\" at rank 1 (row 2, column 1) waits for \"0F1\" at rank 0 "
            "(row 1, column 3)");
  try {
    schedule_from_csv(csv, "t.csv", shape(2, 1, 2));
  } catch (const CheckError& e) {
    EXPECT_EQ(e.ops(), (std::vector<std::string>{"0B0", "1F1"}));
  }
  // A backward before its own forward on one rank.
  EXPECT_EQ(rejection("0B0,0F0\n", shape(1, 1, 1)),
            "t.csv: deadlock: the ranks' orders form a cycle: \"0B0\" at rank 0 (row 1, column 1) waits for "
            "\"0F0\" at rank 0 (row 1, column 2)");
}

TEST(ScheduleCsv, UnmatchedSendIsRejected) {
  // compute_comms form: rank 0 sends 0F1 but rank 1 never posts its receive.
  const std::string csv =
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n";
  EXPECT_EQ(rejection(csv, shape(2, 1, 2)),
            "t.csv: send \"0SEND_F1\" at rank 0 (row 1, column 4) has no matching 1RECV_F1 on rank 1");
  // With the receive the same file loads and is the plain 1F1B order.
  const std::string ok =
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n";
  EXPECT_EQ(schedule_text(schedule_from_csv(ok, "t.csv", shape(2, 1, 2))),
            "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1\n");
  // A receive after its consumer, a send before its producer.
  EXPECT_EQ(rejection("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n", shape(2, 1, 1)),
            "t.csv: \"1RECV_F0\" at rank 1 (row 2, column 2) comes after its consumer \"1F0\" at rank 1 (row 2, "
            "column 1)");
  EXPECT_EQ(rejection("0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", shape(2, 1, 1)),
            "t.csv: \"0SEND_F0\" at rank 0 (row 1, column 1) comes before its producer \"0F0\" at rank 0 (row 1, "
            "column 2)");
  // A hop without its send once the file uses the compute_comms form.
  EXPECT_EQ(rejection("0F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n", shape(2, 1, 1)),
            "t.csv: the file has send and receive actions, but \"0F0\" at rank 0 (row 1, column 1) has no 0SEND_F0");
}

TEST(ScheduleCsv, LayoutAndCountErrorsAreRejections) {
  const auto sh = shape(2, 1, 2);
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1B0,0F1,1B1\n", sh),
            "t.csv: stage 0 is on two ranks: \"0F0\" at rank 0 (row 1, column 1) and \"0F1\" at rank 1 (row 2, "
            "column 3)");
  EXPECT_EQ(rejection("1F0,1F1,1B0,1B1\n0F0,0F1,0B0,0B1\n", sh),
            "t.csv: stage 0 is on rank 1 (first at rank 1 (row 2, column 1)): the stages follow neither the loop "
            "placement (stage g on rank g % pp) nor the V placement (rank r holds stages r and 2 pp - 1 - r)");
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1B0,1F0,1B1\n", sh),
            "t.csv: \"1F0\" appears twice: rank 1 (row 2, column 1) and rank 1 (row 2, column 3)");
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1B0,1B1\n", sh),
            "t.csv: stage 1 (rank 1) has 1 forwards, but the scenario has 2 micro-batches");
  EXPECT_EQ(rejection("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n", sh),
            "t.csv: stage 0 has B + (I + W) / 2 = 1 + (0 + 0) / 2 backwards, but the scenario has 2 micro-batches");
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n", shape(2, 2, 2)),
            "t.csv: stage 2 has no action on any rank");
  // Split backward: PyTorch's I = W rule, and a backward written both ways.
  EXPECT_EQ(rejection("0F0,0I0\n", shape(1, 1, 1)),
            "t.csv: stage 0 has 1 I (backward for inputs) but 0 W (backward for weights) actions; each I needs its W");
  EXPECT_EQ(rejection("0F0,0B0,0I0,0W0\n", shape(1, 1, 1)),
            "t.csv: stage 0 has B + (I + W) / 2 = 1 + (1 + 1) / 2 backwards, but the scenario has 1 micro-batches");
  EXPECT_EQ(rejection("0F0,0W0,0I0\n", shape(1, 1, 1)),
            "t.csv: deadlock: the ranks' orders form a cycle: \"0W0\" at rank 0 (row 1, column 2) waits for \"0I0\" "
            "at rank 0 (row 1, column 3)");
  // A V placement (ZB-V's): rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
  const Schedule v = schedule_from_csv("0F0,3F0,3I0,0I0,3W0,0W0\n1F0,2F0,2I0,1I0,2W0,1W0\n", "v.csv", shape(2, 2, 1));
  EXPECT_EQ(v.style, StageStyle::V);
  EXPECT_EQ(v.per_rank[0][1].chunk, 1);
}

// ---------------------------------------------------------------- through the pipescope binary

const std::string kExe = std::string(PIPESCOPE_BINARY_DIR) + "/pipescope";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

struct CliRun {
  int rc = -1;
  std::string err;
};
CliRun pipescope(const std::string& args, const std::string& base) {
  const int st = std::system((kExe + " " + args + " > " + base + ".out 2> " + base + ".err").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(base + ".err")};
}

// A small scenario for `kind` (8 GPUs: dp 2 x pp 4, 8 micro-batches) with the schedule section `schedule`.
std::string scenario_text(const ScheduleEntry& e, const std::string& schedule) {
  const int v = e.traits.fit_v(1);
  return "model: {preset: gpt3-1b, layers: 8, seq_len: 1024}\n"
         "cluster: {preset: dgx-a100, nodes: 1}\n"
         "parallel: {dp: 2, pp: 4, tp: 1, v: " +
         std::to_string(v) +
         ", global_batch: 16}\n"
         "schedule: " +
         schedule + "\n";
}

// Export every generated schedule with `show --csv`, simulate it as kind file: the same JSON report apart from
// the scenario and schedule names.
TEST(ScheduleCsvCli, EveryRegisteredScheduleRoundTripsThroughAFile) {
  const std::string dir = ::testing::TempDir() + "/csv_rt_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  int kinds = 0;
  for (const ScheduleEntry& e : schedule_registry()) {
    if (e.traits.from_file) continue;
    SCOPED_TRACE(e.name);
    kinds++;
    const std::string base = dir + "/" + e.name, slices = e.traits.sliced() ? ", seq_slices: 2" : "";
    write(base + ".yaml", scenario_text(e, "{kind: " + std::string(e.name) + slices + "}"));
    ASSERT_EQ(pipescope("show " + base + ".yaml --csv " + base + ".csv", base + "_show").rc, 0);
    // The file kind with a path relative to the scenario file.
    write(base + "-file.yaml", scenario_text(e, "{kind: file, file: " + std::string(e.name) + ".csv" + slices + "}"));
    ASSERT_EQ(pipescope("simulate " + base + ".yaml --json " + base + ".json", base + "_a").rc, 0);
    const CliRun b = pipescope("simulate " + base + "-file.yaml --json " + base + "-file.json", base + "_b");
    ASSERT_EQ(b.rc, 0) << b.err;
    auto ja = nlohmann::json::parse(slurp(base + ".json")), jb = nlohmann::json::parse(slurp(base + "-file.json"));
    EXPECT_EQ(ja["schedule"], e.name);
    EXPECT_EQ(jb["schedule"], "file");
    for (const char* k : {"scenario", "schedule"}) ja.erase(k), jb.erase(k);
    EXPECT_EQ(ja.dump(), jb.dump());
  }
  EXPECT_GE(kinds, 9);
}

TEST(ScheduleCsvCli, DeadlockAndUnmatchedSendExitTwoNamingTheCell) {
  const std::string dir = ::testing::TempDir() + "/csv_bad_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string yaml =
      "model: {preset: gpt3-1b, layers: 4, seq_len: 512}\n"
      "cluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 2}\n"
      "parallel: {pp: 2, global_batch: 2}\n";
  write(dir + "/deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  write(dir + "/deadlock.yaml", yaml + "schedule: {kind: file, file: deadlock.csv}\n");
  CliRun r = pipescope("simulate " + dir + "/deadlock.yaml", dir + "/deadlock");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("deadlock.csv: deadlock: the ranks' orders form a cycle: \"0B0\" at rank 0 (row 1, column 2) "
                       "waits for \"1B0\" at rank 1 (row 2, column 4)"),
            std::string::npos)
      << r.err;
  write(dir + "/send.csv",
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
  write(dir + "/send.yaml", yaml + "schedule: {kind: file, file: send.csv}\n");
  r = pipescope("simulate " + dir + "/send.yaml", dir + "/send");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("send \"0SEND_F1\" at rank 0 (row 1, column 4) has no matching 1RECV_F1 on rank 1"),
            std::string::npos)
      << r.err;
  // A missing file is a scenario error at schedule.file (exit 1).
  write(dir + "/missing.yaml", yaml + "schedule: {kind: file, file: nope.csv}\n");
  r = pipescope("simulate " + dir + "/missing.yaml", dir + "/missing");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(
      r.err.find("missing.yaml:4:30: schedule.file: " + dir + "/nope.csv: cannot open schedule file: No such file"),
      std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace pipescope
