// Host memory bandwidth: a 64 MiB copy, counted as bytes read + bytes written (the roofline's HBM term on a CPU).
// The memory-bound kernel classes of the kernel model (core/model/kernel_model.h), each as the CPU reference kernels
// write it (kernels/reference.cc), over a range of sizes: t = fixed + bytes / bw per class.
#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <vector>

#include "calib/benches.h"
#include "core/model/backends.h"
#include "kernels/reference.h"

namespace pipescope::calib {

double bench_host_bandwidth(const TimingPolicy& p) {
  const std::size_t n = 64u << 20;
  std::vector<char> a(n, 1), b(n, 2);
  auto timer = thread_cpu_timer();
  const TimeStats t = time_calls([&] { std::memcpy(b.data(), a.data(), n); }, *timer, p);
  return 2.0 * static_cast<double>(n) / t.median_s;
}

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Row = Eigen::Matrix<T, 1, Eigen::Dynamic>;

using kernels::ref::gelu;
using kernels::ref::gelu_grad;

// One call of kernel class `k` on a rows x cols tensor (random data in [-1, 1]: no denormals), timed as a point of
// `pts`; its index.
template <class T>
std::size_t time_class(MemoryKernel k, int rows, int cols, TablePoints& pts) {
  const Mat<T> x = Mat<T>::Random(rows, cols), dy = Mat<T>::Random(rows, cols);
  Mat<T> y = Mat<T>::Random(rows, cols), dx = Mat<T>::Random(rows, cols);
  Row<T> g = Row<T>::Random(cols), bias = Row<T>::Random(cols), dg = Row<T>::Zero(cols), db = Row<T>::Zero(cols);
  Eigen::Matrix<T, Eigen::Dynamic, 1> mu(rows), rstd(rows);
  for (int r = 0; r < rows; r++) {
    mu(r) = x.row(r).mean();
    rstd(r) = T(1) / std::sqrt((x.row(r).array() - mu(r)).square().mean() + T(1e-5));
  }
  std::function<void()> call;
  switch (k) {
    case MemoryKernel::LayerNorm:
      call = [&] {
        for (int r = 0; r < rows; ++r) {
          const T m = x.row(r).mean();
          const T var = (x.row(r).array() - m).square().mean();
          const T rs = T(1) / std::sqrt(var + T(1e-5));
          mu(r) = m;
          rstd(r) = rs;
          y.row(r) = (((x.row(r).array() - m) * rs) * g.array() + bias.array()).matrix();
        }
      };
      break;
    case MemoryKernel::LayerNormBackward:
      call = [&] {
        for (int r = 0; r < rows; ++r) {
          const Row<T> xhat = ((x.row(r).array() - mu(r)) * rstd(r)).matrix();
          const Row<T> dxhat = dy.row(r).cwiseProduct(g);
          dg += dy.row(r).cwiseProduct(xhat);
          db += dy.row(r);
          const T mean_d = dxhat.mean();
          const T mean_dx = dxhat.cwiseProduct(xhat).mean();
          dx.row(r).array() += rstd(r) * (dxhat.array() - mean_d - xhat.array() * mean_dx);
        }
        dx *= T(0.5);  // keeps dx bounded over repeated calls
      };
      break;
    case MemoryKernel::Gelu:
      call = [&] { y = x.unaryExpr([](T v) { return gelu(v); }); };
      break;
    case MemoryKernel::GeluBackward:
      call = [&] {
        y = dy;
        y.array() *= x.unaryExpr([](T v) { return gelu_grad(v); }).array();
      };
      break;
    case MemoryKernel::Add:
      call = [&] { y = x + dy; };
      break;
    case MemoryKernel::ColumnSum:
      call = [&] { db = x.colwise().sum(); };
      break;
    case MemoryKernel::Copy:
      call = [&] { y = x; };
      break;
    case MemoryKernel::Softmax:
      call = [&] {
        for (int i = 0; i < rows; ++i) {
          const T mx = x.row(i).maxCoeff();
          const Row<T> e = (x.row(i).array() - mx).exp().matrix();
          y.row(i) = e / e.sum();
        }
      };
      break;
  }
  return pts.time(call);
}

}  // namespace

std::vector<MemoryModel> bench_memory_kernels(const std::string& backend, int cols, int vocab,
                                              const TimingPolicy& policy, bool progress, double est_s) {
  if (!backend_on(backend, BackendDevice::Cpu)) return {};
  const bool f64 = backend_named(backend).kind == BackendKind::CpuF64;
  const int e = f64 ? 8 : 4;
  int points = 0;
  for (int i = 0; i < kMemoryKernels; i++)
    points +=
        static_cast<int>(memory_kernel_rows(memory_kernel_cols(static_cast<MemoryKernel>(i), cols, vocab), e).size());
  Progress prog("memory-bound kernels", points, progress, est_s);
  auto timer = steady_timer({});
  TablePoints table(*timer, policy);
  std::vector<std::vector<std::pair<double, std::size_t>>> at(kMemoryKernels);  // per class: (bytes, point)
  for (int i = 0; i < kMemoryKernels; i++) {
    const auto k = static_cast<MemoryKernel>(i);
    const int c = memory_kernel_cols(k, cols, vocab);
    for (int r : memory_kernel_rows(c, e)) {
      at[i].emplace_back(memory_bytes(k, r, c, e),
                         f64 ? time_class<double>(k, r, c, table) : time_class<float>(k, r, c, table));
      prog.step(std::string(to_string(k)) + " " + std::to_string(r) + " x " + std::to_string(c));
    }
  }
  std::vector<MemoryModel> out;
  for (int i = 0; i < kMemoryKernels; i++) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& [bytes, point] : at[i]) pts.emplace_back(bytes, table.at(point).median_s);
    out.push_back(fit_memory_model(static_cast<MemoryKernel>(i), pts));
  }
  return out;
}

}  // namespace pipescope::calib
