#pragma once
// Device profiles: what `pipescope calibrate` measures and the simulator reads in place of the analytic
// device model (docs/calibration.md). A profile is a YAML file with
//   - provenance (where, when, with what it was measured, the exact command, the statistics policy);
//   - a device section (peaks, memory, and the analytic model's efficiency parameters, fitted to the
//     measured GEMMs) used for every shape the profile has no table for;
//   - link classes (alpha-beta p2p fits: intra = NVLink / shared memory, inter = network) and collective fits;
//   - layer tables: t(l, 0) forward and backward for every measured slice length l, TeraPipe's bilinear
//     context term t_ctx(l, c) = a0 + a1 l + a2 c + a3 l c, embedding and LM-head times, per model shape
//     (hidden, heads, ffn, tensor-parallel degree, micro-batch size, dtype);
//   - the optimizer step time per parameter.
// Analytic profiles (kind: analytic) carry only the device and link sections, from public peak specs.
// Raw samples are kept next to the medians so fits can be redone.

#include <map>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/kernel_model.h"
#include "core/model/profile_error.h"

namespace pipescope {

// One timed configuration: median and spread of the per-call samples (seconds).
struct TimeStats {
  double median_s = 0, p10_s = 0, p90_s = 0;
  std::vector<double> samples_s;  // raw, in measurement order
  // Relative width of the median's 95% confidence interval (order statistics n/2 -+ 0.98 sqrt(n)) over the
  // median: the "spread" the calibration gates and tables use; (p90 - p10) / median without samples.
  double rel_spread() const;
};

// Least-squares fit t = a0 + a1 l + a2 c + a3 l c (seconds; l, c in tokens) of the context term.
struct ContextFit {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  double holdout_rel_err = 0;  // mean |rel. error| on the held-out points (of t(l, c), not of t_ctx alone)
  int train_points = 0, test_points = 0;
  double at(int l, int c) const { return a0 + a1 * l + a2 * c + a3 * static_cast<double>(l) * c; }
};

struct SlicePoint {  // one slice length at context 0
  int l = 0;
  TimeStats fwd, bwd;
};
struct ContextPoint {  // one (l, c) grid point: medians and their relative spread (p90 - p10) / median
  int l = 0, c = 0;
  double fwd_s = 0, bwd_s = 0;
  double fwd_spread = 0, bwd_spread = 0;  // 0 = not recorded
};
struct EndPoint {  // embedding (first stage) or final LayerNorm + LM head + loss (last stage) on l tokens
  int l = 0;
  double fwd_s = 0, bwd_s = 0;
  double fwd_spread = 0, bwd_spread = 0;  // 0 = not recorded
};

// Layer timings of one model shape. Times are per layer on one device (its tensor-parallel share).
struct LayerTable {
  int hidden = 0, heads = 0, ffn = 0, tp = 1, micro_batch = 1;
  int vocab = 0;                   // embedding / head tables were measured with this vocabulary (0 = none measured)
  int seq_len = 0;                 // longest l + c measured
  std::string dtype;               // fp64 | fp32 | fp16 | bf16
  std::vector<SlicePoint> slices;  // strictly increasing l
  std::vector<ContextPoint> context_grid;
  ContextFit ctx_fwd, ctx_bwd;  // t(l, c) - t(l, 0)
  std::vector<EndPoint> embedding, head;
  std::vector<ContextPoint> attention;  // attention alone (all heads of the micro-batch) on the (l, c) grid

