#include "core/model/profile_kernels.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "core/util/units.h"

namespace pipescope {
namespace {

using units::kUs;

// A mapping with known keys (an unknown key is an error: typos must not be ignored).
void check_keys(const std::string& src, const YAML::Node& n, const std::string& path,
                const std::set<std::string>& keys) {
  if (!n.IsMap()) fail_profile_key(src, n, path, "expected a mapping");
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) fail_profile_key(src, kv.first, path, "a key must be a plain scalar");
    if (!keys.count(kv.first.Scalar())) fail_profile_key(src, kv.first, path + "." + kv.first.Scalar(), "unknown key");
  }
}

YAML::Node child(const std::string& src, const YAML::Node& n, const std::string& path, const std::string& k) {
  const YAML::Node c = n[k];
  if (!c) fail_profile_key(src, n, path + "." + k, "missing");
  return c;
}

// min: the smallest allowed value; strict: > min instead of >= min.
double number(const std::string& src, const YAML::Node& c, const std::string& key, double min, bool strict) {
  if (!c.IsScalar()) fail_profile_key(src, c, key, "expected a number");
  double v = 0;
  try {
    v = c.as<double>();
  } catch (const YAML::Exception&) {
    fail_profile_key(src, c, key, "expected a number, got '" + c.Scalar() + "'");
  }
  if (!std::isfinite(v)) fail_profile_key(src, c, key, "must be finite, got '" + c.Scalar() + "'");
  if (std::abs(v) > 1e12) fail_profile_key(src, c, key, "implausibly large: " + c.Scalar());
  if (strict ? !(v > min) : v < min)
    fail_profile_key(src, c, key,
                     std::string("must be ") + (strict ? "> " : ">= ") + std::to_string(min) + ", got " + c.Scalar());
  return v;
}
double num(const std::string& src, const YAML::Node& n, const std::string& path, const std::string& k, double min,
           bool strict, double def = -1) {
  if (!n[k] && def >= 0) return def;
  return number(src, child(src, n, path, k), path + "." + k, min, strict);
}
int integer(const std::string& src, const YAML::Node& n, const std::string& path, const std::string& k, int min) {
  const double v = num(src, n, path, k, min, false);
  if (v != std::floor(v) || v > 1e9) fail_profile_key(src, n[k], path + "." + k, "expected an integer");
  return static_cast<int>(v);
}
YAML::Node list(const std::string& src, const YAML::Node& n, const std::string& path, const std::string& k) {
  const YAML::Node c = child(src, n, path, k);
  if (!c.IsSequence()) fail_profile_key(src, c, path + "." + k, "expected a list");
  return c;
}

std::array<double, 3> coeffs(const std::string& src, const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence() || n.size() != 3)
    fail_profile_key(src, n, key, "expected [a0_us, a1_us_per_token, a2_us_per_pair]");
  std::array<double, 3> a{};
  for (std::size_t i = 0; i < 3; i++) a[i] = number(src, n[i], key + "[" + std::to_string(i) + "]", 0, false) * kUs;
  return a;
}

std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace

