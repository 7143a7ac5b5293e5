// t(l, c) of one transformer layer, forward and backward: the forward of a slice of l tokens after c tokens of
// context is timed by rewinding the K/V cache to c before every call; the backward by rewinding to c + l (its
// dK/dV keep accumulating into the context's buffers, which costs the same). Every input is created at the size
// the call reads and filled in the same step (filled_tensor), so no kernel ever runs on stale or uninitialised
// memory.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <tuple>

#include "calib/benches.h"
#include "calib/fit.h"
#include "core/model/profile.h"

namespace pipescope::calib {
namespace {

struct LayerRig {
  kernels::Backend& be;
  const ComputeConfig& cfg;
  int b;
  std::unique_ptr<kernels::Params> params;
  std::unique_ptr<kernels::KVCache> kv;
  std::unique_ptr<kernels::Record> prefix_rec, rec;
  std::unique_ptr<kernels::Tensor> y, dx;

  LayerRig(kernels::Backend& backend, const ComputeConfig& c, int batch) : be(backend), cfg(c), b(batch) {
    const auto& s = cfg.shape;
    params = be.params(kernels::ModuleKind::kLayer, s);
    params->set(kernels::init_params(kernels::ModuleKind::kLayer, s, 11));
    kv = be.kv_cache(s.layer, b, s.max_seq);
    prefix_rec = be.record();
    rec = be.record();
    y = be.tensor(1, s.layer.hidden);  // outputs: the kernels size them
    dx = be.tensor(1, s.layer.hidden);
  }

