#include "core/model/profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/model/backends.h"
#include "core/model/profile_kernels.h"
#include "core/model/yaml_aliases.h"
#include "core/util/input_file.h"
#include "core/util/units.h"
#include "core/util/yaml_boolean.h"

namespace pipescope {
namespace {

using namespace units;

constexpr int kVersion = 1;

// ---------------------------------------------------------------- reading

// A mapping key as text; complex keys (`? [a, b]`, a mapping) are errors, not yaml-cpp conversion exceptions.
std::string key_text(const std::string& src, const YAML::Node& k, const std::string& path) {
  if (!k.IsScalar()) fail_profile_key(src, k, path.empty() ? "(key)" : path + ".(key)", "a key must be a plain scalar");
  return k.Scalar();
}

// A mapping with a known set of keys: unknown keys are errors (typos must not be ignored silently).
class Map {
 public:
  Map(const std::string& src, const YAML::Node& n, const std::string& path, std::set<std::string> keys)
      : src_(src), n_(n), path_(path) {
    if (!n.IsMap()) fail_profile_key(src, n, path, "expected a mapping");
    std::set<std::string> seen;
    for (const auto& kv : n) {
      const std::string k = key_text(src, kv.first, path);
      if (!keys.count(k)) fail_profile_key(src, kv.first, key(k), "unknown key");
      if (!seen.insert(k).second) fail_profile_key(src, kv.first, key(k), "duplicate key (only one value is read)");
    }
  }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  bool has(const std::string& k) const { return static_cast<bool>(n_[k]); }
  YAML::Node node(const std::string& k) const {
    const YAML::Node c = n_[k];
    if (!c) fail_profile_key(src_, n_, key(k), "missing");
    return c;
  }
  double num(const std::string& k, bool positive = false, std::optional<double> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      fail_profile_key(src_, n_, key(k), "missing");
    }
    return number(src_, node(k), key(k), positive);
  }
  // num() of an optional key (default 0) with a plausible maximum (docs/limits.md).
  double num_at_most(const std::string& k, double max) const {
    const double v = num(k, false, 0.0);
    if (v > max) {
      char b[96];
      std::snprintf(b, sizeof b, "%.15g is outside the plausible range [0, %.15g]", v, max);
      fail_profile_key(src_, node(k), key(k), std::string(b) + " (docs/limits.md)");
    }
    return v;
  }
  int integer(const std::string& k, int min, std::optional<int> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      fail_profile_key(src_, n_, key(k), "missing");
    }
    const YAML::Node c = node(k);
    int v = 0;
    try {
      v = c.as<int>();
    } catch (const YAML::Exception&) {
      fail_profile_key(src_, c, key(k), "expected an integer, got '" + scalar(c) + "'");
    }
    if (v < min) fail_profile_key(src_, c, key(k), "must be >= " + std::to_string(min) + ", got " + std::to_string(v));
    return v;
  }
  bool boolean(const std::string& k, bool def) const {
    if (!has(k)) return def;
    const YAML::Node c = node(k);
    const std::optional<bool> v = yaml_boolean(scalar(c));
    if (!v) fail_profile_key(src_, c, key(k), "expected true or false, got '" + scalar(c) + "'");
    return *v;
  }
  std::string str(const std::string& k, std::optional<std::string> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      fail_profile_key(src_, n_, key(k), "missing");
    }
    const YAML::Node c = node(k);
    if (!c.IsScalar()) fail_profile_key(src_, c, key(k), "expected a string");
    return c.as<std::string>();
  }
  static std::string scalar(const YAML::Node& c) { return c.IsScalar() ? c.Scalar() : "<not a scalar>"; }
  static double number(const std::string& src, const YAML::Node& c, const std::string& key, bool positive) {
    double v = 0;
    if (!c.IsScalar()) fail_profile_key(src, c, key, "expected a number");
    try {
      v = c.as<double>();
    } catch (const YAML::Exception&) {
      fail_profile_key(src, c, key, "expected a number, got '" + c.Scalar() + "'");
    }
    if (!std::isfinite(v)) fail_profile_key(src, c, key, "must be finite, got '" + c.Scalar() + "'");
    if (positive && !(v > 0)) fail_profile_key(src, c, key, "must be > 0, got " + c.Scalar());
    if (!positive && v < 0) fail_profile_key(src, c, key, "must be >= 0, got " + c.Scalar());
    return v;
  }

 private:
  std::string src_;
  YAML::Node n_;
  std::string path_;
};

YAML::Node seq(const std::string& src, const Map& m, const std::string& k) {
  const YAML::Node n = m.node(k);
  if (!n.IsSequence()) fail_profile_key(src, n, m.key(k), "expected a list");
  return n;
}

TimeStats read_stats(const std::string& src, const YAML::Node& n, const std::string& path) {
  const Map m(src, n, path, {"median_us", "p10_us", "p90_us", "samples_us"});
  TimeStats t;
  t.median_s = m.num("median_us", true) * kUs;
  t.p10_s = m.num("p10_us", false, t.median_s / kUs) * kUs;
  t.p90_s = m.num("p90_us", false, t.median_s / kUs) * kUs;
  if (m.has("samples_us")) {
    const YAML::Node s = seq(src, m, "samples_us");
    for (std::size_t i = 0; i < s.size(); i++)
      t.samples_s.push_back(Map::number(src, s[i], m.key("samples_us") + "[" + std::to_string(i) + "]", true) * kUs);
  }
  return t;
}

