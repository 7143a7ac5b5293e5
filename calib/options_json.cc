#include "calib/options_json.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

// Each struct's fields are listed once; nlohmann's macros write both directions (from_json throws on a missing key,
// naming it).
namespace pipescope::kernels {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LayerShape, hidden, heads, ffn, tp)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ModelShape, layer, vocab, max_seq)
}  // namespace pipescope::kernels

namespace pipescope::calib {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TimingPolicy, warmup_calls, warmup_s, min_samples, min_time_s, max_samples,
                                   max_time_s, target_rel_spread, min_sample_s, cold)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ComputeConfig, shape, grain, context_steps, tp, max_len, sparse_lengths, policy,
                                   progress)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GateBounds, fit_holdout, link_holdout, monotone_slack, max_spread)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(CalibrateOptions, backend, compute, micro_batches, gemm, device_preset, link_results,
                                   link_class, command, budget_s, accept_poor_fit, gates, clock, timer_noise)

namespace {
const char* const kSchema = "pipescope.calibrate-options/1";
}  // namespace

std::string options_to_json(const CalibrateOptions& o) {
  nlohmann::json j = o;
  j["schema"] = kSchema;
  return j.dump(1) + "\n";
}

CalibrateOptions options_from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("schema") != kSchema) throw std::invalid_argument(std::string("schema: expected ") + kSchema);
    return j.get<CalibrateOptions>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("calibrate options: ") + e.what());
  }
}

}  // namespace pipescope::calib
