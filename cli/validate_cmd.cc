// `pipescope validate [SCENARIO] [--layers N --hidden H ... --dp D --pp P] [--backend cpu-f64] [--trace F] [--json F]`
// Runs the (shrunk) scenario on real kernels with the validation runtime, simulates the same shrunk scenario
// with the same cost source, and prints measured vs simulated iteration time and per-op-kind error.
//
// Process layout (robust against SimGrid's one-engine-per-process rule and fork + MPI):
//   1. this process never initialises MPI; it fits the scenario, lowers and checks it;
//   2. a forked child runs the SimGrid simulation and sends the per-node times back through a pipe;
//   3. the measured run is a separate MPI job: `<launcher> -n <dp*pp*tp> pipescope-rank <same flags> --out FILE`,
//      one rank per worker and TP rank (MPI rank = worker * tp + TP rank), rank 0 writing the gathered results to
//      FILE. A separate program because libsimgrid
//      exports the MPI API (SMPI): this binary links SimGrid and so must not be an MPI program itself;
//   4. this process compares both (and, with the f64 backend, the gradients against the unsliced reference),
//      prints the table and writes --json / --trace (one Perfetto file: a simulated and a measured process
//      per node).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "calib/drift.h"
#include "cli/commands.h"
#include "cli/fork_run.h"
#include "core/atomic_file.h"
#include "core/backends.h"
#include "core/pipeline.h"
#include "core/profile.h"
#include "core/profile_cost.h"
#include "core/scenario.h"
#include "core/work_estimate.h"
#include "runtime/exactness.h"
#include "runtime/job.h"
#include "runtime/mpi_rank.h"
#include "runtime/rank_job.h"
#include "runtime/scenario_fit.h"
#include "runtime/trace.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "sim/scenario_options.h"
#include "sim/svg_render.h"
#include "sim/timeline_svg.h"