ContextFit read_fit(const std::string& src, const YAML::Node& n, const std::string& path) {
  const Map m(src, n, path,
              {"a0_us", "a1_us_per_token", "a2_us_per_token", "a3_us_per_token2", "holdout_rel_err", "train_points",
               "test_points"});
  ContextFit f;
  auto signed_num = [&](const std::string& k) {
    const YAML::Node c = m.node(k);
    double v = 0;
    try {
      v = c.as<double>();
    } catch (const YAML::Exception&) {
      fail_profile_key(src, c, m.key(k), "expected a number, got '" + Map::scalar(c) + "'");
    }
    if (!std::isfinite(v)) fail_profile_key(src, c, m.key(k), "must be finite");
    return v * kUs;
  };
  f.a0 = signed_num("a0_us");
  f.a1 = signed_num("a1_us_per_token");
  f.a2 = signed_num("a2_us_per_token");
  f.a3 = signed_num("a3_us_per_token2");
  f.holdout_rel_err = m.num("holdout_rel_err", false, 0.0);
  f.train_points = m.integer("train_points", 0, 0);
  f.test_points = m.integer("test_points", 0, 0);
  return f;
}

std::vector<std::pair<double, double>> read_points(const std::string& src, const YAML::Node& n,
                                                   const std::string& path) {
  if (!n.IsSequence()) fail_profile_key(src, n, path, "expected a list of [bytes, median_us] pairs");
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < n.size(); i++) {
    const std::string k = path + "[" + std::to_string(i) + "]";
    if (!n[i].IsSequence() || n[i].size() != 2) fail_profile_key(src, n[i], k, "expected [bytes, median_us]");
    out.emplace_back(Map::number(src, n[i][0], k, true), Map::number(src, n[i][1], k, true) * kUs);
  }
  return out;
}

// A list of [l, c, forward_us, backward_us] rows (the context grid, the attention table).
std::vector<ContextPoint> read_grid(const std::string& src, const Map& m, const std::string& key) {
  const YAML::Node g = seq(src, m, key);
  std::vector<ContextPoint> out;
  for (std::size_t i = 0; i < g.size(); i++) {
    const std::string k = m.key(key) + "[" + std::to_string(i) + "]";
    if (!g[i].IsSequence() || (g[i].size() != 4 && g[i].size() != 6))
      fail_profile_key(src, g[i], k,
                       "expected [l, c, forward_us, backward_us] or [..., forward_spread, backward_spread]");
    ContextPoint c;
    c.l = static_cast<int>(Map::number(src, g[i][0], k + ".l", true));
    c.c = static_cast<int>(Map::number(src, g[i][1], k + ".c", false));
    c.fwd_s = Map::number(src, g[i][2], k + ".forward_us", true) * kUs;
    c.bwd_s = Map::number(src, g[i][3], k + ".backward_us", true) * kUs;
    if (g[i].size() == 6) {
      c.fwd_spread = Map::number(src, g[i][4], k + ".forward_spread", false);
      c.bwd_spread = Map::number(src, g[i][5], k + ".backward_spread", false);
    }
    out.push_back(c);
  }
  return out;
}

LayerTable read_layer(const std::string& src, const YAML::Node& n, const std::string& path) {
  const Map m(src, n, path,
              {"hidden", "heads", "ffn", "tp", "micro_batch", "vocab", "seq_len", "dtype", "slices", "context_grid",
               "context_fit_forward", "context_fit_backward", "embedding", "head", "attention"});
  LayerTable t;
  t.hidden = m.integer("hidden", 1);
  t.heads = m.integer("heads", 1);
  t.ffn = m.integer("ffn", 1);
  t.tp = m.integer("tp", 1, 1);
  t.micro_batch = m.integer("micro_batch", 1, 1);
  t.vocab = m.integer("vocab", 0, 0);
  t.seq_len = m.integer("seq_len", 1);
  t.dtype = m.str("dtype");
  if (t.dtype != "fp64" && t.dtype != "fp32" && t.dtype != "fp16" && t.dtype != "bf16")
    fail_profile_key(src, m.node("dtype"), m.key("dtype"), "expected fp64, fp32, fp16 or bf16, got '" + t.dtype + "'");
  const YAML::Node sl = seq(src, m, "slices");
  for (std::size_t i = 0; i < sl.size(); i++) {
    const std::string k = m.key("slices") + "[" + std::to_string(i) + "]";
    const Map p(src, sl[i], k, {"l", "forward", "backward"});
    SlicePoint s;
    s.l = p.integer("l", 1);
    s.fwd = read_stats(src, p.node("forward"), p.key("forward"));
    s.bwd = read_stats(src, p.node("backward"), p.key("backward"));
    if (!t.slices.empty() && s.l <= t.slices.back().l)
      fail_profile_key(src, p.node("l"), p.key("l"), "slice lengths must increase strictly");
    if (s.l > t.seq_len) fail_profile_key(src, p.node("l"), p.key("l"), "exceeds seq_len " + std::to_string(t.seq_len));
    t.slices.push_back(std::move(s));
  }
  if (t.slices.empty()) fail_profile_key(src, sl, m.key("slices"), "must not be empty");
  if (m.has("context_grid")) t.context_grid = read_grid(src, m, "context_grid");
  if (m.has("attention")) t.attention = read_grid(src, m, "attention");
  if (m.has("context_fit_forward"))
    t.ctx_fwd = read_fit(src, m.node("context_fit_forward"), m.key("context_fit_forward"));
  if (m.has("context_fit_backward"))
    t.ctx_bwd = read_fit(src, m.node("context_fit_backward"), m.key("context_fit_backward"));
  for (const char* end : {"embedding", "head"}) {
    if (!m.has(end)) continue;
    const YAML::Node e = seq(src, m, end);
    auto& out = std::string(end) == "embedding" ? t.embedding : t.head;
    for (std::size_t i = 0; i < e.size(); i++) {
      const std::string k = m.key(end) + "[" + std::to_string(i) + "]";
      if (!e[i].IsSequence() || (e[i].size() != 3 && e[i].size() != 5))
        fail_profile_key(src, e[i], k,
                         "expected [l, forward_us, backward_us] or [..., forward_spread, backward_spread]");
      EndPoint p;
      p.l = static_cast<int>(Map::number(src, e[i][0], k + ".l", true));
      p.fwd_s = Map::number(src, e[i][1], k + ".forward_us", true) * kUs;
      p.bwd_s = Map::number(src, e[i][2], k + ".backward_us", true) * kUs;
      if (e[i].size() == 5) {
        p.fwd_spread = Map::number(src, e[i][3], k + ".forward_spread", false);
        p.bwd_spread = Map::number(src, e[i][4], k + ".backward_spread", false);
      }
      if (!out.empty() && p.l <= out.back().l) fail_profile_key(src, e[i], k, "lengths must increase strictly");
      out.push_back(p);
    }
    if (t.vocab == 0 && std::string(end) == "head" && !out.empty())
      fail_profile_key(src, m.node(end), m.key("vocab"), "needed with head timings");
  }
  return t;
}

