#pragma once
// NCCL transport: the GPU path of the runtime (built only with CUDA and NCCL, PIPESCOPE_HAVE_NCCL). Processes
// and numbering as MpiTransport (MPI rank = worker * tp + tp_rank, started by mpirun / srun); buffers are device
// memory of the CUDA backend. Communicators, each created with ncclCommInitRank from a unique id that MPI
// carries (MPI_Bcast on the group's MPI sub-communicator, as nccl-tests do):
//   - per data-parallel group and TP rank (like MpiTransport's), for ncclAllReduce of the fp32 gradients;
//   - per worker's TP group (tp > 1), for the layer kernels' all-reduces and the scatter/gather all-gather;
//   - per directed pair of processes that exchange pipeline messages (sender rank 0, receiver rank 1), for
//     ncclSend / ncclRecv. One communicator per direction, not one world communicator: NCCL runs a
//     communicator's operations in issue order and a send completes only when its receive runs, so 1F1B's
//     "send to the next stage, then receive from it" on both sides would deadlock on a shared communicator.
// NCCL matches messages by order, not by tag: the constructor checks that the schedule's sends from every
// worker to every peer are received in the same order (throws RuntimeError naming the first mismatch), and
// every isend / irecv checks its tag against that order.
// Each communicator has its own stream; an operation first waits (cudaStreamWaitEvent) for everything enqueued
// so far on the backend's stream (set_stream), and its Request::test() is cudaEventQuery on an event recorded
// after it, which also polls ncclCommGetAsyncError so that a failed peer becomes an error rather than a hang.
// Barrier and gather go through MPI. Two processes of one communicator cannot share a GPU (NCCL refuses it):
// the constructor checks every pair of processes and names the ones that do.

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/lower/lowering.h"
#include "runtime/mpi_transport.h"
#include "runtime/transport.h"

namespace pipescope::runtime {

class NcclTransport final : public Transport {
 public:
  // Collective over MPI_COMM_WORLD. Makes `device` current (cudaSetDevice) before creating anything.
  NcclTransport(const LoweredSchedule& ls, int device);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  std::string name() const override { return "nccl"; }
  int worker() const override { return control_.worker(); }
  int workers() const override { return control_.workers(); }
  int tp_rank() const override { return control_.tp_rank(); }
  int tp_size() const override { return control_.tp_size(); }
  bool device_buffers() const override { return true; }
  void set_stream(void* stream) override { compute_ = static_cast<cudaStream_t>(stream); }

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) override;
  std::unique_ptr<Request> ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                                      const std::vector<std::size_t>& recv_bytes, int group) override;
  std::unique_ptr<Request> tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) override;
  std::unique_ptr<Request> tp_iallgather(void* buf, std::size_t chunk_bytes) override;
  void barrier() override { control_.barrier(); }
  std::vector<std::vector<double>> gather(const std::vector<double>& mine) override { return control_.gather(mine); }
  double clock_offset_s() override { return control_.clock_offset_s(); }

  int device() const { return device_; }

  // The order in which worker `from` sends its messages (tags) to worker `to`, and in which `to` receives them,
  // per iteration; throws RuntimeError when they differ (NCCL would pair the wrong messages).
  static std::vector<int> message_order(const LoweredSchedule& ls, int from, int to);

 private:
  struct Comm {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t ready = nullptr;  // recorded on the compute stream, waited for by `stream`
    std::string name;             // for messages: "data-parallel group g1", "p2p 0->1"
  };
  // Sequence of the tags expected on one direction of a pair, cycling once per iteration.
  struct Order {
    std::vector<int> tags;
    std::size_t next = 0;
  };
  void init_comm(Comm& c, MPI_Comm members, const std::string& name);
  // Destroys (or, with work still queued, aborts) every communicator in creation order, which is the same on
  // every rank: ncclCommDestroy communicates with the other members (NCCL >= 2.23), so ranks destroying shared
  // communicators in different orders would wait for each other forever. `abort` aborts them all (error paths:
  // the peers may never destroy theirs).
  void release_all(bool abort);
  void init_pair(Comm& c, int sender, int receiver, MPI_Comm world, const std::string& name);
  std::unique_ptr<Request> enqueue(Comm& c, const std::string& what,
                                   const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& op);
  void expect_tag(Order& o, int tag, const std::string& what);
  void check_shared_gpus() const;
  std::string who() const;

  MpiTransport control_;  // numbering, barrier, gather
  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t compute_ = nullptr;
  std::vector<Comm> groups_;                 // per LoweredSchedule group (comm null when not a member)
  Comm tp_;                                  // this worker's TP group (tp > 1)
  std::map<int, Comm> send_to_, recv_from_;  // by peer worker
  std::map<int, Order> send_order_, recv_order_;
  std::vector<Comm*> created_;  // in creation order (groups_ is sized before any init; map nodes do not move)
};

}  // namespace pipescope::runtime