  // Times forward and backward of the slice [c, c + l) as two points of `pts`; their indices. With `again`, the new
  // samples are pooled into those two points of `pts` instead (TablePoints::time_again).
  using Points = std::pair<std::size_t, std::size_t>;
  Points time(TablePoints& pts, int l, int c, const Points* again = nullptr) {
    auto point = [&](std::size_t which, const std::function<void()>& op) {
      if (!again) return pts.time(op);
      const std::size_t i = which == 0 ? again->first : again->second;
      pts.time_again(i, op);
      return i;
    };
    const int h = cfg.shape.layer.hidden;
    kv->reset();
    if (c > 0) {
      const auto prefix = filled_tensor(be, b * c, h, 1000u + static_cast<unsigned>(c));
      be.layer_forward(*params, *prefix, kernels::Slice{b, 0, c}, *kv, *prefix_rec, *y);
    }
    const auto x = filled_tensor(be, b * l, h, 2000u + static_cast<unsigned>(l));
    const auto dy = filled_tensor(be, b * l, h, 3000u + static_cast<unsigned>(l));
    const kernels::Slice s{b, c, l};
    const std::size_t f = point(0, [&] {
      kv->rewind(c);
      be.layer_forward(*params, *x, s, *kv, *rec, *y);
    });
    const std::size_t bw = point(1, [&] {
      kv->rewind(c + l);
      be.layer_backward(*params, *rec, *kv, *dy, *dx);
    });
    return {f, bw};
  }
};

}  // namespace

std::pair<TimeStats, TimeStats> time_layer_point(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b,
                                                 int l, int c) {
  // Unpaired: the drift probe measures the machine's speed now, which a reference would cancel.
  TimingPolicy direct = cfg.policy;
  direct.reference = nullptr;
  TablePoints pts(timer, direct);
  LayerRig rig(be, cfg, b);
  const auto [f, bw] = rig.time(pts, l, c);
  return {pts.at(f), pts.at(bw)};
}

namespace {

// Whether the c = 0 point of length l is a point of the context fit (its grid's lengths: multiples of the step).
bool on_context_grid(int l, int step) { return step > 0 && l % step == 0; }

// The table's slices, context grid and context fits from its timed points (at_l: each length's forward and backward
// at c = 0; at_lc: each grid point's).
void fill_table(LayerTable& t, const TablePoints& pts, const std::vector<int>& ls,
                const std::vector<std::pair<std::size_t, std::size_t>>& at_l,
                const std::vector<std::pair<int, int>>& grid,
                const std::vector<std::pair<std::size_t, std::size_t>>& at_lc, int step) {
  t.slices.clear();
  t.context_grid.clear();
  for (std::size_t i = 0; i < ls.size(); i++)
    t.slices.push_back(SlicePoint{ls[i], pts.at(at_l[i].first), pts.at(at_l[i].second)});
  auto t0 = [&](bool fwd) {
    return [&t, fwd](int l) {
      for (const auto& p : t.slices)
        if (p.l == l) return fwd ? p.fwd.median_s : p.bwd.median_s;
      return 0.0;
    };
  };
  for (const auto& p : t.slices)
    if (on_context_grid(p.l, step))
      t.context_grid.push_back(
          ContextPoint{p.l, 0, p.fwd.median_s, p.bwd.median_s, p.fwd.rel_spread(), p.bwd.rel_spread()});
  for (std::size_t i = 0; i < grid.size(); i++) {
    const TimeStats f = pts.at(at_lc[i].first), bw = pts.at(at_lc[i].second);
    t.context_grid.push_back(
        ContextPoint{grid[i].first, grid[i].second, f.median_s, bw.median_s, f.rel_spread(), bw.rel_spread()});
  }
  std::sort(t.context_grid.begin(), t.context_grid.end(),
            [](const ContextPoint& a, const ContextPoint& b) { return std::tie(a.l, a.c) < std::tie(b.l, b.c); });
  if (grid.size() >= 5) {
    t.ctx_fwd = fit_context(t.context_grid, true, t0(true));
    t.ctx_bwd = fit_context(t.context_grid, false, t0(false));
  } else {
    t.context_grid.clear();  // too short a sequence for a context fit: t(l, c) = t(l, 0)
  }
}

}  // namespace

LayerTable bench_layer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b) {
  const auto& s = cfg.shape;
  LayerTable t;
  t.hidden = s.layer.hidden;
  t.heads = s.layer.heads;
  t.ffn = s.layer.ffn;
  t.tp = 1;
  t.micro_batch = b;
  t.seq_len = cfg.longest();
  t.dtype = dtype_of_backend(be.name().substr(0, be.name().find(' ')));
  LayerRig rig(be, cfg, b);

  const std::vector<int> ls = slice_lengths(cfg);
  const std::vector<std::pair<int, int>> grid = context_points(cfg);
  Progress prog("layer t(l, c), micro-batch " + std::to_string(b), static_cast<int>(ls.size() + grid.size()),
                cfg.progress);
  TablePoints pts(timer, cfg.policy);
  std::vector<std::pair<std::size_t, std::size_t>> at_l, at_lc;
  for (int l : ls) {
    at_l.push_back(rig.time(pts, l, 0));
    prog.step("l = " + std::to_string(l) + ", c = 0", layer_point_est_s(cfg, b, l, 0));
  }
  for (auto [l, c] : grid) {
    at_lc.push_back(rig.time(pts, l, c));
    prog.step("l = " + std::to_string(l) + ", c = " + std::to_string(c), layer_point_est_s(cfg, b, l, c));
  }
  fill_table(t, pts, ls, at_l, grid, at_lc, context_step(cfg));
  // A context fit above its gate's bound gets the fit's points (the c = 0 lengths on the context grid and every
  // c > 0 point) timed once more, the samples pooled, before the gate judges it: a noisy point of a quick run (one
  // held-out point 19.5% off, 2026-11-28) is measured again; a fit that is wrong for a reason stays refused.
  const double worst = std::max(t.ctx_fwd.holdout_rel_err, t.ctx_bwd.holdout_rel_err);
  if (!t.context_grid.empty() && worst > cfg.refit_above) {
    const int step = context_step(cfg);
    if (cfg.progress)
      std::fprintf(stderr,
                   "calibrate: layer context fit held-out error %.1f%% above %.1f%%: its points timed again, samples "
                   "pooled\n",
                   100 * worst, 100 * cfg.refit_above);
    for (std::size_t i = 0; i < ls.size(); i++)
      if (on_context_grid(ls[i], step)) rig.time(pts, ls[i], 0, &at_l[i]);
    for (std::size_t i = 0; i < grid.size(); i++) rig.time(pts, grid[i].first, grid[i].second, &at_lc[i]);
    fill_table(t, pts, ls, at_l, grid, at_lc, step);
  }
  return t;
}

}  // namespace pipescope::calib
