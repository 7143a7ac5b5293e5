#pragma once
// MPI transport and process-level MPI helpers. One MPI process per (worker, TP rank): MPI rank = worker * tp +
// tp_rank (worker = d * p + r, the LoweredSchedule's numbering), so `mpirun -np <dp * pp * tp>` starts a run. Every MPI
// call is checked; failures throw RuntimeError with the call, the peer / group and MPI's own message.

#include <mpi.h>

#include <string>
#include <vector>

#include "core/lower/lowering.h"
#include "runtime/transport.h"

namespace pipescope::runtime {

// MPI_Init_thread / MPI_Finalize for the lifetime of the object. Requests MPI_THREAD_MULTIPLE so that the
// watchdog thread may call MPI_Abort while the main thread is inside MPI.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool thread_multiple() const { return thread_multiple_; }

 private:
  int rank_ = 0, size_ = 1;
  bool thread_multiple_ = false;
};

// Ends the whole MPI job with `code` (MPI_Abort on MPI_COMM_WORLD, or _exit when MPI_Abort may not be called
// from this thread). Only for failures that cannot unwind: the watchdog, and errors after which other ranks
// would wait forever. Flushes stdout/stderr first.
[[noreturn]] void mpi_abort(int code, bool thread_multiple);

class MpiTransport final : public Transport {
 public:
  // Collective over MPI_COMM_WORLD: creates one communicator per data-parallel group and TP rank, and one per
  // worker's TP group. Throws RuntimeError when the world size differs from workers x tp.
  explicit MpiTransport(const LoweredSchedule& ls);
  ~MpiTransport() override;
  std::string name() const override { return "mpi"; }
  int worker() const override { return worker_; }
  int workers() const override { return workers_; }
  int tp_rank() const override { return tp_rank_; }
  int tp_size() const override { return tp_; }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) override;
  std::unique_ptr<Request> ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                                      const std::vector<std::size_t>& recv_bytes, int group) override;
  std::unique_ptr<Request> tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) override;
  std::unique_ptr<Request> tp_iallgather(void* buf, std::size_t chunk_bytes) override;
  void barrier() override;
  std::vector<std::vector<double>> gather(const std::vector<double>& mine) override;
  // Ping-pong with process 0 over the control plane, the round trip of least delay taken (NTP's estimate).
  double clock_offset_s() override;

 private:
  int rank_ = 0, size_ = 1;  // in MPI_COMM_WORLD
  int worker_ = 0, workers_ = 1, tp_rank_ = 0, tp_ = 1;
  int tag_ub_ = 32767;
  MPI_Comm data_ = MPI_COMM_NULL;     // point-to-point traffic (a duplicate of MPI_COMM_WORLD)
  MPI_Comm control_ = MPI_COMM_NULL;  // barrier / gather
  std::vector<MPI_Comm> groups_;  // per collective group: this TP rank's communicator (MPI_COMM_NULL if not a member)
  MPI_Comm tp_comm_ = MPI_COMM_NULL;  // this worker's tp processes (tp > 1)
};

// This process's index among the ranks on its node (MPI_Comm_split_type MPI_COMM_TYPE_SHARED, ordered by world
// rank): the GPU choice of the cuda backends. Collective over MPI_COMM_WORLD. Launcher variables
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) are not used: SLURM_LOCALID is stale under mpirun inside an allocation.
int mpi_local_rank();

// "MPI_Isend: MPI_ERR_TAG: invalid tag" style message of an MPI return code.
std::string mpi_error_string(int code);

}  // namespace pipescope::runtime
