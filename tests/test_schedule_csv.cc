// Schedules as files in PyTorch pipelining's CSV format (core/schedule_csv.h): every generated schedule
// round-trips (export, load, the same IR and the same text), and bad files are rejected naming the rank and
// the cell: malformed cells (input errors), a deadlock, an unmatched send, a stage on two ranks, duplicated and
// missing ops, PyTorch's counts (schedule rejections).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/checks.h"
#include "core/schedule.h"
#include "core/schedule_csv.h"
#include "core/seq1f1b.h"

namespace pipescope {
namespace {

CsvScheduleShape shape(int p, int v, int m, int seq_len = 8, int k = 1) {
  return {p, v, uniform_microbatches(m, 1, seq_len, k), seq_len};
}

CsvScheduleShape shape_of(const Schedule& s) { return {s.p, s.v, s.microbatches, s.seq_len}; }

// Every generator of this build, on a small shape: the file holds the same ops in the same order.
TEST(ScheduleCsv, EveryGeneratedScheduleRoundTrips) {
  const auto whole = uniform_microbatches(4, 1, 12, 1), sliced = uniform_microbatches(4, 1, 12, 3);
  const auto two_slices = uniform_microbatches(4, 1, 12, 2);
  const Schedule schedules[] = {make_gpipe(2, whole, 12),       make_1f1b(4, whole, 12),
                                make_interleaved(2, 2, whole, 12), make_gpipe(2, sliced, 12),
                                make_seq1f1b(2, sliced, 12),    make_seq1f1b_interleaved(2, 2, two_slices, 12)};
  for (const Schedule& s : schedules) {
    SCOPED_TRACE(s.name);
    const std::string csv = schedule_to_csv(s);
    const Schedule back = schedule_from_csv(csv, "rt.csv", shape_of(s));
    ASSERT_EQ(back.per_rank.size(), s.per_rank.size());
    for (int r = 0; r < s.p; r++) EXPECT_EQ(back.per_rank[r], s.per_rank[r]) << "rank " << r;
    EXPECT_EQ(back.p, s.p);
    EXPECT_EQ(back.v, s.v);
    EXPECT_EQ(back.m, s.m);
    EXPECT_EQ(schedule_to_csv(back), csv);
  }
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
            "<stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>[@<slice>], e.g. 2F0)");
  EXPECT_EQ(input_error("0F0,0UNSHARD\n", shape(1, 1, 1)).substr(0, 95),
            "t.csv: rank 0 (row 1, column 2): \"0UNSHARD\": UNSHARD actions are not supported (pipescope model");
  EXPECT_EQ(input_error("0F\n", shape(1, 1, 1)).substr(0, 60),
            "t.csv: rank 0 (row 1, column 1): \"0F\": no micro-batch number");
  EXPECT_EQ(input_error("0F0,0B0\n", sh), "t.csv: has 1 rows (ranks), but the scenario has parallel.pp = 2 (one row "
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
  EXPECT_EQ(schedule_text(schedule_from_csv(ok, "t.csv", shape(2, 1, 2))), "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1\n");
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
            "t.csv: stage 0 is on rank 1 (first at rank 1 (row 2, column 1)), but the IR places virtual stage g on "
            "rank g % pp = 0");
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1B0,1F0,1B1\n", sh),
            "t.csv: \"1F0\" appears twice: rank 1 (row 2, column 1) and rank 1 (row 2, column 3)");
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1B0,1B1\n", sh),
            "t.csv: stage 1 (rank 1) has 1 forwards, but the scenario has 2 micro-batches");
  EXPECT_EQ(rejection("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n", sh),
            "t.csv: stage 0 has B + (I + W) / 2 = 1 + (0 + 0) / 2 backwards, but the scenario has 2 micro-batches");
  EXPECT_EQ(rejection("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n", shape(2, 2, 2)), "t.csv: stage 2 has no action on any rank");
}

}  // namespace
}  // namespace pipescope
