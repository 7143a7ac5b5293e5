#pragma once
// A placement for tests that need workers on GPUs without core/model/placement.cc's policies: dp x p x tp workers on
// consecutive GPU ids from `first_gpu` (an offset keeps GPU ids apart from worker ids), `gpus_per_node` to a node.
#include "core/model/placement.h"

namespace pipescope::test {

inline Placement flat_placement(int dp, int p, int tp, int gpus_per_node = 8, int first_gpu = 0) {
  Placement pl;
  pl.dp = dp;
  pl.p = p;
  pl.tp = tp;
  pl.gpus_per_node = gpus_per_node;
  for (int i = 0; i < dp * p * tp; i++) pl.gpu.push_back(first_gpu + i);
  return pl;
}

}  // namespace pipescope::test
