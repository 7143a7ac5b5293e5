#pragma once
// Where an iteration's time goes, per worker and per run: compute by kind, the communication left exposed, and the
// pipeline bubble. A worker's time from 0 to the iteration's end is cut into its own compute ops (forward, backward
// less what it recomputes, recomputation, optimizer) and the gaps between them; a gap is charged to what the next op
// waited for, followed back along the last-finishing predecessors of the DAG: a transfer's or a collective's span to
// its kind (pipeline p2p, tensor-, context-, expert- or data-parallel), time waiting for another worker's compute to
// the pipeline bubble. The gap after a worker's last op waits for the iteration's last node the same way. Every
// worker's parts sum to the iteration time.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/lower/dag.h"
#include "core/lower/lowered_schedule.h"

namespace pipescope {

struct TimeBreakdown {
  double forward_s = 0, backward_s = 0, recompute_s = 0, optimizer_s = 0;
  // Exposed: the worker waited for them. ep_comm_s: the MoE dispatch and combine all-to-alls.
  double tp_comm_s = 0, cp_comm_s = 0, ep_comm_s = 0, dp_comm_s = 0, p2p_s = 0;
  double bubble_s = 0;  // waiting for a pipeline dependency (another worker's compute)
  double total_s() const;
};

// The parts, described once: the result tables, the report and the timeline legend name them from here.
struct TimePart {
  const char* key;  // JSON key and table column ("forward_s")
  double TimeBreakdown::*member;
  const char* title;
  const char* short_title;  // a table cell's word ("TP", "bubble")
};
const std::vector<TimePart>& time_parts();
// One line for a picture's legend: "time (mean over workers): forward compute 29.3%, ..." (parts over total_s();
// the parts under 0.1% left out).
std::string breakdown_line(const TimeBreakdown& b);

struct RunBreakdown {
  std::vector<TimeBreakdown> per_worker;
  TimeBreakdown mean;  // over workers
};

// What the breakdown reads of a compute op's seconds (the cost model's CostModel::recompute_seconds and
// cp_wait_seconds; either may be empty = 0): the share of a backward that recomputes the forward, and the share that
// waits for context-parallel transfers inside the op.
struct OpShares {
  std::function<double(const Op&, int)> recompute_s;
  std::function<double(const Op&, int)> cp_wait_s;
};

// `start`/`end`: per DAG node, as simulated or estimated; iteration_s: the makespan. Throws std::invalid_argument
// when the timings do not cover the DAG.
RunBreakdown time_breakdown(const Dag& dag, const LoweredSchedule& ls, const std::vector<double>& start,
                            const std::vector<double>& end, double iteration_s, const OpShares& shares);

}  // namespace pipescope
