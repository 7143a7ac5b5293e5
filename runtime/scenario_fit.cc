#include "runtime/scenario_fit.h"

#include <numeric>

#include "core/model/placement.h"
#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/model/schedule_registry.h"

namespace pipescope::runtime {

namespace {

ScheduleKind kind_of(const std::string& name, const std::string& source) {
  if (const ScheduleEntry* e = find_schedule(name)) return e->kind;
  throw ScenarioError(source + ": schedule.kind: unknown schedule '" + name + "' (valid: " + schedule_names() + ")");
}

// What the runtime's kernels (kernels/layer.h: the GPT layer) and executor do not run yet: a clear refusal naming
// the scenario key, rather than a measured run of a different model.
void refuse_unsupported(const Scenario& s) {
  const ModelSpec& m = s.model;
  if (s.parallel.cp > 1)
    throw ScenarioError(s.source + ": parallel.cp: the runtime does not execute context parallelism (cp = " +
                        std::to_string(s.parallel.cp) +
                        ": ring attention over context-parallel ranks); the simulator (pipescope simulate) models it");
  auto refuse = [&](const char* key, const std::string& what) {
    throw ScenarioError(s.source + ": " + key + ": the runtime does not execute " + what +
                        " (its kernels are the GPT layer: multi-head attention, GeLU MLP, LayerNorm, biases, learned "
                        "positions); the simulator (pipescope simulate) models it");
  };
  if (m.head_dim > 0 && m.head_dim * m.heads != m.hidden) refuse("model.head_dim", "heads wider than hidden / heads");
  if (m.kv_heads() != m.heads) refuse("model.query_groups", "grouped-query attention");
  if (m.ffn != FfnKind::Gelu) refuse("model.ffn", std::string("ffn ") + to_string(m.ffn));
  if (m.norm != NormKind::LayerNorm) refuse("model.norm", std::string("norm ") + to_string(m.norm));
  if (m.position != PositionKind::Learned) refuse("model.position", std::string("position ") + to_string(m.position));
  if (!m.linear_bias) refuse("model.linear_bias", "linear layers without biases");
  if (s.schedule.recompute == Recompute::Selective) refuse("schedule.recompute", "selective recomputation");
  if (s.training.fsdp) refuse("training.fsdp", "fully sharded data parallelism");
  if (s.training.overlap_grad_reduce)
    refuse("training.overlap_grad_reduce", "overlapped gradient reduction (it reduces after the flush)");
  if (s.training.overlap_param_gather)
    refuse("training.overlap_param_gather", "an overlapped parameter all-gather (it gathers after the step)");
}

// What the runtime's MoE layers (kernels/README.md "Mixture of experts") do not run yet, once the parallel layout
// is final.
void refuse_unsupported_moe(const Scenario& s) {
  if (!s.model.moe()) return;
  auto refuse = [&](const char* key, const std::string& what) {
    throw ScenarioError(s.source + ": " + key + ": the runtime does not execute " + what +
                        " with mixture-of-experts layers; the simulator (pipescope simulate) models it");
  };
  if (s.parallel.tp > 1) refuse("parallel.tp", "tensor parallelism (sequence-parallel expert dispatch)");
  if (s.parallel.etp > 1) refuse("parallel.etp", "expert tensor parallelism (experts split over GPUs)");
  if (s.training.distributed_optimizer)
    refuse("training.distributed_optimizer", "the distributed optimizer (sharded expert state)");
  if (s.training.moe_dispatcher != "alltoall") refuse("training.moe_dispatcher", "DeepEP's node-deduplicated dispatch");
  if (schedule_entry(s.schedule.kind).traits.split_backward)
    refuse("schedule.kind", "a split backward (zero-bubble I / W of the routed experts)");
  if (s.training.moe_capacity_factor > 0)
    refuse("training.moe_capacity_factor", "expert capacity (token dropping or padding)");
}

// DualPipe holds every model stage twice (its two directions) and sums the copies' gradients: the executor holds
// one copy of each stage.
void refuse_two_directions(const Scenario& s) {
  if (scenario_stage_style(s) == StageStyle::Dual)
    throw ScenarioError(
        s.source + ": schedule.kind: the runtime does not execute " + schedule_entry(s.schedule.kind).name +
        " (two copies of every stage, one per direction); dualpipev runs the same pairs on one copy, and "
        "the simulator (pipescope simulate) models it");
}

}  // namespace

Scenario fit_scenario(const Scenario& base, const ScenarioOverrides& o) {
  Scenario s = base;
  ModelSpec& m = s.model;
  if (o.hidden && !o.ffn && base.model.hidden > 0)
    m.ffn_hidden = static_cast<int>(static_cast<long long>(*o.hidden) * base.model.ffn_hidden / base.model.hidden);
  if (o.hidden && base.model.hidden > 0) {  // the experts' widths follow like ffn
    m.moe_ffn_hidden =
        static_cast<int>(static_cast<long long>(*o.hidden) * base.model.moe_ffn_hidden / base.model.hidden);
    m.moe_shared_ffn_hidden =
        static_cast<int>(static_cast<long long>(*o.hidden) * base.model.moe_shared_ffn_hidden / base.model.hidden);
  }
  if (o.hidden) m.hidden = *o.hidden;
  if (o.ffn) m.ffn_hidden = *o.ffn;
  if (o.heads) m.heads = *o.heads;
  if (o.layers) m.layers = *o.layers;
  if (o.vocab) m.vocab = *o.vocab;
  if (o.seq_len) m.seq_len = *o.seq_len;
  if (o.experts) {
    if (!m.moe()) m.moe_top_k = 1, m.moe_ffn_hidden = m.ffn_hidden;
    m.moe_experts = *o.experts;
  }
  if (o.top_k) m.moe_top_k = *o.top_k;
  if (o.expert_ffn) m.moe_ffn_hidden = *o.expert_ffn;
  m.tied_embeddings = false;
  refuse_unsupported(s);

  // Another kind re-slices the scenario as every command does (with_schedule: v fitted, slicing dropped for whole
  // sequences); an explicit --v wins.
  if (o.schedule) s = with_schedule(s, kind_of(*o.schedule, s.source));
  ParallelSpec& p = s.parallel;
  if (o.dp) p.dp = *o.dp;
  if (o.pp) p.pp = *o.pp;
  if (o.tp) p.tp = *o.tp;
  if (o.ep) p.ep = *o.ep;
  if (o.v) p.v = *o.v;
  if (o.micro_batch_size) p.micro_batch_size = *o.micro_batch_size;
  if (o.global_batch) p.global_batch = *o.global_batch;

  ScheduleSpec& sch = s.schedule;
  const bool sliced = schedule_entry(sch.kind).traits.sliced();
  if (o.stage_layers) {
    p.stage_layers = *o.stage_layers;
  } else if (!p.stage_layers.empty() && (o.layers || o.pp || o.v || o.schedule) &&
             (static_cast<int>(p.stage_layers.size()) != p.pp * p.v ||
              std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), 0) != m.layers)) {
    throw ScenarioError(s.source + ": parallel.stage_layers: the scenario's layout does not fit the changed layers, " +
                        "pp or v; give --stage-layers");
  }
  if (o.slices) {
    sch.seq_slices = *o.slices;
    sch.slice_tokens.clear();
    sch.slicing = "uniform";
  }
  if (o.slice_tokens) {
    sch.slice_tokens = *o.slice_tokens;
    sch.seq_slices = static_cast<int>(o.slice_tokens->size());
    sch.slicing = "explicit";
  }
  // Flags that slice a schedule of whole sequences would be dropped without a word: refused.
  if (!sliced && ((o.slices && *o.slices > 1) || o.slice_tokens))
    throw ScenarioError(s.source + ": schedule.kind: " + to_string(sch.kind) + " runs whole sequences: " +
                        (o.slices ? "--slices" : "--slice-tokens") + " needs a slicing schedule (--schedule " +
                        schedule_names_if([](const ScheduleTraits& t) { return t.sliced() && !t.from_file; }) + ")");
  if (!sliced) {
    drop_slicing(sch);
  } else if (o.seq_len && !o.slice_tokens && !sch.slice_tokens.empty()) {
    throw ScenarioError(s.source + ": schedule.slice_tokens: the scenario's explicit slices do not fit --seq-len " +
                        std::to_string(*o.seq_len) + "; give --slice-tokens or --slices");
  }

  ClusterSpec& c = s.cluster;
  const int gpus = p.dp * p.pp * p.tp;
  if (gpus >= 1 && gpus != c.total_gpus()) {
    if (c.gpus_per_node >= 1 && gpus % c.gpus_per_node == 0) {
      c.nodes = gpus / c.gpus_per_node;
    } else if (gpus < c.gpus_per_node) {
      c.nodes = 1;
      c.gpus_per_node = gpus;
    } else {
      throw ScenarioError(s.source + ": parallel: dp * pp * tp = " + std::to_string(gpus) +
                          " GPUs do not fill whole nodes of " + std::to_string(c.gpus_per_node) + " GPUs");
    }
  }
  refuse_two_directions(s);
  refuse_unsupported_moe(s);  // first: its refusals name the key the runtime lacks, not a requirement it implies
  validate_scenario(s);
  return s;
}

