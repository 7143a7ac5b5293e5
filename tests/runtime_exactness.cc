// MPI test driver: runs a tiny scenario with the runtime under mpirun (one rank per worker and TP rank) and
// compares the loss and every parameter gradient with the single-process unsliced reference on rank 0.
//   mpirun -np 4 runtime_exactness --schedule 1f1b --dp 2 --pp 2 --m 4
//   mpirun -np 4 runtime_exactness --schedule 1f1b --tp 2 --pp 2 --heads 4    (MPI rank = worker * tp + TP rank)
// --backend cuda-bf16 / cuda-f16 runs on the NCCL transport, one GPU per rank (--need-gpus N: exit 77 = skipped
// without them), compared at a 16-bit tolerance (--tol).
// Exit code (rank 0): 0 when the outcome is the expected one (--expect exact: relative error <= --tol;
// --expect mismatch: the comparison fails), 1 otherwise. A runtime error aborts the job with 3, the
// watchdog with 2.
// --schedule all: the runtime conformance loop, in one MPI job: every schedule of the registry in turn (its chunks
// per rank from its traits, at least 2 token slices for a sliced one), each compared with the reference; exit 0
// when all are exact. Adding a schedule to the registry adds it here.
// --mutate breaks the lowered schedule before running it through the test-only unchecked path, to show what
// the static checker prevents: swap-slices (0F0s1 before 0F0 on rank 0), drop-send (rank 0 never sends
// 0F1: rank 1 blocks, the watchdog fires), early-allreduce (the data-parallel all-reduce moved before the
// last backward on every worker).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/ir/schedule_csv.h"
#include "core/lower/checks.h"
#include "core/model/schedule_registry.h"
#include "runtime/exactness.h"
#include "runtime/job.h"
#include "runtime/mpi_rank.h"
#include "runtime/mpi_transport.h"
#include "runtime/scenario_fit.h"

