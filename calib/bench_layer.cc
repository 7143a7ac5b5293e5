// t(l, c) of one transformer layer, forward and backward (spec/calibration.md 4.1): the forward of a slice of l
// tokens after c tokens of context is timed by rewinding the K/V cache to c before every call; the backward by
// rewinding to c + l (its dK/dV keep accumulating into the context's buffers, which costs the same).
#include <algorithm>
#include <random>
#include <tuple>

#include "calib/benches.h"
#include "calib/fit.h"
#include "core/profile.h"

namespace pipescope::calib {
namespace {

std::vector<double> noise(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct LayerRig {
  kernels::Backend& be;
  const ComputeConfig& cfg;
  int b;
  std::unique_ptr<kernels::Params> params;
  std::unique_ptr<kernels::KVCache> kv;
  std::unique_ptr<kernels::Record> prefix_rec, rec;
  std::unique_ptr<kernels::Tensor> x, y, dy, dx;

  LayerRig(kernels::Backend& backend, const ComputeConfig& c, int batch) : be(backend), cfg(c), b(batch) {
    const auto& s = cfg.shape;
    params = be.params(kernels::ModuleKind::kLayer, s);
    params->set(kernels::init_params(kernels::ModuleKind::kLayer, s, 11));
    kv = be.kv_cache(s.layer, b, s.max_seq);
    prefix_rec = be.record();
    rec = be.record();
    x = be.tensor(b * s.max_seq, s.layer.hidden);
    x->upload(noise(static_cast<std::size_t>(b) * s.max_seq * s.layer.hidden, 1));
    dy = be.tensor(b * s.max_seq, s.layer.hidden);
    dy->upload(noise(static_cast<std::size_t>(b) * s.max_seq * s.layer.hidden, 2));
    y = be.tensor(1, s.layer.hidden);
    dx = be.tensor(1, s.layer.hidden);
  }

  // Times forward and backward of the slice [c, c + l).
  std::pair<TimeStats, TimeStats> time(Timer& timer, int l, int c) {
    kv->reset();
    const int h = cfg.shape.layer.hidden;  // resize discards the data: upload after every resize
    x->resize(b * std::max(c, 1), h);
    x->upload(noise(static_cast<std::size_t>(b) * std::max(c, 1) * h, 3));
    if (c > 0) be.layer_forward(*params, *x, kernels::Slice{b, 0, c}, *kv, *prefix_rec, *y);
    x->resize(b * l, h);
    x->upload(noise(static_cast<std::size_t>(b) * l * h, 1));
    dy->resize(b * l, h);
    dy->upload(noise(static_cast<std::size_t>(b) * l * h, 2));
    const kernels::Slice s{b, c, l};
    const TimeStats f = time_calls(
        [&] {
          kv->rewind(c);
          be.layer_forward(*params, *x, s, *kv, *rec, *y);
        },
        timer, cfg.policy);
    const TimeStats bw = time_calls(
        [&] {
          kv->rewind(c + l);
          be.layer_backward(*params, *rec, *kv, *dy, *dx);
        },
        timer, cfg.policy);
    return {f, bw};
  }
};

}  // namespace

LayerTable bench_layer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b) {
  const auto& s = cfg.shape;
  LayerTable t;
  t.hidden = s.layer.hidden;
  t.heads = s.layer.heads;
  t.ffn = s.layer.ffn;
  t.tp = 1;
  t.micro_batch = b;
  t.seq_len = s.max_seq;
  t.dtype = dtype_of_backend(be.name().substr(0, be.name().find(' ')));
  LayerRig rig(be, cfg, b);

  std::vector<int> ls;
  for (int l = cfg.grain; l <= s.max_seq; l += cfg.grain) ls.push_back(l);
  const int step = std::max(cfg.grain, (s.max_seq / cfg.context_steps) / cfg.grain * cfg.grain);
  std::vector<std::pair<int, int>> grid;
  for (int l = step; l <= s.max_seq; l += step)
    for (int c = step; c + l <= s.max_seq; c += step) grid.emplace_back(l, c);

  Progress prog("layer t(l, c), micro-batch " + std::to_string(b), static_cast<int>(ls.size() + grid.size()),
                cfg.progress);
  for (int l : ls) {
    auto [f, bw] = rig.time(timer, l, 0);
    t.slices.push_back(SlicePoint{l, std::move(f), std::move(bw)});
    prog.step("l = " + std::to_string(l) + ", c = 0");
  }
  auto t0 = [&](bool fwd) {
    return [&t, fwd](int l) {
      for (const auto& p : t.slices)
        if (p.l == l) return fwd ? p.fwd.median_s : p.bwd.median_s;
      return 0.0;
    };
  };
  for (int l = step; l <= s.max_seq; l += step) {
    const double f = t0(true)(l), bw = t0(false)(l);
    t.context_grid.push_back(ContextPoint{l, 0, f, bw});
  }
  for (auto [l, c] : grid) {
    auto [f, bw] = rig.time(timer, l, c);
    t.context_grid.push_back(ContextPoint{l, c, f.median_s, bw.median_s});
    prog.step("l = " + std::to_string(l) + ", c = " + std::to_string(c));
  }
  std::sort(t.context_grid.begin(), t.context_grid.end(),
            [](const ContextPoint& a, const ContextPoint& b) { return std::tie(a.l, a.c) < std::tie(b.l, b.c); });
  if (grid.size() >= 5) {
    t.ctx_fwd = fit_context(t.context_grid, true, t0(true));
    t.ctx_bwd = fit_context(t.context_grid, false, t0(false));
  } else {
    t.context_grid.clear();  // too short a sequence for a context fit: t(l, c) = t(l, 0)
  }
  return t;
}

}  // namespace pipescope::calib
