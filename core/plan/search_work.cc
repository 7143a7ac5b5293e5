#include "core/plan/search_work.h"

#include <algorithm>
#include <stdexcept>

#include "core/model/scenario.h"

namespace pipescope {

// Mirrors enumerate_candidates (core/plan/search.cc; test_limits checks that both count the same points), with each
// point's work estimated instead of built.
GridEstimate estimate_search(const Scenario& base, const SearchSpace& space, int keep, int jobs) {
  GridEstimate g;
  g.what = "search";
  g.unit = "configurations";
  g.hint = "narrow the space with --pp, --tp, --micro-batch-sizes or --schedules, or lower --keep";
  const ClusterSpec& c = base.cluster;
  if (c.total_gpus() < 1 || c.gpus_per_node < 1) return g;  // the search's own error
  double stage12_ops = 0, valid = 0, sim_s = 0;
  Scenario base_point = base;
  base_point.parallel.stage_layers.clear();
  base_point.schedule.slice_tokens.clear();
  try {
    for_each_point(base_point, space, [&](const SearchPoint& pt) {
      g.points++;
      const Scenario s = make_point(base_point, pt, space.seq1f1b_segments);
      try {
        validate_scenario(s);  // what stage 1 rejects first costs nothing more
      } catch (const std::exception&) {
        return;
      }
      const WorkEstimate w = estimate_work(s);
      valid++;
      // Stage 1 builds the point's schedule (one pipeline, not its dp replicas) and memory model, stage 2 lowers
      // one replica's; stage 3 simulates the point only if it ranks in the best K, and a simulation over the
      // per-run limit is refused there at once (a row with its error).
      stage12_ops += w.pipeline_ops;
      sim_s += allow_large() || w.ops <= kMaxOps ? w.seconds : 0;
      if (w.pipeline_ops > g.largest_ops) {
        g.largest_ops = w.pipeline_ops;
        g.largest = candidate_label(s) + ": a schedule of " + estimate_figure(w.pipeline_ops) + " ops";
        g.bytes = kBaseBytes + w.pipeline_ops * kBytesPerModelOp;
      }
    });
  } catch (const std::invalid_argument&) {
    return g;  // the search's own error (an unknown schedule, no --tp value fitting a node)
  }
  // Stage 3 simulates `keep` of the valid points; their mean stands for the ones the estimate will rank first.
  const double simulated = std::min<double>(keep, valid);
  const double stage3_s = valid > 0 ? simulated * (kSecondsPerRun + sim_s / valid) / std::max(1, jobs) : 0;
  g.seconds = valid * kSecondsPerSearchPoint + stage12_ops * kSecondsPerSearchOp + stage3_s;
  return g;
}

}  // namespace pipescope
