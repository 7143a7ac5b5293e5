// `pipescope validate [SCENARIO] [--layers N --hidden H ... --dp D --pp P] [--backend cpu-f64] [--trace F] [--json F]`
// Runs the (shrunk) scenario on real kernels with the validation runtime, simulates the same shrunk scenario
// with the same cost source, and prints measured vs simulated iteration time and per-op-kind error.
//
// Process layout (robust against SimGrid's one-engine-per-process rule and fork + MPI):
//   1. this process never initialises MPI; it fits the scenario, lowers and checks it;
//   2. a forked child runs the SimGrid simulation and sends the per-node times back (sim/simulated_twin.h);
//   3. the measured run is a separate MPI job: `<launcher> -n <dp*pp*tp> pipescope-rank <same flags> --out FILE`,
//      one rank per worker and TP rank (MPI rank = worker * tp + TP rank), rank 0 writing the gathered results to
//      FILE (runtime/measured_run.h, sim/launch.h). A separate program because libsimgrid exports the MPI API
//      (SMPI): this binary links SimGrid and so must not be an MPI program itself;
//   4. this process compares both (runtime/measured_compare.h) and, with the f64 backend, the gradients against the
//      unsliced reference, prints the table and writes --json / --trace (one Perfetto file: a simulated and a
//      measured process per node) / --timeline.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "calib/drift_check.h"
#include "cli/commands.h"
#include "cli/fork_run.h"
#include "core/cost/profile_cost.h"
#include "core/model/profile.h"
#include "core/plan/pipeline.h"
#include "core/util/atomic_file.h"
#include "runtime/measured_compare.h"
#include "runtime/measured_run.h"
#include "runtime/mpi_rank.h"
#include "runtime/trace.h"
#include "runtime/validate_report.h"
#include "sim/report.h"
#include "sim/simulated_twin.h"
#include "sim/svg_render.h"

