#include "core/model/megatron_emit.h"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/model/schedule_registry.h"

namespace pipescope {
namespace {

class Args {
 public:
  void flag(const char* f) { out_.emplace_back(f); }
  void value(const char* f, const std::string& v) { out_.emplace_back(f), out_.push_back(v); }
  void value(const char* f, long long v) { value(f, std::to_string(v)); }
  std::vector<std::string> take() { return std::move(out_); }

 private:
  std::vector<std::string> out_;
};

[[noreturn]] void cannot(const Scenario& s, const std::string& why) {
  throw std::invalid_argument(s.source + ": --emit megatron: " + why);
}

// --moe-layer-freq: an integer when every n-th layer is MoE from the first, else the 0/1 list as Python.
std::string moe_layer_freq(const ModelSpec& m) {
  if (m.moe_dense_layers == 0) return std::to_string(m.moe_layer_freq);
  std::string pattern = "[1";
  for (int i = 1; i < m.moe_layer_freq; i++) pattern += ",0";
  pattern += "]";
  const int rest = m.layers - m.moe_dense_layers;
  if (rest % m.moe_layer_freq != 0) return "";  // a partial last period: no short Python form; the caller refuses
  return "([0]*" + std::to_string(m.moe_dense_layers) + "+" + pattern + "*" + std::to_string(rest / m.moe_layer_freq) +
         ")";
}

void model_args(const Scenario& s, Args& a) {
  const ModelSpec& m = s.model;
  const int tp = s.parallel.tp;
  if (m.sliding_window > 0) cannot(s, "model.sliding_window has no pretrain_gpt.py argument");
  a.value("--num-layers", m.layers);
  a.value("--hidden-size", m.hidden);
  a.value("--num-attention-heads", m.heads);
  a.value("--ffn-hidden-size", m.ffn_hidden);
  a.value("--seq-length", m.seq_len);
  a.value("--max-position-embeddings", m.seq_len);
  // Megatron-LM pads the vocabulary to a multiple of make-vocab-size-divisible-by x tp: 128 keeps it when it is one.
  if (m.vocab % tp != 0) cannot(s, "model.vocab " + std::to_string(m.vocab) + " is not a multiple of tp");
  a.value("--vocab-size", m.vocab);
  a.value("--make-vocab-size-divisible-by", m.vocab % (128 * tp) == 0 ? 128 : 1);
  if (!m.tied_embeddings) a.flag("--untie-embeddings-and-output-weights");
  if (m.query_groups > 0 && m.query_groups != m.heads) {
    a.flag("--group-query-attention");
    a.value("--num-query-groups", m.query_groups);
  }
  switch (m.ffn) {
    case FfnKind::Gelu:
      break;
    case FfnKind::SwiGlu:
      a.flag("--swiglu");
      break;
  }
  switch (m.norm) {
    case NormKind::LayerNorm:
      a.value("--normalization", "LayerNorm");
      break;
    case NormKind::RmsNorm:
      a.value("--normalization", "RMSNorm");
      break;
  }
  switch (m.position) {
    case PositionKind::Learned:
      a.value("--position-embedding-type", "learned_absolute");
      break;
    case PositionKind::Rope:
      a.value("--position-embedding-type", "rope");
      break;
  }
  if (!m.linear_bias) a.flag("--disable-bias-linear");
  if (m.mla()) {
    a.flag("--multi-latent-attention");
    if (m.q_lora_rank > 0) a.value("--q-lora-rank", m.q_lora_rank);
    a.value("--kv-lora-rank", m.kv_lora_rank);
    a.value("--qk-head-dim", m.head_width());
    a.value("--qk-pos-emb-head-dim", m.qk_rope_head_dim);
    a.value("--v-head-dim", m.v_head_dim);
  } else if (m.head_dim > 0) {
    a.value("--kv-channels", m.head_dim);
  }
}

void moe_args(const Scenario& s, Args& a) {
  const ModelSpec& m = s.model;
  const TrainingSpec& t = s.training;
  if (!m.moe()) return;
  a.value("--num-experts", m.moe_experts);
  a.value("--moe-router-topk", m.moe_top_k);
  a.value("--moe-ffn-hidden-size", m.moe_ffn_hidden);
  if (m.moe_shared_ffn_hidden > 0) a.value("--moe-shared-expert-intermediate-size", m.moe_shared_ffn_hidden);
  if (m.moe_dense_layers > 0 || m.moe_layer_freq > 1) {
    const std::string freq = moe_layer_freq(m);
    if (freq.empty()) cannot(s, "the MoE layers end in a partial period of model.moe_layer_freq");
    a.value("--moe-layer-freq", freq);
  }
  a.value("--expert-model-parallel-size", s.parallel.ep);
  a.value("--expert-tensor-parallel-size", s.parallel.etp);
  if (t.moe_dispatcher == "deepep") {
    a.value("--moe-token-dispatcher-type", "flex");
    a.flag("--moe-enable-deepep");
  } else {
    a.value("--moe-token-dispatcher-type", "alltoall");
  }
  if (t.moe_routing == "balanced") a.flag("--moe-router-force-load-balancing");
  if (t.moe_capacity_factor > 0) {
    char c[32];
    std::snprintf(c, sizeof c, "%.9g", t.moe_capacity_factor);
    a.value("--moe-expert-capacity-factor", c);
    if (t.moe_pad_to_capacity) a.flag("--moe-pad-expert-input-to-capacity");
  }
  if (t.moe_router_groups > 0) {
    a.value("--moe-router-num-groups", t.moe_router_groups);
    a.value("--moe-router-group-topk", t.moe_router_group_topk);
  }
}

// The embedding and the loss counted as a layer each in an even split over the virtual stages (Megatron-Core's
// --account-for-embedding/loss-in-pipeline-split): whether `sl` is that split for (embedding, loss).
bool accounted(const std::vector<int>& sl, int layers, int embedding, int loss) {
  const long long total = 1LL * layers + embedding + loss, n = static_cast<long long>(sl.size());
  if (n == 0 || total % n != 0) return false;
  const int per = static_cast<int>(total / n);
  for (std::size_t i = 0; i < sl.size(); i++) {
    const int want = per - (i == 0 ? embedding : 0) - (i + 1 == sl.size() ? loss : 0);
    if (sl[i] != want) return false;
  }
  return true;
}

// Uneven stages: the accounted embedding / loss, or Megatron-Core's first / last stage sizes, the other stages even.
void split_args(const Scenario& s, Args& a) {
  const std::vector<int>& sl = s.parallel.stage_layers;
  if (sl.empty()) return;
  for (const auto& [e, l] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}})
    if (accounted(sl, s.model.layers, e, l)) {
      if (e) a.flag("--account-for-embedding-in-pipeline-split");
      if (l) a.flag("--account-for-loss-in-pipeline-split");
      return;
    }
  const int pp = s.parallel.pp;
  if (s.parallel.v > 1 || pp < 2 || static_cast<int>(sl.size()) != pp)
    cannot(s,
           "parallel.stage_layers: Megatron-LM gives uneven sizes to the first and last stage only, without a "
           "virtual pipeline");
  const int middle = pp > 2 ? sl[1] : -1;  // pp 2: both stages given
  for (int r = 2; r < pp - 1; r++)
    if (sl[r] != middle) cannot(s, "parallel.stage_layers: the middle stages are not even (Megatron-LM has no flag)");
  if (sl.front() != middle) a.value("--decoder-first-pipeline-num-layers", sl.front());
  if (sl.back() != middle) a.value("--decoder-last-pipeline-num-layers", sl.back());
}

