#include "calib/options_json.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace pipescope::calib {
namespace {

using nlohmann::json;

json policy_json(const TimingPolicy& p) {
  return {{"warmup_calls", p.warmup_calls},
          {"warmup_s", p.warmup_s},
          {"min_samples", p.min_samples},
          {"min_time_s", p.min_time_s},
          {"max_samples", p.max_samples},
          {"max_time_s", p.max_time_s},
          {"target_rel_spread", p.target_rel_spread},
          {"min_sample_s", p.min_sample_s},
          {"cold", p.cold}};
}

TimingPolicy policy_of(const json& j) {
  TimingPolicy p;
  j.at("warmup_calls").get_to(p.warmup_calls);
  j.at("warmup_s").get_to(p.warmup_s);
  j.at("min_samples").get_to(p.min_samples);
  j.at("min_time_s").get_to(p.min_time_s);
  j.at("max_samples").get_to(p.max_samples);
  j.at("max_time_s").get_to(p.max_time_s);
  j.at("target_rel_spread").get_to(p.target_rel_spread);
  j.at("min_sample_s").get_to(p.min_sample_s);
  j.at("cold").get_to(p.cold);
  return p;
}

json compute_json(const ComputeConfig& c) {
  const kernels::ModelShape& s = c.shape;
  return {{"shape",
           {{"hidden", s.layer.hidden},
            {"heads", s.layer.heads},
            {"ffn", s.layer.ffn},
            {"layer_tp", s.layer.tp},
            {"vocab", s.vocab},
            {"max_seq", s.max_seq}}},
          {"grain", c.grain},
          {"context_steps", c.context_steps},
          {"tp", c.tp},
          {"max_len", c.max_len},
          {"sparse_lengths", c.sparse_lengths},
          {"policy", policy_json(c.policy)},
          {"progress", c.progress}};
}

ComputeConfig compute_of(const json& j) {
  ComputeConfig c;
  const json& s = j.at("shape");
  s.at("hidden").get_to(c.shape.layer.hidden);
  s.at("heads").get_to(c.shape.layer.heads);
  s.at("ffn").get_to(c.shape.layer.ffn);
  s.at("layer_tp").get_to(c.shape.layer.tp);
  s.at("vocab").get_to(c.shape.vocab);
  s.at("max_seq").get_to(c.shape.max_seq);
  j.at("grain").get_to(c.grain);
  j.at("context_steps").get_to(c.context_steps);
  j.at("tp").get_to(c.tp);
  j.at("max_len").get_to(c.max_len);
  j.at("sparse_lengths").get_to(c.sparse_lengths);
  c.policy = policy_of(j.at("policy"));
  j.at("progress").get_to(c.progress);
  return c;
}

}  // namespace

std::string options_to_json(const CalibrateOptions& o) {
  const GateBounds& g = o.gates;
  const json j = {{"schema", "pipescope.calibrate-options/1"},
                  {"backend", o.backend},
                  {"compute", compute_json(o.compute)},
                  {"micro_batches", o.micro_batches},
                  {"gemm", o.gemm},
                  {"device_preset", o.device_preset},
                  {"link_results", o.link_results},
                  {"link_class", o.link_class},
                  {"command", o.command},
                  {"budget_s", o.budget_s},
                  {"accept_poor_fit", o.accept_poor_fit},
                  {"gates",
                   {{"fit_holdout", g.fit_holdout},
                    {"link_holdout", g.link_holdout},
                    {"monotone_slack", g.monotone_slack},
                    {"max_spread", g.max_spread}}},
                  {"clock", o.clock},
                  {"timer_noise", o.timer_noise}};
  return j.dump(1) + "\n";
}

CalibrateOptions options_from_json(const std::string& text) {
  CalibrateOptions o;
  try {
    const json j = json::parse(text);
    if (j.at("schema") != "pipescope.calibrate-options/1")
      throw std::invalid_argument("schema: expected pipescope.calibrate-options/1");
    j.at("backend").get_to(o.backend);
    o.compute = compute_of(j.at("compute"));
    j.at("micro_batches").get_to(o.micro_batches);
    j.at("gemm").get_to(o.gemm);
    j.at("device_preset").get_to(o.device_preset);
    j.at("link_results").get_to(o.link_results);
    j.at("link_class").get_to(o.link_class);
    j.at("command").get_to(o.command);
    j.at("budget_s").get_to(o.budget_s);
    j.at("accept_poor_fit").get_to(o.accept_poor_fit);
    const json& g = j.at("gates");
    g.at("fit_holdout").get_to(o.gates.fit_holdout);
    g.at("link_holdout").get_to(o.gates.link_holdout);
    g.at("monotone_slack").get_to(o.gates.monotone_slack);
    g.at("max_spread").get_to(o.gates.max_spread);
    j.at("clock").get_to(o.clock);
    j.at("timer_noise").get_to(o.timer_noise);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("calibrate options: ") + e.what());
  }
  return o;
}

}  // namespace pipescope::calib
