#include "runtime/nccl_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "runtime/model.h"

namespace pipescope::runtime {

namespace {

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last && *last) m += " (" + std::string(last) + ")";
#else
  (void)comm;
#endif
  return m;
}

[[noreturn]] void throw_nccl(ncclResult_t r, const char* call, int rank, ncclComm_t comm, const std::string& ctx) {
  throw RuntimeError("rank " + std::to_string(rank) + ": " + call + (ctx.empty() ? "" : " [" + ctx + "]") + ": " +
                     nccl_message(r, comm));
}

[[noreturn]] void throw_cudart(cudaError_t e, const char* call, int rank, const std::string& ctx) {
  throw RuntimeError("rank " + std::to_string(rank) + ": " + call + (ctx.empty() ? "" : " [" + ctx + "]") + ": " +
                     cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void check_mpi(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw RuntimeError(what + ": " + mpi_error_string(rc));
}

}  // namespace

// Every NCCL / CUDA runtime call is checked; the error names the rank, the call, what it was for and the
// library's message. `rank_` is the calling object's MPI rank.
#define NCCL_CHECKED(call, comm, ctx)                                                     \
  do {                                                                                    \
    const ncclResult_t pipescope_nr_ = (call);                                            \
    if (pipescope_nr_ != ncclSuccess) throw_nccl(pipescope_nr_, #call, rank_, comm, ctx); \
  } while (0)
#define CUDART_CHECKED(call, ctx)                                                     \
  do {                                                                                \
    const cudaError_t pipescope_ce_ = (call);                                         \
    if (pipescope_ce_ != cudaSuccess) throw_cudart(pipescope_ce_, #call, rank_, ctx); \
  } while (0)

namespace {

class NcclRequest final : public Request {
 public:
  NcclRequest(std::string what, int rank, ncclComm_t comm, cudaEvent_t done)
      : what_(std::move(what)), rank_(rank), comm_(comm), done_(done) {}
  ~NcclRequest() override {
    // Destroying a pending event is allowed: CUDA releases it when it completes.
    cudaEventDestroy(done_);
  }
  bool test() override {
    if (finished_) return true;
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return finished_ = true;
    if (e != cudaErrorNotReady) throw_cudart(e, "cudaEventQuery", rank_, what_);
    // Not done yet: a peer that died or a network failure shows up here instead of as a hang.
    ncclResult_t async = ncclSuccess;
    NCCL_CHECKED(ncclCommGetAsyncError(comm_, &async), comm_, what_);
    if (async != ncclSuccess && async != ncclInProgress)
      throw RuntimeError("rank " + std::to_string(rank_) + ": " + what_ +
                         ": NCCL asynchronous error: " + nccl_message(async, comm_));
    return false;
  }

 private:
  std::string what_;
  int rank_;
  ncclComm_t comm_;
  cudaEvent_t done_;
  bool finished_ = false;
};

}  // namespace

std::vector<int> NcclTransport::message_order(const LoweredSchedule& ls, int from, int to) {
  const OpKeyIndex index(ls.schedule);
  auto tags = [&](int worker, LOpKind kind, int peer) {
    std::vector<int> t;
    for (const LoweredOp& l : ls.per_worker.at(static_cast<std::size_t>(worker)))
      if (l.kind == kind && l.peer == peer) t.push_back(static_cast<int>(index.slot(key_of(l.op))));
    return t;
  };
  const std::vector<int> sent = tags(from, LOpKind::Send, to), received = tags(to, LOpKind::Recv, from);
  if (sent != received) {
    std::size_t i = 0;
    while (i < sent.size() && i < received.size() && sent[i] == received[i]) i++;
    auto name = [&](const std::vector<int>& v) {
      return i < v.size() ? op_text(op_of(ls.schedule, index.key(static_cast<std::size_t>(v[i])))) : "nothing";
    };
    throw RuntimeError("NCCL transport: worker " + std::to_string(from) + " sends " + std::to_string(sent.size()) +
                       " messages to worker " + std::to_string(to) + ", which receives " +
                       std::to_string(received.size()) + " from it, and message " + std::to_string(i + 1) +
                       " differs (sent: " + name(sent) + ", received: " + name(received) +
                       "); NCCL pairs messages in order, so the receives must follow the sends' order (use the MPI "
                       "transport, a cpu backend, for such a schedule)");
  }
  return sent;
}

NcclTransport::NcclTransport(const LoweredSchedule& ls, int device) : control_(ls), device_(device) {
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  const int tp = control_.tp_size(), me = control_.worker(), t = control_.tp_rank();
  // Deterministic checks first, identical on every rank, so that all ranks throw together before any NCCL call.
  std::map<std::pair<int, int>, std::vector<int>> orders;
  for (int a = 0; a < ls.workers(); a++)
    for (int b = 0; b < ls.workers(); b++)
      if (a != b) {
        auto o = message_order(ls, a, b);
        if (!o.empty()) orders.emplace(std::make_pair(a, b), std::move(o));
      }
  CUDART_CHECKED(cudaSetDevice(device_), "device " + std::to_string(device_));
  check_shared_gpus();

  MPI_Comm world = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  try {
    // Data-parallel groups: one communicator per (group, TP rank), like MpiTransport's MPI communicators.
    groups_.resize(ls.groups.size());
    for (std::size_t g = 0; g < ls.groups.size(); g++) {
      const CollTag tag = ls.groups[g].tag;
      if (tag == CollTag::TensorParallel || tag == CollTag::ScatterGather) continue;  // the TP group's
      const auto& ws = ls.groups[g].workers;
      const auto it = std::find(ws.begin(), ws.end(), me);
      MPI_Comm sub = MPI_COMM_NULL;
      check_mpi(MPI_Comm_split(world, it == ws.end() ? MPI_UNDEFINED : t, static_cast<int>(it - ws.begin()), &sub),
                "MPI_Comm_split (group g" + std::to_string(g) + ")");
      if (sub == MPI_COMM_NULL) continue;
      try {
        init_comm(groups_[g], sub, "group g" + std::to_string(g));
      } catch (...) {
        MPI_Comm_free(&sub);
        throw;
      }
      MPI_Comm_free(&sub);
    }
    if (tp > 1) {
      MPI_Comm sub = MPI_COMM_NULL;
      check_mpi(MPI_Comm_split(world, me, t, &sub), "MPI_Comm_split (TP group)");
      try {
        init_comm(tp_, sub, "TP group of worker " + std::to_string(me));
      } catch (...) {
        MPI_Comm_free(&sub);
        throw;
      }
      MPI_Comm_free(&sub);
    }
    // Pipeline pairs, in the same global order on every rank: each blocking ncclCommInitRank waits only for
    // its partner, who reaches it after finishing the (earlier) pairs it shares with others.
    for (const auto& [pair, tags] : orders)
      for (int k = 0; k < tp; k++) {
        const int sender = pair.first * tp + k, receiver = pair.second * tp + k;
        if (rank_ != sender && rank_ != receiver) continue;
        const std::string name = "p2p " + std::to_string(sender) + "->" + std::to_string(receiver);
        if (rank_ == sender) {
          init_pair(send_to_[pair.second], sender, receiver, world, name);
          send_order_[pair.second].tags = tags;
        } else {
          init_pair(recv_from_[pair.first], sender, receiver, world, name);
          recv_order_[pair.first].tags = tags;
        }
      }
  } catch (...) {
    MPI_Comm_free(&world);
    release_all(true);  // no destructor runs for a constructor that throws
    throw;
  }
  MPI_Comm_free(&world);
}

std::string NcclTransport::who() const { return "rank " + std::to_string(rank_); }

void NcclTransport::check_shared_gpus() const {
  // (host, PCI bus id) of every rank's device.
  char bus[64] = {};
  CUDART_CHECKED(cudaDeviceGetPCIBusId(bus, sizeof bus, device_), "device " + std::to_string(device_));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string mine = std::string(host) + " " + bus;
  mine.resize(320, '\0');
  std::vector<char> all(static_cast<std::size_t>(size_) * 320);
  check_mpi(MPI_Allgather(mine.data(), 320, MPI_CHAR, all.data(), 320, MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
  for (int i = 0; i < size_; i++)
    for (int j = i + 1; j < size_; j++)
      if (std::strncmp(&all[i * 320], &all[j * 320], 320) == 0)
        throw RuntimeError("NCCL transport: ranks " + std::to_string(i) + " and " + std::to_string(j) +
                           " use the same GPU (" + std::string(&all[i * 320]) +
                           "); NCCL does not allow two ranks of a communicator on one GPU: start at most one rank "
                           "per GPU on each node (CUDA_VISIBLE_DEVICES), or use a cpu backend");
}

void NcclTransport::init_comm(Comm& c, MPI_Comm members, const std::string& name) {
  int r = 0, n = 0;
  check_mpi(MPI_Comm_rank(members, &r), "MPI_Comm_rank (" + name + ")");
  check_mpi(MPI_Comm_size(members, &n), "MPI_Comm_size (" + name + ")");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (r == 0) NCCL_CHECKED(ncclGetUniqueId(&id), nullptr, name);
  check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, members), "MPI_Bcast (NCCL id of " + name + ")");
  c.name = name;
  NCCL_CHECKED(ncclCommInitRank(&c.comm, n, id, r), nullptr, name);
  created_.push_back(&c);
  CUDART_CHECKED(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), name);
  CUDART_CHECKED(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming), name);
}

void NcclTransport::init_pair(Comm& c, int sender, int receiver, MPI_Comm world, const std::string& name) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == sender) {
    NCCL_CHECKED(ncclGetUniqueId(&id), nullptr, name);
    check_mpi(MPI_Send(&id, sizeof id, MPI_BYTE, receiver, 0, world), "MPI_Send (NCCL id of " + name + ")");
  } else {
    check_mpi(MPI_Recv(&id, sizeof id, MPI_BYTE, sender, 0, world, MPI_STATUS_IGNORE),
              "MPI_Recv (NCCL id of " + name + ")");
  }
  c.name = name;
  NCCL_CHECKED(ncclCommInitRank(&c.comm, 2, id, rank_ == sender ? 0 : 1), nullptr, name);
  created_.push_back(&c);
  CUDART_CHECKED(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), name);
  CUDART_CHECKED(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming), name);
  // Connect now, in the global pair order: NCCL sets up a pair's connection inside its first send / receive and
  // blocks the host until the peer gets there too. Left to the run, two ranks whose first operations on their
  // pairs are both sends (to each other) would wait forever, and the set-up would land in a measured p2p time.
  void* scratch = nullptr;
  CUDART_CHECKED(cudaMalloc(&scratch, 1), name);
  const ncclResult_t r = rank_ == sender ? ncclSend(scratch, 1, ncclInt8, 1, c.comm, c.stream)
                                         : ncclRecv(scratch, 1, ncclInt8, 0, c.comm, c.stream);
  const cudaError_t e = r == ncclSuccess || r == ncclInProgress ? cudaStreamSynchronize(c.stream) : cudaSuccess;
  cudaFree(scratch);  // constructor time: nothing else is queued on this device yet
  if (r != ncclSuccess && r != ncclInProgress) throw_nccl(r, "connecting the pair", rank_, c.comm, c.name);
  CUDART_CHECKED(e, name + " (connecting)");
}