void parallel_args(const Scenario& s, Args& a) {
  const ParallelSpec& p = s.parallel;
  a.value("--tensor-model-parallel-size", p.tp);
  a.value("--pipeline-model-parallel-size", p.pp);
  if (p.cp > 1) {
    a.value("--context-parallel-size", p.cp);
    if (p.cp_comm_type != CpCommType::P2P) a.value("--cp-comm-type", to_string(p.cp_comm_type));
    if (p.cp_comm_type == CpCommType::A2AP2P) {  // argparse nargs='+': the two levels as two words
      a.value("--hierarchical-context-parallel-sizes", p.cp_a2a);
      a.flag(std::to_string(p.cp / p.cp_a2a).c_str());
    }
  }
  if (p.v > 1) a.value("--num-virtual-stages-per-pipeline-rank", p.v);
  a.value("--micro-batch-size", p.micro_batch_size);
  a.value("--global-batch-size", p.global_batch);
  if (p.sequence_parallel) a.flag("--sequence-parallel");
  split_args(s, a);
}

void schedule_args(const Scenario& s, Args& a) {
  const ScheduleSpec& sc = s.schedule;
  const ScheduleEntry& e = schedule_entry(sc.kind);
  const ScheduleKind want = s.parallel.v > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  if (!e.traits.runs_in(Framework::Megatron) || sc.kind != want)
    cannot(s, std::string("schedule ") + e.name + " with v " + std::to_string(s.parallel.v) +
                  " is not a Megatron-LM schedule (it runs 1f1b with v 1 and interleaved with v > 1)");
  switch (sc.recompute) {
    case Recompute::None:
      break;
    case Recompute::Selective: {
      a.value("--recompute-granularity", "selective");
      if (sc.recompute_modules != module_bit(RecomputeModule::CoreAttn)) {
        a.flag("--recompute-modules");
        for (int i = 0; i <= static_cast<int>(RecomputeModule::MlaUpProj); i++) {
          const auto m = static_cast<RecomputeModule>(i);
          if (sc.recompute_modules & module_bit(m)) a.flag(to_string(m));
        }
      }
      break;
    }
    case Recompute::Full:
      a.value("--recompute-granularity", "full");
      a.value("--recompute-method", "uniform");
      a.value("--recompute-num-layers", 1);
      break;
  }
  if (!sc.scatter_gather) a.flag("--no-scatter-gather-tensors-in-pipeline");
  if (sc.overlap_moe_a2a) a.flag("--overlap-moe-expert-parallel-comm");
}