namespace pipescope::cli {
namespace {

using runtime::kRankExitWatchdog;  // pipescope-rank's exit codes (declarations only: no MPI linked here)

struct ValidateOptions {
  runtime::RankJob job;  // scenario, shrinking, run: passed on to the ranks as flags
  std::string launcher = "mpirun --oversubscribe";
  std::string rank_exe;  // default: pipescope-rank next to this executable
  std::string json, trace, collectives;
  std::string timeline;         // a simulated and a measured panel: SVG, PDF or PNG
  std::string timeline_format;  // --timeline-format (default: from the file name)
  std::string profile;          // calibration profile for the simulated side
  bool no_drift_check = false;  // skip re-timing the profile's layer point before and after the measured run
};

// Unknown names and cuda without the GPU path, before anything runs: a GPU backend this build or machine cannot
// run is the environment's limit (exit 3), not a typo (exit 1).
void check_backend(const std::string& backend) {
  try {
    runtime::check_backend(backend);
  } catch (const runtime::RuntimeError& e) {
    if (runtime::is_cuda_backend(backend)) throw EnvironmentError(std::string("--backend: ") + e.what());
    throw InputError(std::string("--backend: ") + e.what());
  }
}

// The measured MPI job; returns the launcher's exit code and, when it is 0, the gathered results in `out`.
int run_measured(const ValidateOptions& vo, const runtime::RankJob& job, const LoweredSchedule& ls, int layers,
                 runtime::JobResult& out) {
  TempDir dir("pipescope-validate");
  const std::string results = dir.path + "/measured.bin";
  const std::string exe = runtime::rank_program(vo.rank_exe, sibling_exe("pipescope-rank"));
  const int ranks = runtime::measured_ranks(ls);
  runtime::check_rank_count(ranks);
  const int rc = launch_mpi(vo.launcher, ranks, exe, runtime::rank_args(job, results),
                            "measuring: " + std::to_string(ranks) + " ranks ...\n");
  if (rc == 0) out = runtime::read_measured(results, layers);
  return rc;
}

void write_validate_trace(const std::string& path, const CheckedSchedule& cs, const Prepared& prep,
                          const sim::SimResult& sr, const ProfileStamp& stamp, const runtime::JobResult& mr) {
  std::ostringstream simulated, measured;
  sim::write_trace(simulated, cs, sr, stamp);
  runtime::write_measured_trace(measured, prep.lowered, prep.placement, mr);
  write_file_atomic(path, runtime::merge_traces(simulated.str(), measured.str()), "--trace");
}

void write_timeline(const ValidateOptions& vo, const Scenario& s, const CheckedSchedule& cs, const Prepared& prep,
                    const sim::SimResult& sr, const runtime::JobResult& mr) {
  // The last timed measured iteration below the simulated twin.
  runtime::MeasuredSpans m = runtime::last_iteration_spans(prep.lowered, mr);
  const std::string svg =
      sim::twin_timeline_svg(s, cs, prep.placement, sr, {mr.backend, std::move(m.per_worker), m.end_s});
  write_file_atomic(vo.timeline, sim::render_svg(svg, timeline_format(vo.timeline, vo.timeline_format)), "--timeline");
}

int run_validate(const ValidateOptions& vo) {
  const runtime::RankJob o = runtime::validation_job(vo.job);
  check_output_paths({{"--json", vo.json}, {"--trace", vo.trace}, {"--timeline", vo.timeline}});
  check_backend(o.backend);
  const Scenario s = runtime::validation_scenario(o, vo.profile);
  check_output_paths({{"--json", vo.json}, {"--trace", vo.trace}, {"--timeline", vo.timeline}});  // vs inputs
  auto prep = prepare(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  const auto* pcm = dynamic_cast<const ProfileCostModel*>(prep->cost.get());
  const std::string cost_source = pcm ? pcm->describe() : std::string("analytic cost model");
  const ProfileStamp stamp = profile_stamp(s.sim.profile);
  const runtime::ModelConfig mc = runtime::ModelConfig::for_validation(s.model, s.parallel.stage_layers);
  runtime::print_validate_header(stdout, s, prep->lowered, o, cost_source, stamp);
  std::fflush(stdout);

  std::fprintf(stderr, "simulating ...\n");
  const sim::SimResult sr = sim::simulate_in_child(s, cs, vo.collectives);
  calib::DriftCheck drift = calib::drift_before(s.sim.profile, o.backend, vo.no_drift_check);
  runtime::JobResult mr;
  const int rc = run_measured(vo, o, prep->lowered, mc.layers, mr);
  if (rc == 0) calib::drift_after(drift, o.backend);
  if (rc == kRankExitWatchdog) {
    std::fprintf(stderr, "error: the measured run did not finish: a rank's watchdog fired (reports above)\n");
    return kExitSchedule;
  }
  if (rc != 0)  // a rank killed or out of memory, mpirun killed or failing: the environment's (exit 3)
    throw EnvironmentError("the measured run failed (launcher exit code " + std::to_string(rc) +
                           "); the ranks' messages are above");
  const runtime::Comparison c = runtime::compare_runs(cs, sim::node_seconds(sr), sr.iteration_s, mr);
  runtime::print_comparison(stdout, c, o.iterations);
  calib::print_drift(stdout, drift);
  runtime::print_comparison_warnings(stdout, c);
  runtime::print_cost_note(stdout, s, o.backend, pcm != nullptr);
  const runtime::ExactnessCheck exact = runtime::check_exactness(mr, prep->lowered, mc, o);
  runtime::print_exactness(stdout, exact);

  if (!vo.json.empty())
    write_file_atomic(
        vo.json,
        runtime::validate_json(
            s, o, {cost_source, sim::profile_json(stamp), mr.backend, calib::drift_json(drift), &c, exact}),
        "--json");
  if (!vo.trace.empty()) write_validate_trace(vo.trace, cs, *prep, sr, stamp, mr);
  if (!vo.timeline.empty()) write_timeline(vo, s, cs, *prep, sr, mr);
  return exact.ok ? 0 : kExitInternal;
}

}  // namespace

Command add_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  auto* sub = app.add_subcommand("validate",
                                 "Run a (shrunk) scenario on real kernels under MPI and compare with its simulation");
  o->job.add_scenario_option(*sub);
  o->job.add_shrink_options(*sub);
  o->job.add_run_options(*sub);
  sub->add_option("--launcher", o->launcher, "MPI launcher command (-n <ranks> is appended)")->capture_default_str();
  sub->add_option("--rank-exe", o->rank_exe, "The per-rank program (default: pipescope-rank next to pipescope)");
  sub->add_option("--json", o->json, "Write the comparison as JSON to this file");
  sub->add_option("--trace", o->trace, "Write one Perfetto trace with a simulated and a measured process per node");
  sub->add_option("--timeline", o->timeline,
                  "Write a timeline, the simulated run above the measured one: SVG, PDF or PNG (by the file name)");
  sub->add_option("--timeline-format", o->timeline_format,
                  "Timeline format: svg | pdf | png (default: from --timeline)")
      ->check(CLI::IsMember({"svg", "pdf", "png"}));
  sub->add_option("--profile", o->profile,
                  "Calibration profile for the simulated side (pipescope calibrate on this machine, same backend)");
  sub->add_option("--collectives", o->collectives, "Simulated collective model: ring | aggregate | analytic | auto")
      ->check(CLI::IsMember({"ring", "aggregate", "analytic", "auto"}));
  sub->add_flag("--no-drift-check", o->no_drift_check,
                "Do not re-time the profile's layer point before and after the measured run (CPU backends)");
  return {sub, [o] { return run_validate(*o); }};
}

}  // namespace pipescope::cli
