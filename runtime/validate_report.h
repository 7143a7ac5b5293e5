#pragma once
// What `pipescope validate` prints and writes around the simulated-vs-measured comparison (measured_compare.h):
// the run's description, the exactness check against the single-process reference, the note on an analytic
// simulated side, and the --json document (docs/schemas/validate.schema.json).

#include <cstdio>
#include <string>

#include "core/lower/lowering.h"
#include "core/model/config.h"
#include "core/model/profile.h"
#include "runtime/exactness.h"
#include "runtime/job.h"
#include "runtime/measured_compare.h"
#include "runtime/model.h"
#include "runtime/rank_job.h"

namespace pipescope::runtime {

// The header: scenario, model, layout, what was simulated with which costs and profile, what is measured.
void print_validate_header(std::FILE* out, const Scenario& s, const LoweredSchedule& ls, const RankJob& job,
                           const std::string& cost_source, const ProfileStamp& stamp);

// The measured run's loss, gradients and parameters against the single-process unsliced reference.
struct ExactnessCheck {
  bool checked = false;  // off with --no-check and for backends without arithmetic
  int steps = 0;         // Adam steps the run took (the reference takes as many)
  double tolerance = 0;  // runtime::exactness_tolerance of the backend
  bool ok = true;
  Exactness result;
};
ExactnessCheck check_exactness(const JobResult& r, const LoweredSchedule& ls, const ModelConfig& mc,
                               const RankJob& job);
void print_exactness(std::FILE* out, const ExactnessCheck& x);  // nothing when not checked

// Without a profile the simulated side models the scenario's GPUs, not this machine: says so (nothing otherwise).
void print_cost_note(std::FILE* out, const Scenario& s, const std::string& backend, bool profiled);

// Everything validate --json holds beyond the scenario and the job.
struct ValidateRecord {
  std::string cost_source;   // the cost model's description
  std::string profile_json;  // the profile stamp as a JSON object (sim/report.h profile_json)
  std::string backend;       // as the ranks report it
  std::string drift_json;    // the device drift check as a JSON object (calib/drift_check.h drift_json)
  const Comparison* comparison = nullptr;
  ExactnessCheck exactness;
};
std::string validate_json(const Scenario& s, const RankJob& job, const ValidateRecord& r);

}  // namespace pipescope::runtime
