#include "core/pipeline.h"

#include <stdexcept>

#include "core/analytic_cost.h"

namespace pipescope {

Schedule make_schedule(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  const ScheduleSpec& sch = s.schedule;
  const int m = par.micro_batches();
  std::vector<MicroBatch> mbs;
  if (!sch.slice_tokens.empty())
    mbs = sliced_microbatches(m, par.micro_batch_size, sch.slice_tokens);
  else
    mbs = uniform_microbatches(m, par.micro_batch_size, s.model.seq_len, sch.seq_slices);
  switch (sch.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::TeraPipe:
      return make_gpipe(par.pp, mbs, s.model.seq_len);
    case ScheduleKind::OneFOneB:
      return make_1f1b(par.pp, mbs, s.model.seq_len);
    case ScheduleKind::Interleaved:
      return make_interleaved(par.pp, par.v, mbs, s.model.seq_len);
    default:
      break;
  }
  throw std::invalid_argument(s.source + ": schedule.kind: '" + to_string(sch.kind) +
                              "' is not supported by this build yet");
}

std::unique_ptr<CostModel> make_cost_model(const Scenario& s) {
  if (!s.sim.profile.empty())
    throw std::invalid_argument(s.source + ": sim.profile: calibration profiles are not supported by this build yet");
  return std::make_unique<AnalyticCostModel>(s);
}

std::unique_ptr<Prepared> prepare(const Scenario& s) {
  auto p = std::make_unique<Prepared>();
  p->scenario = s;
  p->cost = make_cost_model(s);
  p->schedule = make_schedule(s);
  p->lowered = lower(p->schedule, s.parallel.dp, s.parallel.tp, *p->cost);
  p->placement = make_placement(s.sim.placement, s.parallel.dp, s.parallel.pp, s.parallel.tp, s.cluster);
  return p;
}

}  // namespace pipescope
