#pragma once
// The program every MPI rank of a measured run executes (`pipescope-rank`, launched by `pipescope validate`):
//   mpirun -n <dp * pp * tp> pipescope-rank [SCENARIO] [shrinking flags] [run flags] --out FILE
// Each rank fits the scenario (runtime/rank_job.h), lowers and checks it, runs its worker's program
// (MPI rank = worker * tp + TP rank, worker = d * p + r), and rank 0 writes the gathered results
// (runtime/job.h pack) to FILE.
// Why a separate program: libsimgrid exports the MPI API (SMPI), so the `pipescope` binary, which links
// SimGrid, must not also be an MPI program.
// Exit codes, also used as MPI_Abort codes so that mpirun passes them on: 0 ok, 1 bad input (flags,
// scenario, schedule rejected by the checker; every rank fails alike before any communication),
// 2 a watchdog fired, 3 a runtime error (CUDA / MPI / kernels, named by rank and op).

#include <cstdint>
#include <memory>
#include <string>

#include "core/lower/lowering.h"
#include "runtime/transport.h"
#include "runtime/watchdog.h"

namespace pipescope::runtime {

inline constexpr int kRankExitInput = 1;
inline constexpr int kRankExitWatchdog = 2;
inline constexpr int kRankExitError = 3;

int rank_main(int argc, char** argv);

// The transport for `backend` (collective over MPI_COMM_WORLD): MpiTransport for the host backends; for the cuda
// backends NcclTransport on GPU `device` = this rank's index among the ranks of its node (mpi_local_rank) modulo
// the node's GPU count, which the caller passes on to the backend (JobOptions::device). Throws RuntimeError when
// the build has no GPU path or the node no GPU.
struct RankTransport {
  std::unique_ptr<Transport> transport;
  int device = 0;  // meaningful for the cuda backends
};
RankTransport make_rank_transport(const LoweredSchedule& ls, const std::string& backend);

// Watchdog handler for MPI rank `rank` (worker rank / ls.tp): prints "rank R: watchdog: blocked on <op>, no
// progress for T s" (with tp > 1 "rank R (worker W, TP rank t): ...") to stderr, waits `grace_s` so that the other
// blocked ranks can report too, then aborts the job with exit code `code`.
Watchdog::Handler mpi_watchdog_handler(const LoweredSchedule& ls, int rank, double grace_s, bool thread_multiple,
                                       int code);

}  // namespace pipescope::runtime