DeviceSpec read_device(const std::string& src, const YAML::Node& n) {
  const Map m(src, n, "device",
              {"name", "peak_tflops_fp16", "peak_tflops_bf16", "peak_tflops_fp32", "peak_tflops_fp64", "memory_GB",
               "hbm_bw_GBps", "gemm_efficiency", "gemm_half_sat_gflop", "kernel_launch_us", "memory_efficiency",
               "sm_count", "comm_sm_count", "gemm_epilogue_hidden", "flash_fwd_efficiency", "flash_bwd_efficiency"});
  DeviceSpec d;
  d.name = m.str("name");
  d.peak_flops_fp16 = m.num("peak_tflops_fp16", true) * kTflops;
  d.peak_flops_bf16 = m.num("peak_tflops_bf16", false, 0.0) * kTflops;
  d.peak_flops_fp32 = m.num("peak_tflops_fp32", true) * kTflops;
  d.peak_flops_fp64 = m.num("peak_tflops_fp64", false, 0.0) * kTflops;
  d.memory_bytes = m.num("memory_GB", true) * kGB;
  d.hbm_bw_Bps = m.num("hbm_bw_GBps", true) * kGBps;
  d.gemm_efficiency = m.num("gemm_efficiency", true);
  if (d.gemm_efficiency > 1) fail_profile_key(src, m.node("gemm_efficiency"), "device.gemm_efficiency", "must be <= 1");
  d.gemm_half_sat_flops = m.num("gemm_half_sat_gflop", false) * kGflop;
  d.kernel_launch_s = m.num("kernel_launch_us", false) * kUs;
  d.memory_efficiency = m.num("memory_efficiency", true);
  if (d.memory_efficiency > 1)
    fail_profile_key(src, m.node("memory_efficiency"), "device.memory_efficiency", "must be <= 1");
  d.sm_count = m.integer("sm_count", 0, 0);            // GEMM wave quantisation (core/cost/gemm_model.h); 0 = none
  d.comm_sm_count = m.integer("comm_sm_count", 0, 0);  // held by overlapped communication; 0 = none
  if (d.comm_sm_count > 0 && d.comm_sm_count >= d.sm_count)
    fail_profile_key(src, m.node("comm_sm_count"), "device.comm_sm_count", "must be below device.sm_count");
  d.gemm_epilogue_hidden = m.boolean("gemm_epilogue_hidden", false);
  for (auto [key, field] : {std::pair{"flash_fwd_efficiency", &d.flash_fwd_efficiency},
                            std::pair{"flash_bwd_efficiency", &d.flash_bwd_efficiency}}) {
    *field = m.num(key, false, 0.0);  // fused attention's share of peak; 0 = the GEMM share
    if (*field > 1) fail_profile_key(src, m.node(key), std::string("device.") + key, "must be <= 1");
  }
  return d;
}

std::string read_model(const std::string& src, const Map& f) {
  const std::string m = f.str("model", std::string("alpha-beta"));
  if (m != "alpha-beta" && m != "piecewise")
    fail_profile_key(src, f.node("model"), f.key("model"), "expected alpha-beta or piecewise, got '" + m + "'");
  return m;
}

// A piecewise model is its table: at least two sizes, strictly increasing.
void check_piecewise(const std::string& src, const Map& f, const std::vector<std::pair<double, double>>& pts) {
  if (pts.size() < 2)
    fail_profile_key(src, f.node("model"), f.key("points"), "a piecewise model needs at least 2 points");
  for (std::size_t i = 1; i < pts.size(); i++)
    if (!(pts[i].first > pts[i - 1].first))
      fail_profile_key(src, f.node("points"), f.key("points"), "sizes must increase strictly for a piecewise model");
}

