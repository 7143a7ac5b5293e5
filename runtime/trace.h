#pragma once
// Measured timelines in the simulator's trace format (sim/report.h write_trace): Chrome / Perfetto
// trace-event JSON, pid = cluster node of the worker's GPU (core/model/placement.h), tid = local GPU * 100 for its
// compute stream and local GPU * 100 + k for communication lanes, "X" events in microseconds (integer ns clock,
// core/lower/trace_json.h), the same args keys as the simulated trace and flow events send -> receive, named by the
// ops' canonical text (lowered_op_name), so a simulated and a measured run can be diffed op by op.
// Measured lanes: compute ops and the optimizer on the compute track; receives and all-reduces (blocking,
// from posting to completion) on comm lane 1; sends (non-blocking, from posting to observed completion) on
// comm lanes 2, 3, ... (overlapping sends get separate lanes).

#include <iosfwd>
#include <string>

#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "runtime/job.h"

namespace pipescope::runtime {

// Timed iteration `iteration` of the run (-1: the last). Process names are "<label>node<N>".
void write_measured_trace(std::ostream& os, const LoweredSchedule& ls, const Placement& pl, const JobResult& r,
                          int iteration = -1, const std::string& label = "measured ");

// One file holding both: the simulated trace's processes renamed "simulated node<N>", the measured ones
// moved to pid 1000 + N, and sort indices that put each node's simulated and measured processes next to each
// other. Throws RuntimeError on malformed input.
std::string merge_traces(const std::string& simulated_json, const std::string& measured_json);

}  // namespace pipescope::runtime
