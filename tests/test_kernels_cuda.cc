// CUDA backend against the CPU reference (fp64), per 16-bit dtype, plus layer fwd+bwd throughput.
// Every GPU test skips when cudaGetDeviceCount() fails or finds no device (CTest label `gpu`); the error
// macro tests run anywhere CUDA was built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "tests/tp_sum_group.h"
#ifdef PIPESCOPE_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/cuda_timer.h"
#endif

namespace pipescope::kernels {
namespace {

// ||a - b|| / ||b||: the norm-wise error that rounding to 16 bits produces.
double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    s += b[i] * b[i];
  }
  return s > 0 ? std::sqrt(d / s) : std::sqrt(d);
}

std::vector<double> slice_of(const std::vector<double>& v, std::size_t at, std::size_t n) {
  return {v.begin() + at, v.begin() + at + n};
}

// Tolerances for fp32 accumulation with 16-bit storage: a few units of the format's rounding (2^-8 bf16,
// 2^-11 f16) amplified through a layer; a wrong kernel gives errors of order 1.
double tolerance(DType dt) { return dt == DType::kBF16 ? 5e-2 : 1e-2; }

std::vector<DType> gpu_dtypes() {
  std::vector<DType> out{DType::kF16};
  if (cuda_compute_capability(0) >= 80) out.insert(out.begin(), DType::kBF16);
  return out;
}

#define SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                   \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)"; \
  } while (0)

std::vector<double> random_vec(std::size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::uniform_real_distribution<double> U(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = U(rng);
  return v;
}

struct LayerRun {
  std::vector<std::vector<double>> x, dy, y, dx;  // per slice; x and dy as the backend stored them
  std::vector<double> grads;
};

// One layer over `lens` slices of b sequences: forward in order, backward in reverse; with `split`, each backward
// as I (backward for inputs) and every W (backward for weights) after the last I, earliest slice first.
LayerRun run_layer(Backend& be, const ModelShape& m, const std::vector<double>& params,
                   const std::vector<std::vector<double>>& xs, const std::vector<std::vector<double>>& dys,
                   const std::vector<int>& lens, int b, bool split = false) {
  auto p = be.params(ModuleKind::kLayer, m);
  p->set(params);
  auto kv = be.kv_cache(m.layer, b, m.max_seq);
  LayerRun out;
  std::vector<std::unique_ptr<Record>> rec;
  int c = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    const Slice sl{b, c, lens[i]};
    auto x = be.tensor(sl.rows(), m.layer.hidden), y = be.tensor(0, 0);
    x->upload(xs[i]);
    rec.push_back(be.record());
    be.layer_forward(*p, *x, sl, *kv, *rec.back(), *y);
    out.x.push_back(x->download());
    out.y.push_back(y->download());
    c += lens[i];
  }
  out.dy.resize(lens.size());
  out.dx.resize(lens.size());
  for (int i = static_cast<int>(lens.size()) - 1; i >= 0; --i) {
    auto dy = be.tensor(b * lens[i], m.layer.hidden), dx = be.tensor(0, 0);
    dy->upload(dys[i]);
    if (split)
      be.layer_backward_input(*p, *rec[i], *kv, *dy, *dx);
    else
      be.layer_backward(*p, *rec[i], *kv, *dy, *dx);
    out.dy[i] = dy->download();
    out.dx[i] = dx->download();
  }
  if (split)
    for (auto& r : rec) be.layer_backward_weight(*p, *r);
  EXPECT_EQ(kv->state().backward_end(), 0);
  out.grads = p->grads();
  return out;
}