void training_args(const Scenario& s, Args& a) {
  const TrainingSpec& t = s.training;
  if (t.dtype == "bf16" || t.dtype == "fp8") a.flag("--bf16");
  if (t.dtype == "fp16") a.flag("--fp16");
  if (t.dtype == "fp64") cannot(s, "training.dtype fp64 is not a Megatron-LM precision");
  if (t.fp8()) a.value("--fp8-format", "hybrid");
  const bool bf16 = t.dtype == "bf16" || t.fp8();
  if (bf16 && !t.grad_fp32) a.flag("--grad-reduce-in-bf16");
  if (!bf16 && t.grad_fp32) a.flag("--accumulate-allreduce-grads-in-fp32");
  a.value("--attention-backend", t.flash_attention ? "flash" : "unfused");
  if (t.distributed_optimizer) a.flag("--use-distributed-optimizer");
  if (t.fsdp) a.flag("--use-torch-fsdp2");
  if (t.overlap_grad_reduce) a.flag("--overlap-grad-reduce");
  if (t.overlap_param_gather) a.flag("--overlap-param-gather");
  if (t.tp_comm_overlap) a.flag("--tp-comm-overlap");
}

}  // namespace

std::vector<std::string> megatron_arguments(const Scenario& s) {
  Args a;
  model_args(s, a);
  moe_args(s, a);
  parallel_args(s, a);
  schedule_args(s, a);
  training_args(s, a);
  return a.take();
}

std::string megatron_command(const Scenario& s) {
  const std::vector<std::string> args = megatron_arguments(s);
  const int gpus = s.cluster.total_gpus(), per_node = s.cluster.gpus_per_node;
  std::string out = "# " + s.name + ": " + std::to_string(gpus) + " GPUs (dp " + std::to_string(s.parallel.dp) +
                    "); written by pipescope --emit megatron\n";
  out += "torchrun --nnodes " + std::to_string(s.cluster.nodes) + " --nproc-per-node " + std::to_string(per_node) +
         " pretrain_gpt.py";
  for (std::size_t i = 0; i < args.size(); i++) {
    const bool flag = args[i].rfind("--", 0) == 0;
    out += flag ? " \\\n    " + args[i] : " " + args[i];
  }
  return out + "\n";
}

}  // namespace pipescope
