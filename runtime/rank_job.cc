#include "runtime/rank_job.h"

#include <cstdio>
#include <limits>

#include "core/model/backends.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"

namespace pipescope::runtime {

void RankJob::add_scenario_option(CLI::App& app) {
  app.add_option("scenario", scenario, "Scenario YAML file (default: the built-in default scenario)");
}

void RankJob::add_shrink_options(CLI::App& app) {
  const char* g = "Shrinking (keep the scenario's value when not given)";
  app.add_option("--schedule", schedule, "Schedule kind, one of the registry's: " + schedule_names())->group(g);
  app.add_option("--layers", layers, "Transformer layers")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--hidden", hidden, "Hidden size (ffn follows in the scenario's ratio)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--heads", heads, "Attention heads")->check(CLI::Range(1, std::numeric_limits<int>::max()))->group(g);
  app.add_option("--ffn", ffn, "MLP width")->check(CLI::Range(1, std::numeric_limits<int>::max()))->group(g);
  app.add_option("--vocab", vocab, "Vocabulary size")->check(CLI::Range(1, std::numeric_limits<int>::max()))->group(g);
  app.add_option("--seq-len", seq_len, "Tokens per sequence")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--global-batch", global_batch, "Sequences per iteration")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--micro-batch-size", micro_batch_size, "Sequences per micro-batch")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--dp", dp, "Data-parallel replicas")->check(CLI::Range(1, std::numeric_limits<int>::max()))->group(g);
  app.add_option("--pp", pp, "Pipeline stages")->check(CLI::Range(1, std::numeric_limits<int>::max()))->group(g);
  app.add_option("--tp", tp, "Tensor-parallel degree (tp processes per worker; must divide heads and ffn)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--experts", experts, "Routed experts per MoE layer (model.num_experts; a dense model becomes MoE)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--top-k", top_k, "Experts per token (model.moe_top_k)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--expert-ffn", expert_ffn, "One routed expert's MLP width (model.moe_ffn_hidden)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--ep", ep, "Expert-parallel degree (parallel.ep; must divide dp and the experts)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--v", v, "Model chunks per pipeline rank (interleaved)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--slices", slices, "Uniform token slices per micro-batch (terapipe)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--slice-tokens", slice_tokens, "Explicit slice lengths, e.g. 5,3,4")
      ->delimiter(',')
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
  app.add_option("--stage-layers", stage_layers,
                 "Layers per pipeline stage (per virtual stage with v > 1), e.g. 1,3: an uneven layout")
      ->delimiter(',')
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->group(g);
}

void RankJob::add_run_options(CLI::App& app) {
  std::string help = "Kernels backend:";
  for (const BackendInfo& b : backend_table()) help += std::string(" ") + b.name + " (" + b.help + ");";
  help.back() = ' ';
  app.add_option("--backend", backend, help + "one rank per GPU with the CUDA ones (NCCL)")->capture_default_str();
  app.add_option("--iterations", iterations, "Timed iterations")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed iterations first")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--watchdog", watchdog_s, "Seconds without progress before a rank reports and aborts the job")
      ->capture_default_str();
  app.add_flag("--no-check", no_check, "Skip the comparison with the single-process unsliced reference");
}

std::vector<std::string> RankJob::args() const {
  std::vector<std::string> a;
  if (!scenario.empty()) a.push_back(scenario);
  auto add = [&a](const char* flag, int value) {
    if (value > 0) a.insert(a.end(), {flag, std::to_string(value)});
  };
  if (!schedule.empty()) a.insert(a.end(), {"--schedule", schedule});
  add("--layers", layers);
  add("--hidden", hidden);
  add("--heads", heads);
  add("--ffn", ffn);
  add("--vocab", vocab);
  add("--seq-len", seq_len);
  add("--global-batch", global_batch);
  add("--micro-batch-size", micro_batch_size);
  add("--dp", dp);
  add("--pp", pp);
  add("--tp", tp);
  add("--experts", experts);
  add("--top-k", top_k);
  add("--expert-ffn", expert_ffn);
  add("--ep", ep);
  add("--v", v);
  add("--slices", slices);
  if (!slice_tokens.empty()) {
    std::string s;
    for (int t : slice_tokens) s += (s.empty() ? "" : ",") + std::to_string(t);
    a.insert(a.end(), {"--slice-tokens", s});
  }
  if (!stage_layers.empty()) {
    std::string s;
    for (int l : stage_layers) s += (s.empty() ? "" : ",") + std::to_string(l);
    a.insert(a.end(), {"--stage-layers", s});
  }
  char w[32];
  std::snprintf(w, sizeof w, "%.17g", watchdog_s);
  a.insert(a.end(), {"--backend", backend, "--iterations", std::to_string(iterations), "--warmup",
                     std::to_string(warmup), "--watchdog", w});
  if (no_check) a.push_back("--no-check");
  return a;
}

ScenarioOverrides RankJob::overrides() const {
  ScenarioOverrides r;
  auto set = [](std::optional<int>& dst, int value) {
    if (value > 0) dst = value;
  };
  if (!schedule.empty()) r.schedule = schedule;
  set(r.layers, layers);
  set(r.hidden, hidden);
  set(r.heads, heads);
  set(r.ffn, ffn);
  set(r.vocab, vocab);
  set(r.seq_len, seq_len);
  set(r.dp, dp);
  set(r.pp, pp);
  set(r.tp, tp);
  set(r.experts, experts);
  set(r.top_k, top_k);
  set(r.expert_ffn, expert_ffn);
  set(r.ep, ep);
  set(r.v, v);
  set(r.micro_batch_size, micro_batch_size);
  set(r.global_batch, global_batch);
  set(r.slices, slices);
  if (!slice_tokens.empty()) r.slice_tokens = slice_tokens;
  if (!stage_layers.empty()) r.stage_layers = stage_layers;
  return r;
}

Scenario RankJob::fitted_scenario() const {
  const Scenario base = scenario.empty() ? default_scenario() : load_scenario(scenario);
  return fit_scenario(base, overrides());
}

JobOptions RankJob::job_options() const {
  JobOptions j;
  j.backend = backend;
  j.iterations = iterations;
  j.warmup = warmup;
  j.collect_modules = !no_check;
  return j;
}

}  // namespace pipescope::runtime
