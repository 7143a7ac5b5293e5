#include "runtime/mpi_transport.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <limits>

#include "runtime/model.h"

namespace pipescope::runtime {

namespace {

void check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw RuntimeError(what + ": " + mpi_error_string(rc));
}

int as_count(std::size_t n, const std::string& what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw RuntimeError(what + ": " + std::to_string(n) + " elements exceed MPI's int count");
  return static_cast<int>(n);
}

class MpiRequest final : public Request {
 public:
  MpiRequest(std::string what, long long expect_bytes) : what_(std::move(what)), expect_(expect_bytes) {}
  ~MpiRequest() override {
    // Only on error paths (the executor waits for every request it posts): let MPI finish it on its own.
    if (!done_ && req_ != MPI_REQUEST_NULL) MPI_Request_free(&req_);
  }
  MPI_Request* handle() { return &req_; }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status st;
    check(MPI_Test(&req_, &flag, &st), what_);
    if (!flag) return false;
    done_ = true;
    if (expect_ >= 0) {
      int got = 0;
      check(MPI_Get_count(&st, MPI_BYTE, &got), what_);
      if (got != expect_)
        throw RuntimeError(what_ + ": received " + std::to_string(got) + " bytes, expected " + std::to_string(expect_));
    }
    return true;
  }

 private:
  std::string what_;
  long long expect_;  // receives: the byte count to verify; -1 otherwise
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

}  // namespace

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}

int mpi_local_rank() {
  int world = 0, local = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &world), "MPI_Comm_rank");
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type (ranks of this node)");
  const int rc = MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  check(rc, "MPI_Comm_rank (ranks of this node)");
  return local;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void mpi_abort(int code, bool thread_multiple) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (thread_multiple) MPI_Abort(MPI_COMM_WORLD, code);
  // MPI_Abort may not be called concurrently with the main thread's MPI calls; mpirun ends the job when a
  // rank exits without MPI_Finalize.
  _exit(code);
}

MpiTransport::MpiTransport(const LoweredSchedule& ls) {
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  tp_ = ls.tp;
  workers_ = ls.workers();
  if (tp_ < 1 || size_ != workers_ * tp_)
    throw RuntimeError("the schedule has " + std::to_string(workers_) + " workers x tp " + std::to_string(tp_) +
                       " (dp " + std::to_string(ls.dp) + " x pp " + std::to_string(ls.p) + " x tp " +
                       std::to_string(tp_) + ") but MPI started " + std::to_string(size_) +
                       " ranks: run it with mpirun -np " + std::to_string(workers_ * tp_));
  worker_ = rank_ / tp_;
  tp_rank_ = rank_ % tp_;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &data_), "MPI_Comm_dup");
  check(MPI_Comm_dup(MPI_COMM_WORLD, &control_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) tag_ub_ = *ub;
  groups_.assign(ls.groups.size(), MPI_COMM_NULL);
  for (std::size_t g = 0; g < ls.groups.size(); g++) {
    // The layer kernels' TP all-reduces (and scatter/gather) use tp_comm_; their one-worker groups need none.
    const CollTag tag = ls.groups[g].tag;
    if (tag == CollTag::TensorParallel || tag == CollTag::ScatterGather) continue;
    // A group of workers runs as tp independent collectives, one among each TP rank's processes.
    const auto& ws = ls.groups[g].workers;
    const auto it = std::find(ws.begin(), ws.end(), worker_);
    const int color = it == ws.end() ? MPI_UNDEFINED : tp_rank_;
    const int key = static_cast<int>(it - ws.begin());
    check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &groups_[g]), "MPI_Comm_split (group g" + std::to_string(g) + ")");
    if (groups_[g] != MPI_COMM_NULL) MPI_Comm_set_errhandler(groups_[g], MPI_ERRORS_RETURN);
  }
  if (tp_ > 1) {
    check(MPI_Comm_split(MPI_COMM_WORLD, worker_, tp_rank_, &tp_comm_), "MPI_Comm_split (TP group)");
    MPI_Comm_set_errhandler(tp_comm_, MPI_ERRORS_RETURN);
  }
}

