#include "core/cost/profile_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace pipescope {
namespace {

// Linear interpolation over strictly increasing xs; below the first point the first value (short slices are
// launch-bound: TeraPipe's flat region), above the last an error the caller reports.
template <class P, class X, class Y>
double interp(const std::vector<P>& pts, X x_of, Y y_of, int x) {
  if (x <= x_of(pts.front())) return y_of(pts.front());
  for (std::size_t i = 1; i < pts.size(); i++) {
    if (x <= x_of(pts[i])) {
      const double x0 = x_of(pts[i - 1]), x1 = x_of(pts[i]);
      const double w = (x - x0) / (x1 - x0);
      return (1 - w) * y_of(pts[i - 1]) + w * y_of(pts[i]);
    }
  }
  return -1;  // beyond the table
}

}  // namespace

ProfileCostModel::ProfileCostModel(const Scenario& s, DeviceProfile p) : AnalyticCostModel(s), p_(std::move(p)) {
  const ModelSpec& m = s.model;
  for (const LayerTable& t : p_.layers) {
    if (t.hidden != m.hidden || t.heads != m.heads || t.ffn != m.ffn_hidden || t.tp != s.parallel.tp ||
        t.dtype != s.training.dtype)
      continue;
    if (t.seq_len < m.seq_len)
      throw std::invalid_argument(p_.source + ": layers: the table for hidden " + std::to_string(t.hidden) +
                                  " (micro_batch " + std::to_string(t.micro_batch) + ") was measured up to " +
                                  std::to_string(t.seq_len) + " tokens, but " + s.source + " has model.seq_len " +
                                  std::to_string(m.seq_len) + ": calibrate with a longer sequence");
    tables_.push_back(&t);
  }
  std::sort(tables_.begin(), tables_.end(),
            [](const LayerTable* a, const LayerTable* b) { return a->micro_batch < b->micro_batch; });
  if (tables_.empty() && !p_.kernels.empty() && p_.kernels.dtype == s.training.dtype) {
    try {
      kernels_ = std::make_unique<KernelModel>(p_.kernels);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(p_.source + ": kernels: " + e.what());
    }
  }
  // Layer tables and kernel fits were measured on the runtime's GPT layer (multi-head attention, GeLU MLP,
  // LayerNorm) and time whole layers: they cannot serve other shapes or a recomputed attention core alone.
  if (!tables_.empty() || kernels_) {
    const char* key = m.kv_heads() != m.heads                        ? "model.query_groups"
                      : m.ffn != FfnKind::Gelu                       ? "model.ffn"
                      : m.norm != NormKind::LayerNorm                ? "model.norm"
                      : s.schedule.recompute == Recompute::Selective ? "schedule.recompute"
                                                                     : nullptr;
    if (key)
      throw std::invalid_argument(s.source + ": " + key + ": the profile " + p_.source +
                                  " times the runtime's GPT layer (multi-head attention, GeLU, LayerNorm, whole-layer "
                                  "recomputation); drop sim.profile to use the analytic model");
  }
}

const char* to_string(CostSource s) {
  switch (s) {
    case CostSource::LayerTable:
      return "layer table";
    case CostSource::KernelModel:
      return "kernel model";
    case CostSource::Analytic:
      return "analytic";
  }
  return "?";
}

CostSource ProfileCostModel::source(OpKind) const {
  if (!tables_.empty()) return CostSource::LayerTable;
  return kernels_ ? CostSource::KernelModel : CostSource::Analytic;
}

double ProfileCostModel::kernel_layer_seconds(bool forward, int b, int l, int c) const {
  if (!kernels_) throw std::logic_error("ProfileCostModel: no kernel fits for " + s_.training.dtype);
  const int t = s_.parallel.tp, e = s_.training.act_bytes_per_elem();
  return kernels_->layer_seconds(
      forward ? layer_forward_calls(s_.model, t, e, b, l, c) : layer_backward_calls(s_.model, t, e, b, l, c), !forward);
}

double ProfileCostModel::kernel_op_seconds(const Op& op, int b) const {
  const bool fwd = op.kind == OpKind::Forward;
  const int l = op.tokens(), c = op.tok_begin, e = s_.training.act_bytes_per_elem();
  double layer = kernel_layer_seconds(fwd, b, l, c);
  if (!fwd && s_.schedule.recompute == Recompute::Full) layer += kernel_layer_seconds(true, b, l, c);
  double t = layers_of_stage(op.stage) * layer + p_.op_overhead_s;
  if (first_stage(op.stage)) t += kernels_->seconds(embedding_calls(s_.model, e, b, l, fwd));
  if (last_stage(op.stage)) t += kernels_->seconds(head_calls(s_.model, e, b, l, fwd));
  return t;
}

std::string ProfileCostModel::describe() const {
  std::string d = "profile " + p_.source + " (" + p_.kind + ", " + p_.name + "): ";
  if (tables_.empty() && kernels_) {
    double worst = 0;
    for (const TransferPoint& t : p_.kernels.transfer) worst = std::max(worst, std::abs(t.rel_err()));
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100 * worst);
    return d + "no layer table for this shape: kernel model (GEMM, attention, memory-bound kernel fits" +
           (p_.kernels.transfer.empty() ? std::string(")")
                                        : ", held-out transfer error up to " + std::string(buf) + ")");
  }
  if (tables_.empty()) return d + "no layer table for this shape, analytic model with the profile's device";
  d += "measured layer tables, micro_batch";
  for (const LayerTable* t : tables_) d += " " + std::to_string(t->micro_batch);
  return d;
}