NcclTransport::~NcclTransport() { release_all(false); }

void NcclTransport::release_all(bool abort) {
  // An idle communicator is destroyed; one with work still queued (an error path: a peer failed) is aborted,
  // which does not wait for that work.
  for (Comm* c : created_) {
    ncclResult_t async = ncclSuccess;
    const bool idle = !abort && c->stream && cudaStreamQuery(c->stream) == cudaSuccess &&
                      ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async == ncclSuccess;
    if (idle)
      ncclCommDestroy(c->comm);
    else
      ncclCommAbort(c->comm);
    c->comm = nullptr;
  }
  created_.clear();
  auto free_stream = [](Comm& c) {
    if (c.ready) cudaEventDestroy(c.ready);
    if (c.stream) cudaStreamDestroy(c.stream);
    c.ready = nullptr;
    c.stream = nullptr;
  };
  for (Comm& c : groups_) free_stream(c);
  free_stream(tp_);
  for (auto& [peer, c] : send_to_) free_stream(c);
  for (auto& [peer, c] : recv_from_) free_stream(c);
  cudaGetLastError();  // clear what a failed query left behind
}

std::unique_ptr<Request> NcclTransport::enqueue(Comm& c, const std::string& what,
                                                const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& op) {
  if (!compute_)
    throw RuntimeError(who() + ": " + what +
                       ": no compute stream (Transport::set_stream) to order the operation after");
  // After everything the backend enqueued so far: the kernels that produced the buffer (or last read it).
  CUDART_CHECKED(cudaEventRecord(c.ready, compute_), what);
  CUDART_CHECKED(cudaStreamWaitEvent(c.stream, c.ready, 0), what);
  const ncclResult_t r = op(c.comm, c.stream);
  if (r != ncclSuccess && r != ncclInProgress) throw_nccl(r, what.c_str(), rank_, c.comm, c.name);
  cudaEvent_t done = nullptr;
  CUDART_CHECKED(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what);
  const cudaError_t e = cudaEventRecord(done, c.stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(done);
    throw_cudart(e, "cudaEventRecord", rank_, what);
  }
  return std::make_unique<NcclRequest>(what + " [" + c.name + "]", rank_, c.comm, done);
}

