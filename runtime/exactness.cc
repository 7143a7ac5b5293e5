#include "runtime/exactness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace pipescope::runtime {

namespace {

// max|a - b| / max|b| over [off, off + n); 0 when both are all zero.
double rel_err(const std::vector<double>& a, const std::vector<double>& b, std::size_t off, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = off; i < off + n; i++) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  if (diff == 0) return 0;
  if (scale == 0) return HUGE_VAL;
  return diff / scale;
}

}  // namespace

ReferenceResult reference_run(const ModelConfig& mc, const SyntheticData& data, const kernels::AdamConfig& adam,
                              int steps) {
  mc.validate();
  if (steps < 1) throw RuntimeError("reference_run: steps must be >= 1");
  auto be = kernels::make_cpu_backend(kernels::DType::kF64);
  const int B = data.sequences(), S = data.seq_len(), h = mc.shape.layer.hidden;
  if (S > mc.shape.max_seq) throw RuntimeError("reference_run: seq_len exceeds the model's max_seq");
  std::map<ModuleId, std::unique_ptr<kernels::Params>> mods;
  auto add = [&](const ModuleId& id) {
    auto p = be->params(id.kind, mc.shape);
    p->set(initial_params(mc, id));
    mods.emplace(id, std::move(p));
  };
  add({kernels::ModuleKind::kEmbedding, 0});
  for (int l = 0; l < mc.layers; l++) add({kernels::ModuleKind::kLayer, l});
  add({kernels::ModuleKind::kHead, 0});

  const kernels::Slice sl{B, 0, S};
  const auto tokens = data.tokens(0, B, 0, S);
  const auto targets = data.targets(0, B, 0, S);
  ReferenceResult r;
  for (int step = 1; step <= steps; step++) {
    for (auto& [id, p] : mods) p->zero_grads();
    auto x = be->tensor(sl.rows(), h), y = be->tensor(sl.rows(), h);
    be->embedding_forward(*mods.at({kernels::ModuleKind::kEmbedding, 0}), tokens, sl, *x);
    std::vector<std::unique_ptr<kernels::KVCache>> kv;
    std::vector<std::unique_ptr<kernels::Record>> recs;
    for (int l = 0; l < mc.layers; l++) {
      kv.push_back(be->kv_cache(mc.shape.layer, B, S));
      recs.push_back(be->record());
      be->layer_forward(*mods.at({kernels::ModuleKind::kLayer, l}), *x, sl, *kv.back(), *recs.back(), *y);
      std::swap(x, y);
    }
    auto head_rec = be->record();
    auto& head = *mods.at({kernels::ModuleKind::kHead, 0});
    be->head_forward(head, *x, targets, sl, data.loss_norm(), 1.0, *head_rec);
    r.loss = be->head_loss(*head_rec);
    be->head_backward(head, *head_rec, *x);
    for (int l = mc.layers - 1; l >= 0; l--) {
      be->layer_backward(*mods.at({kernels::ModuleKind::kLayer, l}), *recs[l], *kv[l], *x, *y);
      std::swap(x, y);
    }
    be->embedding_backward(*mods.at({kernels::ModuleKind::kEmbedding, 0}), tokens, sl, *x);
    for (auto& [id, p] : mods) r.grads[id] = p->grads();
    for (auto& [id, p] : mods) be->adam_step(*p, adam, step);
  }
  for (auto& [id, p] : mods) r.params[id] = p->get();
  return r;
}

double Exactness::max_rel_err() const { return std::max({loss_rel_err, grad_rel_err, param_rel_err}); }

Exactness compare_with_reference(const JobResult& run, const ReferenceResult& ref, const ModelConfig& mc) {
  Exactness e;
  e.loss = run.loss();
  e.loss_ref = ref.loss;
  e.loss_rel_err = ref.loss != 0 ? std::abs(e.loss - ref.loss) / std::abs(ref.loss) : std::abs(e.loss);
  std::set<ModuleId> seen;
  for (const auto& w : run.workers)
    for (const auto& m : w.modules) {
      const auto g = ref.grads.find(m.id);
      const auto p = ref.params.find(m.id);
      if (g == ref.grads.end() || p == ref.params.end()) {
        e.problems.push_back(m.id.name() + " (worker " + std::to_string(w.worker) + ") is not in the reference");
        continue;
      }
      if (m.grads.size() != g->second.size() || m.params.size() != p->second.size()) {
        e.problems.push_back(m.id.name() + " (worker " + std::to_string(w.worker) + ") has the wrong size");
        continue;
      }
      seen.insert(m.id);
      e.copies++;
      for (const TensorSpan& t : module_tensors(mc.shape, m.id)) {
        const std::string where = m.id.name() + "." + t.name + " (worker " + std::to_string(w.worker) + ")";
        const double ge = rel_err(m.grads, g->second, t.offset, t.size);
        if (ge > e.grad_rel_err || e.grad_worst.empty()) e.grad_rel_err = ge, e.grad_worst = where;
        const double pe = rel_err(m.params, p->second, t.offset, t.size);
        if (pe > e.param_rel_err || e.param_worst.empty()) e.param_rel_err = pe, e.param_worst = where;
      }
    }
  for (const auto& [id, v] : ref.grads)
    if (!seen.count(id)) e.problems.push_back(id.name() + " is held by no worker of the run");
  e.modules = static_cast<int>(seen.size());
  return e;
}

std::string format_exactness(const Exactness& e) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "loss %.17g vs reference %.17g: relative error %.3e\n"
                "gradients: max relative error %.3e (worst %s); parameters after Adam: %.3e (worst %s); "
                "%d modules, %d copies",
                e.loss, e.loss_ref, e.loss_rel_err, e.grad_rel_err, e.grad_worst.c_str(), e.param_rel_err,
                e.param_worst.c_str(), e.modules, e.copies);
  std::string s = buf;
  for (const auto& p : e.problems) s += "\nproblem: " + p;
  return s;
}

}  // namespace pipescope::runtime