// ---------------------------------------------------------------- writing

std::string yaml_num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}
std::string us(double seconds) { return yaml_num(seconds / kUs); }

// A string scalar as yaml-cpp's emitter writes it (double-quoted, its escapes), so that what the loader reads back
// is exactly the string; the layout around it stays compact flow maps written here.
std::string yaml_quoted(const std::string& s) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << s;
  return e.c_str();
}

void write_stats(std::ostream& os, const TimeStats& t) {
  os << "{median_us: " << us(t.median_s) << ", p10_us: " << us(t.p10_s) << ", p90_us: " << us(t.p90_s);
  if (!t.samples_s.empty()) {
    os << ", samples_us: [";
    for (std::size_t i = 0; i < t.samples_s.size(); i++) os << (i ? ", " : "") << us(t.samples_s[i]);
    os << "]";
  }
  os << "}";
}

void write_fit(std::ostream& os, const char* key, const ContextFit& f) {
  os << "    " << key << ": {a0_us: " << us(f.a0) << ", a1_us_per_token: " << us(f.a1)
     << ", a2_us_per_token: " << us(f.a2) << ", a3_us_per_token2: " << us(f.a3)
     << ", holdout_rel_err: " << yaml_num(f.holdout_rel_err) << ", train_points: " << f.train_points
     << ", test_points: " << f.test_points << "}\n";
}

// [l, c, forward_us, backward_us] and the spreads when they were recorded.
void write_grid_row(std::ostream& os, const ContextPoint& c) {
  os << "      - [" << c.l << ", " << c.c << ", " << us(c.fwd_s) << ", " << us(c.bwd_s);
  if (c.fwd_spread > 0 || c.bwd_spread > 0) os << ", " << yaml_num(c.fwd_spread) << ", " << yaml_num(c.bwd_spread);
  os << "]\n";
}

void write_points(std::ostream& os, const std::vector<std::pair<double, double>>& pts) {
  os << "[";
  for (std::size_t i = 0; i < pts.size(); i++)
    os << (i ? ", " : "") << "[" << yaml_num(pts[i].first) << ", " << us(pts[i].second) << "]";
  os << "]";
}

// The cost model adds c (a2 + a3 l) to t(l, 0): that slope must not be negative anywhere on the measured l
// (it is linear in l, so the two ends decide): attention work grows with context.
void check_fit(const std::string& src, const std::string& key, const ContextFit& f, int lmin, int lmax) {
  for (int l : {lmin, lmax})
    if (f.a2 + f.a3 * l < -1e-15)
      throw ProfileError(src + ": " + key + ": fitted context term decreases with context at l = " + std::to_string(l) +
                         " (a2 + a3*l = " + yaml_num((f.a2 + f.a3 * l) / kUs) + " us/token)");
}

}  // namespace

double TimeStats::rel_spread() const {
  if (!(median_s > 0)) return 0.0;
  if (samples_s.size() < 3) return (p90_s - p10_s) / median_s;
  std::vector<double> x = samples_s;
  std::sort(x.begin(), x.end());
  const double n = static_cast<double>(x.size()), half = 0.98 * std::sqrt(n);
  const auto lo = static_cast<std::size_t>(std::max(0.0, std::floor(n / 2 - half)));
  const auto hi = static_cast<std::size_t>(std::min(n - 1, std::ceil(n / 2 + half - 1)));
  return (x[hi] - x[lo]) / median_s;
}

double piecewise_seconds(const std::vector<std::pair<double, double>>& pts, double bytes) {
  if (pts.empty()) throw std::invalid_argument("piecewise_seconds: empty table");
  if (pts.size() == 1 || bytes <= pts.front().first) return pts.front().second;
  std::size_t i = 1;
  while (i + 1 < pts.size() && bytes > pts[i].first) i++;
  const auto& [s0, t0] = pts[i - 1];
  const auto& [s1, t1] = pts[i];
  const double t = t0 + (t1 - t0) * (bytes - s0) / (s1 - s0);
  return bytes > s1 ? std::max(t, t1) : t;  // a noisy last segment must not make larger messages cheaper
}

double LinkFit::seconds(double bytes) const {
  if (model == "piecewise" && points.size() >= 2) return piecewise_seconds(points, bytes);
  return latency_s + bytes / bw_Bps;
}

double CollectiveFit::seconds(double bytes) const {
  if (model == "piecewise" && points.size() >= 2) return piecewise_seconds(points, bytes);
  double factor = 1.0;
  const double n = ranks;
  if (op == "allreduce") factor = 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reducescatter") factor = (n - 1) / n;
  return alpha_s + bytes * factor / busbw_Bps;
}

bool LayerTable::same_shape(const LayerTable& o) const {
  return hidden == o.hidden && heads == o.heads && ffn == o.ffn && tp == o.tp && dtype == o.dtype;
}