double ProfileCostModel::table_layer_seconds(bool forward, int b, int l, int c) const {
  if (tables_.empty()) throw std::logic_error("ProfileCostModel: no layer table");
  auto one = [&](const LayerTable& t) {
    const double base = interp(
        t.slices, [](const SlicePoint& s) { return s.l; },
        [&](const SlicePoint& s) { return forward ? s.fwd.median_s : s.bwd.median_s; }, l);
    if (base < 0)
      throw std::invalid_argument(p_.source + ": layers: slice length " + std::to_string(l) +
                                  " is beyond the measured lengths (up to " + std::to_string(t.slices.back().l) + ")");
    const ContextFit& f = forward ? t.ctx_fwd : t.ctx_bwd;
    return base + (c > 0 ? c * (f.a2 + f.a3 * l) : 0.0);
  };
  // Micro-batch axis: exact, linear between measured sizes, proportional outside.
  const LayerTable* lo = nullptr;
  const LayerTable* hi = nullptr;
  for (const LayerTable* t : tables_) {
    if (t->micro_batch == b) return one(*t);
    if (t->micro_batch < b) lo = t;
    if (t->micro_batch > b && !hi) hi = t;
  }
  if (lo && hi) {
    const double w = static_cast<double>(b - lo->micro_batch) / (hi->micro_batch - lo->micro_batch);
    return (1 - w) * one(*lo) + w * one(*hi);
  }
  const LayerTable* t = lo ? lo : hi;
  return one(*t) * b / t->micro_batch;
}

double ProfileCostModel::table_end_seconds(bool embedding, bool forward, int b, int l) const {
  // The table with the nearest micro-batch size that has end-stage timings for this vocabulary, scaled by b.
  const LayerTable* best = nullptr;
  for (const LayerTable* t : tables_) {
    const auto& v = embedding ? t->embedding : t->head;
    if (v.empty() || t->vocab != s_.model.vocab) continue;
    if (!best || std::abs(t->micro_batch - b) < std::abs(best->micro_batch - b)) best = t;
  }
  if (!best) return -1;
  const auto& v = embedding ? best->embedding : best->head;
  const double x = interp(
      v, [](const EndPoint& e) { return e.l; }, [&](const EndPoint& e) { return forward ? e.fwd_s : e.bwd_s; }, l);
  if (x < 0) return -1;
  return x * b / best->micro_batch;
}

double ProfileCostModel::compute_seconds(const Op& op, int b) const {
  switch (op.kind) {  // I and W: the measured fused backward split by the analytic model's ratio
    case OpKind::Forward:
    case OpKind::Backward:
      break;
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight: {
      Op fused = op;
      fused.kind = OpKind::Backward;
      const double w = backward_weight_share(op, b);
      return compute_seconds(fused, b) * (op.kind == OpKind::BackwardWeight ? w : 1 - w);
    }
  }
  if (tables_.empty()) {
    if (kernels_) return kernel_op_seconds(op, b);
    return AnalyticCostModel::compute_seconds(op, b) + p_.op_overhead_s;
  }
  const bool fwd = op.kind == OpKind::Forward;
  const int l = op.tokens(), c = op.tok_begin;
  const bool first = first_stage(op.stage), last = last_stage(op.stage);
  double layer = table_layer_seconds(fwd, b, l, c);
  if (!fwd && s_.schedule.recompute == Recompute::Full) layer += table_layer_seconds(true, b, l, c);
  double t = layers_of_stage(op.stage) * layer + p_.op_overhead_s;
  if (first || last) {
    double ends = 0;
    bool measured = true;
    for (bool emb : {true, false}) {
      if ((emb && !first) || (!emb && !last)) continue;
      const double x = table_end_seconds(emb, fwd, b, l);
      if (x < 0) measured = false;
      ends += std::max(0.0, x);
    }
    if (!measured) {
      // No end-stage timings for this vocabulary: the analytic estimate of everything but the layers.
      const double layers_a =
          layers_of_stage(op.stage) * (fwd ? layer_forward_seconds(b, l, c) : layer_backward_seconds(b, l, c));
      ends = std::max(0.0, AnalyticCostModel::compute_seconds(op, b) - layers_a);
    }
    t += ends;
  }
  return t;
}

double ProfileCostModel::optimizer_seconds(int rank) const {
  if (p_.optimizer_s_per_param > 0) return rank_parameter_count(s_, rank) * p_.optimizer_s_per_param;
  return AnalyticCostModel::optimizer_seconds(rank);
}

std::string cost_sources_text(const Scenario& s) {
  const ProfileCostModel m(s, load_profile(s.sim.profile));
  return std::string("cost sources: forward ops ") + to_string(m.source(OpKind::Forward)) + ", backward ops " +
         to_string(m.source(OpKind::Backward)) + "; " + m.describe();
}

}  // namespace pipescope
