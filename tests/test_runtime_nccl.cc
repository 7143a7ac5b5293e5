// NcclTransport under mpirun with 2 ranks (CTest label gpu; exit 77 = skipped without a CUDA + NCCL build or
// without a GPU):
//   - 1 GPU: both ranks would share it, which NCCL forbids: the constructor must refuse, naming both ranks;
//   - >= 2 GPUs (one per rank): pp2 p2p in both directions with every send posted before any receive (deadlocks
//     on a single shared communicator, and on per-direction ones left to connect at their first send; works on
//     the per-direction ones the transport connects when it is built), byte-exact payloads; an out-of-order
//     tag is refused; dp2 gradient all-reduce in fp32 and fp64; tp2 all-reduce and in-place all-gather.
//   mpirun -np 2 runtime_nccl_transport
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "runtime/model.h"
#include "runtime/mpi_transport.h"
#include "runtime/scenario_fit.h"
#ifdef PIPESCOPE_HAVE_NCCL
#include <cuda_runtime.h>

#include "runtime/nccl_transport.h"
#endif

namespace {

using namespace pipescope;
using namespace pipescope::runtime;

int failures = 0;
int rank = 0;

[[maybe_unused]] void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
    failures++;
  }
}

#ifdef PIPESCOPE_HAVE_NCCL
void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(e));
}

LoweredSchedule lowered(const std::string& kind, int dp, int pp, int tp) {
  const Scenario s = tiny_scenario(kind, dp, pp, 1, 2, 2, 16, 2, 8, 29, 1, {}, tp);
  return prepare_with_constant_costs(s)->lowered;
}

// Device buffer of n values of T, filled from / read back to the host.
template <class T>
struct DeviceVec {
  explicit DeviceVec(std::size_t n) : n(n) { cuda(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc"); }
  ~DeviceVec() { cudaFree(p); }
  // A pageable cudaMemcpy may return before the DMA lands, and the transport's non-blocking streams are not
  // ordered after the legacy stream: wait for the device. Call it before posting operations (they may be pending).
  void put(const std::vector<T>& v) {
    cuda(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice), "put");
    cuda(cudaDeviceSynchronize(), "put");
  }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cuda(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "get");
    return v;
  }
  T* p = nullptr;
  std::size_t n;
};

void wait_all(std::vector<std::unique_ptr<Request>>& reqs) {
  for (auto& r : reqs)
    while (!r->test()) {
    }
}

void p2p(int device, cudaStream_t stream) {
  const LoweredSchedule ls = lowered("1f1b", 1, 2, 1);
  NcclTransport tr(ls, device);
  tr.set_stream(stream);
  const int peer = 1 - tr.worker();
  const std::vector<int> out = NcclTransport::message_order(ls, tr.worker(), peer);
  const std::vector<int> in = NcclTransport::message_order(ls, peer, tr.worker());
  expect(!out.empty() && !in.empty(), "a pp2 1f1b schedule has messages both ways");
  const std::size_t n = 1000;  // floats per message
  std::vector<std::unique_ptr<DeviceVec<float>>> sbuf, rbuf;
  std::vector<std::unique_ptr<Request>> reqs;
  // Every buffer first (allocation and uploads may wait for the device), then all sends before any receive:
  // the pairs are connected when the transport is built, so the sends do not wait for the peer's receives.
  for (std::size_t k = 0; k < out.size(); k++) {
    sbuf.push_back(std::make_unique<DeviceVec<float>>(n));
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; i++) v[i] = static_cast<float>(tr.worker() * 100000 + out[k] * 1000 + i);
    sbuf.back()->put(v);
  }
  for (std::size_t k = 0; k < in.size(); k++) rbuf.push_back(std::make_unique<DeviceVec<float>>(n));
  for (std::size_t k = 0; k < out.size(); k++) reqs.push_back(tr.isend(sbuf[k]->p, n * sizeof(float), peer, out[k]));
  for (std::size_t k = 0; k < in.size(); k++) reqs.push_back(tr.irecv(rbuf[k]->p, n * sizeof(float), peer, in[k]));
  wait_all(reqs);
  for (std::size_t k = 0; k < in.size(); k++) {
    const auto v = rbuf[k]->get();
    bool ok = true;
    for (std::size_t i = 0; i < n; i++) ok = ok && v[i] == static_cast<float>(peer * 100000 + in[k] * 1000 + i);
    expect(ok, "payload of message " + std::to_string(k) + " (tag " + std::to_string(in[k]) + ")");
  }
  // NCCL pairs by order: a tag that is not next must be refused before anything is enqueued.
  if (out.size() >= 2) {
    bool refused = false;
    try {
      tr.isend(sbuf[0]->p, 4, peer, out[1]);
    } catch (const RuntimeError& e) {
      refused = std::string(e.what()).find("out of order") != std::string::npos;
    }
    expect(refused, "an out-of-order send is refused");
  }
  tr.barrier();
}