void NcclTransport::expect_tag(Order& o, int tag, const std::string& what) {
  if (o.tags.empty())
    throw RuntimeError(who() + ": " + what + ": the schedule has no such messages, so there is no communicator");
  if (o.tags[o.next] != tag)
    throw RuntimeError(who() + ": " + what + ": out of order: NCCL pairs messages in order and tag " +
                       std::to_string(o.tags[o.next]) + " comes next on this pair");
  o.next = (o.next + 1) % o.tags.size();
}

std::unique_ptr<Request> NcclTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  const std::string what = "ncclSend (to worker " + std::to_string(peer) + ", tag " + std::to_string(tag) + ", " +
                           std::to_string(bytes) + " bytes)";
  auto it = send_to_.find(peer);
  if (it == send_to_.end()) throw RuntimeError(who() + ": " + what + ": the schedule sends nothing to that worker");
  expect_tag(send_order_[peer], tag, what);
  return enqueue(it->second, what,
                 [&](ncclComm_t comm, cudaStream_t s) { return ncclSend(buf, bytes, ncclInt8, 1, comm, s); });
}

std::unique_ptr<Request> NcclTransport::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  const std::string what = "ncclRecv (from worker " + std::to_string(peer) + ", tag " + std::to_string(tag) + ", " +
                           std::to_string(bytes) + " bytes)";
  auto it = recv_from_.find(peer);
  if (it == recv_from_.end())
    throw RuntimeError(who() + ": " + what + ": the schedule receives nothing from that worker");
  expect_tag(recv_order_[peer], tag, what);
  return enqueue(it->second, what,
                 [&](ncclComm_t comm, cudaStream_t s) { return ncclRecv(buf, bytes, ncclInt8, 0, comm, s); });
}

