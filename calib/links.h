#pragma once
// Link benchmarks, nccl-tests conventions (docs/calibration.md): sizes -b .. -e by factor -f, -w warm-up and
// -n timed operations per size, time = host wall clock around the n operations / n, averaged over ranks;
// algbw = S / t and busbw = algbw * factor with nccl-tests' S and factors:
//   allreduce      S = per-rank buffer bytes            factor 2 (n - 1) / n
//   allgather      S = total output bytes (n x send)     factor (n - 1) / n
//   reducescatter  S = total input bytes (n x recv)      factor (n - 1) / n
//   sendrecv       S = bytes each rank sends (a ring)    factor 1
//   p2p            S = bytes of one one-way message      factor 1 (ranks in pairs; half a round trip of two
//                  one-off transfers: fresh receive buffer, the receiver polling; the pipeline's link table)
// The MPI program is pipescope-linkbench (link_main.cc, link_mpi.cc); this header is MPI-free so that
// `pipescope calibrate` can read its results and fit them.

#include <map>
#include <string>
#include <vector>

#include "core/model/profile.h"

namespace pipescope::calib {

struct LinkOptions {
  double min_bytes = 8, max_bytes = 64.0 * 1024 * 1024, factor = 2;
  int iters = 20, warmup = 5;
  std::vector<std::string> ops{"p2p", "sendrecv", "allreduce", "allgather", "reducescatter"};
  std::string out;  // JSON results (rank 0)
};

struct LinkResult {
  std::string op;
  int ranks = 0;
  double bytes = 0;   // S as nccl-tests counts it
  double time_s = 0;  // per rank the median of the timed operations, averaged over ranks
  double algbw_Bps = 0, busbw_Bps = 0;
  bool holdout = false;  // a size between two sweep sizes, measured to test the fitted model only
  double ci_s = 0;       // half-width of the median's 95% confidence interval (0: not recorded)
};

double bus_factor(const std::string& op, int ranks);  // throws std::invalid_argument on an unknown op
bool known_link_op(const std::string& op);

struct LinkRun {
  std::string library;  // e.g. "Open MPI v4.1.4"
  std::string host;
  std::vector<LinkResult> results;
};
// Reads pipescope-linkbench's JSON (throws std::runtime_error naming the file).
LinkRun read_link_results(const std::string& path);

// Piecewise models (the sweep's table, linear between sizes) with their error on the held-out sizes (without
// any: every second interior size held out, fit_piecewise) and the large-message alpha-beta line: the p2p
// link class from p2p (from sendrecv in runs without p2p), one CollectiveFit per collective.
void fit_links(const LinkRun& run, const std::string& link_class, DeviceProfile& p);

}  // namespace pipescope::calib
