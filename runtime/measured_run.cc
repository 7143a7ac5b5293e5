#include "runtime/measured_run.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "core/model/backends.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"
#include "core/plan/work_estimate.h"
#include "runtime/model.h"

namespace pipescope::runtime {

RankJob validation_job(RankJob job) {
  if (backend_on(job.backend, BackendDevice::None)) job.no_check = true;  // no arithmetic: nothing to compare
  if (job.iterations < 1 || job.warmup < 0) throw std::invalid_argument("--iterations must be >= 1 and --warmup >= 0");
  if (!(job.watchdog_s > 0)) throw std::invalid_argument("--watchdog must be > 0 seconds");
  return job;
}

Scenario validation_scenario(const RankJob& job, const std::string& profile) {
  Scenario s;
  try {
    s = job.fitted_scenario();
  } catch (const RuntimeError& e) {
    throw std::invalid_argument(std::string("validate: ") + e.what());
  }
  const std::string path = !profile.empty() ? profile : s.sim.profile;
  if (!path.empty() && !backend_on(job.backend, BackendDevice::None)) {
    s.training.dtype = dtype_of_backend(job.backend);
    s = use_profile(s, path);
  }
  return s;
}

int measured_ranks(const LoweredSchedule& ls) { return ls.workers() * ls.tp; }

void check_rank_count(int ranks) {
  if (ranks > kMaxValidateRanks && !allow_large())
    throw std::invalid_argument("validate: " + std::to_string(ranks) +
                                " MPI ranks (dp * pp * tp) is over the limit of " + std::to_string(kMaxValidateRanks) +
                                " (shrink with --dp/--pp/--tp, or pass --allow-large)");
}

std::string rank_program(const std::string& given, const std::string& fallback) {
  const std::string exe = given.empty() ? fallback : given;
  if (access(exe.c_str(), X_OK) != 0)
    throw std::invalid_argument("--rank-exe " + exe + ": not an executable (build pipescope-rank)");
  return exe;
}

std::vector<std::string> rank_args(const RankJob& job, const std::string& out_file) {
  std::vector<std::string> args = job.args();
  args.insert(args.end(), {"--out", out_file});
  return args;
}

JobResult read_measured(const std::string& path, int layers) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("the measured run wrote no results");
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(double) != 0) throw std::runtime_error("the measured results are truncated");
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return unpack_job(v, layers);
}

MeasuredSpans last_iteration_spans(const LoweredSchedule& ls, const JobResult& r) {
  MeasuredSpans m;
  m.per_worker.resize(ls.per_worker.size());
  for (const auto& w : r.workers) {
    if (w.iterations.empty() || w.tp_rank != 0) continue;  // one row per worker, like the simulated panel
    const IterationStats& it = w.iterations.back();
    m.end_s = std::max(m.end_s, it.end_s);
    for (std::size_t i = 0; i < it.ops.size(); i++)
      m.per_worker.at(w.worker).push_back(
          {it.ops[i].start, ls.per_worker[w.worker][i].kind == LOpKind::Send ? it.ops[i].done : it.ops[i].end});
  }
  return m;
}

}  // namespace pipescope::runtime