MpiTransport::~MpiTransport() {
  for (MPI_Comm& c : groups_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  if (tp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&tp_comm_);
  if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

std::unique_ptr<Request> MpiTransport::isend(const void* buf, std::size_t bytes, int peer_worker, int tag) {
  const int peer = peer_worker * tp_ + tp_rank_;
  const std::string what = "MPI_Isend (to rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
  if (tag < 0 || tag > tag_ub_) throw RuntimeError(what + ": tag outside MPI_TAG_UB = " + std::to_string(tag_ub_));
  auto r = std::make_unique<MpiRequest>(what, -1);
  check(MPI_Isend(buf, as_count(bytes, what), MPI_BYTE, peer, tag, data_, r->handle()), what);
  return r;
}

std::unique_ptr<Request> MpiTransport::irecv(void* buf, std::size_t bytes, int peer_worker, int tag) {
  const int peer = peer_worker * tp_ + tp_rank_;
  const std::string what = "MPI_Irecv (from rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
  if (tag < 0 || tag > tag_ub_) throw RuntimeError(what + ": tag outside MPI_TAG_UB = " + std::to_string(tag_ub_));
  auto r = std::make_unique<MpiRequest>(what, static_cast<long long>(bytes));
  check(MPI_Irecv(buf, as_count(bytes, what), MPI_BYTE, peer, tag, data_, r->handle()), what);
  return r;
}

std::unique_ptr<Request> MpiTransport::iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) {
  const std::string what = "MPI_Iallreduce (group g" + std::to_string(group) + ")";
  if (group < 0 || static_cast<std::size_t>(group) >= groups_.size() || groups_[group] == MPI_COMM_NULL)
    throw RuntimeError(what + ": rank " + std::to_string(rank_) + " is not a member of that group");
  auto r = std::make_unique<MpiRequest>(what, -1);
  check(MPI_Iallreduce(MPI_IN_PLACE, buf, as_count(count, what), type == ElemType::kF64 ? MPI_DOUBLE : MPI_FLOAT,
                       MPI_SUM, groups_[group], r->handle()),
        what);
  return r;
}

std::unique_ptr<Request> MpiTransport::ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                                  void* recv, const std::vector<std::size_t>& recv_bytes, int group) {
  const std::string what = "MPI_Ialltoallv (group g" + std::to_string(group) + ")";
  if (group < 0 || static_cast<std::size_t>(group) >= groups_.size() || groups_[group] == MPI_COMM_NULL)
    throw RuntimeError(what + ": rank " + std::to_string(rank_) + " is not a member of that group");
  int n = 0;
  check(MPI_Comm_size(groups_[group], &n), what);
  if (send_bytes.size() != static_cast<std::size_t>(n) || recv_bytes.size() != static_cast<std::size_t>(n))
    throw RuntimeError(what + ": " + std::to_string(send_bytes.size()) + " send and " +
                       std::to_string(recv_bytes.size()) + " receive sizes for " + std::to_string(n) + " members");
  // MPI reads the counts and displacements until the operation completes: the request owns them.
  class Request final : public runtime::Request {
   public:
    Request(std::string what, const std::vector<std::size_t>& sb, const std::vector<std::size_t>& rb)
        : req(what, -1), sc(sb.size()), sd(sb.size()), rc(rb.size()), rd(rb.size()) {
      int so = 0, ro = 0;
      for (std::size_t i = 0; i < sb.size(); i++) {
        sc[i] = as_count(sb[i], what), sd[i] = so, so += sc[i];
        rc[i] = as_count(rb[i], what), rd[i] = ro, ro += rc[i];
        if (so < 0 || ro < 0) throw RuntimeError(what + ": more bytes than MPI's int displacements hold");
      }
    }
    bool test() override { return req.test(); }
    MpiRequest req;
    std::vector<int> sc, sd, rc, rd;
  };
  auto r = std::make_unique<Request>(what, send_bytes, recv_bytes);
  check(MPI_Ialltoallv(send, r->sc.data(), r->sd.data(), MPI_BYTE, recv, r->rc.data(), r->rd.data(), MPI_BYTE,
                       groups_[group], r->req.handle()),
        what);
  return r;
}

