// The end stages' extra work on l tokens: embedding (token + position) on the first stage, final LayerNorm +
// LM head + cross-entropy on the last, forward and backward, at context 0 (neither depends on context).
#include <cstdint>
#include <random>

#include "calib/benches.h"

namespace pipescope::calib {

void bench_ends(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b, LayerTable& t) {
  const auto& s = cfg.shape;
  const int h = s.layer.hidden;
  auto emb = be.params(kernels::ModuleKind::kEmbedding, s);
  emb->set(kernels::init_params(kernels::ModuleKind::kEmbedding, s, 12));
  auto head = be.params(kernels::ModuleKind::kHead, s);
  head->set(kernels::init_params(kernels::ModuleKind::kHead, s, 13));
  auto x = be.tensor(1, h), dx = be.tensor(1, h);  // outputs: the kernels size them
  auto rec = be.record();
  std::mt19937 g(5);
  std::uniform_int_distribution<std::int32_t> tok(0, s.vocab - 1);
  t.vocab = s.vocab;
  Progress prog("embedding and LM head, micro-batch " + std::to_string(b), static_cast<int>(t.slices.size()),
                cfg.progress);
  TablePoints pts(timer, cfg.policy);
  std::vector<std::pair<std::size_t, std::size_t>> at;  // per slice: embedding (fwd, bwd), head (fwd, bwd)
  for (const SlicePoint& sp : t.slices) {
    const int l = sp.l;
    const kernels::Slice sl{b, 0, l};
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(b) * l), targets(tokens.size());
    for (auto& v : tokens) v = tok(g);
    for (auto& v : targets) v = tok(g);
    // Inputs at their final size, filled: the embedding's upstream gradient and the head's input.
    const auto dy = filled_tensor(be, b * l, h, 4000u + static_cast<unsigned>(l));
    const auto hx = filled_tensor(be, b * l, h, 5000u + static_cast<unsigned>(l));
    at.push_back({pts.time([&] { be.embedding_forward(*emb, tokens, sl, *x); }),
                  pts.time([&] { be.embedding_backward(*emb, tokens, sl, *dy); })});
    const double norm = static_cast<double>(tokens.size());
    at.push_back({pts.time([&] { be.head_forward(*head, *hx, targets, sl, norm, 1.0, *rec); }),
                  pts.time([&] { be.head_backward(*head, *rec, *dx); })});
    // The first step's share includes making the modules, which happened before it.
    prog.step("l = " + std::to_string(l), ends_point_est_s(cfg, b, l) + (at.size() == 2 ? ends_setup_est_s(cfg) : 0));
  }
  auto point = [&](int l, std::pair<std::size_t, std::size_t> fb) {
    const TimeStats f = pts.at(fb.first), bw = pts.at(fb.second);
    return EndPoint{l, f.median_s, bw.median_s, f.rel_spread(), bw.rel_spread()};
  };
  for (std::size_t i = 0; i < t.slices.size(); i++) {
    t.embedding.push_back(point(t.slices[i].l, at[2 * i]));
    t.head.push_back(point(t.slices[i].l, at[2 * i + 1]));
  }
}

}  // namespace pipescope::calib
