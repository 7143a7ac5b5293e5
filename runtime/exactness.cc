#include "runtime/exactness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/model/backends.h"

namespace pipescope::runtime {

namespace {

// max|a - b| over [off, off + n) of both, divided by `scale` (max|ref| over the whole tensor, of which this may be
// one tensor-parallel shard); 0 when there is no difference.
double rel_err(const std::vector<double>& a, const std::vector<double>& b, std::size_t off, std::size_t n,
               double scale) {
  double diff = 0;
  for (std::size_t i = off; i < off + n; i++) diff = std::max(diff, std::abs(a[i] - b[i]));
  if (diff == 0) return 0;
  if (scale == 0) return HUGE_VAL;
  return diff / scale;
}

double max_abs(const std::vector<double>& v, std::size_t off, std::size_t n) {
  double m = 0;
  for (std::size_t i = off; i < off + n; i++) m = std::max(m, std::abs(v[i]));
  return m;
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
    auto p = be->params(id.kind, mc.layer_shape(id.layer));
    p->set(initial_params(mc, id));
    mods.emplace(id, std::move(p));
  };
  add({kernels::ModuleKind::kEmbedding, 0});
  for (int l = 0; l < mc.layers; l++) {
    add({kernels::ModuleKind::kLayer, l});
    if (mc.moe_layer(l)) add({kernels::ModuleKind::kExperts, l});  // all experts on this one device (ep = 1)
  }
  add({kernels::ModuleKind::kHead, 0});
  auto experts = [&](int l) -> kernels::Params& { return *mods.at({kernels::ModuleKind::kExperts, l}); };

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
      const auto& P = *mods.at({kernels::ModuleKind::kLayer, l});
      if (mc.moe_layer(l))
        be->moe_layer_forward(P, experts(l), *x, sl, *kv.back(), *recs.back(), *y);
      else
        be->layer_forward(P, *x, sl, *kv.back(), *recs.back(), *y);
      std::swap(x, y);
    }
    auto head_rec = be->record();
    auto& head = *mods.at({kernels::ModuleKind::kHead, 0});
    be->head_forward(head, *x, targets, sl, data.loss_norm(), 1.0, *head_rec);
    r.loss = be->head_loss(*head_rec);
    be->head_backward(head, *head_rec, *x);
    for (int l = mc.layers - 1; l >= 0; l--) {
      auto& P = *mods.at({kernels::ModuleKind::kLayer, l});
      if (mc.moe_layer(l))
        be->moe_layer_backward(P, experts(l), *recs[l], *kv[l], *x, *y);
      else
        be->layer_backward(P, *recs[l], *kv[l], *x, *y);
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
  // With tensor parallelism each process holds its shard of every layer: it is compared with the same cut of the
  // reference, scaled by the whole tensor, so the worst over the shards is the whole tensor's error.
  kernels::ModelShape shard = mc.shape;
  shard.layer.tp = run.tp;
  std::set<std::pair<ModuleId, int>> seen;  // (module, TP rank)
  for (const auto& w : run.workers)
    for (const auto& m : w.modules) {
      const std::string who =
          "worker " + std::to_string(w.worker) + (run.tp > 1 ? ", TP rank " + std::to_string(w.tp_rank) : "");
      const auto g = ref.grads.find(m.id);
      const auto p = ref.params.find(m.id);
      if (g == ref.grads.end() || p == ref.params.end()) {
        e.problems.push_back(m.id.name() + " (" + who + ") is not in the reference");
        continue;
      }
      std::vector<double> ref_g, ref_p;
      // An experts module holds its expert-parallel rank's experts: compared with the same experts of the reference,
      // each scaled by its own tensors (spans from `first`, the rank's first expert's, on).
      kernels::ModelShape cut = shard;
      std::size_t first = 0;
      try {
        if (m.id.kind == kernels::ModuleKind::kExperts) {
          cut = mc.layer_shape(m.id.layer);
          const std::size_t one = kernels::ExpertLayout::of(cut.layer).size;
          const int local = static_cast<int>(m.grads.size() / one);
          if (local < 1 || cut.layer.experts % local != 0 || m.grads.size() % one != 0)
            throw kernels::KernelError("holds " + std::to_string(m.grads.size()) + " values, not whole experts");
          cut.layer.ep = cut.layer.experts / local;
          first = static_cast<std::size_t>(w.ep_rank) * static_cast<std::size_t>(local) * 4;  // 4 tensors per expert
          ref_g = kernels::expert_shard(cut, w.ep_rank, g->second);
          ref_p = kernels::expert_shard(cut, w.ep_rank, p->second);
        } else {
          cut = mc.layer_shape(m.id.layer);
          cut.layer.tp = run.tp;
          ref_g = kernels::shard_params(m.id.kind, cut, w.tp_rank, g->second);
          ref_p = kernels::shard_params(m.id.kind, cut, w.tp_rank, p->second);
        }
      } catch (const kernels::KernelError& ex) {
        e.problems.push_back(m.id.name() + " (" + who + "): " + ex.what());
        continue;
      }
      if (m.grads.size() != ref_g.size() || m.params.size() != ref_p.size()) {
        e.problems.push_back(m.id.name() + " (" + who + ") has the wrong size");
        continue;
      }
      seen.insert({m.id, w.tp_rank});
      e.copies++;
      const auto whole = module_tensors(mc, m.id), part = module_tensors(cut, m.id);
      for (std::size_t k = 0; k < part.size(); k++) {
        const TensorSpan &t = part[k], &wt = whole[first + k];
        const std::string where = m.id.name() + "." + wt.name + " (" + who + ")";
        const double ge = rel_err(m.grads, ref_g, t.offset, t.size, max_abs(g->second, wt.offset, wt.size));
        if (ge > e.grad_rel_err || e.grad_worst.empty()) e.grad_rel_err = ge, e.grad_worst = where;
        const double pe = rel_err(m.params, ref_p, t.offset, t.size, max_abs(p->second, wt.offset, wt.size));
        if (pe > e.param_rel_err || e.param_worst.empty()) e.param_rel_err = pe, e.param_worst = where;
      }
    }
  std::set<ModuleId> modules;
  for (const auto& [id, v] : ref.grads)
    for (int t = 0; t < run.tp; t++) {
      if (seen.count({id, t})) {
        modules.insert(id);
      } else {
        e.problems.push_back(id.name() + (run.tp > 1 ? " (TP rank " + std::to_string(t) + ")" : "") +
                             " is held by no worker of the run");
      }
    }
  e.modules = static_cast<int>(modules.size());
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

double exactness_tolerance(const std::string& backend) {
  if (const BackendInfo* b = find_backend(backend)) switch (b->kind) {
      case BackendKind::CpuF64:
        return 1e-10;
      case BackendKind::CpuF32:
        return 1e-3;
      case BackendKind::CudaBF16:
      case BackendKind::CudaF16:
        return 3e-2;
      case BackendKind::Null:
        break;
    }
  throw RuntimeError("backend '" + backend + "' has no exactness tolerance (it does no arithmetic, or is unknown)");
}

}  // namespace pipescope::runtime
