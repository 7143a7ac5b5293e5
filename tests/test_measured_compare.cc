// validate's comparison (runtime/measured_compare.h): the statistics, the op-kind rows, simulated against measured
// on a synthetic measured run whose every number is known, the table and the JSON keys.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/lower/checks.h"
#include "runtime/measured_compare.h"
#include "runtime/scenario_fit.h"
#include "tests/printed.h"

namespace pipescope::runtime {
namespace {

using testing_print::printed;

int count_ops(const LoweredSchedule& ls, LOpKind kind, OpKind op = OpKind::Forward, bool by_op = false) {
  int n = 0;
  for (const auto& prog : ls.per_worker)
    for (const LoweredOp& l : prog) n += l.kind == kind && (!by_op || l.op.kind == op);
  return n;
}

// Every process of `ls`, `iterations` timed iterations: op i from i to i + 0.25 s (sends done at i + 0.5 s); the
// iteration ends at 10 + it s; each process spends 1 s in kernels, 2 s communicating and 1 s in overhead.
JobResult synthetic_run(const LoweredSchedule& ls, int iterations) {
  JobResult r;
  r.backend = "cpu-f64";
  r.tp = ls.tp;
  for (int w = 0; w < ls.workers(); w++)
    for (int t = 0; t < ls.tp; t++) {
      WorkerResult wr;
      wr.worker = w;
      wr.tp_rank = t;
      for (int it = 0; it < iterations; it++) {
        IterationStats st;
        for (std::size_t i = 0; i < ls.per_worker[w].size(); i++) {
          const double at = static_cast<double>(i);
          st.ops.push_back({at, at + 0.25, at + 0.5});
        }
        st.end_s = 10 + it;
        st.kernel_s = 1, st.comm_s = 2, st.overhead_s = 1;
        wr.iterations.push_back(st);
      }
      r.workers.push_back(wr);
    }
  return r;
}

struct Fixture {
  std::unique_ptr<Prepared> prep;
  CheckedSchedule cs;
};
Fixture one_f_one_b() {
  auto p = prepare_with_constant_costs(tiny_scenario("1f1b", 2, 2, 1, 2, 2, 16, 2, 12, 29));
  CheckedSchedule cs = check(p->lowered, p->placement);
  return {std::move(p), std::move(cs)};
}

TEST(MeasuredCompare, MedianMeanAndSpread) {
  EXPECT_EQ(median_of({}), 0);
  EXPECT_EQ(median_of({3, 1, 2}), 2);
  EXPECT_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(mean_of({}), 0);
  EXPECT_EQ(mean_of({1, 2, 6}), 3);
  const Spread s = spread_of({4, 1, 3, 2});
  EXPECT_EQ(s.n, 4u);
  EXPECT_EQ(s.min_s, 1);
  EXPECT_EQ(s.median_s, 2.5);
  EXPECT_EQ(s.max_s, 4);
  EXPECT_EQ(s.mean_s, 2.5);
  EXPECT_DOUBLE_EQ(s.stddev_s, std::sqrt(5.0 / 3.0));  // sample standard deviation
  EXPECT_EQ(spread_of({7}).stddev_s, 0);
  EXPECT_EQ(spread_json(spread_of({})), "{}");
  EXPECT_EQ(spread_json(spread_of({2})), R"({"n":1,"min":2.0,"median":2.0,"max":2.0,"mean":2.0,"stddev":0.0})");
}

TEST(MeasuredCompare, PercentError) {
  EXPECT_EQ(pct(1.1, 1.0), "+10.0%");
  EXPECT_EQ(pct(0.5, 1.0), "-50.0%");
  EXPECT_EQ(pct(1.0, 0.0), "-");
}

TEST(MeasuredCompare, RowsByOpKind) {
  LoweredOp l;
  l.kind = LOpKind::Compute;
  for (auto [op, row] : {std::pair{OpKind::Forward, kRowF},
                         {OpKind::Backward, kRowB},
                         {OpKind::BackwardInput, kRowI},
                         {OpKind::BackwardWeight, kRowW}}) {
    l.op.kind = op;
    EXPECT_EQ(op_kind_row(l), row);
  }
  for (auto [kind, row] : {std::pair{LOpKind::Send, kRowP2P},
                           {LOpKind::Recv, kRowP2P},
                           {LOpKind::AllReduce, kRowAllReduce},
                           {LOpKind::AllGather, kRowAllReduce},
                           {LOpKind::ReduceScatter, kRowAllReduce},
                           {LOpKind::Optimizer, kRowOptimizer}}) {
    l.kind = kind;
    EXPECT_EQ(op_kind_row(l), row);
  }
  EXPECT_STREQ(op_kind_row_name(kRowP2P), "p2p");
  EXPECT_STREQ(op_kind_row_name(kRowAllReduce), "allreduce");
}

TEST(MeasuredCompare, SimulatedAgainstASyntheticMeasuredRun) {
  const Fixture f = one_f_one_b();
  const LoweredSchedule& ls = f.cs.schedule();
  const std::vector<double> node_s(f.cs.dag().size(), 1.0);
  const Comparison c = compare_runs(f.cs, node_s, 7.0, synthetic_run(ls, 2));
  EXPECT_EQ(c.simulated_iteration_s, 7.0);
  EXPECT_EQ(c.measured_iteration_s, 10.5);  // mean of 10 and 11
  EXPECT_EQ(c.measured_iterations_s, (std::vector<double>{10, 11}));
  const int forwards = count_ops(ls, LOpKind::Compute, OpKind::Forward, true);
  EXPECT_EQ(c.kinds[kRowF].measured_n(), static_cast<std::size_t>(2 * forwards));  // per timed iteration
  EXPECT_EQ(c.kinds[kRowF].simulated_n(), static_cast<std::size_t>(forwards));
  EXPECT_EQ(c.kinds[kRowF].measured(), 0.25);
  EXPECT_EQ(c.kinds[kRowF].simulated(), 1.0);
  EXPECT_EQ(c.kinds[kRowP2P].measured_n(), static_cast<std::size_t>(2 * count_ops(ls, LOpKind::Recv)));
  EXPECT_EQ(c.kinds[kRowP2P].simulated_n(), static_cast<std::size_t>(count_ops(ls, LOpKind::Send)));
  EXPECT_GT(c.kinds[kRowAllReduce].measured_n(), 0u);
  EXPECT_EQ(c.kinds[kRowI].measured_n() + c.kinds[kRowI].simulated_n(), 0u);
  const std::size_t procs = static_cast<std::size_t>(ls.workers() * ls.tp);
  EXPECT_EQ(c.kernel_s, 2.0 * procs);
  EXPECT_EQ(c.comm_s, 4.0 * procs);
  EXPECT_DOUBLE_EQ(c.overhead_s_per_op, c.overhead_s / static_cast<double>(c.ops));
}

TEST(MeasuredCompare, IncompleteMeasuredResultsAreRefused) {
  const Fixture f = one_f_one_b();
  JobResult r = synthetic_run(f.cs.schedule(), 1);
  r.workers.pop_back();
  EXPECT_THROW(compare_runs(f.cs, {}, 1.0, r), std::runtime_error);
}

TEST(MeasuredCompare, TableAndJson) {
  const Fixture f = one_f_one_b();
  const Comparison c =
      compare_runs(f.cs, std::vector<double>(f.cs.dag().size(), 1.0), 7.0, synthetic_run(f.cs.schedule(), 2));
  const std::string table = printed([&](std::FILE* out) { print_comparison(out, c, 2); });
  char row[128];
  std::snprintf(row, sizeof row, "%-12s %8d %16.9f %16.9f %10s\n", "iteration", 2, 10.5, 7.0, "-33.3%");
  EXPECT_NE(table.find(row), std::string::npos) << table;
  EXPECT_NE(table.find("measured min 10.000000000 / median 10.500000000 / max 11.000000000 s"), std::string::npos);
  EXPECT_NE(table.find("median duration per op:\nF "), std::string::npos);
  EXPECT_EQ(table.find("\nI "), std::string::npos);  // rows without ops are left out
  const auto j = nlohmann::ordered_json::parse(comparison_json(c, 2));
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"iteration_s", "per_op_kind", "runtime_overhead_us_per_op"}));
  EXPECT_EQ(j["iteration_s"]["measured_spread"]["n"], 2);
  EXPECT_EQ(j["per_op_kind"]["F"]["count"], count_ops(f.cs.schedule(), LOpKind::Compute, OpKind::Forward, true));
  EXPECT_EQ(j["per_op_kind"]["F"]["rel_error"], 3.0);  // (1 - 0.25) / 0.25
  EXPECT_FALSE(j["per_op_kind"].contains("I"));
}

TEST(MeasuredCompare, WarnsAboutReceivesBeforeTheirSends) {
  Comparison c;
  EXPECT_EQ(printed([&](std::FILE* out) { print_comparison_warnings(out, c); }), "");
  c.acausal = 3;
  EXPECT_NE(printed([&](std::FILE* out) { print_comparison_warnings(out, c); }).find("warning: 3 receives"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope::runtime