KernelFits read_kernel_fits(const std::string& src, const YAML::Node& n) {
  const std::string P = "kernels";
  check_keys(src, n, P, {"dtype", "gemm", "attention", "memory", "in_situ", "transfer"});
  KernelFits f;
  const YAML::Node dt = child(src, n, P, "dtype");
  f.dtype = dt.IsScalar() ? dt.Scalar() : "";
  if (f.dtype != "fp64" && f.dtype != "fp32" && f.dtype != "fp16" && f.dtype != "bf16")
    fail_profile_key(src, dt, P + ".dtype", "expected fp64, fp32, fp16 or bf16");

  const std::string G = P + ".gemm";
  const YAML::Node g = child(src, n, P, "gemm");
  check_keys(src, g, G,
             {"rate_gflops", "m0", "n0", "k0", "fixed_us", "holdout_rel_err", "train_points", "test_points"});
  f.gemm.rate_flops = num(src, g, G, "rate_gflops", 1e-6, false) * 1e9;
  f.gemm.m0 = num(src, g, G, "m0", 0, false);
  f.gemm.n0 = num(src, g, G, "n0", 0, false);
  f.gemm.k0 = num(src, g, G, "k0", 0, false);
  f.gemm.fixed_s = num(src, g, G, "fixed_us", 0, false) * kUs;
  f.gemm.holdout_rel_err = num(src, g, G, "holdout_rel_err", 0, false, 0);
  f.gemm.train_points = n["gemm"]["train_points"] ? integer(src, g, G, "train_points", 0) : 0;
  f.gemm.test_points = n["gemm"]["test_points"] ? integer(src, g, G, "test_points", 0) : 0;

  const YAML::Node at = list(src, n, P, "attention");
  if (at.size() == 0) fail_profile_key(src, at, P + ".attention", "must not be empty");
  for (std::size_t i = 0; i < at.size(); i++) {
    const std::string A = P + ".attention[" + std::to_string(i) + "]";
    check_keys(src, at[i], A, {"head_dim", "forward_us", "backward_us", "holdout_rel_err"});
    AttentionModel a;
    a.head_dim = integer(src, at[i], A, "head_dim", 1);
    if (!f.attention.empty() && a.head_dim <= f.attention.back().head_dim)
      fail_profile_key(src, at[i]["head_dim"], A + ".head_dim", "head dimensions must increase strictly");
    a.fwd = coeffs(src, child(src, at[i], A, "forward_us"), A + ".forward_us");
    a.bwd = coeffs(src, child(src, at[i], A, "backward_us"), A + ".backward_us");
    if (a.fwd[0] + a.fwd[1] + a.fwd[2] <= 0 || a.bwd[0] + a.bwd[1] + a.bwd[2] <= 0)
      fail_profile_key(src, at[i], A, "an attention fit must not be identically zero");
    a.holdout_rel_err = num(src, at[i], A, "holdout_rel_err", 0, false, 0);
    f.attention.push_back(a);
  }

  const YAML::Node me = list(src, n, P, "memory");
  std::set<MemoryKernel> seen;
  for (std::size_t i = 0; i < me.size(); i++) {
    const std::string M = P + ".memory[" + std::to_string(i) + "]";
    check_keys(src, me[i], M, {"class", "fixed_us", "bw_GBps", "holdout_rel_err"});
    const YAML::Node cl = child(src, me[i], M, "class");
    MemoryModel m;
    try {
      m.kind = memory_kernel_of(cl.IsScalar() ? cl.Scalar() : "");
    } catch (const std::invalid_argument& e) {
      fail_profile_key(src, cl, M + ".class", e.what());
    }
    if (!seen.insert(m.kind).second) fail_profile_key(src, cl, M + ".class", "duplicate class");
    m.fixed_s = num(src, me[i], M, "fixed_us", 0, false) * kUs;
    m.bw_Bps = num(src, me[i], M, "bw_GBps", 1e-6, false) * 1e9;
    m.holdout_rel_err = num(src, me[i], M, "holdout_rel_err", 0, false, 0);
    f.memory.push_back(m);
  }
  for (int k = 0; k < kMemoryKernels; k++)
    if (!seen.count(static_cast<MemoryKernel>(k)))
      fail_profile_key(src, me, P + ".memory",
                       std::string("no fit for class ") + to_string(static_cast<MemoryKernel>(k)));

  if (n["in_situ"]) {  // profiles before it: 1 (the kernels' sum)
    const std::string I = P + ".in_situ";
    const YAML::Node is = n["in_situ"];
    if (!is.IsMap()) fail_profile_key(src, is, I, "expected {forward, backward}");
    check_keys(src, is, I, {"forward", "backward"});
    f.layer_in_situ_fwd = num(src, is, I, "forward", 0, true);
    f.layer_in_situ_bwd = num(src, is, I, "backward", 0, true);
  }

  if (n["transfer"]) {
    const YAML::Node tr = list(src, n, P, "transfer");
    for (std::size_t i = 0; i < tr.size(); i++) {
      const std::string T = P + ".transfer[" + std::to_string(i) + "]";
      check_keys(src, tr[i], T,
                 {"op", "hidden", "heads", "ffn", "micro_batch", "l", "c", "measured_us", "predicted_us", "slowdown"});
      TransferPoint t;
      const YAML::Node op = child(src, tr[i], T, "op");
      if (!op.IsScalar()) fail_profile_key(src, op, T + ".op", "expected a string");
      t.op = op.Scalar();
      t.hidden = integer(src, tr[i], T, "hidden", 1);
      t.heads = integer(src, tr[i], T, "heads", 1);
      t.ffn = integer(src, tr[i], T, "ffn", 1);
      t.micro_batch = integer(src, tr[i], T, "micro_batch", 1);
      t.l = integer(src, tr[i], T, "l", 1);
      t.c = integer(src, tr[i], T, "c", 0);
      t.measured_s = num(src, tr[i], T, "measured_us", 0, true) * kUs;
      t.predicted_s = num(src, tr[i], T, "predicted_us", 0, true) * kUs;
      t.slowdown = num(src, tr[i], T, "slowdown", 0, true, 1);  // profiles before it: 1
      f.transfer.push_back(t);
    }
  }
  return f;
}