namespace {

// The optional sections, in the order write_profile writes them.
const char* const kSections[] = {"links",          "collectives", "gemm", "layers", "optimizer_us_per_mparam",
                                 "op_overhead_us", "kernels"};

std::string profile_sections(const DeviceProfile& p) {
  const bool has[] = {!p.links.empty(),  !p.collectives.empty(),      !p.gemms.empty(),
                      !p.layers.empty(), p.optimizer_s_per_param > 0, p.op_overhead_s > 0,
                      !p.kernels.empty()};
  std::string out = "device";
  for (std::size_t i = 0; i < std::size(kSections); i++)
    if (has[i]) out += std::string(", ") + kSections[i];
  return "[" + out + "]";
}

// Schema-complete or refused: a profile lists its sections first (`sections: [...]`) and ends with
// `complete: true`, so a file cut at a line boundary or with a section deleted is an error naming the file and
// what is missing, instead of a profile that silently times some ops with the analytic model.
void check_complete(const std::string& src, const YAML::Node& root, const Map& m) {
  const std::string rerun = " (re-run pipescope calibrate, or calibrate --analytic, to write a whole profile)";
  if (!m.has("complete") || !root["complete"].IsScalar() || root["complete"].Scalar() != "true")
    fail_profile_key(
        src, root, "complete",
        "missing: the profile does not end with `complete: true`; the file is truncated or was edited" + rerun);
  if (!m.has("sections") || !root["sections"].IsSequence())
    fail_profile_key(src, root, "sections",
                     "missing: the list of the profile's sections (the profile is incomplete)" + rerun);
  std::set<std::string> listed;
  for (const auto& e : root["sections"]) {
    const std::string name = e.IsScalar() ? e.Scalar() : std::string();
    if (name != "device" && std::find(std::begin(kSections), std::end(kSections), name) == std::end(kSections))
      fail_profile_key(src, e, "sections", "unknown section '" + name + "'");
    listed.insert(name);
  }
  for (const std::string& name : listed)
    if (!m.has(name))
      fail_profile_key(src, root, name, "missing: the profile lists section " + name + " but it is not there" + rerun);
  for (const char* name : kSections)
    if (m.has(name) && !listed.count(name))
      fail_profile_key(src, m.node(name), name, "present but not listed in `sections`: the file was edited" + rerun);
}

}  // namespace

DeviceProfile parse_profile(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    YAML::Mark at;
    const std::string alias = yaml_alias_problem(text, at);
    if (!alias.empty())
      throw ProfileError(source + ":" + std::to_string(at.line + 1) + ":" + std::to_string(at.column + 1) + ": " +
                         alias);
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ProfileError(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                       ": YAML syntax error: " + yaml_error_text(e));
  }
  if (!root || root.IsNull()) throw ProfileError(source + ": empty profile");
  const Map m(source, root, "",
              {"pipescope_profile", "kind", "name", "provenance", "sections", "device", "links", "collectives", "gemm",
               "layers", "optimizer_us_per_mparam", "op_overhead_us", "kernels", "complete"});
  check_complete(source, root, m);
  const int version = m.integer("pipescope_profile", 1);
  if (version != kVersion)
    fail_profile_key(source, m.node("pipescope_profile"), "pipescope_profile",
                     "unsupported profile version " + std::to_string(version) + " (this build reads " +
                         std::to_string(kVersion) + ")");
  DeviceProfile p;
  p.source = source;
  p.kind = m.str("kind");
  if (p.kind != "measured" && p.kind != "analytic")
    fail_profile_key(source, m.node("kind"), "kind", "expected measured or analytic, got '" + p.kind + "'");
  p.name = m.str("name");
  if (m.has("provenance")) {
    const YAML::Node pv = m.node("provenance");
    if (!pv.IsMap()) fail_profile_key(source, pv, "provenance", "expected a mapping");
    for (const auto& kv : pv) {
      const std::string k = key_text(source, kv.first, "provenance");
      if (!kv.second.IsScalar()) fail_profile_key(source, kv.second, "provenance." + k, "expected a string");
      p.provenance[k] = kv.second.Scalar();
    }
  }
  p.device = read_device(source, m.node("device"));
  if (m.has("links")) {
    const Map l(source, m.node("links"), "links", {"intra", "inter"});
    for (const char* cls : {"intra", "inter"}) {
      if (!l.has(cls)) continue;
      const Map f(source, l.node(cls), l.key(cls),
                  {"latency_us", "bw_GBps", "holdout_rel_err", "points", "model", "holdout_points"});
      LinkFit lf;
      lf.model = read_model(source, f);
      lf.latency_s = f.num("latency_us") * kUs;
      lf.bw_Bps = f.num("bw_GBps", true) * kGBps;
      lf.holdout_rel_err = f.num("holdout_rel_err", false, 0.0);
      if (f.has("points")) lf.points = read_points(source, f.node("points"), f.key("points"));
      if (f.has("holdout_points"))
        lf.holdout_points = read_points(source, f.node("holdout_points"), f.key("holdout_points"));
      if (lf.model == "piecewise") check_piecewise(source, f, lf.points);
      p.links[cls] = lf;
    }
  }
  if (m.has("collectives")) {
    const YAML::Node c = seq(source, m, "collectives");
    for (std::size_t i = 0; i < c.size(); i++) {
      const std::string k = "collectives[" + std::to_string(i) + "]";
      const Map f(
          source, c[i], k,
          {"op", "ranks", "class", "alpha_us", "busbw_GBps", "holdout_rel_err", "points", "model", "holdout_points"});
      CollectiveFit cf;
      cf.model = read_model(source, f);
      cf.op = f.str("op");
      if (cf.op != "allreduce" && cf.op != "allgather" && cf.op != "reducescatter" && cf.op != "sendrecv")
        fail_profile_key(source, f.node("op"), f.key("op"), "expected allreduce, allgather, reducescatter or sendrecv");
      cf.ranks = f.integer("ranks", 2);
      cf.link_class = f.str("class");
      if (cf.link_class != "intra" && cf.link_class != "inter")
        fail_profile_key(source, f.node("class"), f.key("class"), "expected intra or inter");
      cf.alpha_s = f.num("alpha_us") * kUs;
      cf.busbw_Bps = f.num("busbw_GBps", true) * kGBps;
      cf.holdout_rel_err = f.num("holdout_rel_err", false, 0.0);
      if (f.has("points")) cf.points = read_points(source, f.node("points"), f.key("points"));
      if (f.has("holdout_points"))
        cf.holdout_points = read_points(source, f.node("holdout_points"), f.key("holdout_points"));
      if (cf.model == "piecewise") check_piecewise(source, f, cf.points);
      p.collectives.push_back(std::move(cf));
    }
  }
  if (m.has("gemm")) {
    const YAML::Node g = seq(source, m, "gemm");
    for (std::size_t i = 0; i < g.size(); i++) {
      const Map f(source, g[i], "gemm[" + std::to_string(i) + "]", {"m", "n", "k", "dtype", "median_us", "tflops"});
      GemmPoint gp;
      gp.m = f.integer("m", 1);
      gp.n = f.integer("n", 1);
      gp.k = f.integer("k", 1);
      gp.dtype = f.str("dtype");
      gp.median_s = f.num("median_us", true) * kUs;
      f.num("tflops", false, 0.0);  // derived; written for readers
      p.gemms.push_back(gp);
    }
  }
  if (m.has("layers")) {
    const YAML::Node l = seq(source, m, "layers");
    for (std::size_t i = 0; i < l.size(); i++) {
      LayerTable t = read_layer(source, l[i], "layers[" + std::to_string(i) + "]");
      for (const auto& o : p.layers)
        if (o.same_shape(t) && o.micro_batch == t.micro_batch)
          fail_profile_key(source, l[i], "layers[" + std::to_string(i) + "]",
                           "duplicate table for the same shape and micro_batch");
      p.layers.push_back(std::move(t));
    }
  }
  // A CPU profile's optimizer step is about 7e3 us per million parameters, a GPU's about 5.
  p.optimizer_s_per_param = m.num_at_most("optimizer_us_per_mparam", 1e7) * kUs / 1e6;
  p.op_overhead_s = m.num_at_most("op_overhead_us", 1e6) * kUs;
  if (m.has("kernels")) p.kernels = read_kernel_fits(source, m.node("kernels"));
  if (p.kind == "analytic" && !p.layers.empty())
    fail_profile_key(source, m.node("layers"), "layers", "an analytic profile has no measured layer tables");
  check_profile(p);
  return p;
}

