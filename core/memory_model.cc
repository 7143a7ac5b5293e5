// Memory model: static state per rank plus an activation peak walked from the rank's op list.
//
// Static state (per GPU of the rank's TP group): P_r = rank_parameter_count (its v chunks of layers/(pp*v)
// layers, word + position embeddings on the first virtual stage, final LayerNorm and the tied-embedding copy
// or output layer on the last, / t). Weights e B/param (2 for fp16/bf16), gradients 2 B (4 with grad_fp32),
// optimizer state the rest of training.optimizer_bytes_per_param (16 = 2 + 2 + fp32 master 4 + Adam 8).
//
// Activations per layer (Korthikanti et al. 2022, "Reducing activation recomputation", Table 2, tensor
// parallelism without sequence parallelism), for b sequences of l tokens attending to c + l keys:
//   b*l*h*(10 + 24/t) + 5*a*b*l*(c + l)/t    bytes at 2-byte activations (1-byte dropout masks)
// The 10*b*l*h part (LayerNorm inputs, residual dropout masks and outputs) is replicated over the TP group;
// the 24*b*l*h part (QKV, attention internals, MLP) and the score / softmax / dropout tensors (5 B per score)
// are split over heads. At l = s, c = 0, t = 1 this is s*b*h*(34 + 5*a*s/h). The context keys of a slice are
// stored by the earlier slices of the same micro-batch, which live until after this slice's backward
// (backward runs slices last-first), so only the score rectangle grows with c. fp32 activations double the
// figure. Flash attention (no score matrix) is not modelled.
// With full recomputation only each layer's input survives the forward: b*l*h*e per layer (replicated over
// TP), plus for token-sliced schedules the slice's K and V (2*b*l*h*e/t per layer), which later slices'
// recomputed forwards need; during a backward one layer's full activations exist transiently.
// Extras: the first virtual stage keeps the embedding dropout mask (b*l*h B); the last keeps the final
// LayerNorm input and output (2*b*l*h*e) and the fp32 softmax of the vocab-parallel cross entropy (4*b*l*V/t).
//
// Walk: for each op of the rank in order, a forward adds its stored bytes (layers per chunk x per-layer bytes
// + extras) and l/s * 1/v in-flight units (a whole stage-micro-batch = 1: a chunk is 1/v of the rank's
// layers, a slice of l tokens l/s of the sequence); a backward is checked at live + transient, then frees what
// its forward stored. The peak is the maximum of those points; peak_in_flight is the unit count there.
#include "core/memory_model.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/analytic_cost.h"