namespace {

using namespace pipescope;
using namespace pipescope::runtime;

int find_op(const std::vector<LoweredOp>& prog, LOpKind kind, const std::string& text) {
  for (std::size_t i = 0; i < prog.size(); i++)
    if (prog[i].kind == kind && (text.empty() || lowered_text(prog[i]) == text)) return static_cast<int>(i);
  throw std::invalid_argument("mutate: no op " + text + " in the program");
}

LoweredSchedule mutate(const LoweredSchedule& in, const std::string& how) {
  LoweredSchedule ls = in;
  if (how == "swap-slices") {
    auto& prog = ls.per_worker.at(0);
    std::swap(prog[find_op(prog, LOpKind::Compute, "0F0")], prog[find_op(prog, LOpKind::Compute, "0F0s1")]);
  } else if (how == "drop-send") {
    auto& prog = ls.per_worker.at(0);
    prog.erase(prog.begin() + find_op(prog, LOpKind::Send, "send(0F1->1)"));
  } else if (how == "early-allreduce") {
    for (auto& prog : ls.per_worker) {
      const int ar = find_op(prog, LOpKind::AllReduce, "");
      if (ar < 1 || prog[ar - 1].kind != LOpKind::Compute)
        throw std::invalid_argument("mutate: no compute op before the all-reduce");
      std::swap(prog[ar - 1], prog[ar]);
    }
  } else if (how != "none") {
    throw std::invalid_argument("unknown --mutate " + how);
  }
  return ls;
}

struct Options {
  std::string schedule = "1f1b", backend = "cpu-f64", mutation = "none", expect = "exact";
  int dp = 1, pp = 1, tp = 1, v = 1, m = 4, mbs = 1, layers = 4, hidden = 16, heads = 2, seq = 12, vocab = 29,
      slices = 1;
  int iterations = 1;
  std::vector<int> slice_tokens;
  std::vector<int> stage_layers;  // layers per virtual stage (uneven layout); empty = even
  double tol = 1e-10, watchdog_s = 60;
  double loss_scale = 0;  // 0: the backend's default (1024 for f16)
  bool scatter_gather = false;
  bool distributed_optimizer = false;  // training.distributed_optimizer: reduce-scatter, sharded Adam, all-gather
  bool via_csv = false;  // run the generated schedule after a round trip through a PyTorch-format CSV file
};

// The scenario's schedule exported to CSV and read back as kind `file` (one file per rank and process).
Scenario as_file_schedule(const Scenario& s, int rank) {
  const auto gen = prepare_with_constant_costs(s);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pipescope-conf-" + std::to_string(::getpid()) + "-" + std::to_string(rank) + ".csv"))
                               .string();
  std::ofstream(path) << schedule_to_csv(gen->schedule);
  Scenario f = s;
  f.schedule.kind = ScheduleKind::File;
  f.schedule.file = path;
  f.schedule.file_style = csv_stage_style(path, s.parallel.pp);
  return f;
}

// One schedule: prepare, check, run, compare on rank 0. Returns the exit code (rank 0's verdict; 0 elsewhere).
int run_case(MpiSession& mpi, const Options& o) {
  const int rank = mpi.rank();
  std::unique_ptr<Prepared> prep;
  LoweredSchedule bad;
  ModelConfig mc;
  try {
    Scenario s = tiny_scenario(o.schedule, o.dp, o.pp, o.v, o.m, o.layers, o.hidden, o.heads, o.seq, o.vocab, o.slices,
                               o.slice_tokens, o.tp, o.stage_layers);
    s.schedule.scatter_gather = o.scatter_gather;
    s.training.distributed_optimizer = o.distributed_optimizer;
    if (o.mbs != 1) {
      ScenarioOverrides ov;
      ov.micro_batch_size = o.mbs;
      ov.global_batch = o.m * o.mbs * o.dp;
      s = fit_scenario(s, ov);
    }
    if (o.via_csv) s = as_file_schedule(s, rank);
    prep = prepare_with_constant_costs(s);
    if (o.via_csv) std::filesystem::remove(s.schedule.file);
    mc = ModelConfig::from(s.model, s.parallel.stage_layers);
    mc.perturb = 0.1;
    bad = mutate(prep->lowered, o.mutation);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  const bool mutated = o.mutation != "none";
  const LoweredSchedule& ls = mutated ? bad : prep->lowered;
  if (rank == 0)
    std::printf(
        "%s: dp %d x pp %d (v %d) x tp %d, %d micro-batches of %d, slices %s, %d layers, h %d, %d heads, "
        "backend %s\n",
        o.schedule.c_str(), o.dp, o.pp, prep->scenario.parallel.v, o.tp, o.m, o.mbs,
        o.slice_tokens.empty() ? std::to_string(o.slices).c_str() : "explicit", o.layers, o.hidden, o.heads,
        o.backend.c_str());

  std::unique_ptr<CheckedSchedule> cs;
  try {
    cs = std::make_unique<CheckedSchedule>(check(ls, prep->placement));
    if (rank == 0) std::printf("checker: accepted\n");
  } catch (const CheckError& e) {
    if (rank == 0) std::printf("checker: rejected: %s\n", e.what());
    if (!mutated) return 1;
  }
  if (mutated && rank == 0)
    std::printf("running the %s schedule through the test-only unchecked path\n", o.mutation.c_str());
  std::fflush(stdout);

  JobResult result;
  try {
    // MpiTransport for the cpu backends; NcclTransport on this rank's GPU for the cuda ones.
    RankTransport rt = make_rank_transport(ls, o.backend);
    Transport& tr = *rt.transport;
    Watchdog wd(o.watchdog_s, mpi_watchdog_handler(ls, rank, o.watchdog_s, mpi.thread_multiple(), 2));
    JobOptions opt;
    opt.backend = o.backend;
    opt.device = rt.device;
    opt.iterations = o.iterations;
    opt.loss_scale = o.loss_scale;
    result = mutated ? run_job_unchecked_for_testing(ls, mc, tr, opt, &wd) : run_job(*cs, mc, tr, opt, &wd);
    if (rank == 0 && is_cuda_backend(o.backend))
      std::printf("transport %s, backend %s\n", tr.name().c_str(), result.backend.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s: %s\n", o.schedule.c_str(), e.what());
    mpi_abort(3, mpi.thread_multiple());
  }
  if (rank != 0) return 0;

  const SyntheticData data = make_data(ls, mc);
  const ReferenceResult ref = reference_run(mc, data, kernels::AdamConfig{}, result.steps);
  const Exactness e = compare_with_reference(result, ref, mc);
  std::printf("%s\n", format_exactness(e).c_str());
  double overhead = 0;
  std::size_t ops = 0;
  for (const auto& w : result.workers)
    for (const auto& it : w.iterations) overhead += it.overhead_s, ops += it.ops.size();
  std::printf("runtime overhead: %.2f us per op (%zu ops)\n", ops ? overhead / ops * 1e6 : 0.0, ops);
  const bool exact = e.ok(o.tol);
  if (o.expect == "exact") {
    std::printf("%s (tolerance %.1e)\n", exact ? "EXACT" : "NOT EXACT", o.tol);
    return exact ? 0 : 1;
  }
  std::printf("%s\n", !exact ? "MISMATCH, as expected" : "unexpectedly exact");
  return !exact && e.problems.empty() ? 0 : 1;
}

// --schedule all: every registered schedule at the given shape.
int run_conformance(MpiSession& mpi, const Options& o) {
  std::vector<std::string> failed;
  const auto& all = schedule_registry();
  for (const ScheduleEntry& e : all) {
    // The file kind has no generator of its own: every generated schedule also runs from its exported CSV.
    if (e.traits.from_file) continue;
    if (e.traits.style == StageStyle::Dual) {  // two copies of every stage: the runtime refuses it (scenario_fit.cc)
      if (mpi.rank() == 0) std::printf("=== conformance: %s skipped (not executed by the runtime)\n", e.name);
      continue;
    }
    Options c = o;
    c.schedule = e.name;
    c.v = e.traits.fit_v(o.v);
    if (e.traits.sliced()) {
      c.slices = std::max(o.slices, 2);
    } else {
      c.slices = 1;
      c.slice_tokens.clear();
    }
    for (bool csv : {false, true}) {
      c.via_csv = csv;
      const std::string label = std::string(e.name) + (csv ? " (from its CSV file)" : "");
      if (mpi.rank() == 0) std::printf("=== conformance: %s\n", label.c_str());
      if (run_case(mpi, c) != 0) failed.push_back(label);
    }
  }
  if (mpi.rank() != 0) return 0;
  if (failed.empty()) {
    std::printf("conformance: every registered schedule exact, generated and from its CSV file (tolerance %.1e)\n",
                o.tol);
    return 0;
  }
  std::string names;
  for (const auto& n : failed) names += (names.empty() ? "" : ", ") + n;
  std::printf("conformance: NOT EXACT or not run: %s\n", names.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  CLI::App app{"runtime exactness driver (run under mpirun)"};
  Options o;
  app.add_option("--schedule", o.schedule, "a registered schedule name, or `all` (conformance: every one)");
  app.add_option("--dp", o.dp);
  app.add_option("--pp", o.pp);
  app.add_option("--tp", o.tp, "tensor-parallel processes per worker");
  app.add_flag("--scatter-gather", o.scatter_gather, "Megatron scatter/gather of the p2p messages (tp > 1)");
  app.add_flag("--distributed-optimizer", o.distributed_optimizer,
               "ZeRO-1: gradient reduce-scatter, each replica's Adam shard, parameter all-gather (dp > 1)");
  app.add_option("--v", o.v);
  app.add_option("--m", o.m, "micro-batches per replica");
  app.add_option("--mbs", o.mbs, "sequences per micro-batch");
  app.add_option("--layers", o.layers);
  app.add_option("--hidden", o.hidden);
  app.add_option("--heads", o.heads);
  app.add_option("--seq", o.seq);
  app.add_option("--vocab", o.vocab);
  app.add_option("--slices", o.slices);
  app.add_option("--slice-tokens", o.slice_tokens)->delimiter(',');
  app.add_option("--stage-layers", o.stage_layers, "layers per virtual stage (uneven layout)")->delimiter(',');
  app.add_option("--backend", o.backend);
  app.add_option("--iterations", o.iterations);
  app.add_option("--tol", o.tol);
  app.add_option("--loss-scale", o.loss_scale);
  app.add_option("--watchdog", o.watchdog_s);
  app.add_option("--mutate", o.mutation)->check(CLI::IsMember({"none", "swap-slices", "drop-send", "early-allreduce"}));
  app.add_option("--expect", o.expect)->check(CLI::IsMember({"exact", "mismatch"}));
  int need_gpus = 0;
  app.add_option("--need-gpus", need_gpus,
                 "exit 77 (ctest: skipped) unless the build has the GPU path and this node has this many GPUs "
                 "(NCCL puts one rank on each)");
  bool probe = false;
  app.add_flag("--probe", probe, "only the --need-gpus check: exit 0 or 77 (no MPI job needed)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc;
  }
  if (need_gpus > 0 && (!built_with_nccl() || kernels::cuda_device_count() < need_gpus)) {
    if (mpi.rank() == 0)
      std::printf("SKIP: needs %d GPU(s) and a CUDA + NCCL build (GPU path built: %s, GPUs: %d)\n", need_gpus,
                  built_with_nccl() ? "yes" : "no", kernels::cuda_device_count());
    return 77;
  }
  if (probe) return 0;
  if (o.schedule == "all") {
    if (o.mutation != "none" || o.expect != "exact") {
      if (mpi.rank() == 0) std::fprintf(stderr, "error: --schedule all takes no --mutate / --expect\n");
      return 1;
    }
    return run_conformance(mpi, o);
  }
  return run_case(mpi, o);
}