DeviceProfile load_profile(const std::string& path) {
  try {
    return parse_profile(read_input_file(path, "profile"), path);
  } catch (const InputFileError& e) {
    throw ProfileError(e.what());
  }
}

void check_profile(const DeviceProfile& p) {
  const std::string& src = p.source.empty() ? std::string("<profile>") : p.source;
  for (std::size_t i = 0; i < p.layers.size(); i++) {
    const LayerTable& t = p.layers[i];
    const std::string k = "layers[" + std::to_string(i) + "]";
    if (t.slices.empty()) throw ProfileError(src + ": " + k + ".slices: must not be empty");
    for (const auto& s : t.slices)
      if (!(s.fwd.median_s > 0) || !(s.bwd.median_s > 0) || !std::isfinite(s.fwd.median_s) ||
          !std::isfinite(s.bwd.median_s))
        throw ProfileError(src + ": " + k + ".slices: non-positive time at l = " + std::to_string(s.l));
    int cmax = 0;
    for (const auto& c : t.context_grid) cmax = std::max(cmax, c.c);
    if (cmax > 0) {
      check_fit(src, k + ".context_fit_forward", t.ctx_fwd, t.slices.front().l, t.slices.back().l);
      check_fit(src, k + ".context_fit_backward", t.ctx_bwd, t.slices.front().l, t.slices.back().l);
    }
  }
  for (const auto& [cls, l] : p.links)
    if (!(l.bw_Bps > 0) || l.latency_s < 0) throw ProfileError(src + ": links." + cls + ": bandwidth must be > 0");
}