std::unique_ptr<Request> NcclTransport::iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) {
  const std::string what = "ncclAllReduce (group g" + std::to_string(group) + ")";
  if (group < 0 || static_cast<std::size_t>(group) >= groups_.size() || !groups_[group].comm)
    throw RuntimeError(who() + ": " + what + ": not a member of that group");
  const ncclDataType_t t = type == ElemType::kF64 ? ncclDouble : ncclFloat;
  return enqueue(groups_[group], what,
                 [&](ncclComm_t comm, cudaStream_t s) { return ncclAllReduce(buf, buf, count, t, ncclSum, comm, s); });
}

std::unique_ptr<Request> NcclTransport::ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                                   void* recv, const std::vector<std::size_t>& recv_bytes, int group) {
  const std::string what = "ncclSend/ncclRecv all-to-all (group g" + std::to_string(group) + ")";
  if (group < 0 || static_cast<std::size_t>(group) >= groups_.size() || !groups_[group].comm)
    throw RuntimeError(who() + ": " + what + ": not a member of that group");
  int n = 0;
  NCCL_CHECKED(ncclCommCount(groups_[group].comm, &n), groups_[group].comm, what);
  if (send_bytes.size() != static_cast<std::size_t>(n) || recv_bytes.size() != static_cast<std::size_t>(n))
    throw RuntimeError(who() + ": " + what + ": " + std::to_string(send_bytes.size()) + " send and " +
                       std::to_string(recv_bytes.size()) + " receive sizes for " + std::to_string(n) + " members");
  // NCCL has no all-to-all-v: one grouped send and receive per member (communicator rank = member index).
  return enqueue(groups_[group], what, [&](ncclComm_t comm, cudaStream_t s) {
    ncclResult_t r = ncclGroupStart();
    const char* out = static_cast<const char*>(send);
    char* in = static_cast<char*>(recv);
    for (int j = 0; j < n && (r == ncclSuccess || r == ncclInProgress); j++) {
      if (send_bytes[j] > 0) r = ncclSend(out, send_bytes[j], ncclInt8, j, comm, s);
      if (recv_bytes[j] > 0 && (r == ncclSuccess || r == ncclInProgress))
        r = ncclRecv(in, recv_bytes[j], ncclInt8, j, comm, s);
      out += send_bytes[j];
      in += recv_bytes[j];
    }
    const ncclResult_t end = ncclGroupEnd();
    return r == ncclSuccess || r == ncclInProgress ? end : r;
  });
}

std::unique_ptr<Request> NcclTransport::tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) {
  const std::string what = "ncclAllReduce (TP group of worker " + std::to_string(worker()) + ")";
  if (!tp_.comm) throw RuntimeError(who() + ": " + what + ": no tensor parallelism (tp = 1)");
  const ncclDataType_t t = type == ElemType::kF64 ? ncclDouble : ncclFloat;
  return enqueue(tp_, what,
                 [&](ncclComm_t comm, cudaStream_t s) { return ncclAllReduce(buf, buf, count, t, ncclSum, comm, s); });
}

std::unique_ptr<Request> NcclTransport::tp_iallgather(void* buf, std::size_t chunk_bytes) {
  const std::string what = "ncclAllGather (TP group of worker " + std::to_string(worker()) + ")";
  if (!tp_.comm) throw RuntimeError(who() + ": " + what + ": no tensor parallelism (tp = 1)");
  // In place: NCCL's convention is sendbuff = recvbuff + rank * sendcount.
  char* base = static_cast<char*>(buf);
  const void* mine = base + chunk_bytes * static_cast<std::size_t>(tp_rank());
  return enqueue(tp_, what, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(mine, base, chunk_bytes, ncclInt8, comm, s);
  });
}

#undef NCCL_CHECKED
#undef CUDART_CHECKED

}  // namespace pipescope::runtime
