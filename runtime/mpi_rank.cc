#include "runtime/mpi_rank.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "runtime/mpi_transport.h"
#include "runtime/rank_job.h"
#ifdef PIPESCOPE_HAVE_NCCL
#include "runtime/nccl_transport.h"
#endif

namespace pipescope::runtime {

Watchdog::Handler mpi_watchdog_handler(const LoweredSchedule& ls, int rank, double grace_s, bool thread_multiple,
                                       int code) {
  return [&ls, rank, grace_s, thread_multiple, code](std::int64_t op, double idle_s) {
    const int tp = std::max(ls.tp, 1), worker = rank / tp;
    const std::string who =
        tp == 1 ? "" : " (worker " + std::to_string(worker) + ", TP rank " + std::to_string(rank % tp) + ")";
    std::fprintf(stderr, "rank %d%s: watchdog: blocked on %s, no progress for %.1f s\n", rank, who.c_str(),
                 describe_position(ls, worker, op).c_str(), idle_s);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
    mpi_abort(code, thread_multiple);
  };
}

RankTransport make_rank_transport(const LoweredSchedule& ls, const std::string& backend) {
  RankTransport r;
  if (!is_cuda_backend(backend)) {
    r.transport = std::make_unique<MpiTransport>(ls);
    return r;
  }
  check_backend(backend);
#ifdef PIPESCOPE_HAVE_NCCL
  // Every rank computes its local rank (collective), then fails alike when the node has no GPU.
  const int local = mpi_local_rank();
  const int gpus = kernels::cuda_device_count();
  if (gpus == 0)
    throw RuntimeError("backend " + backend + ": no CUDA device on this node (cudaGetDeviceCount found none)");
  r.device = local % gpus;
  r.transport = std::make_unique<NcclTransport>(ls, r.device);
#endif
  return r;
}

int rank_main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  const int rank = mpi.rank();
  CLI::App app{"pipescope-rank: one MPI rank of a measured run (launched by `pipescope validate`)"};
  RankJob job;
  std::string out;
  job.add_scenario_option(app);
  job.add_shrink_options(app);
  job.add_run_options(app);
  app.add_option("--out", out, "Rank 0 writes the gathered results here")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : kRankExitInput);
  }

  // Input errors are deterministic: every rank throws the same one before any communication.
  std::unique_ptr<Prepared> prep;
  std::unique_ptr<CheckedSchedule> cs;
  ModelConfig mc;
  try {
    const Scenario s = job.fitted_scenario();
    prep = prepare(s);
    cs = std::make_unique<CheckedSchedule>(check(prep->lowered, prep->placement));
    mc = ModelConfig::for_validation(s.model, s.parallel.stage_layers);
    check_backend(job.backend);  // creates nothing (no CUDA context before the device is chosen)
  } catch (const CheckError& e) {
    if (rank == 0) std::fprintf(stderr, "error: schedule rejected by the static checker: %s\n", e.what());
    return kRankExitInput;
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return kRankExitInput;
  }

  try {
    RankTransport rt = make_rank_transport(prep->lowered, job.backend);
    Watchdog wd(job.watchdog_s, mpi_watchdog_handler(prep->lowered, rank, std::min(job.watchdog_s, 10.0),
                                                     mpi.thread_multiple(), kRankExitWatchdog));
    JobOptions jo = job.job_options();
    jo.device = rt.device;
    const JobResult r = run_job(*cs, mc, *rt.transport, jo, &wd);
    if (rank == 0) {
      const std::vector<double> v = pack(r);
      std::ofstream f(out, std::ios::binary);
      f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
      if (!f.flush()) throw RuntimeError("--out " + out + ": cannot write the results");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    mpi_abort(kRankExitError, mpi.thread_multiple());
  }
  return 0;
}

}  // namespace pipescope::runtime