void write_profile(const DeviceProfile& p, std::ostream& os) {
  os << "# pipescope device profile (docs/calibration.md). Times in microseconds, sizes in bytes.\n";
  os << "pipescope_profile: " << kVersion << "\n";
  os << "kind: " << p.kind << "\n";
  os << "name: " << yaml_quoted(p.name) << "\n";
  os << "sections: " << profile_sections(p) << "\n";
  os << "provenance:" << (p.provenance.empty() ? " {}" : "") << "\n";
  for (const auto& [k, v] : p.provenance) os << "  " << yaml_quoted(k) << ": " << yaml_quoted(v) << "\n";
  const DeviceSpec& d = p.device;
  os << "device:\n  name: " << yaml_quoted(d.name) << "\n";
  os << "  peak_tflops_fp16: " << yaml_num(d.peak_flops_fp16 / kTflops) << "\n";
  os << "  peak_tflops_bf16: " << yaml_num(d.peak_flops_bf16 / kTflops) << "\n";
  os << "  peak_tflops_fp32: " << yaml_num(d.peak_flops_fp32 / kTflops) << "\n";
  os << "  peak_tflops_fp64: " << yaml_num(d.peak_flops_fp64 / kTflops) << "\n";
  os << "  memory_GB: " << yaml_num(d.memory_bytes / kGB) << "\n";
  os << "  hbm_bw_GBps: " << yaml_num(d.hbm_bw_Bps / kGBps) << "\n";
  os << "  gemm_efficiency: " << yaml_num(d.gemm_efficiency) << "\n";
  os << "  gemm_half_sat_gflop: " << yaml_num(d.gemm_half_sat_flops / kGflop) << "\n";
  os << "  kernel_launch_us: " << us(d.kernel_launch_s) << "\n";
  os << "  memory_efficiency: " << yaml_num(d.memory_efficiency) << "\n";
  if (d.sm_count > 0) os << "  sm_count: " << d.sm_count << "\n";
  if (d.comm_sm_count > 0) os << "  comm_sm_count: " << d.comm_sm_count << "\n";
  if (d.gemm_epilogue_hidden) os << "  gemm_epilogue_hidden: true\n";
  if (d.flash_fwd_efficiency > 0) os << "  flash_fwd_efficiency: " << yaml_num(d.flash_fwd_efficiency) << "\n";
  if (d.flash_bwd_efficiency > 0) os << "  flash_bwd_efficiency: " << yaml_num(d.flash_bwd_efficiency) << "\n";
  if (!p.links.empty()) {
    os << "links:\n";
    for (const auto& [cls, l] : p.links) {
      os << "  " << cls << ": {latency_us: " << us(l.latency_s) << ", bw_GBps: " << yaml_num(l.bw_Bps / kGBps)
         << ", holdout_rel_err: " << yaml_num(l.holdout_rel_err);
      if (l.model != "alpha-beta") os << ", model: " << l.model;
      if (!l.points.empty()) os << ",\n    points: ", write_points(os, l.points);
      if (!l.holdout_points.empty()) os << ",\n    holdout_points: ", write_points(os, l.holdout_points);
      os << "}\n";
    }
  }
  if (!p.collectives.empty()) {
    os << "collectives:\n";
    for (const auto& c : p.collectives) {
      os << "  - {op: " << c.op << ", ranks: " << c.ranks << ", class: " << c.link_class
         << ", alpha_us: " << us(c.alpha_s) << ", busbw_GBps: " << yaml_num(c.busbw_Bps / kGBps)
         << ", holdout_rel_err: " << yaml_num(c.holdout_rel_err);
      if (c.model != "alpha-beta") os << ", model: " << c.model;
      if (!c.points.empty()) os << ",\n     points: ", write_points(os, c.points);
      if (!c.holdout_points.empty()) os << ",\n     holdout_points: ", write_points(os, c.holdout_points);
      os << "}\n";
    }
  }
  if (!p.gemms.empty()) {
    os << "gemm:\n";
    for (const auto& g : p.gemms)
      os << "  - {m: " << g.m << ", n: " << g.n << ", k: " << g.k << ", dtype: " << g.dtype
         << ", median_us: " << us(g.median_s) << ", tflops: " << yaml_num(g.flops_per_s() / kTflops) << "}\n";
  }
  if (!p.layers.empty()) {
    os << "layers:\n";
    for (const auto& t : p.layers) {
      os << "  - hidden: " << t.hidden << "\n    heads: " << t.heads << "\n    ffn: " << t.ffn << "\n    tp: " << t.tp
         << "\n    micro_batch: " << t.micro_batch << "\n    vocab: " << t.vocab << "\n    seq_len: " << t.seq_len
         << "\n    dtype: " << t.dtype << "\n    slices:\n";
      for (const auto& s : t.slices) {
        os << "      - l: " << s.l << "\n        forward: ";
        write_stats(os, s.fwd);
        os << "\n        backward: ";
        write_stats(os, s.bwd);
        os << "\n";
      }
      if (!t.context_grid.empty()) {
        os << "    context_grid:  # [l, c, forward_us, backward_us, forward_spread, backward_spread]\n";
        for (const auto& c : t.context_grid) write_grid_row(os, c);
        write_fit(os, "context_fit_forward", t.ctx_fwd);
        write_fit(os, "context_fit_backward", t.ctx_bwd);
      }
      if (!t.attention.empty()) {
        os << "    attention:  # [l, c, forward_us, backward_us, forward_spread, backward_spread], all heads\n";
        for (const auto& c : t.attention) write_grid_row(os, c);
      }
      for (const char* end : {"embedding", "head"}) {
        const auto& v = std::string(end) == "embedding" ? t.embedding : t.head;
        if (v.empty()) continue;
        os << "    " << end << ":  # [l, forward_us, backward_us, forward_spread, backward_spread]\n";
        for (const auto& e : v) {
          os << "      - [" << e.l << ", " << us(e.fwd_s) << ", " << us(e.bwd_s);
          if (e.fwd_spread > 0 || e.bwd_spread > 0)
            os << ", " << yaml_num(e.fwd_spread) << ", " << yaml_num(e.bwd_spread);
          os << "]\n";
        }
      }
    }
  }
  if (p.optimizer_s_per_param > 0) os << "optimizer_us_per_mparam: " << us(p.optimizer_s_per_param * 1e6) << "\n";
  if (p.op_overhead_s > 0) os << "op_overhead_us: " << us(p.op_overhead_s) << "\n";
  if (!p.kernels.empty()) write_kernel_fits(p.kernels, os);
  os << "complete: true\n";
}