namespace pipescope::cli {
namespace {

using runtime::kRankExitWatchdog;  // pipescope-rank's exit codes (declarations only: no MPI linked here)
constexpr int kMaxValidateRanks = 256;

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

// ---------------------------------------------------------------- simulated side (forked child)
sim::SimResult simulate_forked(const Scenario& s, const CheckedSchedule& cs, const std::string& collectives) {
  // The child answers with the raw doubles: iteration, pipeline end, node count, then start/end per node.
  const std::string got = run_in_child([&] {
    const sim::SimResult r = sim::simulate(s.cluster, cs, sim::engine_options_for(s, collectives));
    std::vector<double> v{r.iteration_s, r.pipeline_end_s, static_cast<double>(r.timing.size())};
    for (const auto& t : r.timing) v.insert(v.end(), {t.start, t.end});
    return "OK" + std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  });
  if (got.rfind("OK", 0) != 0 || (got.size() - 2) % sizeof(double) != 0)
    throw std::runtime_error("the simulation process returned a malformed answer");
  std::vector<double> v((got.size() - 2) / sizeof(double));
  std::memcpy(v.data(), got.data() + 2, v.size() * sizeof(double));
  sim::SimResult r;
  r.iteration_s = v.at(0);
  r.pipeline_end_s = v.at(1);
  const auto nodes = static_cast<std::size_t>(v.at(2));
  if (v.size() != 3 + 2 * nodes) throw std::runtime_error("simulation result is truncated");
  r.timing.resize(nodes);
  for (std::size_t i = 0; i < nodes; i++) r.timing[i] = {v[3 + 2 * i], v[4 + 2 * i]};
  r.total = nodes;
  return r;
}

// ---------------------------------------------------------------- measured side (MPI job)
// Runs the measured MPI job; returns the launcher's exit code and, when it is 0, the gathered results.
int run_measured(const ValidateOptions& o, const runtime::RankJob& job, const LoweredSchedule& ls, int layers,
                 runtime::JobResult& out) {
  TempDir dir("pipescope-validate");
  const std::string out_file = dir.path + "/measured.bin";
  std::vector<std::string> argv = launcher_argv(o.launcher);
  if (argv.empty()) throw InputError("--launcher: empty command");
  std::string exe = o.rank_exe;
  if (exe.empty()) exe = sibling_exe("pipescope-rank");
  if (access(exe.c_str(), X_OK) != 0)
    throw InputError("--rank-exe " + exe + ": not an executable (build pipescope-rank)");
  const int ranks = ls.workers() * ls.tp;
  // One process per rank on this machine: beyond a few hundred the job only thrashes (docs/limits.md).
  if (ranks > kMaxValidateRanks && !allow_large())
    throw InputError("validate: " + std::to_string(ranks) + " MPI ranks (dp * pp * tp) is over the limit of " +
                     std::to_string(kMaxValidateRanks) + " (shrink with --dp/--pp/--tp, or pass --allow-large)");
  require_program(argv[0], "--launcher");
  argv.insert(argv.end(), {"-n", std::to_string(ranks), exe});
  for (auto& a : job.args()) argv.push_back(a);
  argv.insert(argv.end(), {"--out", out_file});
  std::fprintf(stderr, "measuring: %d ranks ...\n", ranks);
  const int rc = launch(argv);
  if (rc != 0) return rc;
  std::ifstream f(out_file, std::ios::binary);
  if (!f) throw std::runtime_error("the measured run wrote no results");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(double) != 0) throw std::runtime_error("the measured results are truncated");
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  out = runtime::unpack_job(v, layers);
  return 0;
}

// ---------------------------------------------------------------- comparison
enum Kind { kF, kB, kI, kW, kP2P, kAllReduce, kOptimizer, kKinds };  // rows without ops are not printed
const char* const kKindNames[kKinds] = {"F", "B", "I", "W", "p2p", "allreduce", "optimizer"};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Per op kind, every duration: the table compares medians (on a shared machine one message in a hundred whose
// receiver was descheduled for a millisecond moves a mean by tens of percent, not a median); JSON has the means too.
struct KindStats {
  std::vector<double> measured_each, simulated_each;
  std::size_t measured_n() const { return measured_each.size(); }
  std::size_t simulated_n() const { return simulated_each.size(); }
  double measured() const { return median_of(measured_each); }
  double simulated() const { return median_of(simulated_each); }
  static double mean(const std::vector<double>& v) {
    return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
};

struct Comparison {
  double measured_iteration_s = 0, simulated_iteration_s = 0;
  std::vector<double> measured_iterations_s;  // each timed iteration (the spread behind the mean)
  KindStats kinds[kKinds];
  double overhead_s_per_op = 0, kernel_s = 0, comm_s = 0, overhead_s = 0;
  std::size_t ops = 0;
  std::size_t acausal = 0;  // receives that completed before their send was posted: clocks misaligned
};

int kind_of(const LoweredOp& l) {
  switch (l.kind) {
    case LOpKind::Compute:
      switch (l.op.kind) {
        case OpKind::Forward:
          return kF;
        case OpKind::Backward:
          return kB;
        case OpKind::BackwardInput:
          return kI;
        case OpKind::BackwardWeight:
          return kW;
      }
      return kB;
    case LOpKind::Send:
    case LOpKind::Recv:
      return kP2P;
    case LOpKind::AllReduce:
    case LOpKind::AllGather:
    case LOpKind::ReduceScatter:
      return kAllReduce;
    case LOpKind::Optimizer:
      return kOptimizer;
  }
  return kF;
}

Comparison compare(const CheckedSchedule& cs, const sim::SimResult& sr, const runtime::JobResult& mr) {
  const LoweredSchedule& ls = cs.schedule();
  const Dag& dag = cs.dag();
  Comparison c;
  c.simulated_iteration_s = sr.iteration_s;
  // Simulated: compute / optimizer nodes, transfer nodes (owned by the send), one node per collective call.
  for (std::uint32_t n = 0; n < dag.size(); n++) {
    const DagNode& d = dag.nodes[n];
    if (d.worker < 0 || d.index < 0 || n >= sr.timing.size()) continue;
    const LoweredOp& l = ls.per_worker[d.worker][d.index];
    if (l.kind == LOpKind::Recv) continue;  // a join; the transfer is on the send's node
    KindStats& k = c.kinds[kind_of(l)];
    k.simulated_each.push_back(sr.timing[n].end - sr.timing[n].start);
  }
  // Measured: per timed iteration. Transfers: send/recv pairs, from the later of the two postings to the
  // receive's completion. Collectives: per call, from the last member's arrival to the last member's completion.
  std::map<std::tuple<int, int, int, int, int, int>, std::pair<int, int>> sends;  // key -> (worker, index)
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> calls;          // (group, n) -> members' ops
  for (int w = 0; w < ls.workers(); w++) {
    std::map<int, int> seen;
    const auto& prog = ls.per_worker[w];
    for (std::size_t i = 0; i < prog.size(); i++) {
      const LoweredOp& l = prog[i];
      if (l.kind == LOpKind::Send)
        sends[{w, l.peer, static_cast<int>(l.op.kind), l.op.stage, l.op.microbatch, l.op.slice}] = {
            w, static_cast<int>(i)};
      if (l.kind == LOpKind::AllReduce || l.kind == LOpKind::AllGather || l.kind == LOpKind::ReduceScatter)
        calls[{l.group, seen[l.group]++}].push_back({w, static_cast<int>(i)});
    }
  }
  // Per-op times come from TP rank 0 of each worker (the simulator folds a TP group into its worker; the TP
  // ranks run in lock step); iteration end and the time accounting cover every process.
  std::map<int, const runtime::WorkerResult*> by_worker;
  for (const auto& w : mr.workers)
    if (w.tp_rank == 0) by_worker[w.worker] = &w;
  if (static_cast<int>(by_worker.size()) != ls.workers() ||
      mr.workers.size() != static_cast<std::size_t>(ls.workers()) * ls.tp)
    throw std::runtime_error("measured results are incomplete");
  const std::size_t iters = by_worker.begin()->second->iterations.size();
  for (std::size_t it = 0; it < iters; it++) {
    auto timing = [&](int w, int i) -> const runtime::OpTiming& {
      return by_worker.at(w)->iterations.at(it).ops.at(i);
    };
    double end = 0;
    for (const auto& wr : mr.workers) {
      const runtime::IterationStats& st = wr.iterations.at(it);
      end = std::max(end, st.end_s);
      c.kernel_s += st.kernel_s;
      c.comm_s += st.comm_s;
      c.overhead_s += st.overhead_s;
      c.ops += st.ops.size();
    }
    for (const auto& [w, wr] : by_worker) {
      const runtime::IterationStats& st = wr->iterations.at(it);
      const auto& prog = ls.per_worker[w];
      for (std::size_t i = 0; i < prog.size(); i++) {
        const LoweredOp& l = prog[i];
        const runtime::OpTiming& t = st.ops.at(i);
        if (l.kind == LOpKind::Compute || l.kind == LOpKind::Optimizer) {
          KindStats& k = c.kinds[kind_of(l)];
          k.measured_each.push_back(t.end - t.start);
        } else if (l.kind == LOpKind::Recv) {
          const auto s = sends.find({l.peer, w, static_cast<int>(l.op.kind), l.op.stage, l.op.microbatch, l.op.slice});
          if (s == sends.end()) continue;
          const runtime::OpTiming& ts = timing(s->second.first, s->second.second);
          if (t.end < ts.start - 1e-6) c.acausal++;
          c.kinds[kP2P].measured_each.push_back(std::max(0.0, t.end - std::max(t.start, ts.start)));
        }
      }
    }
    for (const auto& [key, members] : calls) {
      double start = 0, stop = 0;
      for (const auto& [w, i] : members) {
        start = std::max(start, timing(w, i).start);
        stop = std::max(stop, timing(w, i).end);
      }
      c.kinds[kAllReduce].measured_each.push_back(std::max(0.0, stop - start));
    }
    c.measured_iteration_s += end;
    c.measured_iterations_s.push_back(end);
  }
  if (iters) c.measured_iteration_s /= static_cast<double>(iters);
  if (c.ops) c.overhead_s_per_op = c.overhead_s / static_cast<double>(c.ops);
  return c;
}

// min, median, max, mean and sample standard deviation of the timed iterations.
nlohmann::ordered_json spread_json(std::vector<double> v) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (v.empty()) return j;
  std::sort(v.begin(), v.end());
  const double mean = KindStats::mean(v);
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  const std::size_t n = v.size();
  j["n"] = n;
  j["min"] = v.front();
  j["median"] = median_of(v);
  j["max"] = v.back();
  j["mean"] = mean;
  j["stddev"] = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  return j;
}

std::string pct(double sim, double meas) {
  if (meas <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100.0 * (sim - meas) / meas);
  return b;
}

// The machine's drift since the profile (calib/drift.h): its layer point re-timed before and after the run.
struct Drift {
  std::optional<calib::DriftProbe> probe;
  std::string why;  // why there is no probe
  calib::DriftReading before, after;
};

void print_drift(const Drift& d) {
  if (!d.probe) return;
  const double prof = d.probe->profile_fwd_s + d.probe->profile_bwd_s;
  std::printf(
      "device drift since the profile (%s, forward + backward %.3f ms in the profile): %.3f ms before the run "
      "(%+.1f%%), %.3f ms after (%+.1f%%); simulated-vs-measured errors of this size are the machine's, not the "
      "model's\n",
      d.probe->describe().c_str(), prof * 1e3, (d.before.fwd_s + d.before.bwd_s) * 1e3,
      100 * calib::drift_change(*d.probe, d.before), (d.after.fwd_s + d.after.bwd_s) * 1e3,
      100 * calib::drift_change(*d.probe, d.after));
}

nlohmann::ordered_json drift_json(const Drift& d) {
  if (!d.probe) return {{"checked", false}, {"why", d.why}};
  auto reading = [&](const calib::DriftReading& r) {
    return nlohmann::ordered_json{
        {"forward_s", r.fwd_s}, {"backward_s", r.bwd_s}, {"change", calib::drift_change(*d.probe, r)}};
  };
  return {{"checked", true},
          {"point", d.probe->describe()},
          {"profile", {{"forward_s", d.probe->profile_fwd_s}, {"backward_s", d.probe->profile_bwd_s}}},
          {"before", reading(d.before)},
          {"after", reading(d.after)}};
}

int run_validate(const ValidateOptions& vo) {
  runtime::RankJob o = vo.job;
  if (backend_on(o.backend, BackendDevice::None))
    o.no_check = true;  // no arithmetic: nothing to compare with the reference
  if (o.iterations < 1 || o.warmup < 0) throw InputError("--iterations must be >= 1 and --warmup >= 0");
  check_output_paths({{"--json", vo.json}, {"--trace", vo.trace}, {"--timeline", vo.timeline}});
  if (!(o.watchdog_s > 0)) throw InputError("--watchdog must be > 0 seconds");
  try {
    runtime::check_backend(o.backend);  // unknown names, cuda without the GPU path: before anything runs
  } catch (const runtime::RuntimeError& e) {
    // A GPU backend this build or machine cannot run is the environment's limit, not a typo.
    if (runtime::is_cuda_backend(o.backend)) throw EnvironmentError(std::string("--backend: ") + e.what());
    throw InputError(std::string("--backend: ") + e.what());
  }

  Scenario s;
  try {
    s = o.fitted_scenario();
  } catch (const runtime::RuntimeError& e) {
    throw InputError(std::string("validate: ") + e.what());
  }
  // The simulated twin runs in the measured backend's precision with the profile's device, links and tables
  // (a profile of this machine, `pipescope calibrate --backend <the same>`, closes the loop).
  const std::string profile = !vo.profile.empty() ? vo.profile : s.sim.profile;
  if (!profile.empty() && !backend_on(o.backend, BackendDevice::None)) {
    s.training.dtype = dtype_of_backend(o.backend);
    s = use_profile(s, profile);
  }
  check_output_paths({{"--json", vo.json}, {"--trace", vo.trace}, {"--timeline", vo.timeline}});  // vs inputs
  auto prep = prepare(s);
  const CheckedSchedule cs = check(prep->lowered, prep->placement);
  const auto* pcm = dynamic_cast<const ProfileCostModel*>(prep->cost.get());
  const std::string cost_source = pcm ? pcm->describe() : std::string("analytic cost model");
  const ProfileStamp stamp = profile_stamp(s.sim.profile);
  const runtime::ModelConfig mc = runtime::ModelConfig::for_validation(s.model, s.parallel.stage_layers);
  const LoweredSchedule& ls = prep->lowered;
  const ParallelSpec& par = s.parallel;
  std::printf("validate %s (%s)\n", s.name.c_str(), s.source.c_str());
  std::string layout;  // "layers 1,3 per stage" for an uneven layout
  for (int g : par.stage_layers) layout += (layout.empty() ? ", layers " : ",") + std::to_string(g);
  if (!layout.empty()) layout += par.v > 1 ? " per virtual stage" : " per stage";
  std::printf("  model: %d layers%s, hidden %d, %d heads, ffn %d, vocab %d, seq_len %d (untied head)\n", s.model.layers,
              layout.c_str(), s.model.hidden, s.model.heads, s.model.ffn_hidden, s.model.vocab, s.model.seq_len);
  std::printf("  parallel: dp %d x pp %d (v %d), tp %d; schedule %s, %d micro-batches of %d, %zu slice(s)\n", par.dp,
              par.pp, par.v, par.tp, to_string(s.schedule.kind), par.micro_batches(), par.micro_batch_size,
              ls.schedule.microbatches.empty() ? 0 : ls.schedule.microbatches[0].slice_begin.size());
  std::printf("  simulated: %d x %s (%s), %s\n", s.cluster.total_gpus(), s.cluster.device.name.c_str(),
              s.cluster.preset.empty() ? "custom cluster" : s.cluster.preset.c_str(), cost_source.c_str());
  std::printf("  profile: %s\n", describe_stamp(stamp).c_str());
  for (const std::string& g : stamp.gate_failures) std::printf("    failed gate: %s\n", g.c_str());
  std::printf("  measured: backend %s, %d MPI ranks%s, %d timed iteration(s) after %d warm-up\n", o.backend.c_str(),
              ls.workers() * ls.tp, ls.tp > 1 ? " (tp ranks innermost; Megatron-sharded layers)" : "", o.iterations,
              o.warmup);
  std::fflush(stdout);

  std::fprintf(stderr, "simulating ...\n");
  const sim::SimResult sr = simulate_forked(s, cs, vo.collectives);
  Drift drift;
  drift.why = vo.no_drift_check ? "--no-drift-check" : "no profile";
  if (!vo.no_drift_check && !s.sim.profile.empty())
    drift.probe = calib::drift_probe_of(load_profile(s.sim.profile), o.backend, drift.why);
  if (drift.probe) drift.before = calib::retime_probe(*drift.probe, o.backend);
  runtime::JobResult mr;
  const int rc = run_measured(vo, o, ls, mc.layers, mr);
  if (drift.probe && rc == 0) drift.after = calib::retime_probe(*drift.probe, o.backend);
  if (rc == kRankExitWatchdog) {
    std::fprintf(stderr, "error: the measured run did not finish: a rank's watchdog fired (reports above)\n");
    return kExitSchedule;
  }
  if (rc != 0)
    throw std::runtime_error("the measured run failed (launcher exit code " + std::to_string(rc) +
                             "); the ranks' messages are above");
  const Comparison c = compare(cs, sr, mr);

  std::printf("\n%-12s %8s %16s %16s %10s\n", "", "count", "measured_s", "simulated_s", "error");
  std::printf("%-12s %8d %16.9f %16.9f %10s\n", "iteration", o.iterations, c.measured_iteration_s,
              c.simulated_iteration_s, pct(c.simulated_iteration_s, c.measured_iteration_s).c_str());
  if (c.measured_iterations_s.size() > 1) {
    const auto sp = spread_json(c.measured_iterations_s);
    std::printf("%-12s measured min %.9f / median %.9f / max %.9f s, stddev %.9f s over %zu iterations\n", "",
                sp["min"].get<double>(), sp["median"].get<double>(), sp["max"].get<double>(),
                sp["stddev"].get<double>(), c.measured_iterations_s.size());
  }
  std::printf("median duration per op:\n");
  for (int k = 0; k < kKinds; k++) {
    const KindStats& st = c.kinds[k];
    if (!st.measured_n() && !st.simulated_n()) continue;
    std::printf("%-12s %8zu %16.9f %16.9f %10s\n", kKindNames[k],
                st.measured_n() / static_cast<std::size_t>(o.iterations), st.measured(), st.simulated(),
                pct(st.simulated(), st.measured()).c_str());
  }
  std::printf(
      "error = (simulated - measured) / measured. p2p measured = receive completion - later of send / receive "
      "posting; allreduce measured = last member's arrival to last completion.\n");
  std::printf(
      "runtime overhead (scheduling, bookkeeping): %.2f us per op; of the ranks' time: kernels %.1f%%, "
      "communication and waiting %.1f%%, overhead %.2f%%\n",
      c.overhead_s_per_op * 1e6, 100 * c.kernel_s / (c.kernel_s + c.comm_s + c.overhead_s),
      100 * c.comm_s / (c.kernel_s + c.comm_s + c.overhead_s),
      100 * c.overhead_s / (c.kernel_s + c.comm_s + c.overhead_s));
  print_drift(drift);
  if (c.acausal)
    std::printf(
        "warning: %zu receives completed before their send was posted on the aligned clocks: the ranks' clock "
        "offsets are wrong, so the measured p2p times are not reliable.\n",
        c.acausal);
  if (!pcm)
    std::printf(
        "note: the simulated side models %s GPUs with the analytic cost model while the measured side ran the %s "
        "backend on this machine; for a like-for-like comparison calibrate this machine first "
        "(pipescope calibrate --backend %s ...) and pass --profile.\n",
        s.cluster.device.name.c_str(), o.backend.c_str(), o.backend.c_str());

  nlohmann::ordered_json exact_json;
  bool exact_ok = true;
  if (!o.no_check) {
    const runtime::SyntheticData data = runtime::make_data(ls, mc);
    const runtime::ReferenceResult ref = runtime::reference_run(mc, data, kernels::AdamConfig{}, mr.steps);
    const runtime::Exactness e = runtime::compare_with_reference(mr, ref, mc);
    const double tol = runtime::exactness_tolerance(o.backend);
    exact_ok = e.ok(tol);
    std::printf("\nexactness vs the single-process unsliced reference (step %d, tolerance %.0e): %s\n%s\n", mr.steps,
                tol, exact_ok ? "OK" : "FAILED", runtime::format_exactness(e).c_str());
    exact_json = {{"tolerance", tol},
                  {"ok", exact_ok},
                  {"loss", e.loss},
                  {"loss_reference", e.loss_ref},
                  {"loss_rel_err", e.loss_rel_err},
                  {"grad_rel_err", e.grad_rel_err},
                  {"grad_worst", e.grad_worst},
                  {"param_rel_err", e.param_rel_err},
                  {"problems", e.problems}};
  }

  if (!vo.json.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "pipescope.validate/1";
    j["scenario"] = s.name;
    j["source"] = s.source;
    j["cost_model"] = cost_source;
    j["profile"] = nlohmann::ordered_json::parse(sim::profile_json(stamp));
    j["schedule"] = to_string(s.schedule.kind);
    j["dp"] = par.dp;
    j["pp"] = par.pp;
    j["tp"] = par.tp;
    j["v"] = par.v;
    j["m"] = par.micro_batches();
    if (!par.stage_layers.empty()) j["stage_layers"] = par.stage_layers;
    j["model"] = {{"layers", s.model.layers},  {"hidden", s.model.hidden}, {"heads", s.model.heads},
                  {"ffn", s.model.ffn_hidden}, {"vocab", s.model.vocab},   {"seq_len", s.model.seq_len}};
    j["backend"] = mr.backend;
    j["iterations"] = o.iterations;
    j["warmup"] = o.warmup;
    j["iteration_s"] = {{"measured", c.measured_iteration_s},
                        {"simulated", c.simulated_iteration_s},
                        {"measured_per_iteration", c.measured_iterations_s},
                        {"measured_spread", spread_json(c.measured_iterations_s)}};
    for (int k = 0; k < kKinds; k++) {
      const KindStats& st = c.kinds[k];
      if (!st.measured_n() && !st.simulated_n()) continue;
      j["per_op_kind"][kKindNames[k]] = {
          {"count", st.measured_n() / static_cast<std::size_t>(o.iterations)},
          {"measured_s", st.measured()},
          {"simulated_s", st.simulated()},
          {"measured_mean_s", KindStats::mean(st.measured_each)},
          {"simulated_mean_s", KindStats::mean(st.simulated_each)},
          {"rel_error", st.measured() > 0 ? (st.simulated() - st.measured()) / st.measured() : 0.0}};
    }
    j["runtime_overhead_us_per_op"] = c.overhead_s_per_op * 1e6;
    j["device_drift"] = drift_json(drift);
    if (!o.no_check) j["exactness"] = exact_json;
    write_file_atomic(vo.json, j.dump(2) + "\n", "--json");
  }
  if (!vo.trace.empty()) {
    std::ostringstream simulated, measured;
    sim::write_trace(simulated, cs, sr, stamp);
    runtime::write_measured_trace(measured, ls, prep->placement, mr);
    write_file_atomic(vo.trace, runtime::merge_traces(simulated.str(), measured.str()), "--trace");
  }
  if (!vo.timeline.empty()) {
    // The last timed measured iteration (sends until their observed completion), below the simulated twin;
    // each panel has its own time axis (the two sides may run on very different hardware).
    sim::ProgramSpans measured(ls.per_worker.size());
    double measured_s = 0;
    for (const auto& w : mr.workers) {
      if (w.iterations.empty() || w.tp_rank != 0) continue;  // one row per worker, like the simulated panel
      const runtime::IterationStats& it = w.iterations.back();
      measured_s = std::max(measured_s, it.end_s);
      for (std::size_t i = 0; i < it.ops.size(); i++)
        measured.at(w.worker).push_back(
            {it.ops[i].start, ls.per_worker[w.worker][i].kind == LOpKind::Send ? it.ops[i].done : it.ops[i].end});
    }
    sim::PanelOptions po;
    po.all_replicas = true;
    sim::SvgOptions so;
    so.title = "pipescope validate: simulated and measured (" + mr.backend + ")";
    so.comm = true;
    so.shared_scale = true;  // simulated and measured on one time axis, so their lengths compare by eye
    const std::vector<sim::TimelinePanel> panels = {
        sim::timeline_panel(ls, prep->placement, sim::program_spans(cs.dag(), ls, sr),
                            sim::timeline_title("simulated", s.name, ls, sr.iteration_s), po),
        sim::timeline_panel(ls, prep->placement, measured,
                            sim::timeline_title("measured " + mr.backend, s.name, ls, measured_s), po)};
    std::ostringstream svg;
    sim::write_timeline_svg(svg, panels, so);
    write_file_atomic(vo.timeline, sim::render_svg(svg.str(), timeline_format(vo.timeline, vo.timeline_format)),
                      "--timeline");
  }
  return exact_ok ? 0 : kExitInternal;
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