void allreduce(int device, cudaStream_t stream) {
  const LoweredSchedule ls = lowered("1f1b", 2, 1, 1);
  NcclTransport tr(ls, device);
  tr.set_stream(stream);
  int group = -1;
  for (std::size_t g = 0; g < ls.groups.size(); g++)
    if (ls.groups[g].tag == CollTag::DataParallel) group = static_cast<int>(g);
  expect(group >= 0, "dp2 has a data-parallel group");
  if (group < 0) return;
  const std::size_t n = 4097;
  DeviceVec<float> f(n);
  DeviceVec<double> d(n);
  std::vector<float> fv(n);
  std::vector<double> dv(n);
  for (std::size_t i = 0; i < n; i++) fv[i] = static_cast<float>((tr.worker() + 1) * 0.5 + i), dv[i] = fv[i] * 2.0;
  f.put(fv);
  d.put(dv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(tr.iallreduce_sum(f.p, n, ElemType::kF32, group));
  reqs.push_back(tr.iallreduce_sum(d.p, n, ElemType::kF64, group));
  wait_all(reqs);
  const auto fs = f.get();
  const auto ds = d.get();
  bool ok = true;
  for (std::size_t i = 0; i < n; i++) ok = ok && fs[i] == static_cast<float>(1.5 + 2.0 * i) && ds[i] == 3.0 + 4.0 * i;
  expect(ok, "dp2 all-reduce sums (fp32, fp64)");
}

void tensor_parallel(int device, cudaStream_t stream) {
  const LoweredSchedule ls = lowered("1f1b", 1, 1, 2);
  NcclTransport tr(ls, device);
  tr.set_stream(stream);
  expect(tr.tp_size() == 2 && tr.worker() == 0, "tp2: one worker, two TP ranks");
  const std::size_t n = 257;
  DeviceVec<float> a(n);
  std::vector<float> av(n, static_cast<float>(tr.tp_rank() + 1));
  a.put(av);
  // All-gather in place: chunk t holds TP rank t's values; the other chunk is garbage before the call.
  const std::size_t chunk = 64;
  DeviceVec<float> g(2 * chunk);
  std::vector<float> gv(2 * chunk, -1.0f);
  for (std::size_t i = 0; i < chunk; i++) gv[tr.tp_rank() * chunk + i] = static_cast<float>(10 * tr.tp_rank() + i);
  g.put(gv);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(tr.tp_iallreduce_sum(a.p, n, ElemType::kF32));
  reqs.push_back(tr.tp_iallgather(g.p, chunk * sizeof(float)));
  wait_all(reqs);
  bool ok = true;
  for (float x : a.get()) ok = ok && x == 3.0f;
  expect(ok, "tp2 all-reduce sum");
  const auto gs = g.get();
  ok = true;
  for (std::size_t t = 0; t < 2; t++)
    for (std::size_t i = 0; i < chunk; i++) ok = ok && gs[t * chunk + i] == static_cast<float>(10 * t + i);
  expect(ok, "tp2 in-place all-gather");
}
#endif

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  rank = mpi.rank();
  const int gpus = kernels::cuda_device_count();
  if (!built_with_nccl() || gpus == 0) {
    if (rank == 0) std::printf("SKIP: GPU path built: %s, GPUs: %d\n", built_with_nccl() ? "yes" : "no", gpus);
    return 77;
  }
  if (mpi.size() != 2) {
    if (rank == 0) std::fprintf(stderr, "run with mpirun -np 2\n");
    return 1;
  }
#ifdef PIPESCOPE_HAVE_NCCL
  try {
    const int device = mpi_local_rank() % gpus;
    cuda(cudaSetDevice(device), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (gpus == 1) {
      // Both ranks on GPU 0: refused with both ranks named (the same on both, before any NCCL call).
      std::string msg;
      try {
        NcclTransport tr(lowered("1f1b", 1, 2, 1), device);
      } catch (const RuntimeError& e) {
        msg = e.what();
      }
      expect(msg.find("ranks 0 and 1 use the same GPU") != std::string::npos, "shared GPU refused: '" + msg + "'");
    } else {
      p2p(device, stream);
      allreduce(device, stream);
      tensor_parallel(device, stream);
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    mpi_abort(3, mpi.thread_multiple());
  }
#endif
  std::printf("rank %d: %s (%d GPU(s))\n", rank, failures ? "FAILED" : "OK", gpus);
  return failures ? 1 : 0;
}
