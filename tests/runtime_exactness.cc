// MPI test driver: runs a tiny scenario with the runtime under mpirun (one rank per worker and TP rank) and
// compares the loss and every parameter gradient with the single-process unsliced reference on rank 0.
//   mpirun -np 4 runtime_exactness --schedule 1f1b --dp 2 --pp 2 --m 4
//   mpirun -np 4 runtime_exactness --schedule 1f1b --tp 2 --pp 2 --heads 4    (MPI rank = worker * tp + TP rank)
// --backend cuda-bf16 / cuda-f16 runs on the NCCL transport, one GPU per rank (--need-gpus N: exit 77 = skipped
// without them), compared at a 16-bit tolerance (--tol).
// Exit code (rank 0): 0 when the outcome is the expected one (--expect exact: relative error <= --tol;
// --expect mismatch: the comparison fails), 1 otherwise. A runtime error aborts the job with 3, the
// watchdog with 2.
// --mutate breaks the lowered schedule before running it through the test-only unchecked path, to show what
// the static checker prevents: swap-slices (0F0s1 before 0F0 on rank 0), drop-send (rank 0 never sends
// 0F1: rank 1 blocks, the watchdog fires), early-allreduce (the data-parallel all-reduce moved before the
// last backward on every worker).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "core/checks.h"
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

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  CLI::App app{"runtime exactness driver (run under mpirun)"};
  std::string schedule = "1f1b", backend = "cpu-f64", mutation = "none", expect = "exact";
  int dp = 1, pp = 1, tp = 1, v = 1, m = 4, mbs = 1, layers = 4, hidden = 16, heads = 2, seq = 12, vocab = 29,
      slices = 1;
  int iterations = 1;
  std::vector<int> slice_tokens;
  double tol = 1e-10, watchdog_s = 60;
  double loss_scale = 0;  // 0: the backend's default (1024 for f16)
  app.add_option("--schedule", schedule);
  app.add_option("--dp", dp);
  app.add_option("--pp", pp);
  app.add_option("--tp", tp, "tensor-parallel processes per worker");
  bool scatter_gather = false;
  app.add_flag("--scatter-gather", scatter_gather, "Megatron scatter/gather of the p2p messages (tp > 1)");
  app.add_option("--v", v);
  app.add_option("--m", m, "micro-batches per replica");
  app.add_option("--mbs", mbs, "sequences per micro-batch");
  app.add_option("--layers", layers);
  app.add_option("--hidden", hidden);
  app.add_option("--heads", heads);
  app.add_option("--seq", seq);
  app.add_option("--vocab", vocab);
  app.add_option("--slices", slices);
  app.add_option("--slice-tokens", slice_tokens)->delimiter(',');
  std::vector<int> stage_layers;
  app.add_option("--stage-layers", stage_layers, "layers per virtual stage (uneven layout)")->delimiter(',');
  app.add_option("--backend", backend);
  app.add_option("--iterations", iterations);
  app.add_option("--tol", tol);
  app.add_option("--loss-scale", loss_scale);
  app.add_option("--watchdog", watchdog_s);
  app.add_option("--mutate", mutation)->check(CLI::IsMember({"none", "swap-slices", "drop-send", "early-allreduce"}));
  app.add_option("--expect", expect)->check(CLI::IsMember({"exact", "mismatch"}));
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

  const int rank = mpi.rank();
  std::unique_ptr<Prepared> prep;
  LoweredSchedule bad;
  ModelConfig mc;
  try {
    Scenario s = tiny_scenario(schedule, dp, pp, v, m, layers, hidden, heads, seq, vocab, slices, slice_tokens, tp,
                               stage_layers);
    s.schedule.scatter_gather = scatter_gather;
    if (mbs != 1) {
      ScenarioOverrides o;
      o.micro_batch_size = mbs;
      o.global_batch = m * mbs * dp;
      s = fit_scenario(s, o);
    }
    prep = prepare_with_constant_costs(s);
    mc = ModelConfig::from(s.model, s.parallel.stage_layers);
    mc.perturb = 0.1;
    bad = mutate(prep->lowered, mutation);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  const bool mutated = mutation != "none";
  const LoweredSchedule& ls = mutated ? bad : prep->lowered;
  if (rank == 0)
    std::printf(
        "%s: dp %d x pp %d (v %d) x tp %d, %d micro-batches of %d, slices %s, %d layers, h %d, %d heads, "
        "backend %s\n",
        schedule.c_str(), dp, pp, v, tp, m, mbs, slice_tokens.empty() ? std::to_string(slices).c_str() : "explicit",
        layers, hidden, heads, backend.c_str());

  std::unique_ptr<CheckedSchedule> cs;
  try {
    cs = std::make_unique<CheckedSchedule>(check(ls, prep->placement));
    if (rank == 0) std::printf("checker: accepted\n");
  } catch (const CheckError& e) {
    if (rank == 0) std::printf("checker: rejected: %s\n", e.what());
    if (!mutated) return 1;
  }
  if (mutated && rank == 0)
    std::printf("running the %s schedule through the test-only unchecked path\n", mutation.c_str());
  std::fflush(stdout);

  JobResult result;
  try {
    // MpiTransport for the cpu backends; NcclTransport on this rank's GPU for the cuda ones.
    RankTransport rt = make_rank_transport(ls, backend);
    Transport& tr = *rt.transport;
    Watchdog wd(watchdog_s, mpi_watchdog_handler(ls, rank, watchdog_s, mpi.thread_multiple(), 2));
    JobOptions opt;
    opt.backend = backend;
    opt.device = rt.device;
    opt.iterations = iterations;
    opt.loss_scale = loss_scale;
    result = mutated ? run_job_unchecked_for_testing(ls, mc, tr, opt, &wd) : run_job(*cs, mc, tr, opt, &wd);
    if (rank == 0 && is_cuda_backend(backend))
      std::printf("transport %s, backend %s\n", tr.name().c_str(), result.backend.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
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
  const bool exact = e.ok(tol);
  if (expect == "exact") {
    std::printf("%s (tolerance %.1e)\n", exact ? "EXACT" : "NOT EXACT", tol);
    return exact ? 0 : 1;
  }
  std::printf("%s\n", !exact ? "MISMATCH, as expected" : "unexpectedly exact");
  return !exact && e.problems.empty() ? 0 : 1;
}
