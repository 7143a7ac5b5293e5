#pragma once
// Simulated against measured, op kind by op kind (`pipescope validate`): every op's simulated duration (one per DAG
// node) and measured duration (one per op and timed iteration), the iteration times and how the ranks spent
// their time. Tables compare medians: on a shared machine one message in a hundred whose receiver was
// descheduled for a millisecond moves a mean by tens of percent, not a median; the JSON has the means too.

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "core/lower/checks.h"
#include "runtime/job.h"

namespace pipescope::runtime {

// The comparison's rows, in table order (rows without ops are not printed).
enum OpKindRow { kRowF, kRowB, kRowI, kRowW, kRowP2P, kRowAllReduce, kRowAllToAll, kRowOptimizer, kOpKindRows };
const char* op_kind_row_name(int row);  // "F", "B", "I", "W", "p2p", "allreduce", "alltoall", "optimizer"
int op_kind_row(const LoweredOp& l);  // sends, receives -> p2p; all-to-alls -> alltoall; other collectives -> allreduce

double median_of(std::vector<double> v);       // 0 for none
double mean_of(const std::vector<double>& v);  // 0 for none

// The spread of the timed iterations: min, median, max, mean and sample standard deviation (0 for one value).
struct Spread {
  std::size_t n = 0;
  double min_s = 0, median_s = 0, max_s = 0, mean_s = 0, stddev_s = 0;
};
Spread spread_of(std::vector<double> v);

struct KindStats {
  std::vector<double> measured_each, simulated_each;  // durations in seconds
  std::size_t measured_n() const { return measured_each.size(); }
  std::size_t simulated_n() const { return simulated_each.size(); }
  double measured() const { return median_of(measured_each); }
  double simulated() const { return median_of(simulated_each); }
};

struct Comparison {
  double measured_iteration_s = 0, simulated_iteration_s = 0;  // measured: the mean over timed iterations
  std::vector<double> measured_iterations_s;                   // each timed iteration (the spread behind the mean)
  KindStats kinds[kOpKindRows];
  double overhead_s_per_op = 0, kernel_s = 0, comm_s = 0, overhead_s = 0;  // summed over processes and iterations
  std::size_t ops = 0;
  std::size_t acausal = 0;  // receives that completed before their send was posted: clocks misaligned
};

// `simulated_node_s`: each DAG node's simulated duration (end - start). Simulated rows: compute, optimizer, transfer
// (on the send's node) and collective-call nodes. Measured rows from TP rank 0 of each worker (the simulator folds
// a TP group into its worker): compute and optimizer ops as timed; a transfer from the later of its send's and
// receive's postings to the receive's completion; a collective call from its last member's arrival to its last
// member's completion. Throws std::runtime_error when the measured results miss a process.
Comparison compare_runs(const CheckedSchedule& cs, const std::vector<double>& simulated_node_s,
                        double simulated_iteration_s, const JobResult& measured);

// (simulated - measured) / measured as "+1.2%"; "-" when nothing was measured.
std::string pct(double simulated, double measured);
// The table validate prints: iteration, the measured spread, the median per op kind (count per iteration), what
// the columns mean and where the ranks' time went. `iterations`: timed iterations.
void print_comparison(std::FILE* out, const Comparison& c, int iterations);
// The warning validate prints when receives completed before their sends were posted (nothing otherwise).
void print_comparison_warnings(std::FILE* out, const Comparison& c);
// validate --json's comparison keys as one JSON object: iteration_s (with the spread), per_op_kind,
// runtime_overhead_us_per_op.
std::string comparison_json(const Comparison& c, int iterations);
// A spread as a JSON object ({} for none): n, min, median, max, mean, stddev.
std::string spread_json(const Spread& s);

}  // namespace pipescope::runtime