std::string device_class(const std::string& name) {
  for (const char* gpu : {"H100", "A100", "V100"})
    if (name.find(gpu) != std::string::npos) return gpu;
  if (name.find("(cpu-") != std::string::npos) return "CPU";
  return name == "custom" ? "" : name;  // a scenario's own device description: no class to match
}

std::string profile_dtype(const DeviceProfile& p) {
  if (p.kind == "analytic") return "";
  if (!p.layers.empty()) return p.layers.front().dtype;
  if (auto it = p.provenance.find("backend"); it != p.provenance.end()) {
    try {
      return dtype_of_backend(it->second.substr(0, it->second.find(' ')));
    } catch (const ProfileError&) {
    }
  }
  return p.gemms.empty() ? "" : p.gemms.front().dtype;
}

void check_profile_serves(const DeviceProfile& p, const Scenario& s) {
  const std::string src = p.source.empty() ? std::string("<profile>") : p.source;
  const std::string dt = profile_dtype(p);
  if (!dt.empty() && dt != s.training.dtype)
    throw ProfileError(src + ": this " + dt + " profile cannot serve " + s.source + " (training.dtype " +
                       s.training.dtype +
                       "): calibrate with a backend of that precision, or set training.dtype: " + dt);
  const std::string want = device_class(s.cluster.device.name), have = device_class(p.device.name);
  if (!want.empty() && want != have)
    throw ProfileError(src + ": a profile of device class " + have + " ('" + p.device.name + "') cannot serve " +
                       s.source + ", whose cluster has " + want + " devices ('" + s.cluster.device.name +
                       "'): calibrate on that device, or use a scenario without a device preset");
}

namespace {
std::string fnv1a_hex(const std::string& bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
}  // namespace

ProfileStamp profile_stamp(const std::string& path) {
  ProfileStamp st;
  if (path.empty()) return st;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ProfileError(path + ": cannot open profile: " + std::strerror(errno));
  std::ostringstream text;
  text << f.rdbuf();
  const DeviceProfile p = parse_profile(text.str(), path);
  st.path = path;
  st.kind = p.kind;
  st.name = p.name;
  st.device = p.device.name;
  auto prov = [&](const char* k) {
    const auto it = p.provenance.find(k);
    return it == p.provenance.end() ? std::string() : it->second;
  };
  st.backend = p.kind == "analytic" ? "analytic" : prov("backend");
  st.dtype = profile_dtype(p);
  st.date = prov("date");
  st.hash = fnv1a_hex(text.str());
  const std::string gates = prov("gate_failures");
  for (std::size_t a = 0; !gates.empty() && a <= gates.size();) {
    const std::size_t b = std::min(gates.find(" | ", a), gates.size());
    st.gate_failures.push_back(gates.substr(a, b - a));
    a = b + 3;
  }
  return st;
}

std::string describe_stamp(const ProfileStamp& st) {
  if (st.path.empty()) return "analytic (no profile)";
  std::string d = st.path + " (device " + st.device + ", backend " + (st.backend.empty() ? "?" : st.backend) +
                  ", dtype " + (st.dtype.empty() ? "any" : st.dtype) + ", date " + (st.date.empty() ? "?" : st.date) +
                  ", fnv1a64 " + st.hash + ")";
  if (!st.gate_failures.empty())
    d += " ACCEPTED WITH " + std::to_string(st.gate_failures.size()) + " FAILED QUALITY GATE(S)";
  return d;
}

std::map<std::string, std::vector<std::pair<double, double>>> piecewise_link_tables(const std::string& path) {
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  if (path.empty()) return out;
  for (const auto& [cls, l] : load_profile(path).links)
    if (l.model == "piecewise" && l.points.size() >= 2) out[cls] = l.points;
  return out;
}

Scenario apply_profile(const Scenario& in, const DeviceProfile& p, const std::string& path) {
  check_profile_serves(p, in);
  Scenario s = in;
  s.sim.profile = path;
  s.cluster.device = p.device;
  // A link class the profile measured replaces the cluster's; the others keep the preset's values.
  if (auto it = p.links.find("intra"); it != p.links.end()) {
    s.cluster.nvlink_bw_Bps = it->second.bw_Bps;
    s.cluster.nvlink_latency_s = it->second.latency_s;
    if (s.cluster.fabric == IntraNodeFabric::PCIe || s.cluster.pcie_bw_Bps > 0) {
      s.cluster.pcie_bw_Bps = it->second.bw_Bps;
      s.cluster.pcie_latency_s = it->second.latency_s;
    }
  }
  if (auto it = p.links.find("inter"); it != p.links.end()) {
    s.cluster.nic_bw_Bps = it->second.bw_Bps;
    s.cluster.nic_latency_s = it->second.latency_s;
  }
  return s;
}

std::string dtype_of_backend(const std::string& backend) {
  auto computes = [](const BackendInfo& b) { return b.device != BackendDevice::None; };
  const BackendInfo* b = find_backend(backend);
  if (b == nullptr || !computes(*b))
    throw ProfileError("unknown backend '" + backend + "' (expected " + backend_names(computes) + ")");
  return b->dtype;
}

}  // namespace pipescope
