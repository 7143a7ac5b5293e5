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

#include "core/lowering.h"
#include "runtime/watchdog.h"

namespace pipescope::runtime {

inline constexpr int kRankExitInput = 1;
inline constexpr int kRankExitWatchdog = 2;
inline constexpr int kRankExitError = 3;

int rank_main(int argc, char** argv);

// Watchdog handler for MPI rank `rank` (worker rank / ls.tp): prints "rank R: watchdog: blocked on <op>, no
// progress for T s" (with tp > 1 "rank R (worker W, TP rank t): ...") to stderr, waits `grace_s` so that the other
// blocked ranks can report too, then aborts the job with exit code `code`.
Watchdog::Handler mpi_watchdog_handler(const LoweredSchedule& ls, int rank, double grace_s, bool thread_multiple,
                                       int code);

}  // namespace pipescope::runtime
