#pragma once
// The cost model of a calibration profile (core/model/profile.h). Compute ops use the profile's layer tables when one
// matches the scenario's shape (hidden, heads, ffn, tensor-parallel degree, dtype):
//   layer(b, l, c) = t(l, 0) [linear between measured l; the smallest measured l below it]
//                  + c * (a2 + a3 * l)  [the bilinear context fit minus its c = 0 part, so t(l, 0) stays exact]
// per micro-batch size b measured; other b interpolate linearly between measured sizes and scale
// proportionally outside them. An op is layers x layer(b, l, c) (+ the recomputed forward), plus the measured
// embedding / LM head on the end stages, plus the runtime's per-op overhead. Shapes without a table use the
// kernel model (core/model/kernel_model.h) when the profile has kernel fits in the scenario's dtype: each op is the sum
// of its GEMMs, attention and memory-bound kernels at the scenario's shape. Without either, the analytic model with the
// profile's (fitted) device parameters. source() and describe() say which applies. Communication sizes are the analytic
// model's; link speeds come from the profile via apply_profile().

#include <memory>
#include <string>
#include <vector>

#include "core/cost/analytic_cost.h"
#include "core/model/kernel_model.h"
#include "core/model/profile.h"

namespace pipescope {

// Which part of a profile times an op kind.
enum class CostSource : std::uint8_t { LayerTable, KernelModel, Analytic };
const char* to_string(CostSource s);  // "layer table" | "kernel model" | "analytic"

class ProfileCostModel final : public AnalyticCostModel {
 public:
  // `s` must already carry the profile's device (apply_profile). Throws std::invalid_argument when a matching
  // table does not cover the scenario's sequence length.
  ProfileCostModel(const Scenario& s, DeviceProfile p);
  ProfileCostModel(const ProfileCostModel&) = delete;  // tables_ points into p_
  ProfileCostModel& operator=(const ProfileCostModel&) = delete;
  double compute_seconds(const Op& op, int microbatch_seqs) const override;
  double optimizer_seconds(int rank) const override;

  bool uses_layer_tables() const { return !tables_.empty(); }
  // The source that times compute ops of kind k (forward and backward share one today).
  CostSource source(OpKind k) const;
  std::string describe() const;
  // One layer by the kernel model (throws std::logic_error without kernel fits in the scenario's dtype).
  double kernel_layer_seconds(bool forward, int b, int l, int c) const;
  // One layer of the matched tables (throws std::logic_error without tables).
  double table_layer_seconds(bool forward, int b, int l, int c) const;

 private:
  double table_end_seconds(bool embedding, bool forward, int b, int l) const;
  bool kernels_time_backward() const override { return source(OpKind::Backward) == CostSource::Analytic; }
  double kernel_op_seconds(const Op& op, int b) const;
  DeviceProfile p_;
  std::vector<const LayerTable*> tables_;  // matching shape, by micro_batch
  std::unique_ptr<KernelModel> kernels_;   // when no table matches and the fits' dtype is the scenario's
};

// One line for reports: which source times forward and backward ops under the scenario's profile (s.sim.profile,
// loaded here), and the model's description. Throws like load_profile / ProfileCostModel.
std::string cost_sources_text(const Scenario& s);

}  // namespace pipescope