namespace pipescope {

bool MemoryReport::any_oom() const {
  return std::any_of(ranks.begin(), ranks.end(), [](const RankMemory& r) { return r.oom; });
}

double layer_activation_bytes(const Scenario& s, int b, int tokens, int context) {
  if (b < 1 || tokens < 1 || context < 0)
    throw std::invalid_argument(
        "layer_activation_bytes: needs b >= 1, tokens >= 1, context >= 0; got b = " + std::to_string(b) +
        ", tokens = " + std::to_string(tokens) + ", context = " + std::to_string(context));
  const double h = s.model.hidden, a = s.model.heads, t = s.parallel.tp;
  const double bl = static_cast<double>(b) * tokens;
  const double bytes = bl * h * (10.0 + 24.0 / t) + 5.0 * a * bl * (static_cast<double>(context) + tokens) / t;
  return bytes * s.training.act_bytes_per_elem() / 2.0;
}

MemoryReport memory_report(const Scenario& s, const Schedule& sched) {
  const ModelSpec& m = s.model;
  const ParallelSpec& par = s.parallel;
  const std::string where = "memory_report(" + (s.source.empty() ? s.name : s.source) + ", " + sched.name + ")";
  auto fail = [&](const std::string& what) { throw std::invalid_argument(where + ": " + what); };
  if (sched.p != par.pp || sched.v != par.v)
    fail("schedule has p = " + std::to_string(sched.p) + ", v = " + std::to_string(sched.v) +
         " but the scenario has parallel.pp = " + std::to_string(par.pp) + ", parallel.v = " + std::to_string(par.v));
  if (sched.seq_len != m.seq_len)
    fail("schedule seq_len " + std::to_string(sched.seq_len) + " != model.seq_len " + std::to_string(m.seq_len));
  if (par.pp < 1 || par.v < 1 || m.layers % (par.pp * par.v) != 0)
    fail("model.layers = " + std::to_string(m.layers) + " is not divisible by pp * v");
  if (static_cast<int>(sched.per_rank.size()) != sched.p || static_cast<int>(sched.microbatches.size()) != sched.m)
    fail("malformed schedule (per-rank lists or micro-batch table of the wrong size)");

  const int e = s.training.act_bytes_per_elem();
  const int g = s.training.grad_fp32 ? 4 : e;
  const double h = m.hidden, t = par.tp, V = m.vocab;
  const int layers = m.layers / (par.pp * par.v);
  const int last_stage = par.pp * par.v - 1;
  const bool recompute = s.schedule.recompute;

  MemoryReport rep;
  rep.device_bytes = s.cluster.device.memory_bytes;
  rep.ranks.resize(static_cast<std::size_t>(par.pp));
  for (int r = 0; r < par.pp; r++) {
    RankMemory& rm = rep.ranks[r];
    const double params = rank_parameter_count(s, r);
    rm.weights_bytes = params * e;
    rm.grads_bytes = params * g;
    rm.optimizer_bytes = params * std::max(0.0, s.training.optimizer_bytes_per_param - e - g);
    const double static_bytes = rm.weights_bytes + rm.grads_bytes + rm.optimizer_bytes;

    struct Stored {
      double bytes;
      long long tokens;  // in-flight units are counted in tokens (exact), / (seq_len * v) at the end
    };
    std::map<std::tuple<int, int, int>, Stored> live_ops;  // (stage, micro-batch, slice) -> what its forward keeps
    double live = 0, peak = 0;
    long long units = 0, peak_units = 0, max_units = 0;
    auto consider = [&](double bytes) {
      if (bytes > peak) {
        peak = bytes;
        peak_units = units;
      }
      max_units = std::max(max_units, units);
    };
    for (const Op& op : sched.per_rank[r]) {
      if (op.microbatch < 0 || op.microbatch >= sched.m)
        fail("rank " + std::to_string(r) + ": op " + op_text(op) + " names a micro-batch outside 0.." +
             std::to_string(sched.m - 1));
      if (op.stage < 0 || op.stage > last_stage || op.tok_end <= op.tok_begin || op.tok_end > m.seq_len)
        fail("rank " + std::to_string(r) + ": op " + op_text(op) + " has a stage or token range outside the model");
      const int b = sched.microbatches[op.microbatch].seq_count;
      const int l = op.tokens(), c = op.tok_begin;
      const double bl = static_cast<double>(b) * l;
      const auto key = std::make_tuple(op.stage, op.microbatch, op.slice);
      const double full_layer = layer_activation_bytes(s, b, l, c);
      if (op.kind == OpKind::Forward) {
        double per_layer = full_layer;
        if (recompute) {
          per_layer = bl * h * e;
          if (sched.slices(op.microbatch) > 1) per_layer += 2.0 * bl * h * e / t;
        }
        double bytes = layers * per_layer;
        if (op.stage == 0) bytes += bl * h;
        if (op.stage == last_stage) bytes += 2.0 * bl * h * e + 4.0 * bl * V / t;
        if (!live_ops.emplace(key, Stored{bytes, l}).second)
          fail("rank " + std::to_string(r) + ": forward " + op_text(op) + " appears twice");
        live += bytes;
        units += l;
        consider(live);
      } else {
        auto it = live_ops.find(key);
        if (it == live_ops.end())
          fail("rank " + std::to_string(r) + ": backward " + op_text(op) + " comes before its forward");
        consider(live + (recompute ? full_layer : 0.0));
        live -= it->second.bytes;
        units -= it->second.tokens;
        live_ops.erase(it);
      }
    }
    rm.activation_peak_bytes = peak;
    const double unit = static_cast<double>(m.seq_len) * par.v;
    rm.peak_in_flight = peak_units / unit;
    rm.max_in_flight = max_units / unit;
    rm.peak_bytes = static_bytes + peak;
    rm.oom = rm.peak_bytes > rep.device_bytes;
  }
  return rep;
}

}  // namespace pipescope