TEST(KernelsCuda, LayerForwardBackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  ModelShape m;
  m.layer = {256, 4, 1024};
  m.vocab = 64;
  m.max_seq = 128;
  const int b = 2;
  const std::vector<int> lens{48, 32, 48};
  const std::vector<double> params = init_params(ModuleKind::kLayer, m, 3, 0.05, 0.1);
  std::mt19937_64 rng(4);
  std::vector<std::vector<double>> xs, dys;
  for (int l : lens) {
    xs.push_back(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
    dys.push_back(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
  }
  auto cpu = make_cpu_backend(DType::kF64);
  const std::vector<TensorSpan> tensors = module_tensor_spans(ModuleKind::kLayer, m);
  for (DType dt : gpu_dtypes()) {
    auto gpu = make_cuda_backend(dt);
    const LayerRun g = run_layer(*gpu, m, params, xs, dys, lens, b);
    // The reference sees the 16-bit-rounded inputs the GPU saw.
    const LayerRun r = run_layer(*cpu, m, params, g.x, g.dy, lens, b);
    const double tol = tolerance(dt);
    double worst_y = 0, worst_dx = 0, worst_g = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) {
      worst_y = std::max(worst_y, rel_l2(g.y[i], r.y[i]));
      worst_dx = std::max(worst_dx, rel_l2(g.dx[i], r.dx[i]));
    }
    for (const TensorSpan& t : tensors) {
      const double e = rel_l2(slice_of(g.grads, t.offset, t.size), slice_of(r.grads, t.offset, t.size));
      EXPECT_LE(e, tol) << dtype_name(dt) << " grad " << t.name;
      worst_g = std::max(worst_g, e);
    }
    EXPECT_LE(worst_y, tol) << dtype_name(dt) << " y";
    EXPECT_LE(worst_dx, tol) << dtype_name(dt) << " dx";
    std::printf("[ cuda ] %s layer h=256 slices [48,32,48] x 2: rel L2 err y %.2e, dx %.2e, grads %.2e (tol %.0e)\n",
                gpu->name().c_str(), worst_y, worst_dx, worst_g, tol);
  }
}

// Split backward (zero-bubble I, then every W after the last I) on slices with context: the fused backward's input
// and parameter gradients (the same operations on the same operands; only the fp32 gradient sums run in another
// order), so also the reference's.
TEST(KernelsCuda, SplitBackwardMatchesFusedAndReference) {
  SKIP_WITHOUT_GPU();
  ModelShape m;
  m.layer = {128, 4, 512};
  m.vocab = 64;
  m.max_seq = 96;
  const int b = 2;
  const std::vector<int> lens{40, 24, 32};
  const std::vector<double> params = init_params(ModuleKind::kLayer, m, 13, 0.05, 0.1);
  std::mt19937_64 rng(14);
  std::vector<std::vector<double>> xs, dys;
  for (int l : lens) {
    xs.push_back(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
    dys.push_back(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
  }
  auto cpu = make_cpu_backend(DType::kF64);
  for (DType dt : gpu_dtypes()) {
    auto gpu = make_cuda_backend(dt);
    const LayerRun fused = run_layer(*gpu, m, params, xs, dys, lens, b, false);
    const LayerRun split = run_layer(*gpu, m, params, xs, dys, lens, b, true);
    const LayerRun r = run_layer(*cpu, m, params, split.x, split.dy, lens, b, true);
    double worst_dx = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) {
      worst_dx = std::max(worst_dx, rel_l2(split.dx[i], fused.dx[i]));
      EXPECT_LE(rel_l2(split.dx[i], r.dx[i]), tolerance(dt)) << dtype_name(dt) << " slice " << i;
    }
    EXPECT_LE(worst_dx, 1e-6) << dtype_name(dt) << " dx split vs fused";
    const double eg = rel_l2(split.grads, fused.grads);
    EXPECT_LE(eg, 1e-5) << dtype_name(dt) << " grads split vs fused";
    EXPECT_LE(rel_l2(split.grads, r.grads), tolerance(dt)) << dtype_name(dt) << " grads vs reference";
    std::printf("[ cuda ] %s split backward: rel L2 vs fused dx %.2e, grads %.2e\n", gpu->name().c_str(), worst_dx, eg);
  }
}

#ifdef PIPESCOPE_HAVE_CUDA
// In-process sum over the tp shards of a layer, each shard a CUDA backend on its own thread: a call waits for
// the shard's stream, copies the fp32 device buffer to the host, waits for every shard, and writes the sum (in
// rank order) back.
class DeviceSumGroup {
 public:
  explicit DeviceSumGroup(int n) : host_(n) {}
  void all_reduce(int rank, Backend& be, void* data, std::size_t count) {
    be.synchronize();  // the backend enqueued the partial sum's GEMM; it must have run
    std::vector<float> mine(count);
    CUDA_CHECK(cudaMemcpy(mine.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost));
    host_.all_reduce(rank, mine.data(), count);
    // On the backend's non-blocking stream, which is not ordered after the legacy stream's cudaMemcpy (and a
    // pageable copy may return before its DMA lands); the kernels that read the sum follow on that stream.
    auto* st = static_cast<cudaStream_t>(be.stream());
    CUDA_CHECK(cudaMemcpyAsync(data, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));  // `mine` is freed on return
  }
  int calls(int rank) const { return host_.calls(rank); }

 private:
  pipescope::testing::TpSumGroup<float> host_;
};
#endif

// Megatron tensor parallelism on CUDA: 2 shards of a layer (2 of 4 heads, ffn / 2 columns each), joined by an
// fp32 sum, give the unsharded fp64 reference's outputs and input gradients, and each shard's parameter gradients
// are the same cut of the reference's, over 2 slices with K/V context (dK/dV accumulated across them).
TEST(KernelsCuda, TensorParallelShardsMatchUnshardedReference) {
  SKIP_WITHOUT_GPU();
#ifdef PIPESCOPE_HAVE_CUDA
  constexpr int kTp = 2;
  ModelShape m;
  m.layer = {256, 4, 1024};
  m.vocab = 64;
  m.max_seq = 96;
  const int b = 2;
  const std::vector<int> lens{48, 48};
  const std::vector<double> params = init_params(ModuleKind::kLayer, m, 5, 0.05, 0.1);
  std::mt19937_64 rng(6);
  std::vector<std::vector<double>> xs, dys;
  for (int l : lens) {
    xs.push_back(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
    dys.push_back(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
  }
  ModelShape shard = m;
  shard.layer.tp = kTp;
  const std::vector<TensorSpan> tensors = module_tensor_spans(ModuleKind::kLayer, shard);
  auto cpu = make_cpu_backend(DType::kF64);
  for (DType dt : gpu_dtypes()) {
    {  // A shard cannot run without the all-reduce.
      auto gpu = make_cuda_backend(dt);
      auto p = gpu->params(ModuleKind::kLayer, shard);
      p->set(shard_params(ModuleKind::kLayer, shard, 0, params));
      auto kv = gpu->kv_cache(shard.layer, b, m.max_seq);
      auto rec = gpu->record();
      auto x = gpu->tensor(b * lens[0], m.layer.hidden), y = gpu->tensor(0, 0);
      x->upload(xs[0]);
      EXPECT_THROW(gpu->layer_forward(*p, *x, {b, 0, lens[0]}, *kv, *rec, *y), KernelError);
      // A cache made for the unsharded layer does not fit the shard.
      gpu->set_tp_all_reduce([](void*, std::size_t, DType) {});
      auto whole_kv = gpu->kv_cache(m.layer, b, m.max_seq);
      EXPECT_THROW(gpu->layer_forward(*p, *x, {b, 0, lens[0]}, *whole_kv, *rec, *y), KernelError);
    }
    DeviceSumGroup group(kTp);
    std::vector<LayerRun> got(kTp);
    const std::vector<std::string> errors = pipescope::testing::run_shards(kTp, [&](int r) {
      auto gpu = make_cuda_backend(dt);
      Backend* be = gpu.get();
      gpu->set_tp_all_reduce([&group, be, r](void* data, std::size_t n, DType t) {
        if (t != DType::kF32) throw KernelError("the CUDA backend's TP all-reduce should be fp32");
        group.all_reduce(r, *be, data, n);
      });
      got[r] = run_layer(*gpu, shard, shard_params(ModuleKind::kLayer, shard, r, params), xs, dys, lens, b);
    });
    for (int r = 0; r < kTp; ++r) {
      ASSERT_TRUE(errors[r].empty()) << "shard " << r << ": " << errors[r];
      EXPECT_EQ(group.calls(r), 4 * static_cast<int>(lens.size())) << "2 all-reduces per forward and per backward";
    }
    // The reference sees the 16-bit-rounded inputs the shards saw (both rounded the same host values).
    const LayerRun want = run_layer(*cpu, m, params, got[0].x, got[0].dy, lens, b);
    const double tol = tolerance(dt);
    double worst_y = 0, worst_dx = 0, worst_g = 0;
    for (int r = 0; r < kTp; ++r) {
      for (std::size_t i = 0; i < lens.size(); ++i) {
        const double ey = rel_l2(got[r].y[i], want.y[i]), edx = rel_l2(got[r].dx[i], want.dx[i]);
        EXPECT_LE(ey, tol) << dtype_name(dt) << " shard " << r << " slice " << i << " y";
        EXPECT_LE(edx, tol) << dtype_name(dt) << " shard " << r << " slice " << i << " dx";
        worst_y = std::max(worst_y, ey);
        worst_dx = std::max(worst_dx, edx);
      }
      const std::vector<double> cut = shard_params(ModuleKind::kLayer, shard, r, want.grads);
      ASSERT_EQ(got[r].grads.size(), cut.size());
      for (const TensorSpan& t : tensors) {
        const double e = rel_l2(slice_of(got[r].grads, t.offset, t.size), slice_of(cut, t.offset, t.size));
        EXPECT_LE(e, tol) << dtype_name(dt) << " shard " << r << " grad " << t.name;
        worst_g = std::max(worst_g, e);
      }
    }
    std::printf(
        "[ cuda ] %s tp 2 layer h=256 slices [48,48] x 2 vs unsharded f64: rel L2 err y %.2e, dx %.2e, grads %.2e "
        "(tol %.0e)\n",
        dtype_name(dt), worst_y, worst_dx, worst_g, tol);
  }
#endif
}

TEST(KernelsCuda, EmbeddingHeadAndLossMatchReference) {
  SKIP_WITHOUT_GPU();
  ModelShape m;
  m.layer = {128, 2, 512};
  m.vocab = 500;
  m.max_seq = 64;
  const int b = 3;
  const std::vector<int> lens{40, 24};
  std::mt19937_64 rng(9);
  std::vector<std::int32_t> tokens, targets;
  for (int i = 0; i < b * m.max_seq; ++i) {
    tokens.push_back(static_cast<std::int32_t>(rng() % 17));  // repeated ids exercise the grouped scatter
    targets.push_back(i % 13 == 5 ? -1 : static_cast<std::int32_t>(rng() % m.vocab));
  }
  const double norm = static_cast<double>(count_targets(targets));
  auto cut = [&](const std::vector<std::int32_t>& v, int c, int l) {
    std::vector<std::int32_t> out;
    for (int s = 0; s < b; ++s)
      for (int t = c; t < c + l; ++t) out.push_back(v[s * m.max_seq + t]);
    return out;
  };
  const std::vector<double> pe = init_params(ModuleKind::kEmbedding, m, 1, 0.5);
  const std::vector<double> ph = init_params(ModuleKind::kHead, m, 2, 0.1, 0.1);
  struct Out {
    double loss = 0, accumulated = 0, after_take = 0;
    std::vector<double> ge, gh, dx;
  };
  auto run = [&](Backend& be, bool split) {
    auto emb = be.params(ModuleKind::kEmbedding, m), head = be.params(ModuleKind::kHead, m);
    emb->set(pe);
    head->set(ph);
    Out o;
    int c = 0;
    for (int l : lens) {
      const Slice sl{b, c, l};
      auto x = be.tensor(0, 0), dx = be.tensor(0, 0);
      auto rec = be.record();
      be.embedding_forward(*emb, cut(tokens, c, l), sl, *x);
      be.head_forward(*head, *x, cut(targets, c, l), sl, norm, 1.0, *rec);
      o.loss += be.head_loss(*rec);
      be.accumulate_loss(*rec);  // read at the end, after this record is gone
      if (split) {               // I, then the W halves: the embedding's whole backward, the head's weight gradients
        be.head_backward_input(*head, *rec, *dx);
        be.embedding_backward(*emb, cut(tokens, c, l), sl, *dx);
        be.head_backward_weight(*head, *rec);
      } else {
        be.head_backward(*head, *rec, *dx);
        be.embedding_backward(*emb, cut(tokens, c, l), sl, *dx);
      }
      const std::vector<double> d = dx->download();
      o.dx.insert(o.dx.end(), d.begin(), d.end());
      c += l;
    }
    o.ge = emb->grads();
    o.gh = head->grads();
    o.accumulated = be.take_loss();
    o.after_take = be.take_loss();
    return o;
  };
  auto cpu = make_cpu_backend(DType::kF64);
  const Out r = run(*cpu, false);
  for (DType dt : gpu_dtypes()) {
    auto gpu = make_cuda_backend(dt);
    const Out g = run(*gpu, false);
    // The split backward (head I then W) does the fused one's operations on the same inputs.
    const Out gs = run(*gpu, true);
    EXPECT_LE(rel_l2(gs.dx, g.dx), 1e-6) << dtype_name(dt) << " split dx";
    EXPECT_LE(rel_l2(gs.gh, g.gh), 1e-6) << dtype_name(dt) << " split head grads";
    EXPECT_LE(rel_l2(gs.ge, g.ge), 1e-6) << dtype_name(dt) << " split embedding grads";
    const double tol = tolerance(dt);
    EXPECT_NEAR(g.loss, r.loss, tol * std::abs(r.loss)) << dtype_name(dt);
    EXPECT_EQ(g.accumulated, g.loss) << dtype_name(dt) << ": accumulate_loss / take_loss sum as head_loss does";
    EXPECT_EQ(g.after_take, 0.0) << dtype_name(dt);
    EXPECT_LE(rel_l2(g.dx, r.dx), tol) << dtype_name(dt) << " dx";
    EXPECT_LE(rel_l2(g.ge, r.ge), tol) << dtype_name(dt) << " embedding grads";
    EXPECT_LE(rel_l2(g.gh, r.gh), tol) << dtype_name(dt) << " head grads";
    std::printf("[ cuda ] %s embedding+head: loss %.6f vs %.6f, rel L2 err dx %.2e, emb %.2e, head %.2e\n",
                gpu->name().c_str(), g.loss, r.loss, rel_l2(g.dx, r.dx), rel_l2(g.ge, r.ge), rel_l2(g.gh, r.gh));
  }
}

#ifdef PIPESCOPE_HAVE_CUDA
TEST(KernelsCuda, AdamMatchesReference) {
  SKIP_WITHOUT_GPU();
  ModelShape m;
  m.layer = {8, 1, 8};
  m.vocab = 30;
  m.max_seq = 10;
  const std::vector<double> p0 = init_params(ModuleKind::kEmbedding, m, 5, 1.0);
  std::mt19937_64 rng(6);
  AdamConfig cfg;
  cfg.lr = 0.01;
  cfg.weight_decay = 0.1;
  cfg.grad_scale = 0.25;
  auto cpu = make_cpu_backend(DType::kF64);
  for (DType dt : gpu_dtypes()) {
    auto gpu = make_cuda_backend(dt);
    auto pc = cpu->params(ModuleKind::kEmbedding, m), pg = gpu->params(ModuleKind::kEmbedding, m);
    pc->set(p0);
    pg->set(p0);
    for (int step = 1; step <= 3; ++step) {
      const std::vector<double> g = random_vec(p0.size(), rng);
      const std::vector<float> gf(g.begin(), g.end());
      std::copy(g.begin(), g.end(), static_cast<double*>(pc->grad_data()));
      gpu->synchronize();  // the previous step still reads the gradients on the backend's stream
      auto* st = static_cast<cudaStream_t>(gpu->stream());  // ordered before adam_step on the same stream
      CUDA_CHECK(cudaMemcpyAsync(pg->grad_data(), gf.data(), gf.size() * sizeof(float), cudaMemcpyHostToDevice, st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      cpu->adam_step(*pc, cfg, step);
      gpu->adam_step(*pg, cfg, step);
    }
    const double e = rel_l2(pg->get(), pc->get());
    EXPECT_LE(e, 1e-6) << dtype_name(dt);  // fp32 master weights
    std::printf("[ cuda ] %s Adam 3 steps: rel L2 err of fp32 master %.2e\n", gpu->name().c_str(), e);
  }
}

// Layer forward + backward throughput (not asserted: printed for the calibration tables).
TEST(KernelsCuda, LayerThroughput) {
  SKIP_WITHOUT_GPU();
  ModelShape m;
  m.layer = {2048, 16, 8192};
  m.vocab = 64;
  m.max_seq = 2048;
  const int b = 4;
  const std::vector<double> params = init_params(ModuleKind::kLayer, m, 1, 0.02);
  std::mt19937_64 rng(2);
  for (DType dt : gpu_dtypes()) {
    auto be = make_cuda_backend(dt);
    auto p = be->params(ModuleKind::kLayer, m);
    p->set(params);
    for (const std::vector<int>& lens :
         {std::vector<int>{2048}, std::vector<int>{1024, 1024}, std::vector<int>{512, 512, 512, 512}}) {
      auto kv = be->kv_cache(m.layer, b, m.max_seq);
      std::vector<std::unique_ptr<Tensor>> xs, ys;
      std::vector<std::unique_ptr<Record>> recs;
      double flops = 0;
      int c = 0;
      for (int l : lens) {
        xs.push_back(be->tensor(b * l, m.layer.hidden));
        xs.back()->upload(random_vec(static_cast<std::size_t>(b) * l * m.layer.hidden, rng));
        ys.push_back(be->tensor(0, 0));
        recs.push_back(be->record());
        flops += 3 * layer_forward_flops(m.layer, {b, c, l});  // backward = 2 x forward
        c += l;
      }
      auto dx = be->tensor(0, 0);
      auto step = [&] {
        int c0 = 0;
        for (std::size_t i = 0; i < lens.size(); ++i) {
          be->layer_forward(*p, *xs[i], {b, c0, lens[i]}, *kv, *recs[i], *ys[i]);
          c0 += lens[i];
        }
        for (int i = static_cast<int>(lens.size()) - 1; i >= 0; --i) be->layer_backward(*p, *recs[i], *kv, *ys[i], *dx);
      };
      for (int i = 0; i < 3; ++i) step();  // warm-up: allocations, cuBLAS heuristics, clocks
      const int iters = 10;
      CudaEventTimer timer(static_cast<cudaStream_t>(be->stream()));
      for (int i = 0; i < iters; ++i) step();
      const double s = timer.elapsed_s() / iters;
      EXPECT_GT(s, 0.0);
      std::string lens_s;
      for (int l : lens) lens_s += (lens_s.empty() ? "" : ",") + std::to_string(l);
      std::printf("[ cuda ] %s layer h=2048 ffn=8192 heads=16 b=%d slices [%s]: fwd+bwd %.3f ms, %.1f TFLOP/s\n",
                  be->name().c_str(), b, lens_s.c_str(), s * 1e3, flops / s / 1e12);
    }
  }
}

// Backend::op_timer: CUDA events on the backend's stream. A mark after a large Adam step lies well after the mark
// before it, and a mark with nothing enqueued in between follows immediately; marks resolve in order.
TEST(KernelsCuda, OpTimerTimesDeviceWork) {
  SKIP_WITHOUT_GPU();
  ModelShape m;
  m.layer = {2048, 16, 8192};  // ~50 M parameters: an Adam step of a few hundred microseconds
  m.vocab = 64;
  m.max_seq = 16;
  auto be = make_cuda_backend(gpu_dtypes().front());
  auto p = be->params(ModuleKind::kLayer, m);
  p->set(init_params(ModuleKind::kLayer, m, 1, 0.02));
  auto t = be->op_timer();
  ASSERT_TRUE(t->on_device());
  for (int round = 0; round < 2; ++round) {  // begin() reuses the events
    t->begin();
    const int a = t->mark();
    for (int i = 1; i <= 5; ++i) be->adam_step(*p, AdamConfig{}, i);
    const int b = t->mark();
    const int c = t->mark();
    EXPECT_EQ(a, 0);
    EXPECT_EQ(c, 2);
    const std::vector<double> s = t->resolve();
    ASSERT_EQ(s.size(), 3u);
    EXPECT_GE(s[a], 0.0);
    EXPECT_GT(s[b] - s[a], 20e-6);                // five Adam steps over 50 M parameters
    EXPECT_LT(s[c] - s[b], 0.1 * (s[b] - s[a]));  // nothing between b and c
  }
}

TEST(KernelsOpTimer, CpuIsTheHostClock) {
  auto be = make_cpu_backend(DType::kF64);
  auto t = be->op_timer();
  EXPECT_FALSE(t->on_device());
  t->begin();
  const int a = t->mark();
  volatile double x = 0;
  for (int i = 0; i < 200000; ++i) x = x + 1e-9 * i;
  const int b = t->mark();
  const std::vector<double> s = t->resolve();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_GE(s[0], 0.0);
  EXPECT_GT(s[1], s[0]);
}

// The check macros carry file:line, the call and the library message; no GPU needed.
TEST(KernelsCudaErrors, CheckMacrosThrowTypedErrors) {
  try {
    CUDA_CHECK(static_cast<cudaError_t>(cudaErrorInvalidValue));
    FAIL() << "CUDA_CHECK did not throw";
  } catch (const CudaError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("test_kernels_cuda.cc:"), std::string::npos) << w;
    EXPECT_NE(w.find("static_cast<cudaError_t>(cudaErrorInvalidValue) failed"), std::string::npos) << w;
    EXPECT_NE(w.find("cudaErrorInvalidValue: invalid argument"), std::string::npos) << w;
  }
  try {
    CUBLAS_CHECK(cublasSetStream(nullptr, nullptr));  // a null handle fails without touching a device
    FAIL() << "CUBLAS_CHECK did not throw";
  } catch (const CudaError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("test_kernels_cuda.cc:"), std::string::npos) << w;
    EXPECT_NE(w.find("cublasSetStream(nullptr, nullptr) failed: CUBLAS_STATUS_"), std::string::npos) << w;
  }
  EXPECT_NO_THROW(CUDA_CHECK(cudaSuccess));
}

TEST(KernelsCudaErrors, NoDeviceGivesClearErrors) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(make_cuda_backend(DType::kBF16), KernelError);
  EXPECT_THROW(CudaEventTimer timer, CudaError);
}
#endif

TEST(KernelsCudaErrors, WrongDtypeRejected) {
  if (!built_with_cuda()) {
    EXPECT_THROW(make_cuda_backend(DType::kBF16), KernelError);
    EXPECT_EQ(cuda_device_count(), 0);
    return;
  }
  EXPECT_THROW(make_cuda_backend(DType::kF64), KernelError);
}

}  // namespace
}  // namespace pipescope::kernels
