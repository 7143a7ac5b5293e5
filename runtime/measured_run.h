#pragma once
// The measured side of `pipescope validate`, apart from the launch itself (sim/launch.h, beside the one fork):
// what the job runs (checked options, the fitted scenario, the rank program and its flags) and what it hands back
// (the gathered results file, the last iteration's op spans). Input errors are std::invalid_argument.

#include <string>
#include <utility>
#include <vector>

#include "core/lower/lowering.h"
#include "core/model/config.h"
#include "runtime/job.h"
#include "runtime/rank_job.h"

namespace pipescope::runtime {

// One process per rank on this machine: beyond a few hundred the job only thrashes (docs/limits.md).
inline constexpr int kMaxValidateRanks = 256;

// `job` checked for a measured run: --iterations >= 1, --warmup >= 0, --watchdog > 0; a backend without arithmetic
// (null) has nothing to compare with the reference, so its check is off.
RankJob validation_job(RankJob job);
// The job's scenario, fitted (runtime/scenario_fit.h); with a profile (`profile`, else the scenario's sim.profile)
// and a measuring backend, in the backend's precision with the profile's device, links and tables: a profile of
// this machine (`pipescope calibrate --backend <the same>`) closes the loop.
Scenario validation_scenario(const RankJob& job, const std::string& profile);

// MPI ranks of the job: one per worker and TP rank.
int measured_ranks(const LoweredSchedule& ls);
// Refuses more than kMaxValidateRanks ranks unless --allow-large (core/plan/work_estimate.h).
void check_rank_count(int ranks);
// The rank program: `given` (--rank-exe), else `fallback`; refused when it is not executable.
std::string rank_program(const std::string& given, const std::string& fallback);
// The rank program's flags: the job's, then `--out out_file` (rank 0 writes the gathered results there).
std::vector<std::string> rank_args(const RankJob& job, const std::string& out_file);
// The gathered results rank 0 wrote (runtime/job.h pack); throws std::runtime_error when missing or truncated.
JobResult read_measured(const std::string& path, int layers);

// The last timed iteration as op spans [worker][op] (TP rank 0 of each worker; a send until its observed
// completion) and its end: the measured panel of validate --timeline.
struct MeasuredSpans {
  std::vector<std::vector<std::pair<double, double>>> per_worker;  // (start, end) in seconds
  double end_s = 0;
};
MeasuredSpans last_iteration_spans(const LoweredSchedule& ls, const JobResult& r);

}  // namespace pipescope::runtime
