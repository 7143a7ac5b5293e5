#pragma once
// `pipescope simulate` of one scenario: the run, its report, and the outputs it was asked for (JSON, trace,
// timeline SVG) rendered in memory, so that the command writes them whole after the run.

#include <string>

#include "core/model/config.h"
#include "sim/report.h"

namespace pipescope::sim {

struct TimelineRequest {
  bool comm = false, all_replicas = false, compact = false;
  double width_px = 1600;
  std::string title;                             // the picture's heading
  int first_rank = 0, last_rank = -1;            // the pipeline ranks drawn (last -1: to the last)
  double window_start_s = 0, window_end_s = -1;  // the time drawn (end -1: to the iteration's end)
  int row_group = 1;                             // one row per that many stages (sim/timeline_svg.h aggregate_rows)
};

struct SimulateOneRequest {
  std::string collectives;  // overrides sim.collectives when non-empty
  bool json = false, trace = false, timeline = false;
  TimelineRequest timeline_options;
  TraceSubset trace_subset;  // the ranks and replicas the trace keeps
};

struct SimulateOneResult {
  Report report;
  std::string json, trace, timeline_svg;  // those asked for
};

// Throws what the pipeline throws (std::invalid_argument, CheckError, std::runtime_error for a deadlock).
SimulateOneResult simulate_one(const Scenario& s, const SimulateOneRequest& q);

}  // namespace pipescope::sim