  bool same_shape(const LayerTable& o) const;  // every key but micro_batch
};

// Time of a message of `bytes` from a measured (bytes, seconds) table, sorted by size: linear between
// neighbouring sizes (a piecewise alpha-beta: each segment has its own latency and bandwidth, which follows
// MPI's / NCCL's protocol switches), the first time below the table, the last segment's line above it.
double piecewise_seconds(const std::vector<std::pair<double, double>>& points, double bytes);

// Point-to-point transfers of one link class. model "alpha-beta": t(S) = alpha + S / bw; model "piecewise":
// the measured table (piecewise_seconds), with alpha / bw the large-message line (what a single SimGrid link
// carries when the simulator has no size model).
struct LinkFit {
  double latency_s = 0, bw_Bps = 0;
  double holdout_rel_err = 0;
  std::vector<std::pair<double, double>> points;          // (bytes, median seconds), sorted by bytes
  std::string model = "alpha-beta";                       // alpha-beta | piecewise
  std::vector<std::pair<double, double>> holdout_points;  // measured sizes the model was tested on, not fitted
  double seconds(double bytes) const;
};

// A collective (nccl-tests bus bandwidth): alpha-beta t(S) = alpha + S * factor(op, n) / busbw, or the
// piecewise table of its measured points.
struct CollectiveFit {
  std::string op;  // allreduce | allgather | reducescatter | sendrecv
  int ranks = 0;
  std::string link_class;  // intra | inter
  double alpha_s = 0, busbw_Bps = 0;
  double holdout_rel_err = 0;
  std::vector<std::pair<double, double>> points;          // (bytes as nccl-tests counts them, median seconds)
  std::string model = "alpha-beta";                       // alpha-beta | piecewise
  std::vector<std::pair<double, double>> holdout_points;  // measured sizes the model was tested on, not fitted
  double seconds(double bytes) const;
};

struct GemmPoint {
  int m = 0, n = 0, k = 0;
  std::string dtype;
  double median_s = 0;
  double flops_per_s() const { return 2.0 * m * n * k / median_s; }
};

struct DeviceProfile {
  std::string source;                             // file it came from
  std::string kind = "measured";                  // measured | analytic
  std::string name;                               // e.g. "cpu-f64 host42", "A100-SXM4-80GB (analytic)"
  std::map<std::string, std::string> provenance;  // ordered: the file is deterministic
  DeviceSpec device;
  std::map<std::string, LinkFit> links;  // intra | inter
  std::vector<CollectiveFit> collectives;
  std::vector<GemmPoint> gemms;
  std::vector<LayerTable> layers;
  double optimizer_s_per_param = 0;  // 0 = not measured (the analytic model's estimate is used)
  double op_overhead_s = 0;          // per compute op (dispatch and bookkeeping of the runtime)
  KernelFits kernels;                // kernel-level fits for shapes without a layer table (core/model/kernel_model.h)
};

// Reads and checks a profile (throws ProfileError "file:line:col: key: message").
DeviceProfile load_profile(const std::string& path);
DeviceProfile parse_profile(const std::string& yaml_text, const std::string& source);
// Writes the profile as YAML (deterministic: fixed key order, fixed number format).
void write_profile(const DeviceProfile& p, std::ostream& os);
// Throws ProfileError for implausible content: non-positive or non-finite times, sizes and bandwidths, fitted
// context terms that go negative or shrink with context on the measured range, unsorted tables.
void check_profile(const DeviceProfile& p);

// The device class of a device name: "H100", "A100", "V100", "CPU" (a CPU backend's profile), or the name
// itself; "" for an unnamed or "custom" device (a scenario that describes its own device).
std::string device_class(const std::string& device_name);
// The dtype a measured profile was taken in (its layer tables' / backend's), "" for an analytic profile.
std::string profile_dtype(const DeviceProfile& p);
// Throws ProfileError when the profile cannot serve the scenario: a measured profile of another dtype than
// training.dtype, or a device class other than the cluster's (an unnamed custom device accepts any).
void check_profile_serves(const DeviceProfile& p, const Scenario& s);
// One line naming a profile for reports: path, device, backend, dtype, date, content hash.
struct ProfileStamp {
  std::string path, kind, name, device, backend, dtype, date, hash;  // hash: FNV-1a 64 of the file's bytes, hex
  std::vector<std::string> gate_failures;                            // accepted with --accept-poor-fit
};
ProfileStamp profile_stamp(const std::string& path);  // "" = analytic: every field empty
std::string describe_stamp(const ProfileStamp& st);   // "analytic (no profile)" or "PATH (device ..., ...)"

// The piecewise p2p link tables ("intra", "inter" -> (bytes, seconds)) of the profile at `path` ("" or a profile
// without piecewise links: empty), for the simulator's size-dependent link times (sim EngineOptions::link_tables).
std::map<std::string, std::vector<std::pair<double, double>>> piecewise_link_tables(const std::string& path);

// The scenario with the profile's device in place of the cluster's (and its link classes in place of the
// cluster's intra-node / network links where the profile has them); sim.profile is set to `path`.
Scenario apply_profile(const Scenario& s, const DeviceProfile& p, const std::string& path);

// Profile dtype names (fp64, fp32, fp16, bf16) from a kernels backend name ("cpu-f64", "cuda-bf16", ...).
std::string dtype_of_backend(const std::string& backend);

}  // namespace pipescope
