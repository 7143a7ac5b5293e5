// Adam step time per parameter, and the smallest operation's time (the per-kernel fixed cost).
#include "calib/benches.h"

namespace pipescope::calib {

double bench_optimizer(kernels::Backend& be, Timer& timer, const ComputeConfig& cfg) {
  auto p = be.params(kernels::ModuleKind::kLayer, cfg.shape);
  p->set(kernels::init_params(kernels::ModuleKind::kLayer, cfg.shape, 14));
  kernels::AdamConfig adam;
  int step = 0;
  const TimeStats t = time_calls([&] { be.adam_step(*p, adam, ++step); }, timer, cfg.policy);
  return t.median_s / static_cast<double>(p->size());
}

double bench_launch(kernels::Backend& be, Timer& timer, const TimingPolicy& pol) {
  kernels::ModelShape tiny;
  tiny.layer = {16, 1, 16};
  tiny.vocab = 16;
  tiny.max_seq = 8;
  auto p = be.params(kernels::ModuleKind::kHead, tiny);
  p->set(kernels::init_params(kernels::ModuleKind::kHead, tiny, 15));
  kernels::AdamConfig adam;
  int step = 0;
  return time_calls([&] { be.adam_step(*p, adam, ++step); }, timer, pol).median_s;
}

}  // namespace pipescope::calib
