#include "runtime/local_transport.h"

#include <algorithm>
#include <cstring>

#include "runtime/model.h"

namespace pipescope::runtime {

namespace {

class DoneRequest final : public Request {
 public:
  bool test() override { return true; }
};

template <class T>
void add_into(std::vector<char>& acc, const std::vector<char>& x) {
  T* a = reinterpret_cast<T*>(acc.data());
  const T* b = reinterpret_cast<const T*>(x.data());
  const std::size_t n = acc.size() / sizeof(T);
  for (std::size_t i = 0; i < n; i++) a[i] += b[i];
}

}  // namespace

LocalFabric::LocalFabric(int workers, std::vector<CollGroup> groups, int tp)
    : workers_(workers),
      tp_(tp),
      groups_(std::move(groups)),
      calls_(groups_.size() * static_cast<std::size_t>(std::max(tp, 1))),
      tp_calls_(static_cast<std::size_t>(std::max(workers, 0))),
      deposit_(static_cast<std::size_t>(std::max(workers, 0) * std::max(tp, 1))),
      result_(deposit_.size()) {
  if (workers < 1 || tp < 1)
    throw RuntimeError("LocalFabric: workers and tp must be >= 1 (got " + std::to_string(workers) + ", " +
                       std::to_string(tp) + ")");
}

void LocalFabric::cancel() {
  cancelled_.store(true);
  std::lock_guard<std::mutex> l(mu_);
  cv_.notify_all();
}

LocalTransport::LocalTransport(LocalFabric& fabric, int worker, int tp_rank)
    : fabric_(fabric), worker_(worker), tp_rank_(tp_rank), next_call_(fabric.groups_.size(), 0) {
  if (worker < 0 || worker >= fabric.workers() || tp_rank < 0 || tp_rank >= fabric.tp())
    throw RuntimeError("LocalTransport: worker " + std::to_string(worker) + " of " + std::to_string(fabric.workers()) +
                       ", TP rank " + std::to_string(tp_rank) + " of " + std::to_string(fabric.tp()));
}

std::unique_ptr<Request> LocalTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  if (peer < 0 || peer >= fabric_.workers())
    throw RuntimeError("send to worker " + std::to_string(peer) + " of " + std::to_string(fabric_.workers()));
  std::vector<char> msg(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
  std::lock_guard<std::mutex> l(fabric_.mu_);
  fabric_.mail_[{process(), peer * fabric_.tp() + tp_rank_, tag}].push_back(std::move(msg));
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> LocalTransport::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  class Recv final : public Request {
   public:
    Recv(LocalFabric& f, void* buf, std::size_t bytes, std::tuple<int, int, int> key, int peer)
        : f_(f), buf_(buf), bytes_(bytes), key_(key), peer_(peer) {}
    bool test() override {
      if (done_) return true;
      std::lock_guard<std::mutex> l(f_.mu_);
      auto it = f_.mail_.find(key_);
      if (it == f_.mail_.end() || it->second.empty()) return false;
      std::vector<char>& msg = it->second.front();
      if (msg.size() != bytes_)
        throw RuntimeError("receive from worker " + std::to_string(peer_) + " (tag " +
                           std::to_string(std::get<2>(key_)) + "): " + std::to_string(msg.size()) +
                           " bytes arrived, expected " + std::to_string(bytes_));
      if (bytes_) std::memcpy(buf_, msg.data(), bytes_);
      it->second.erase(it->second.begin());
      if (it->second.empty()) f_.mail_.erase(it);
      done_ = true;
      return true;
    }

   private:
    LocalFabric& f_;
    void* buf_;
    std::size_t bytes_;
    std::tuple<int, int, int> key_;
    int peer_;
    bool done_ = false;
  };
  if (peer < 0 || peer >= fabric_.workers())
    throw RuntimeError("receive from worker " + std::to_string(peer) + " of " + std::to_string(fabric_.workers()));
  return std::make_unique<Recv>(fabric_, buf, bytes, std::make_tuple(peer * fabric_.tp() + tp_rank_, process(), tag),
                                peer);
}

std::unique_ptr<Request> LocalTransport::iallreduce_sum(void* buf, std::size_t count, ElemType type, int group) {
  if (group < 0 || static_cast<std::size_t>(group) >= fabric_.groups_.size())
    throw RuntimeError("all-reduce on unknown group g" + std::to_string(group));
  const auto& ws = fabric_.groups_[group].workers;
  const auto it = std::find(ws.begin(), ws.end(), worker_);
  if (it == ws.end())
    throw RuntimeError("all-reduce on group g" + std::to_string(group) + ": worker " + std::to_string(worker_) +
                       " is not a member");
  auto& calls = fabric_.calls_[static_cast<std::size_t>(group) * fabric_.tp() + tp_rank_];
  return reduce(calls, next_call_[group]++, static_cast<int>(it - ws.begin()), static_cast<int>(ws.size()), buf, count,
                type, "all-reduce of group g" + std::to_string(group));
}

std::unique_ptr<Request> LocalTransport::ialltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                                    void* recv, const std::vector<std::size_t>& recv_bytes, int group) {
  const std::string what = "all-to-all of group g" + std::to_string(group);
  if (group < 0 || static_cast<std::size_t>(group) >= fabric_.groups_.size())
    throw RuntimeError("all-to-all on unknown group g" + std::to_string(group));
  const auto& ws = fabric_.groups_[group].workers;
  const auto it = std::find(ws.begin(), ws.end(), worker_);
  if (it == ws.end()) throw RuntimeError(what + ": worker " + std::to_string(worker_) + " is not a member");
  const int n = static_cast<int>(ws.size()), me = static_cast<int>(it - ws.begin());
  if (send_bytes.size() != ws.size() || recv_bytes.size() != ws.size())
    throw RuntimeError(what + ": " + std::to_string(send_bytes.size()) + " send and " +
                       std::to_string(recv_bytes.size()) + " receive sizes for " + std::to_string(n) + " members");
  auto& calls = fabric_.calls_[static_cast<std::size_t>(group) * fabric_.tp() + tp_rank_];
  const std::int64_t number = next_call_[group]++;
  {
    std::lock_guard<std::mutex> l(fabric_.mu_);
    LocalFabric::Call& c = calls[number];
    if (c.contrib.empty()) c.contrib.resize(static_cast<std::size_t>(n)), c.sizes.resize(static_cast<std::size_t>(n));
    std::size_t total = 0;
    for (std::size_t b : send_bytes) total += b;
    const char* p = static_cast<const char*>(send);
    c.contrib[me].assign(p, p + total);
    c.sizes[me] = send_bytes;
    c.arrived++;
  }
  // Member i's chunk for this member, copied out once everyone has deposited (eager, like the sends).
  class AllToAll final : public Request {
   public:
    AllToAll(LocalFabric& f, void* recv, std::vector<std::size_t> rb, LocalFabric::Calls& calls, std::int64_t number,
             int n, int me, std::string what)
        : f_(f),
          recv_(recv),
          rb_(std::move(rb)),
          calls_(calls),
          number_(number),
          n_(n),
          me_(me),
          what_(std::move(what)) {}
    bool test() override {
      if (done_) return true;
      std::lock_guard<std::mutex> l(f_.mu_);
      auto it = calls_.find(number_);
      if (it == calls_.end() || it->second.arrived < n_) return false;
      char* out = static_cast<char*>(recv_);
      for (int i = 0; i < n_; i++) {
        const auto& sz = it->second.sizes[static_cast<std::size_t>(i)];
        if (sz.size() != static_cast<std::size_t>(n_) || sz[me_] != rb_[i])
          throw RuntimeError(what_ + ": member " + std::to_string(i) + " sends " +
                             std::to_string(sz.size() == static_cast<std::size_t>(n_) ? sz[me_] : 0) +
                             " bytes to member " + std::to_string(me_) + ", which expects " + std::to_string(rb_[i]));
        std::size_t off = 0;
        for (int j = 0; j < me_; j++) off += sz[j];
        if (rb_[i] > 0) std::memcpy(out, it->second.contrib[static_cast<std::size_t>(i)].data() + off, rb_[i]);
        out += rb_[i];
      }
      if (++it->second.taken == n_) calls_.erase(it);
      done_ = true;
      return true;
    }

   private:
    LocalFabric& f_;
    void* recv_;
    std::vector<std::size_t> rb_;
    LocalFabric::Calls& calls_;
    std::int64_t number_;
    int n_, me_;
    std::string what_;
    bool done_ = false;
  };
  return std::make_unique<AllToAll>(fabric_, recv, recv_bytes, calls, number, n, me, what);
}

