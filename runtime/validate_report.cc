#include "runtime/validate_report.h"

#include <nlohmann/json.hpp>

namespace pipescope::runtime {
namespace {

// "layers 1,3 per stage" for an uneven layout, "" for an even one.
std::string layout_text(const ParallelSpec& par) {
  std::string layout;
  for (int g : par.stage_layers) layout += (layout.empty() ? ", layers " : ",") + std::to_string(g);
  if (!layout.empty()) layout += par.v > 1 ? " per virtual stage" : " per stage";
  return layout;
}

nlohmann::ordered_json exactness_object(const ExactnessCheck& x) {
  const Exactness& e = x.result;
  return {{"tolerance", x.tolerance},
          {"ok", x.ok},
          {"loss", e.loss},
          {"loss_reference", e.loss_ref},
          {"loss_rel_err", e.loss_rel_err},
          {"grad_rel_err", e.grad_rel_err},
          {"grad_worst", e.grad_worst},
          {"param_rel_err", e.param_rel_err},
          {"problems", e.problems}};
}

}  // namespace

void print_validate_header(std::FILE* out, const Scenario& s, const LoweredSchedule& ls, const RankJob& job,
                           const std::string& cost_source, const ProfileStamp& stamp) {
  const ParallelSpec& par = s.parallel;
  std::fprintf(out, "validate %s (%s)\n", s.name.c_str(), s.source.c_str());
  std::fprintf(out, "  model: %d layers%s, hidden %d, %d heads, ffn %d, vocab %d, seq_len %d (untied head)\n",
               s.model.layers, layout_text(par).c_str(), s.model.hidden, s.model.heads, s.model.ffn_hidden,
               s.model.vocab, s.model.seq_len);
  if (s.model.moe())  // dense runs print no such line
    std::fprintf(
        out, "  experts: %d routed (top-%d, width %d), shared width %d, in layers %d.. every %d; ep %d (%d per rank)\n",
        s.model.moe_experts, s.model.moe_top_k, s.model.moe_ffn_hidden, s.model.moe_shared_ffn_hidden,
        s.model.moe_dense_layers, s.model.moe_layer_freq, par.ep, s.model.moe_experts / par.ep);
  std::fprintf(out, "  parallel: dp %d x pp %d (v %d), tp %d; schedule %s, %d micro-batches of %d, %zu slice(s)\n",
               par.dp, par.pp, par.v, par.tp, to_string(s.schedule.kind), par.micro_batches(), par.micro_batch_size,
               ls.schedule.microbatches.empty() ? 0 : ls.schedule.microbatches[0].slice_begin.size());
  std::fprintf(out, "  simulated: %d x %s (%s), %s\n", s.cluster.total_gpus(), s.cluster.device.name.c_str(),
               s.cluster.preset.empty() ? "custom cluster" : s.cluster.preset.c_str(), cost_source.c_str());
  std::fprintf(out, "  profile: %s\n", describe_stamp(stamp).c_str());
  for (const std::string& g : stamp.gate_failures) std::fprintf(out, "    failed gate: %s\n", g.c_str());
  std::fprintf(out, "  measured: backend %s, %d MPI ranks%s, %d timed iteration(s) after %d warm-up\n",
               job.backend.c_str(), ls.workers() * ls.tp,
               ls.tp > 1 ? " (tp ranks innermost; Megatron-sharded layers)" : "", job.iterations, job.warmup);
}

ExactnessCheck check_exactness(const JobResult& r, const LoweredSchedule& ls, const ModelConfig& mc,
                               const RankJob& job) {
  ExactnessCheck x;
  if (job.no_check) return x;
  const SyntheticData data = make_data(ls, mc);
  const ReferenceResult ref = reference_run(mc, data, kernels::AdamConfig{}, r.steps);
  x.checked = true;
  x.steps = r.steps;
  x.result = compare_with_reference(r, ref, mc);
  x.tolerance = exactness_tolerance(job.backend);
  x.ok = x.result.ok(x.tolerance);
  return x;
}

void print_exactness(std::FILE* out, const ExactnessCheck& x) {
  if (!x.checked) return;
  std::fprintf(out, "\nexactness vs the single-process unsliced reference (step %d, tolerance %.0e): %s\n%s\n", x.steps,
               x.tolerance, x.ok ? "OK" : "FAILED", format_exactness(x.result).c_str());
}

void print_cost_note(std::FILE* out, const Scenario& s, const std::string& backend, bool profiled) {
  if (profiled) return;
  std::fprintf(out,
               "note: the simulated side models %s GPUs with the analytic cost model while the measured side ran the "
               "%s backend on this machine; for a like-for-like comparison calibrate this machine first "
               "(pipescope calibrate --backend %s ...) and pass --profile.\n",
               s.cluster.device.name.c_str(), backend.c_str(), backend.c_str());
}

std::string validate_json(const Scenario& s, const RankJob& job, const ValidateRecord& r) {
  const ParallelSpec& par = s.parallel;
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.validate/1";
  j["scenario"] = s.name;
  j["source"] = s.source;
  j["cost_model"] = r.cost_source;
  j["profile"] = nlohmann::ordered_json::parse(r.profile_json);
  j["schedule"] = to_string(s.schedule.kind);
  j["dp"] = par.dp;
  j["pp"] = par.pp;
  j["tp"] = par.tp;
  j["v"] = par.v;
  j["m"] = par.micro_batches();
  if (!par.stage_layers.empty()) j["stage_layers"] = par.stage_layers;
  j["model"] = {{"layers", s.model.layers},  {"hidden", s.model.hidden}, {"heads", s.model.heads},
                {"ffn", s.model.ffn_hidden}, {"vocab", s.model.vocab},   {"seq_len", s.model.seq_len}};
  j["backend"] = r.backend;
  j["iterations"] = job.iterations;
  j["warmup"] = job.warmup;
  const auto comparison = nlohmann::ordered_json::parse(comparison_json(*r.comparison, job.iterations));
  for (const auto& [key, value] : comparison.items()) j[key] = value;
  j["device_drift"] = nlohmann::ordered_json::parse(r.drift_json);
  if (r.exactness.checked) j["exactness"] = exactness_object(r.exactness);
  return j.dump(2) + "\n";
}

}  // namespace pipescope::runtime
