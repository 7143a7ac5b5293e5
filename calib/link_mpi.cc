// pipescope-linkbench: the link benchmarks over MPI (CPU ranks), nccl-tests flags and output columns.
//   mpirun -n 2 pipescope-linkbench -b 8 -e 64M -f 2 -n 20 -w 5 [-o sendrecv,allreduce,...] [--out FILE.json]
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "calib/driver.h"
#include "calib/links.h"
#include "kernels/host_memory.h"

namespace pipescope::calib {
namespace {

#define MPI_CHECK(call)                                                                     \
  do {                                                                                      \
    const int rc_ = (call);                                                                 \
    if (rc_ != MPI_SUCCESS) {                                                               \
      char msg_[MPI_MAX_ERROR_STRING];                                                      \
      int len_ = 0;                                                                         \
      MPI_Error_string(rc_, msg_, &len_);                                                   \
      throw std::runtime_error(std::string(#call) + " failed: " + std::string(msg_, len_)); \
    }                                                                                       \
  } while (0)

// nccl-tests' flags through CLI11, before MPI_Init: --help and a bad flag end the process (each rank alike; only
// rank 0 of a launched job prints) without an MPI job to abort.
void add_options(CLI::App& app, LinkOptions& o, std::string& min_bytes, std::string& max_bytes) {
  app.add_option("-b,--minbytes", min_bytes, "Smallest message (bytes; K, M, G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", max_bytes, "Largest message (bytes; K, M, G suffixes)")->capture_default_str();
  app.add_option("-f,--stepfactor", o.factor, "Size multiplier between steps (> 1)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Timed iterations per size (>= 1)")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "Warm-up iterations per size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-o,--ops", o.ops, "Operations, comma-separated: p2p, sendrecv, allreduce, allgather, reducescatter")
      ->delimiter(',')
      ->check([](const std::string& t) { return known_link_op(t) ? "" : "unknown operation '" + t + "'"; });
  app.add_option("--out", o.out, "Write the results as JSON to this file (rank 0)");
}

bool is_rank0_or_unlaunched() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::string(v) == "0";
  return true;
}

// Parses argv into `o`. Returns -1 to go on, else the exit code (0 after --help).
int parse_link_options(int argc, char** argv, LinkOptions& o) {
  CLI::App app{
      "pipescope-linkbench: link benchmarks over MPI, nccl-tests flags and columns.\n"
      "  mpirun -n 2 pipescope-linkbench -b 8 -e 64M -f 2 -n 20 -w 5 [-o sendrecv,allreduce] [--out F.json]"};
  std::string min_bytes = "8", max_bytes = "64M";
  add_options(app, o, min_bytes, max_bytes);
  try {
    app.parse(argc, argv);
    if (!(o.factor > 1)) throw CLI::ValidationError("-f", "step factor must be > 1");
    o.min_bytes = parse_size(min_bytes);
    o.max_bytes = parse_size(max_bytes);
    if (o.min_bytes > o.max_bytes) throw CLI::ValidationError("-b", "must not exceed -e");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    if (is_rank0_or_unlaunched()) app.exit(e);
    return 1;
  } catch (const std::exception& e) {  // parse_size's message names the value
    if (is_rank0_or_unlaunched()) std::fprintf(stderr, "pipescope-linkbench: error: %s\n", e.what());
    return 1;
  }
  return -1;
}

// One operation of `bytes` (nccl-tests' S) on float data.
struct Op {
  std::string name;
  int n, rank;
  std::vector<float> send, recv;
  int count = 0;  // elements per rank-level call
  Op(const std::string& op, int ranks, int r, double bytes) : name(op), n(ranks), rank(r) {
    const auto elems = static_cast<std::size_t>(bytes / sizeof(float));
    if (op == "allreduce" || op == "sendrecv" || op == "p2p") {
      count = static_cast<int>(elems);
      send.assign(elems, 1.0f);
      recv.assign(elems, 0.0f);
    } else {
      // allgather / reducescatter: S is the total buffer; per-rank count rounded down to 16 bytes.
      count = static_cast<int>(elems / n / 4 * 4);
      send.assign(static_cast<std::size_t>(op == "allgather" ? count : count * n), 1.0f);
      recv.assign(static_cast<std::size_t>(op == "allgather" ? count * n : count), 0.0f);
    }
  }
  bool empty() const { return count == 0; }
  void run() {
    if (name == "allreduce")
      MPI_CHECK(MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    else if (name == "allgather")
      MPI_CHECK(MPI_Allgather(send.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, MPI_COMM_WORLD));
    else if (name == "reducescatter")
      MPI_CHECK(MPI_Reduce_scatter_block(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    else
      MPI_CHECK(MPI_Sendrecv(send.data(), count, MPI_FLOAT, (rank + 1) % n, 7, recv.data(), count, MPI_FLOAT,
                             (rank + n - 1) % n, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
  double real_bytes() const {  // S of what actually ran (after rounding)
    if (name == "allreduce" || name == "sendrecv" || name == "p2p") return count * sizeof(float);
    return static_cast<double>(count) * n * sizeof(float);
  }
};

// Waits as the pipeline runtime's executor does: MPI_Test, giving the core away between polls.
void wait_yielding(MPI_Request* r) {
  int done = 0;
  for (;;) {
    MPI_CHECK(MPI_Test(r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    sched_yield();
  }
}

// Bytes of the largest CPU cache (Linux sysfs; 32 MiB when it cannot be read).
std::size_t last_level_cache_bytes() {
  std::size_t best = 0;
  for (int i = 0; i < 8; i++) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string text;
    if (!(f >> text) || text.empty()) continue;
    std::size_t v = std::strtoull(text.c_str(), nullptr, 10);
    if (text.back() == 'K') v <<= 10;
    if (text.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best ? best : std::size_t{32} << 20;
}

// Work that stands for the computation between a pipeline's transfers: it writes through twice the largest cache,
// as a layer's kernels do, so a rank comes back to MPI with cold caches and TLB (that, not the copy itself, is
// most of a one-off transfer's cost on a CPU: measured 9 us warm against 27 us cold for 64 KiB here).
double busy(std::vector<double>& scratch) {
  double acc = 0;
  for (double& x : scratch) acc += (x = x * 0.5 + 1.0);
  return acc;
}

// A size's figure: the median of its samples and the half-width of the median's 95% confidence interval (the
// calibration driver's statistics): what the calibration gates take as the measurement's own uncertainty.
struct Central {
  double median_s = 0, ci_s = 0;
};
Central central(std::vector<double> v) {
  if (v.empty()) return {};
  const TimeStats st = stats_of(std::move(v));
  return {st.median_s, st.rel_spread() * st.median_s / 2};
}

// One exchange of the p2p benchmark; returns the receive's time on the receiving rank, 0 elsewhere.
double p2p_once(int peer, bool sender, std::vector<float>& out, float value, std::vector<double>& scratch,
                double& sink) {
  const int count = static_cast<int>(out.size());
  std::unique_ptr<float[]> in(new float[out.size()]);  // new, as the runtime allocates a receive
  std::fill(out.begin(), out.end(), value);            // the sender has just written it
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  if (peer < 0) return 0;
  MPI_Request r = MPI_REQUEST_NULL;
  if (sender) {
    MPI_CHECK(MPI_Isend(out.data(), count, MPI_FLOAT, peer, 9, MPI_COMM_WORLD, &r));
    sink += busy(scratch);
    wait_yielding(&r);
    return 0;
  }
  sink += busy(scratch);  // the message arrives meanwhile
  const double t0 = MPI_Wtime();
  MPI_CHECK(MPI_Irecv(in.get(), count, MPI_FLOAT, peer, 9, MPI_COMM_WORLD, &r));
  wait_yielding(&r);
  return MPI_Wtime() - t0;
}

// One-way transfer as a pipeline makes it (the p2p op). Ranks pair up (0-1, 2-3, ...). The first of a pair sends a
// message it has just written and goes back to work; the second is still working when the message arrives, then
// posts its receive on a freshly allocated buffer and polls it as the runtime's executor does. The time is the
// receive's, from its posting to its completion on the receiver's clock: what `validate` measures as a p2p when the
// receive is the later of the two postings (almost always, in a pipeline). The warm exchange (sendrecv: the same
// buffers again and again, both ranks inside one call) misses what such a transfer pays. The sizes are interleaved
// (each iteration visits every size) so that slow drifts of a shared machine spread over the whole table instead
// of bending a few neighbouring sizes. Returns this rank's median per size, 0 on ranks that do not receive.
std::vector<Central> time_p2p(int rank, int n, const std::vector<int>& counts, const LinkOptions& o) {
  const int partner = rank % 2 == 0 ? rank + 1 : rank - 1, peer = partner < n ? partner : -1;
  const bool sender = rank % 2 == 0;
  const std::size_t cache = std::clamp(last_level_cache_bytes(), std::size_t{4} << 20, std::size_t{128} << 20);
  std::vector<double> scratch(2 * cache / sizeof(double));
  std::vector<std::vector<float>> out;
  for (int c : counts) out.emplace_back(static_cast<std::size_t>(c));
  std::vector<std::vector<double>> each(counts.size());
  double sink = 0;
  for (int i = -o.warmup; i < o.iters; i++)
    for (std::size_t k = 0; k < counts.size(); k++) {
      const double t = p2p_once(peer, sender, out[k], static_cast<float>(i), scratch, sink);
      if (i >= 0 && t > 0) each[k].push_back(t);
    }
  if (sink == 42.0) std::printf(" ");  // keeps the work from being optimised away
  std::vector<Central> out_stats;
  for (auto& e : each) out_stats.push_back(central(e));
  return out_stats;
}

// The size's time, nccl-tests -a 1: the mean over the ranks that timed it of each one's median (and of their
// confidence half-widths).
Central mean_over_timing_ranks(Central local) {
  const double timing = local.median_s > 0 ? 1 : 0;
  double in[3] = {local.median_s, local.ci_s, timing}, sum[3] = {0, 0, 0};
  MPI_CHECK(MPI_Allreduce(in, sum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  if (!(sum[2] > 0)) return {};
  return {sum[0] / sum[2], sum[1] / sum[2]};
}

// Per size, the median of `iters` operations each timed on its own after a barrier, per rank: on a shared machine a
// rank that is descheduled for a moment spoils a few operations, not the size's figure (nccl-tests times the mean
// of back-to-back operations, which such pauses dominate). The sizes are interleaved as the p2p sweep's are (each
// iteration visits every size): this machine switches speed within a second (calib/README.md "Speed reference"),
// and a sweep that timed size after size gave neighbouring sizes different phases (allreduce 4, 6, 8 KiB at 2.94,
// 2.03, 6.20 us) and a held-out error of 14% to the gate.
std::vector<Central> time_collectives(std::vector<Op>& ops, const LinkOptions& o) {
  std::vector<std::vector<double>> each(ops.size());
  for (int i = -o.warmup; i < o.iters; i++)
    for (std::size_t k = 0; k < ops.size(); k++) {
      if (ops[k].empty()) continue;
      MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      ops[k].run();  // untimed: the timed call follows one of its own size, not the previous size's protocol
      MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      const double t0 = MPI_Wtime();
      ops[k].run();
      if (i >= 0) each[k].push_back(MPI_Wtime() - t0);
    }
  std::vector<Central> out;
  for (auto& e : each) out.push_back(central(e));
  return out;
}

}  // namespace

int link_bench_main(int argc, char** argv) {
  LinkOptions o;
  if (const int rc = parse_link_options(argc, argv, o); rc >= 0) return rc;
  kernels::keep_freed_host_memory();  // receive buffers come from memory as the runtime's CPU backend gets them
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  try {
    if (n < 2) throw std::invalid_argument("needs at least 2 ranks (mpirun -n 2 ...)");
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string library(lib, len);
    if (auto nl = library.find_first_of(",\n"); nl != std::string::npos) library.resize(nl);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    nlohmann::json results = nlohmann::json::array();
    if (rank == 0)
      std::printf(
          "# pipescope-linkbench: %d ranks, %s, warm-up %d, iters %d (each timed after a barrier; median), float, "
          "sum\n#\n%-14s %12s %12s %10s "
          "%10s %10s\n",
          n, library.c_str(), o.warmup, o.iters, "# op", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    for (const std::string& name : o.ops) {
      // The sweep's sizes, and between each two of them a held-out size (their midpoint) that the fit of the
      // table never uses: its error is that of the model at a size it was not given.
      std::vector<std::pair<double, bool>> sizes;
      for (double bytes = o.min_bytes; bytes <= o.max_bytes;
           bytes = std::max(bytes + 1, std::floor(bytes * o.factor))) {
        const double next = std::max(bytes + 1, std::floor(bytes * o.factor));
        sizes.emplace_back(bytes, false);
        if (next <= o.max_bytes && next - bytes >= 8) sizes.emplace_back(std::floor((bytes + next) / 2), true);
      }
      std::vector<Op> ops;
      for (const auto& [bytes, held_out] : sizes) ops.emplace_back(name, n, rank, bytes);
      std::vector<int> counts;
      for (const Op& op : ops) counts.push_back(op.count);
      const std::vector<Central> times = name == "p2p" ? time_p2p(rank, n, counts, o) : time_collectives(ops, o);
      for (std::size_t k = 0; k < ops.size(); k++) {
        Op& op = ops[k];
        const bool held_out = sizes[k].second;
        if (op.empty()) continue;
        const Central c = mean_over_timing_ranks(times[k]);
        const double t = c.median_s;
        const double s = op.real_bytes();
        const double alg = s / t, bus = alg * bus_factor(name, n);
        if (rank == 0) {
          std::printf("%-14s %12.0f %12d %10.2f %10.3f %10.3f%s\n", name.c_str(), s, op.count, t * 1e6, alg / 1e9,
                      bus / 1e9, held_out ? "  held out" : "");
          results.push_back({{"op", name},
                             {"ranks", n},
                             {"bytes", s},
                             {"count", op.count},
                             {"time_us", t * 1e6},
                             {"ci_us", c.ci_s * 1e6},
                             {"algbw_GBps", alg / 1e9},
                             {"busbw_GBps", bus / 1e9},
                             {"holdout", held_out}});
        }
      }
    }
    if (rank == 0 && !o.out.empty()) {
      std::ofstream f(o.out);
      f << nlohmann::json{{"library", library}, {"host", host}, {"ranks", n}, {"results", results}}.dump(1) << "\n";
      if (!f) throw std::runtime_error(o.out + ": cannot write results");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipescope-linkbench: rank %d: error: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  MPI_Finalize();
  return 0;
}

}  // namespace pipescope::calib