std::unique_ptr<Request> LocalTransport::tp_iallreduce_sum(void* buf, std::size_t count, ElemType type) {
  if (fabric_.tp() == 1) throw RuntimeError("tensor-parallel all-reduce without tensor parallelism (tp = 1)");
  return reduce(fabric_.tp_calls_[worker_], next_tp_call_++, tp_rank_, fabric_.tp(), buf, count, type,
                "tensor-parallel all-reduce of worker " + std::to_string(worker_));
}

std::unique_ptr<Request> LocalTransport::tp_iallgather(void* buf, std::size_t chunk_bytes) {
  if (fabric_.tp() == 1) throw RuntimeError("tensor-parallel all-gather without tensor parallelism (tp = 1)");
  return reduce(fabric_.tp_calls_[worker_], next_tp_call_++, tp_rank_, fabric_.tp(), buf, chunk_bytes, ElemType::kF64,
                "tensor-parallel all-gather of worker " + std::to_string(worker_), true);
}

std::unique_ptr<Request> LocalTransport::reduce(LocalFabric::Calls& calls, std::int64_t number, int member, int n,
                                                void* buf, std::size_t count, ElemType type, const std::string& what,
                                                bool gather) {
  const std::size_t bytes = gather ? count : count * elem_bytes(type);
  const char* mine = static_cast<const char*>(buf) + (gather ? bytes * static_cast<std::size_t>(member) : 0);
  {
    std::lock_guard<std::mutex> l(fabric_.mu_);
    LocalFabric::Call& c = calls[number];
    if (c.contrib.empty()) c.contrib.resize(static_cast<std::size_t>(n));
    c.contrib[member].assign(mine, mine + bytes);
    if (++c.arrived == n) {
      for (const auto& x : c.contrib)
        if (x.size() != bytes)
          throw RuntimeError(what + ", call " + std::to_string(number) + ": members contribute different sizes (" +
                             std::to_string(x.size()) + " vs " + std::to_string(bytes) + " bytes)");
      c.result = c.contrib[0];  // sum (or concatenation) in member order: deterministic
      for (int k = 1; k < n; k++)
        if (gather)
          c.result.insert(c.result.end(), c.contrib[k].begin(), c.contrib[k].end());
        else if (type == ElemType::kF64)
          add_into<double>(c.result, c.contrib[k]);
        else
          add_into<float>(c.result, c.contrib[k]);
    }
  }
  class Reduce final : public Request {
   public:
    Reduce(LocalFabric& f, void* buf, LocalFabric::Calls& calls, std::int64_t number, int n)
        : f_(f), buf_(buf), calls_(calls), number_(number), n_(n) {}
    bool test() override {
      if (done_) return true;
      std::lock_guard<std::mutex> l(f_.mu_);
      auto it = calls_.find(number_);
      if (it == calls_.end() || it->second.arrived < n_) return false;
      if (!it->second.result.empty()) std::memcpy(buf_, it->second.result.data(), it->second.result.size());
      if (++it->second.taken == n_) calls_.erase(it);
      done_ = true;
      return true;
    }

   private:
    LocalFabric& f_;
    void* buf_;
    LocalFabric::Calls& calls_;
    std::int64_t number_;
    int n_;
    bool done_ = false;
  };
  return std::make_unique<Reduce>(fabric_, buf, calls, number, n);
}

std::vector<std::vector<double>> LocalTransport::exchange(const std::vector<double>& mine) {
  std::unique_lock<std::mutex> l(fabric_.mu_);
  if (fabric_.cancelled()) throw RuntimeError("run cancelled");
  const int gen = fabric_.gen_;
  fabric_.deposit_[process()] = mine;
  if (++fabric_.arrived_ == fabric_.processes()) {
    fabric_.result_.swap(fabric_.deposit_);
    fabric_.arrived_ = 0;
    fabric_.gen_++;
    fabric_.cv_.notify_all();
  } else {
    fabric_.cv_.wait(l, [&] { return fabric_.gen_ != gen || fabric_.cancelled(); });
    if (fabric_.gen_ == gen) throw RuntimeError("run cancelled");
  }
  // result_ stays valid until every worker has entered the next exchange, which needs this one to return.
  return fabric_.result_;
}

void LocalTransport::barrier() { exchange({}); }

std::vector<std::vector<double>> LocalTransport::gather(const std::vector<double>& mine) {
  auto all = exchange(mine);
  if (process() != 0) return {};
  return all;
}

}  // namespace pipescope::runtime
