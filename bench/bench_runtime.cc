// The validation runtime's own per-op overhead (scheduling and bookkeeping), measured with the no-op compute
// backend (runtime/null_backend.h) so that nothing but the runtime runs: op dispatch, tensor and record
// bookkeeping, K/V-cache protocol checks, timing, watchdog updates, and (pp > 1) in-process message passing.
// Workers are threads over LocalTransport (no MPI in the way). Counters per op:
//   overhead_us_per_op: the executor's own accounting (wall - kernels - transport), mean over workers;
//   wall_us_per_op:     the slowest worker's iteration wall time / its op count (pp = 1: everything is overhead
//                       except the empty kernel calls).
// tp > 1 runs tp threads per worker; the null backend's layers make their 2 TP all-reduces per layer call, so the
// rows with tp show what the in-process TP collectives add per op.
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "core/lower/checks.h"
#include "core/model/backends.h"
#include "runtime/job.h"
#include "runtime/local_transport.h"
#include "runtime/scenario_fit.h"

namespace {

using namespace pipescope;
using namespace pipescope::runtime;

// args: pp, token slices per micro-batch, micro-batches, tensor-parallel degree
void BM_RuntimeOverhead(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), k = static_cast<int>(state.range(1));
  const int m = static_cast<int>(state.range(2)), tp = static_cast<int>(state.range(3));
  const Scenario s = tiny_scenario(k > 1 ? "terapipe" : "1f1b", 1, pp, 1, m, 2 * pp, 8, tp, 64, 16, k, {}, tp);
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = ModelConfig::from(s.model);
  JobOptions opt;
  opt.backend = backend_info(BackendKind::Null).name;
  opt.iterations = 20;
  opt.collect_modules = false;
  double overhead = 0, wall = 0;
  std::size_t ops = 0, runs = 0;
  for (auto _ : state) {
    LocalFabric fabric(cs.schedule().workers(), cs.schedule().groups, tp);
    JobResult r;
    std::vector<std::thread> threads;
    for (int w = 0; w < cs.schedule().workers(); w++)
      for (int t = 0; t < tp; t++)
        threads.emplace_back([&, w, t] {
          Watchdog wd(60, [&](std::int64_t, double) { fabric.cancel(); });
          LocalTransport tr(fabric, w, t);
          JobResult x = run_job(cs, mc, tr, opt, &wd);
          if (w == 0 && t == 0) r = std::move(x);
        });
    for (auto& t : threads) t.join();
    for (std::size_t it = 0; it < r.workers[0].iterations.size(); it++) {
      double slowest = 0;
      std::size_t slowest_ops = 1;
      for (const auto& w : r.workers) {
        const IterationStats& st = w.iterations[it];
        overhead += st.overhead_s;
        ops += st.ops.size();
        if (st.end_s > slowest) slowest = st.end_s, slowest_ops = st.ops.size();
      }
      wall += slowest / static_cast<double>(slowest_ops);
      runs++;
    }
  }
  state.counters["ops_per_iteration"] = static_cast<double>(ops) / static_cast<double>(runs);
  state.counters["overhead_us_per_op"] = overhead / static_cast<double>(ops) * 1e6;
  state.counters["wall_us_per_op"] = wall / static_cast<double>(runs) * 1e6;
}
BENCHMARK(BM_RuntimeOverhead)
    ->ArgNames({"pp", "k", "m", "tp"})
    ->Args({1, 1, 64, 1})
    ->Args({1, 4, 64, 1})
    ->Args({2, 4, 32, 1})
    ->Args({4, 4, 32, 1})
    ->Args({1, 4, 64, 2})
    ->Args({2, 4, 32, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