Scenario tiny_scenario(const std::string& schedule, int dp, int pp, int v, int m, int layers, int hidden, int heads,
                       int seq_len, int vocab, int slices, const std::vector<int>& slice_tokens, int tp,
                       const std::vector<int>& stage_layers) {
  Scenario base = default_scenario();
  base.name = "tiny";
  base.source = "<tiny>";
  ScenarioOverrides o;
  o.schedule = schedule;
  o.layers = layers;
  o.hidden = hidden;
  o.ffn = 4 * hidden;
  o.heads = heads;
  o.seq_len = seq_len;
  o.vocab = vocab;
  o.dp = dp;
  o.pp = pp;
  o.tp = tp;
  o.v = v;
  o.micro_batch_size = 1;
  o.global_batch = m * dp;
  if (!stage_layers.empty()) o.stage_layers = stage_layers;
  if (!slice_tokens.empty())
    o.slice_tokens = slice_tokens;
  else
    o.slices = slices;
  base.schedule.scatter_gather = false;
  return fit_scenario(base, o);
}

std::unique_ptr<Prepared> prepare_with_constant_costs(const Scenario& s) {
  auto p = std::make_unique<Prepared>();
  p->scenario = s;
  ConstantCosts c;
  c.forward_s = 1.0;
  c.backward_s = 2.0;
  c.p2p_bytes = 1e6;
  c.grad_bytes = 1e6;
  c.optimizer_s = 0.1;
  c.v = s.parallel.v;
  c.seq_len = s.model.seq_len;
  const int stages = s.parallel.pp * s.parallel.v;
  if (s.parallel.tp > 1 && stages > 0) {
    // What the sharded layer kernels do, forward and backward: 2 per layer of the op's stage.
    for (int g = 0; g < stages; g++) c.stage_tp_calls.push_back(2 * stage_layer_range(s, g).count);
    c.tp_bytes = 1e6;
  }
  if (s.model.moe()) c.expert_grad_bytes = 1e6;  // the experts' gradient reduction when edp > 1
  p->cost = std::make_unique<ConstantCostModel>(c);
  p->schedule = make_schedule(s);
  p->lowered = lower_scenario(s, p->schedule, *p->cost);
  p->placement = scenario_placement(s);
  return p;
}

}  // namespace pipescope::runtime