void write_kernel_fits(const KernelFits& f, std::ostream& os) {
  const GemmModel& g = f.gemm;
  // The comment's first wording (the fits are in core/model/kernel_model.h now): it is part of a profile's bytes.
  os << "kernels:  # kernel-level fits (core/kernel_model.h), for shapes without a layer table\n";
  os << "  dtype: " << f.dtype << "\n";
  os << "  gemm: {rate_gflops: " << fmt(g.rate_flops / 1e9) << ", m0: " << fmt(g.m0) << ", n0: " << fmt(g.n0)
     << ", k0: " << fmt(g.k0) << ", fixed_us: " << fmt(g.fixed_s / kUs)
     << ", holdout_rel_err: " << fmt(g.holdout_rel_err) << ", train_points: " << g.train_points
     << ", test_points: " << g.test_points << "}\n";
  os << "  attention:  # per (sequence, head): a0 + a1 l + a2 l (c + l), us\n";
  auto arr = [&](const std::array<double, 3>& a) {
    os << "[" << fmt(a[0] / kUs) << ", " << fmt(a[1] / kUs) << ", " << fmt(a[2] / kUs) << "]";
  };
  for (const auto& a : f.attention) {
    os << "    - {head_dim: " << a.head_dim << ", forward_us: ";
    arr(a.fwd);
    os << ", backward_us: ";
    arr(a.bwd);
    os << ", holdout_rel_err: " << fmt(a.holdout_rel_err) << "}\n";
  }
  os << "  memory:  # fixed + bytes / bw\n";
  for (const auto& m : f.memory)
    os << "    - {class: " << to_string(m.kind) << ", fixed_us: " << fmt(m.fixed_s / kUs)
       << ", bw_GBps: " << fmt(m.bw_Bps / 1e9) << ", holdout_rel_err: " << fmt(m.holdout_rel_err) << "}\n";
  os << "  in_situ: {forward: " << fmt(f.layer_in_situ_fwd) << ", backward: " << fmt(f.layer_in_situ_bwd)
     << "}  # layer table / kernel sum at the profile's shape; scales the kernel model's layers\n";
  if (!f.transfer.empty()) {
    os << "  transfer:  # layers at shapes outside the fits; slowdown: machine speed then vs during the fits\n";
    for (const auto& t : f.transfer)
      os << "    - {op: \"" << t.op << "\", hidden: " << t.hidden << ", heads: " << t.heads << ", ffn: " << t.ffn
         << ", micro_batch: " << t.micro_batch << ", l: " << t.l << ", c: " << t.c
         << ", measured_us: " << fmt(t.measured_s / kUs) << ", predicted_us: " << fmt(t.predicted_s / kUs)
         << ", slowdown: " << fmt(t.slowdown) << "}\n";
  }
}

}  // namespace pipescope
