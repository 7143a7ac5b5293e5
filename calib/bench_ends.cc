// The end stages' extra work on l tokens: embedding (token + position) on the first stage, final LayerNorm +
// LM head + cross-entropy on the last, forward and backward, at context 0 (neither depends on context).
#include <cstdint>
#include <random>

#include "calib/benches.h"

namespace pipescope::calib {

void bench_ends(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg, int b, LayerTable& t, double flop_s) {
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
  for (const SlicePoint& sp : t.slices) {
    const int l = sp.l;
    const kernels::Slice sl{b, 0, l};
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(b) * l), targets(tokens.size());
    for (auto& v : tokens) v = tok(g);
    for (auto& v : targets) v = tok(g);
    // Inputs at their final size, filled: the embedding's upstream gradient and the head's input.
    const auto dy = filled_tensor(be, b * l, h, 4000u + static_cast<unsigned>(l));
    const auto hx = filled_tensor(be, b * l, h, 5000u + static_cast<unsigned>(l));
    const TimeStats ef = time_calls([&] { be.embedding_forward(*emb, tokens, sl, *x); }, timer, cfg.policy);
    const TimeStats eb = time_calls([&] { be.embedding_backward(*emb, tokens, sl, *dy); }, timer, cfg.policy);
    const double norm = static_cast<double>(tokens.size());
    const TimeStats hf =
        time_calls([&] { be.head_forward(*head, *hx, targets, sl, norm, 1.0, *rec); }, timer, cfg.policy);
    const TimeStats hb = time_calls([&] { be.head_backward(*head, *rec, *dx); }, timer, cfg.policy);
    t.embedding.push_back(EndPoint{l, ef.median_s, eb.median_s, ef.rel_spread(), eb.rel_spread()});
    t.head.push_back(EndPoint{l, hf.median_s, hb.median_s, hf.rel_spread(), hb.rel_spread()});
    const double call = head_flops(cfg, b, l) / flop_s;
    prog.step("l = " + std::to_string(l), estimated_point_s(call, cfg.policy) +
                                              estimated_point_s(2 * call, cfg.policy) +
                                              2 * estimated_point_s(0, cfg.policy));
  }
}

}  // namespace pipescope::calib
