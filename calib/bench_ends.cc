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
  auto x = be.tensor(1, h), dx = be.tensor(1, h);
  auto rec = be.record();
  std::mt19937 g(5);
  std::uniform_int_distribution<std::int32_t> tok(0, s.vocab - 1);
  t.vocab = s.vocab;
  Progress prog("embedding and LM head, micro-batch " + std::to_string(b), static_cast<int>(t.slices.size()),
                cfg.progress);
  for (const SlicePoint& sp : t.slices) {
    const int l = sp.l;
    const kernels::Slice sl{b, 0, l};
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(b) * l), targets(tokens.size());
    for (auto& v : tokens) v = tok(g);
    for (auto& v : targets) v = tok(g);
    EndPoint e{l, 0, 0}, hd{l, 0, 0};
    e.fwd_s = time_calls([&] { be.embedding_forward(*emb, tokens, sl, *x); }, timer, cfg.policy).median_s;
    e.bwd_s = time_calls([&] { be.embedding_backward(*emb, tokens, sl, *x); }, timer, cfg.policy).median_s;
    const double norm = static_cast<double>(tokens.size());
    hd.fwd_s =
        time_calls([&] { be.head_forward(*head, *x, targets, sl, norm, 1.0, *rec); }, timer, cfg.policy).median_s;
    hd.bwd_s = time_calls([&] { be.head_backward(*head, *rec, *dx); }, timer, cfg.policy).median_s;
    t.embedding.push_back(e);
    t.head.push_back(hd);
    prog.step("l = " + std::to_string(l));
  }
}

}  // namespace pipescope::calib