std::unique_ptr<Request> MpiTransport::tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) {
  const std::string what = "MPI_Iallreduce (TP group of worker " + std::to_string(worker_) + ")";
  if (tp_comm_ == MPI_COMM_NULL) throw RuntimeError(what + ": no tensor parallelism (tp = 1)");
  auto r = std::make_unique<MpiRequest>(what, -1);
  check(MPI_Iallreduce(MPI_IN_PLACE, buf, as_count(count, what), type == ElemType::kF64 ? MPI_DOUBLE : MPI_FLOAT,
                       MPI_SUM, tp_comm_, r->handle()),
        what);
  return r;
}

std::unique_ptr<Request> MpiTransport::tp_iallgather(void* buf, std::size_t chunk_bytes) {
  const std::string what = "MPI_Iallgather (TP group of worker " + std::to_string(worker_) + ")";
  if (tp_comm_ == MPI_COMM_NULL) throw RuntimeError(what + ": no tensor parallelism (tp = 1)");
  auto r = std::make_unique<MpiRequest>(what, -1);
  check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, as_count(chunk_bytes, what), MPI_BYTE, tp_comm_,
                       r->handle()),
        what);
  return r;
}

double MpiTransport::clock_offset_s() {
  constexpr int kRounds = 16, kTag = 1;
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const char* const what = "clock alignment (MPI_Send / MPI_Recv with process 0)";
  double offset = 0;
  for (int k = 1; k < size_; k++) {
    if (rank_ == 0) {
      double best_rtt = std::numeric_limits<double>::infinity(), best = 0;
      for (int i = 0; i < kRounds; i++) {
        const double t1 = now();
        double t2 = 0;
        check(MPI_Send(&t1, 1, MPI_DOUBLE, k, kTag, control_), what);
        check(MPI_Recv(&t2, 1, MPI_DOUBLE, k, kTag, control_, MPI_STATUS_IGNORE), what);
        const double t3 = now();
        if (t3 - t1 < best_rtt) {
          best_rtt = t3 - t1;
          best = t2 - 0.5 * (t1 + t3);  // the peer's stamp against the midpoint of the round trip
        }
      }
      check(MPI_Send(&best, 1, MPI_DOUBLE, k, kTag, control_), what);
    } else if (rank_ == k) {
      for (int i = 0; i < kRounds; i++) {
        double t1 = 0;
        check(MPI_Recv(&t1, 1, MPI_DOUBLE, 0, kTag, control_, MPI_STATUS_IGNORE), what);
        const double t2 = now();
        check(MPI_Send(&t2, 1, MPI_DOUBLE, 0, kTag, control_), what);
      }
      check(MPI_Recv(&offset, 1, MPI_DOUBLE, 0, kTag, control_, MPI_STATUS_IGNORE), what);
    }
  }
  return offset;
}

void MpiTransport::barrier() { check(MPI_Barrier(control_), "MPI_Barrier"); }

std::vector<std::vector<double>> MpiTransport::gather(const std::vector<double>& mine) {
  const int n = as_count(mine.size(), "MPI_Gatherv");
  std::vector<int> counts(rank_ == 0 ? size_ : 0), displs;
  check(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, control_), "MPI_Gather");
  std::vector<double> all;
  if (rank_ == 0) {
    displs.resize(size_);
    long long total = 0;
    for (int i = 0; i < size_; i++) {
      displs[i] = static_cast<int>(total);
      total += counts[i];
    }
    if (total > INT_MAX) throw RuntimeError("MPI_Gatherv: results exceed MPI's int count");
    all.resize(static_cast<std::size_t>(total));
  }
  check(MPI_Gatherv(mine.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, control_),
        "MPI_Gatherv");
  std::vector<std::vector<double>> out;
  if (rank_ == 0)
    for (int i = 0; i < size_; i++) out.emplace_back(all.begin() + displs[i], all.begin() + displs[i] + counts[i]);
  return out;
}

}  // namespace pipescope::runtime
