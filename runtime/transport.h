#pragma once
// How workers exchange data: point-to-point messages between pipeline stages, sum all-reduces over the
// collective groups of a LoweredSchedule, and a small blocking control plane (barrier, gather of results).
// Two implementations:
//   - MpiTransport (runtime/mpi_transport.h): one process per (worker, TP rank), started by mpirun / srun; MPI
//     rank = worker * tp + tp_rank (worker = d * p + r; TP innermost, like Megatron).
//   - LocalTransport (runtime/local_transport.h): one thread per (worker, TP rank) inside one process,
//     in-memory mailboxes; used by the in-process tests and the overhead benchmark.
//   - NcclTransport (runtime/nccl_transport.h, built with CUDA + NCCL): MPI processes as above, GPU buffers moved by
//     NCCL on streams ordered after the backend's stream; the control plane stays on MPI.
// Tensor parallelism (tp > 1): the tp processes of a worker run the worker's program together. Peers and
// collective groups are named by worker: TP rank t of a worker talks to TP rank t of the peer worker, and a
// data-parallel group's all-reduce runs among the members' TP rank t processes (tp independent reductions).
// Everything on the data path is non-blocking: the executor polls Request::test(), so it can time waits,
// check for cancellation and yield the core (ranks are often oversubscribed on CI machines).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/layer.h"

namespace pipescope::runtime {

enum class ElemType : std::uint8_t { kF64, kF32 };
ElemType elem_type(kernels::DType t);  // throws RuntimeError for 16-bit types (no host sum for them)
std::size_t elem_bytes(ElemType t);

class Request {
 public:
  virtual ~Request() = default;
  // True once the operation completed (buffers may be reused); throws RuntimeError on failure.
  virtual bool test() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual int worker() const = 0;
  virtual int workers() const = 0;
  // This process is TP rank tp_rank() of the tp_size() processes of worker().
  virtual int tp_rank() const { return 0; }
  virtual int tp_size() const { return 1; }

  // Message `tag` from this worker to `peer`; the receiver must post the same tag and byte count.
  virtual std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) = 0;
  // In-place element-wise sum over the members of collective group `group` (LoweredSchedule::groups index,
  // as given to the transport's constructor). The n-th call of a group on each member is the same call.
  virtual std::unique_ptr<Request> iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) = 0;
  // All-to-all over the members of collective group `group` (an expert-parallel group; MoE dispatch and combine):
  // `send` holds, in member order, send_bytes[j] bytes for member j; `recv` receives recv_bytes[i] bytes from
  // member i, in member order (MPI_Alltoallv with contiguous displacements). The n-th call of a group on each
  // member is the same call, and member i's send_bytes[j] must equal member j's recv_bytes[i] (the MoE layer
  // exchanges the counts first). Buffers and size vectors must stay valid until the request completes.
  virtual std::unique_ptr<Request> ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                                              const std::vector<std::size_t>& recv_bytes, int group) = 0;
  // In-place element-wise sum over the tp_size() processes of this worker (the layer kernels' tensor-parallel
  // all-reduces); the n-th call on each of them is the same call. Throws when tp_size() == 1.
  virtual std::unique_ptr<Request> tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) = 0;
  // In-place all-gather over the same processes (Megatron scatter/gather): `buf` holds tp_size() chunks of
  // `chunk_bytes`; this process's chunk tp_rank() is filled, the others arrive. Throws when tp_size() == 1.
  virtual std::unique_ptr<Request> tp_iallgather(void* buf, std::size_t chunk_bytes) = 0;

  // Device transports (NcclTransport) move GPU memory; the host transports (MPI, local) host memory. A backend
  // must match: run_job refuses a CUDA backend on a host transport and vice versa.
  virtual bool device_buffers() const { return false; }
  // The stream that produces and consumes the buffers (kernels::Backend::stream()): a device transport orders
  // its operations after the work enqueued there so far. Host transports ignore it.
  virtual void set_stream(void* /*stream*/) {}

  // Control plane (setup and results; blocking).
  virtual void barrier() = 0;
  // Process 0 (worker 0, TP rank 0) receives every process's vector in process order (worker * tp + tp_rank);
  // the others get an empty result.
  virtual std::vector<std::vector<double>> gather(const std::vector<double>& mine) = 0;
  // This process's steady clock minus process 0's, in seconds (collective). Ranks leave a barrier up to
  // milliseconds apart when cores are oversubscribed, and clocks of different hosts differ: measured times of
  // different processes are compared only after this correction. Threads of one process share a clock: 0.
  virtual double clock_offset_s() { return 0; }
  // True when the run was cancelled (another worker failed, or the watchdog fired): waits give up.
  virtual bool cancelled() const { return false; }
};

}  // namespace pipescope::runtime
