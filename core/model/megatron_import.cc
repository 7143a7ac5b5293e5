#include "core/model/megatron_import.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/util/ranges.h"

namespace pipescope {

namespace {

// Megatron flags that take a value and do not change an iteration's time.
const std::set<std::string> kIgnoredWithValue = {"--lr",
                                                 "--min-lr",
                                                 "--lr-decay-style",
                                                 "--lr-decay-iters",
                                                 "--lr-warmup-iters",
                                                 "--lr-warmup-fraction",
                                                 "--weight-decay",
                                                 "--clip-grad",
                                                 "--adam-beta1",
                                                 "--adam-beta2",
                                                 "--adam-eps",
                                                 "--init-method-std",
                                                 "--train-iters",
                                                 "--train-samples",
                                                 "--log-interval",
                                                 "--save-interval",
                                                 "--eval-interval",
                                                 "--eval-iters",
                                                 "--save",
                                                 "--load",
                                                 "--data-path",
                                                 "--vocab-file",
                                                 "--merge-file",
                                                 "--tokenizer-type",
                                                 "--tokenizer-model",
                                                 "--split",
                                                 "--seed",
                                                 "--distributed-backend",
                                                 "--tensorboard-dir",
                                                 "--hidden-dropout",
                                                 "--attention-dropout",
                                                 "--loss-scale",
                                                 "--initial-loss-scale",
                                                 "--min-loss-scale",
                                                 "--loss-scale-window",
                                                 "--max-position-embeddings",
                                                 "--data-impl",
                                                 "--num-workers",
                                                 "--exit-interval",
                                                 "--distributed-timeout-minutes",
                                                 "--wandb-project",
                                                 "--wandb-exp-name",
                                                 "--data-cache-path",
                                                 "--rampup-batch-size",
                                                 "--fp8-margin",
                                                 "--fp8-interval",
                                                 "--fp8-amax-history-len",
                                                 "--fp8-amax-compute-algo",
                                                 "--moe-aux-loss-coeff",
                                                 "--moe-z-loss-coeff",
                                                 "--moe-router-load-balancing-type",
                                                 "--moe-router-dtype",
                                                 "--moe-router-score-function",
                                                 "--moe-router-topk-scaling-factor",
                                                 "--moe-router-bias-update-rate",
                                                 "--rotary-base",
                                                 "--rotary-percent",
                                                 "--decoupled-lr",
                                                 "--decoupled-min-lr",
                                                 "--lr-decay-samples",
                                                 "--lr-warmup-samples",
                                                 "--exit-duration-in-mins",
                                                 "--tiktoken-pattern",
                                                 "--profile-step-start",
                                                 "--profile-step-end",
                                                 "--ckpt-format",
                                                 "--empty-unused-memory-level"};
// Flags without a value that do not change an iteration's time.
const std::set<std::string> kIgnoredFlags = {"--no-masked-softmax-fusion",
                                             "--no-bias-gelu-fusion",
                                             "--no-bias-dropout-fusion",
                                             "--use-checkpoint-args",
                                             "--no-load-optim",
                                             "--no-load-rng",
                                             "--log-num-zeros-in-grad",
                                             "--log-params-norm",
                                             "--log-timers-to-tensorboard",
                                             "--log-validation-ppl-to-tensorboard",
                                             "--log-memory-to-tensorboard",
                                             "--mock-data",
                                             "--no-async-tensor-model-parallel-allreduce",
                                             "--use-mcore-models",
                                             "--transformer-impl",
                                             "--moe-grouped-gemm",  // the experts run as grouped GEMMs anyway
                                             "--moe-router-enable-expert-bias",
                                             "--moe-permute-fusion",
                                             "--moe-router-fusion",
                                             "--moe-router-pre-softmax",
                                             "--manual-gc",
                                             "--calculate-per-token-loss",
                                             "--apply-layernorm-1p",
                                             "--no-create-attention-mask-in-dataloader",
                                             "--no-mmap-bin-files",
                                             "--log-throughput",
                                             "--profile"};
// Known, change the time, not modelled.
const std::map<std::string, std::string> kUnsupported = {
    {"--fp8-param-gather", "the distributed optimizer's parameter all-gather in FP8 (it moves 16-bit parameters here)"},
    {"--mtp-num-layers", "multi-token prediction layers"},
    {"--cross-entropy-loss-fusion", "the fused cross-entropy kernel (the loss's fp32 logits are modelled unfused)"},
    {"--delay-wgrad-compute",
     "the weight gradients delayed inside a combined 1F1B pair (a pair computes as one stream)"}};

// --recompute-modules (Megatron-Core: selective recomputation only; core_attn when not given) as
// schedule.recompute_modules.
std::string recompute_modules(std::map<std::string, std::string>& values, const std::string& recompute) {
  if (!values.count("--recompute-modules")) return "";
  if (recompute != "selective")
    throw std::invalid_argument("--recompute-modules needs --recompute-granularity selective (got " + recompute + ")");
  static const std::set<std::string> known = {"core_attn", "moe_act",        "layernorm", "mla_up_proj",
                                              "mlp",       "shared_experts", "moe"};
  std::istringstream in(values["--recompute-modules"]);
  std::string out, m;
  while (in >> m) {
    if (!known.count(m))
      throw std::invalid_argument(
          "--recompute-modules: '" + m +
          "' is not one of core_attn, moe_act, layernorm, mla_up_proj, mlp, shared_experts, moe");
    out += (out.empty() ? "" : ", ") + m;
  }
  return ", recompute_modules: [" + out + "]";
}

bool takes_value(const std::string& flag) {
  static const std::set<std::string> with_value = {"--num-layers",
                                                   "--hidden-size",
                                                   "--num-attention-heads",
                                                   "--ffn-hidden-size",
                                                   "--seq-length",
                                                   "--micro-batch-size",
                                                   "--global-batch-size",
                                                   "--tensor-model-parallel-size",
                                                   "--pipeline-model-parallel-size",
                                                   "--context-parallel-size",
                                                   "--context-model-parallel-size",
                                                   "--num-layers-per-virtual-pipeline-stage",
                                                   "--num-virtual-stages-per-pipeline-rank",
                                                   "--recompute-granularity",
                                                   "--vocab-size",
                                                   "--padded-vocab-size",
                                                   "--make-vocab-size-divisible-by",
                                                   "--num-query-groups",
                                                   "--position-embedding-type",
                                                   "--normalization",
                                                   "--num-experts",
                                                   "--expert-model-parallel-size",
                                                   "--expert-tensor-parallel-size",
                                                   "--moe-router-topk",
                                                   "--moe-ffn-hidden-size",
                                                   "--moe-shared-expert-intermediate-size",
                                                   "--moe-layer-freq",
                                                   "--moe-token-dispatcher-type",
                                                   "--moe-expert-capacity-factor",
                                                   "--moe-router-num-groups",
                                                   "--moe-router-group-topk",
                                                   "--kv-channels",
                                                   "--q-lora-rank",
                                                   "--kv-lora-rank",
                                                   "--qk-head-dim",
                                                   "--qk-pos-emb-head-dim",
                                                   "--v-head-dim",
                                                   "--mtp-num-layers",
                                                   "--recompute-method",
                                                   "--recompute-num-layers",
                                                   "--decoder-first-pipeline-num-layers",
                                                   "--decoder-last-pipeline-num-layers",
                                                   "--transformer-impl",
                                                   "--attention-backend",
                                                   "--fp8-format"};
  return with_value.count(flag) > 0 || kIgnoredWithValue.count(flag) > 0;
}

int positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 1 || x > 1 << 30)
    throw std::invalid_argument(flag + ": '" + v + "' is not a positive integer");
  return static_cast<int>(x);
}

// The product of sizes that each fit an int, computed wide: `what` = the product is over `max` (docs/limits.md).
int bounded_product(const std::string& what, std::initializer_list<int> xs, long long max) {
  long long p = 1;
  for (const int x : xs) {
    p *= x;
    if (p > max) throw std::invalid_argument(what + " is over " + std::to_string(max) + " (docs/limits.md)");
  }
  return static_cast<int>(p);
}

// --cp-comm-type (one type, or one per layer: one type for all of them here) and, for a2a+p2p, its two levels
// (--hierarchical-context-parallel-sizes A R: all-to-all groups of A ranks, a ring of R) as the scenario's keys.
std::string cp_comm_args(const std::map<std::string, std::string>& values, int cp) {
  const auto it = values.find("--cp-comm-type");
  const auto hier = values.find("--hierarchical-context-parallel-sizes");
  if (it == values.end()) {
    if (hier != values.end())
      throw std::invalid_argument("--hierarchical-context-parallel-sizes needs --cp-comm-type a2a+p2p");
    return "";
  }
  std::istringstream words(it->second);
  std::string type, w;
  words >> type;
  while (words >> w)
    if (w != type)
      throw std::invalid_argument("--cp-comm-type '" + it->second +
                                  "': one type per layer is not modelled (give one type for every layer)");
  static const std::set<std::string> known = {"p2p", "a2a", "allgather", "a2a+p2p"};
  if (!known.count(type))
    throw std::invalid_argument("--cp-comm-type: '" + type + "' is not one of p2p, a2a, allgather, a2a+p2p");
  std::string out = ", cp_comm_type: \"" + type + "\"";
  if (type != "a2a+p2p") {
    if (hier != values.end())
      throw std::invalid_argument("--hierarchical-context-parallel-sizes is for --cp-comm-type a2a+p2p, not " + type);
    return out;
  }
  if (hier == values.end())
    throw std::invalid_argument("--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes A R");
  std::istringstream sizes(hier->second);
  std::vector<int> lv;
  while (sizes >> w) lv.push_back(positive("--hierarchical-context-parallel-sizes", w));
  if (lv.size() != 2 || 1LL * lv[0] * lv[1] != cp)
    throw std::invalid_argument("--hierarchical-context-parallel-sizes '" + hier->second +
                                "': two levels (all-to-all, ring) whose product is --context-parallel-size " +
                                std::to_string(cp) + " are modelled");
  return out + ", cp_a2a: " + std::to_string(lv[0]);
}

// Megatron's --moe-layer-freq: an integer N (layer i is MoE when i % N == 0) or a Python list expression of 0/1 per
// layer such as "([0]*3+[1]*58)" or "[0,1,1,1]"; what the scenario can say: dense first layers, then every n-th.
struct LayerPattern {
  int dense = 0, freq = 1;
};
LayerPattern moe_layer_pattern(const std::string& v, int layers) {
  const std::string flag = "--moe-layer-freq";
  if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) {
    const int n = positive(flag, v);
    return {0, n};
  }
  std::vector<int> bits;  // expand "[a]*n" terms and plain lists
  std::string s;
  for (char c : v)
    if (c != ' ' && c != '(' && c != ')') s += c;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '+') {
      i++;
      continue;
    }
    if (s[i] != '[') throw std::invalid_argument(flag + ": '" + v + "' is not an integer or a list of 0 and 1");
    const std::size_t close = s.find(']', i);
    if (close == std::string::npos) throw std::invalid_argument(flag + ": '" + v + "': unclosed [");
    std::vector<int> items;
    std::size_t k = i + 1;
    while (k < close) {
      const std::size_t end = std::min(s.find(',', k), close);
      const std::string item = s.substr(k, end - k);
      if (item != "0" && item != "1") throw std::invalid_argument(flag + ": '" + v + "': items must be 0 or 1");
      items.push_back(item == "1");
      k = end + 1;
    }
    i = close + 1;
    int reps = 1;
    if (i < s.size() && s[i] == '*') {
      std::size_t end = s.find_first_not_of("0123456789", i + 1);
      if (end == std::string::npos) end = s.size();
      reps = positive(flag, s.substr(i + 1, end - i - 1));
      i = end;
    }
    if (1LL * reps * static_cast<long long>(items.size()) + static_cast<long long>(bits.size()) > layers)
      throw std::invalid_argument(flag + ": '" + v + "' lists more than the " + std::to_string(layers) + " layers");
    for (int r = 0; r < reps; r++) bits.insert(bits.end(), items.begin(), items.end());
  }
  if (static_cast<int>(bits.size()) != layers)
    throw std::invalid_argument(flag + ": '" + v + "' lists " + std::to_string(bits.size()) +
                                " layers, the model has " + std::to_string(layers));
  LayerPattern p;
  while (p.dense < layers && bits[static_cast<std::size_t>(p.dense)] == 0) p.dense++;
  if (p.dense == layers) throw std::invalid_argument(flag + ": '" + v + "' has no MoE layer");
  int next = p.dense + 1;
  while (next < layers && bits[static_cast<std::size_t>(next)] == 0) next++;
  p.freq = next < layers ? next - p.dense : 1;
  for (int l = p.dense; l < layers; l++)
    if ((bits[static_cast<std::size_t>(l)] == 1) != ((l - p.dense) % p.freq == 0))
      throw std::invalid_argument(flag + ": '" + v + "': the MoE layers are not dense first layers then every " +
                                  std::to_string(p.freq) + "-th (what the scenario can describe)");
  return p;
}

// Multi-head latent attention's sizes as model keys (", kv_lora_rank: 512, ..."); Megatron's defaults where a flag is
// absent (q_lora_rank none, kv_lora_rank 32, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128).
std::string mla_args(std::map<std::string, std::string>& values) {
  if (!values.count("--multi-latent-attention")) {
    for (const char* f : {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim"})
      if (values.count(f)) throw std::invalid_argument(std::string(f) + " needs --multi-latent-attention");
    return "";
  }
  auto get = [&](const char* flag, int def) { return values.count(flag) ? positive(flag, values[flag]) : def; };
  std::ostringstream m;
  if (values.count("--q-lora-rank")) m << ", q_lora_rank: " << get("--q-lora-rank", 1);
  m << ", kv_lora_rank: " << get("--kv-lora-rank", 32) << ", head_dim: " << get("--qk-head-dim", 128)
    << ", qk_rope_head_dim: " << get("--qk-pos-emb-head-dim", 64) << ", v_head_dim: " << get("--v-head-dim", 128);
  return m.str();
}

// The mixture-of-experts arguments as scenario text: model keys (", num_experts: 8, ..."), training keys and ep.
struct MoeArgs {
  std::string model, training;
  int ep = 1, etp = 1;
  std::vector<std::string> not_modelled;  // for MegatronImport::unsupported
};
MoeArgs moe_args(std::map<std::string, std::string>& values, int layers, int tp) {
  MoeArgs a;
  auto get = [&](const char* flag, int def) { return values.count(flag) ? positive(flag, values[flag]) : def; };
  if (!values.count("--num-experts")) {
    for (const char* f : {"--expert-model-parallel-size", "--expert-tensor-parallel-size", "--moe-router-topk",
                          "--moe-ffn-hidden-size"})
      if (values.count(f)) throw std::invalid_argument(std::string(f) + " needs --num-experts (a mixture of experts)");
    return a;
  }
  std::ostringstream m;
  m << ", num_experts: " << get("--num-experts", 1) << ", moe_top_k: " << get("--moe-router-topk", 2);
  if (values.count("--moe-ffn-hidden-size"))
    m << ", moe_ffn_hidden: " << get("--moe-ffn-hidden-size", 1);
  else if (values.count("--ffn-hidden-size"))
    m << ", moe_ffn_hidden: " << get("--ffn-hidden-size", 1);
  else
    throw std::invalid_argument("--num-experts needs --moe-ffn-hidden-size or --ffn-hidden-size (an expert's size)");
  if (values.count("--moe-shared-expert-intermediate-size"))
    m << ", moe_shared_ffn_hidden: " << get("--moe-shared-expert-intermediate-size", 1);
  if (values.count("--moe-layer-freq")) {
    const LayerPattern p = moe_layer_pattern(values["--moe-layer-freq"], layers);
    if (p.dense > 0) m << ", moe_dense_layers: " << p.dense;
    if (p.freq > 1) m << ", moe_layer_freq: " << p.freq;
  }
  a.model = m.str();
  a.ep = get("--expert-model-parallel-size", 1);
  a.etp = get("--expert-tensor-parallel-size", tp);  // Megatron-Core's default: the tensor-parallel size
  // alltoall, allgather (not modelled: the all-to-all's bytes are used) or flex with --moe-enable-deepep.
  const std::string kind =
      values.count("--moe-token-dispatcher-type") ? values["--moe-token-dispatcher-type"] : "allgather";
  if (kind != "alltoall" && kind != "allgather" && kind != "flex")
    throw std::invalid_argument("--moe-token-dispatcher-type: '" + kind + "' is not alltoall, allgather or flex");
  if (kind == "allgather") a.not_modelled.push_back("--moe-token-dispatcher-type allgather: priced as the all-to-all");
  std::ostringstream t;
  t << ", moe_dispatcher: " << (values.count("--moe-enable-deepep") ? "deepep" : "alltoall");
  // Without forced balance the router is a trained one: its load imbalance (docs/moe.md, "Load imbalance").
  t << ", moe_routing: " << (values.count("--moe-router-force-load-balancing") ? "balanced" : "trained");
  if (values.count("--moe-expert-capacity-factor")) {
    const std::string c = values["--moe-expert-capacity-factor"];
    char* end = nullptr;
    const double x = std::strtod(c.c_str(), &end);
    if (c.empty() || *end != '\0' || !(x > 0) || x > 1000)
      throw std::invalid_argument("--moe-expert-capacity-factor: '" + c + "' is not a number in (0, 1000]");
    t << ", moe_capacity_factor: " << c;
    if (values.count("--moe-pad-expert-input-to-capacity")) t << ", moe_pad_to_capacity: true";
  } else if (values.count("--moe-pad-expert-input-to-capacity")) {
    throw std::invalid_argument("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
  }
  // Group-limited routing (DeepSeek-V3's node-limited routing): both flags or neither.
  if (values.count("--moe-router-num-groups") != values.count("--moe-router-group-topk"))
    throw std::invalid_argument("--moe-router-num-groups and --moe-router-group-topk go together");
  if (values.count("--moe-router-num-groups"))
    t << ", moe_router_groups: " << get("--moe-router-num-groups", 0)
      << ", moe_router_group_topk: " << get("--moe-router-group-topk", 0);
  a.training = t.str();
  return a;
}

// The pretrain_gpt.py flag behind a key of the generated scenario; nullptr when none gives it alone.
const char* megatron_flag(const std::string& key) {
  static const std::pair<const char*, const char*> kFlags[] = {{"model.layers", "--num-layers"},
                                                               {"model.hidden", "--hidden-size"},
                                                               {"model.heads", "--num-attention-heads"},
                                                               {"model.ffn_hidden", "--ffn-hidden-size"},
                                                               {"model.vocab", "--vocab-size"},
                                                               {"model.seq_len", "--seq-length"},
                                                               {"model.head_dim", "--kv-channels"},
                                                               {"model.query_groups", "--num-query-groups"},
                                                               {"parallel.tp", "--tensor-model-parallel-size"},
                                                               {"parallel.pp", "--pipeline-model-parallel-size"},
                                                               {"parallel.cp", "--context-parallel-size"},
                                                               {"parallel.ep", "--expert-model-parallel-size"},
                                                               {"parallel.etp", "--expert-tensor-parallel-size"},
                                                               {"parallel.micro_batch_size", "--micro-batch-size"},
                                                               {"parallel.global_batch", "--global-batch-size"},
                                                               {"parallel.dp", "--nodes (of this command)"},
                                                               {"cluster.nodes", "--nodes (of this command)"}};
  for (const auto& [k, flag] : kFlags)
    if (key == k) return flag;
  return nullptr;
}

// The loader's checks of the generated YAML, told in the launch's terms: "<import megatron>:4:42: model.heads: ..."
// would point at a line of a file the user never saw.
void check_in_flag_terms(const std::string& yaml) {
  const std::string source = "<import megatron>";
  try {
    parse_scenario(yaml, source);
  } catch (const ScenarioError& e) {
    const std::string m = e.what();
    if (m.rfind(source + ":", 0) != 0) throw;
    const std::size_t at = m.find(": ", source.size() + 1);  // past "line:column"
    const std::size_t key_end = at == std::string::npos ? at : m.find(": ", at + 2);
    if (key_end == std::string::npos) throw;
    const std::string key = m.substr(at + 2, key_end - at - 2);
    const char* flag = megatron_flag(key);
    throw std::invalid_argument("import megatron: " + (flag ? std::string(flag) + " (scenario key " + key + ")" : key) +
                                ": " + m.substr(key_end + 2));
  }
}

// Megatron-Core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the embedding
// and the loss count as a layer each, the total split evenly over the pp * v virtual stages (it must divide), the
// first stage's share less the embedding, the last's less the loss. Empty without the flags.
std::vector<int> accounted_split(const std::map<std::string, std::string>& values, int layers, int pp, int v) {
  const int embedding = values.count("--account-for-embedding-in-pipeline-split") ? 1 : 0,
            loss = values.count("--account-for-loss-in-pipeline-split") ? 1 : 0;
  if (embedding + loss == 0) return {};
  const long long stages = 1LL * pp * v, total = 1LL * layers + embedding + loss;
  if (total % stages != 0)
    throw std::invalid_argument("--account-for-*-in-pipeline-split: " + std::to_string(layers) + " layers + " +
                                std::to_string(embedding + loss) +
                                " do not split evenly over pp x v = " + std::to_string(stages) + " virtual stages");
  std::vector<int> out(static_cast<std::size_t>(stages), static_cast<int>(total / stages));
  out.front() -= embedding, out.back() -= loss;
  return out;
}

}  // namespace

MegatronImport import_megatron(const std::vector<std::string>& args, const MegatronImportOptions& opt) {
  MegatronImport out;
  std::map<std::string, std::string> values;  // known flags -> value ("" for switches)
  for (std::size_t i = 0; i < args.size(); i++) {
    std::string flag = args[i], value;
    bool has_value = false;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag.rfind("--", 0) != 0) {
      out.unknown.push_back(flag);  // a stray positional word
      continue;
    }
    // argparse's nargs='*' / '+' flags: every following word up to the next flag, joined by spaces.
    static const std::set<std::string> list_valued = {"--recompute-modules", "--cp-comm-type",
                                                      "--hierarchical-context-parallel-sizes"};
    if (list_valued.count(flag)) {
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) value += (value.empty() ? "" : " ") + args[++i];
      if (value.empty()) throw std::invalid_argument(flag + ": missing value");
      values[flag] = value;
      continue;
    }
    const bool known_value = takes_value(flag);
    if (known_value && !has_value) {
      if (i + 1 >= args.size()) throw std::invalid_argument(flag + ": missing value");
      value = args[++i];
      has_value = true;
    }
    // argparse's nargs flags among the ignored ones (--rampup-batch-size 16 16 5859375, --data-path 0.2 A 0.3 B):
    // every following word up to the next flag is theirs.
    if (kIgnoredWithValue.count(flag) && has_value)
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) value += " " + args[++i];
    if (kIgnoredWithValue.count(flag) || kIgnoredFlags.count(flag)) {
      out.ignored.push_back(flag + (has_value ? " " + value : ""));
      continue;
    }
    if (const auto u = kUnsupported.find(flag); u != kUnsupported.end()) {
      out.unsupported.push_back(flag + (has_value ? " " + value : "") + ": " + u->second);
      continue;
    }
    static const std::set<std::string> switches = {"--sequence-parallel",
                                                   "--bf16",
                                                   "--fp16",
                                                   "--recompute-activations",
                                                   "--checkpoint-activations",
                                                   "--grad-reduce-in-bf16",
                                                   "--untie-embeddings-and-output-weights",
                                                   "--use-flash-attn",
                                                   "--no-scatter-gather-tensors-in-pipeline",
                                                   "--fp32",
                                                   "--group-query-attention",
                                                   "--swiglu",
                                                   "--disable-bias-linear",
                                                   "--use-distributed-optimizer",
                                                   "--use-torch-fsdp2",
                                                   "--overlap-grad-reduce",
                                                   "--overlap-param-gather",
                                                   "--tp-comm-overlap",
                                                   "--overlap-moe-expert-parallel-comm",
                                                   "--accumulate-allreduce-grads-in-fp32",
                                                   "--moe-enable-deepep",
                                                   "--moe-router-force-load-balancing",
                                                   "--moe-pad-expert-input-to-capacity",
                                                   "--account-for-embedding-in-pipeline-split",
                                                   "--account-for-loss-in-pipeline-split",
                                                   "--multi-latent-attention"};  // the model's assumption
    if (!known_value && !switches.count(flag)) {
      // Unknown: every following word up to the next flag is its value (a flag of one or of several values), so
      // that none is misread as a positional word.
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        value += (has_value ? " " : "") + args[++i], has_value = true;
      out.unknown.push_back(flag + (has_value ? " " + value : ""));
      continue;
    }
    // argparse's store_true switches take no value: "--bf16=false" is an error there, not bf16 off.
    if (switches.count(flag) && has_value)
      throw std::invalid_argument(flag + "=" + value + ": " + flag + " is a switch and takes no value");
    values[flag] = value;
  }
  auto need = [&](const char* flag) {
    const auto it = values.find(flag);
    if (it == values.end()) throw std::invalid_argument(std::string(flag) + " is required (the model or batch size)");
    return positive(flag, it->second);
  };
  auto get = [&](const char* flag, int def) {
    const auto it = values.find(flag);
    return it == values.end() ? def : positive(flag, it->second);
  };
  const int layers = need("--num-layers"), hidden = need("--hidden-size"), heads = need("--num-attention-heads");
  const int seq = need("--seq-length"), mbs = need("--micro-batch-size"), gbs = need("--global-batch-size");
  const int tp = get("--tensor-model-parallel-size", 1), pp = get("--pipeline-model-parallel-size", 1);
  const int cp = std::max(get("--context-parallel-size", 1), get("--context-model-parallel-size", 1));
  const std::optional<ClusterSpec> cluster = cluster_preset(opt.cluster);
  if (!cluster) throw std::invalid_argument("--cluster: unknown cluster preset '" + opt.cluster + "'");
  const int gpn = cluster->gpus_per_node;
  // One data-parallel replica (Megatron: world = tp * cp * dp * pp), at most the GPUs of the largest cluster.
  const int model_gpus = bounded_product("tp x pp x cp = " + std::to_string(1LL * tp * pp * cp) + " GPUs", {tp, pp, cp},
                                         static_cast<long long>(key_range("cluster.nodes")->max) * gpn);
  const int nodes = opt.nodes > 0 ? opt.nodes : (model_gpus + gpn - 1) / gpn;
  const int gpus = nodes * gpn;
  if (gpus % model_gpus != 0)
    throw std::invalid_argument(std::to_string(nodes) + " nodes x " + std::to_string(gpn) +
                                " GPUs do not divide into tp " + std::to_string(tp) + " x pp " + std::to_string(pp) +
                                (cp > 1 ? " x cp " + std::to_string(cp) : std::string()) + " (give --nodes)");
  const int dp = gpus / model_gpus;
  int v = 1;
  // Virtual stages per rank: Megatron-Core's count, or the older layers per virtual stage.
  if (values.count("--num-virtual-stages-per-pipeline-rank")) {
    if (values.count("--num-layers-per-virtual-pipeline-stage"))
      throw std::invalid_argument(
          "--num-virtual-stages-per-pipeline-rank and --num-layers-per-virtual-pipeline-stage: give one of them");
    v = positive("--num-virtual-stages-per-pipeline-rank", values["--num-virtual-stages-per-pipeline-rank"]);
  }
  if (values.count("--num-layers-per-virtual-pipeline-stage")) {
    const int per =
        positive("--num-layers-per-virtual-pipeline-stage", values["--num-layers-per-virtual-pipeline-stage"]);
    if (1LL * pp * per > layers || layers % (pp * per) != 0)
      throw std::invalid_argument("--num-layers-per-virtual-pipeline-stage " + std::to_string(per) + ": " +
                                  std::to_string(layers) + " layers do not split into pp " + std::to_string(pp) +
                                  " x chunks of " + std::to_string(per));
    v = layers / (pp * per);
  }
  const std::vector<int> accounted = accounted_split(values, layers, pp, v);
  // Uneven first / last pipeline stages (Megatron-Core): the other stages split the remaining layers evenly.
  std::vector<int> stage_layers = accounted;
  if (values.count("--decoder-first-pipeline-num-layers") || values.count("--decoder-last-pipeline-num-layers")) {
    if (!accounted.empty())
      throw std::invalid_argument(
          "--decoder-first/last-pipeline-num-layers with --account-for-*-in-pipeline-split: "
          "give one way of splitting");
    const int first = get("--decoder-first-pipeline-num-layers", 0),
              last = get("--decoder-last-pipeline-num-layers", 0);
    const int fixed = (first > 0) + (last > 0), rest = layers - first - last;
    if (v > 1 || pp < 2 || pp - fixed < 0 || rest < pp - fixed || (pp > fixed && rest % (pp - fixed) != 0) ||
        (pp == fixed && rest != 0))
      throw std::invalid_argument("--decoder-first/last-pipeline-num-layers: " + std::to_string(first) + " / " +
                                  std::to_string(last) + " of " + std::to_string(layers) + " layers leave " +
                                  std::to_string(rest) + " that do not split evenly over the other " +
                                  std::to_string(pp - fixed) + " of pp " + std::to_string(pp) +
                                  " stages (or a virtual pipeline is set: not modelled with uneven stages)");
    for (int r = 0; r < pp; r++)
      stage_layers.push_back(r == 0 && first > 0 ? first : r == pp - 1 && last > 0 ? last : rest / (pp - fixed));
  }
  // Megatron-LM pads the tokenizer's vocabulary to a multiple of make-vocab-size-divisible-by (128) x tp
  // (_vocab_size_with_padding); --padded-vocab-size is that padded size already.
  const int pad = bounded_product("--make-vocab-size-divisible-by x tp (the vocabulary padding)",
                                  {get("--make-vocab-size-divisible-by", 128), tp},
                                  static_cast<long long>(key_range("model.vocab")->max));
  int vocab = get("--padded-vocab-size", 51200);
  if (values.count("--vocab-size")) vocab = (get("--vocab-size", 1) + pad - 1) / pad * pad;
  std::string dtype = "fp32";
  if (values.count("--bf16")) dtype = "bf16";
  if (values.count("--fp16")) dtype = "fp16";
  if (values.count("--bf16") && values.count("--fp16"))
    throw std::invalid_argument("import megatron: --fp16 and --bf16 together (Megatron-LM refuses the pair)");
  // Megatron-LM's arguments.py: bf16 training accumulates and all-reduces gradients in fp32 whatever the flag says.
  // --grad-reduce-in-bf16 turns that off (arguments.py: accumulate_allreduce_grads_in_fp32 = False).
  const bool grad_fp32 = !values.count("--grad-reduce-in-bf16") &&
                         (values.count("--accumulate-allreduce-grads-in-fp32") || values.count("--bf16"));
  // Transformer Engine FP8 (core/cost/fp8.h): hybrid = E4M3 forward, E5M2 gradients; e4m3 everywhere. Same cost here.
  if (values.count("--fp8-format")) {
    const std::string f = values["--fp8-format"];
    if (f != "hybrid" && f != "e4m3") throw std::invalid_argument("--fp8-format: '" + f + "' is not hybrid or e4m3");
    dtype = "fp8";
  }
  std::string recompute = "none";
  if (values.count("--recompute-activations")) recompute = "selective";  // Megatron's alias for selective
  if (values.count("--checkpoint-activations")) recompute = "full";      // older Megatron-LM: every layer checkpointed
  if (values.count("--recompute-granularity")) {
    const std::string g = values["--recompute-granularity"];
    if (g != "full" && g != "selective")
      throw std::invalid_argument("--recompute-granularity: '" + g + "' is not full or selective");
    recompute = g;
  }
  const std::string modules = recompute_modules(values, recompute);
  // --recompute-method / --recompute-num-layers shape full recomputation only (Megatron reads them with full
  // granularity): uniform checkpoints every layer's input in groups (all layers recomputed, as modelled); block
  // recomputes only the first N layers of a stage, which the scenario cannot say.
  for (const char* f : {"--recompute-method", "--recompute-num-layers"}) {
    if (!values.count(f)) continue;
    const std::string arg = std::string(f) + " " + values[f];
    if (recompute != "full")
      out.ignored.push_back(arg);
    else if (std::string(f) == "--recompute-method" && values[f] == "block")
      out.unsupported.push_back(arg + ": partial recomputation (the first N layers of each stage)");
  }
  const bool gqa = values.count("--group-query-attention") != 0;
  const int groups = gqa ? get("--num-query-groups", 1) : heads;
  std::string norm = "layernorm";
  if (values.count("--normalization")) {
    const std::string n = values["--normalization"];
    if (n != "LayerNorm" && n != "RMSNorm")
      throw std::invalid_argument("--normalization: '" + n + "' is not LayerNorm or RMSNorm");
    norm = n == "RMSNorm" ? "rmsnorm" : "layernorm";
  }
  std::string position = "learned";
  if (values.count("--position-embedding-type")) {
    const std::string p = values["--position-embedding-type"];
    if (p != "learned_absolute" && p != "rope")
      throw std::invalid_argument("--position-embedding-type: '" + p + "' is not learned_absolute or rope");
    position = p == "rope" ? "rope" : "learned";
  }
  // PyTorch's FSDP2 in Megatron-LM shards the optimizer state itself (training.fsdp); it replaces the distributed
  // optimizer.
  const bool fsdp = values.count("--use-torch-fsdp2") != 0;
  const bool dist_opt = values.count("--use-distributed-optimizer") != 0 && !fsdp;
  if (fsdp && values.count("--use-distributed-optimizer"))
    out.ignored.push_back("--use-distributed-optimizer (with --use-torch-fsdp2, FSDP shards the optimizer state)");
  const MoeArgs moe = moe_args(values, layers, tp);
  out.unsupported.insert(out.unsupported.end(), moe.not_modelled.begin(), moe.not_modelled.end());

  std::ostringstream y;
  y << "# Imported from a Megatron-LM pretrain_gpt.py command line (pipescope import megatron).\n";
  if (!values.count("--vocab-size") && !values.count("--padded-vocab-size"))
    y << "# vocab: not in the arguments (set by the tokenizer); 51200, GPT-2's padded BPE vocabulary, assumed.\n";
  for (const auto& u : out.unsupported) y << "# not modelled: " << u << "\n";
  for (const auto& u : out.unknown) y << "# unknown argument: " << u << "\n";
  if (!out.ignored.empty()) {
    y << "# ignored (no effect on an iteration's time):";
    for (const auto& g : out.ignored) y << " " << g;
    y << "\n";
  }
  y << "name: " << opt.name << "\n";
  y << "model: {layers: " << layers << ", hidden: " << hidden << ", heads: " << heads;
  if (values.count("--ffn-hidden-size"))
    y << ", ffn_hidden: " << positive("--ffn-hidden-size", values["--ffn-hidden-size"]);
  y << ", vocab: " << vocab << ", seq_len: " << seq
    << ", tied_embeddings: " << (values.count("--untie-embeddings-and-output-weights") ? "false" : "true")
    << ", query_groups: " << groups << ", ffn: " << (values.count("--swiglu") ? "swiglu" : "gelu") << ", norm: " << norm
    << ", position: " << position << ", linear_bias: " << (values.count("--disable-bias-linear") ? "false" : "true");
  if (values.count("--kv-channels") && !values.count("--multi-latent-attention"))
    y << ", head_dim: " << positive("--kv-channels", values["--kv-channels"]);
  y << mla_args(values);
  y << moe.model << "}\n";
  y << "cluster: {preset: " << opt.cluster << ", nodes: " << nodes << "}\n";
  y << "parallel: {dp: " << dp << ", pp: " << pp << ", tp: " << tp;
  if (cp > 1) y << ", cp: " << cp << cp_comm_args(values, cp);  // Transformer Engine's attention (flash kernels)
  if (moe.ep > 1) y << ", ep: " << moe.ep;
  if (moe.etp > 1) y << ", etp: " << moe.etp;
  y << ", v: " << v << ", micro_batch_size: " << mbs << ", global_batch: " << gbs
    << ", sequence_parallel: " << (values.count("--sequence-parallel") ? "true" : "false");
  if (!stage_layers.empty()) {
    y << ", stage_layers: [";
    for (std::size_t i = 0; i < stage_layers.size(); i++) y << (i ? ", " : "") << stage_layers[i];
    y << "]";
  }
  y << "}\n";
  y << "schedule: {kind: " << to_string(v > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB)
    << ", recompute: " << recompute << modules
    << ", scatter_gather: " << (values.count("--no-scatter-gather-tensors-in-pipeline") ? "false" : "true")
    << (values.count("--overlap-moe-expert-parallel-comm") ? ", overlap_moe_a2a: true" : "") << "}\n";
  // Context parallelism and multi-head latent attention run Transformer Engine's fused attention, whatever
  // --use-flash-attn says.
  // --attention-backend (Megatron-Core): flash and fused (cuDNN) are fused attention kernels, auto picks one on the
  // GPUs that run them; unfused and local run the attention core as separate kernels.
  bool backend_fused = false;
  if (values.count("--attention-backend")) {
    const std::string b = values["--attention-backend"];
    if (b != "flash" && b != "fused" && b != "auto" && b != "unfused" && b != "local")
      throw std::invalid_argument("--attention-backend: '" + b + "' is not flash, fused, unfused, local or auto");
    backend_fused = b == "flash" || b == "fused" || b == "auto";
  }
  const bool flash =
      values.count("--use-flash-attn") || backend_fused || cp > 1 || values.count("--multi-latent-attention");
  // Megatron-LM turns the userbuffers overlap off at tp = 1 and asserts sequence parallelism with it.
  const bool userbuffers = values.count("--tp-comm-overlap") && tp > 1;
  if (userbuffers && !values.count("--sequence-parallel"))
    throw std::invalid_argument("--tp-comm-overlap needs --sequence-parallel (Megatron-LM asserts it)");
  if (values.count("--tp-comm-overlap") && tp == 1) out.ignored.push_back("--tp-comm-overlap (off at tp 1)");
  y << "training: {dtype: " << dtype << ", flash_attention: " << (flash ? "true" : "false")
    << ", grad_fp32: " << (grad_fp32 ? "true" : "false") << ", distributed_optimizer: " << (dist_opt ? "true" : "false")
    << (fsdp ? ", fsdp: true" : "")
    << ", overlap_grad_reduce: " << (values.count("--overlap-grad-reduce") ? "true" : "false")
    << ", overlap_param_gather: " << (dist_opt && values.count("--overlap-param-gather") ? "true" : "false")
    << (userbuffers ? ", tp_comm_overlap: true" : "") << moe.training << "}\n";
  y << "sim: {placement: megatron, p2p: blocking}  # Megatron-LM's p2p calls block\n";
  out.yaml = y.str();
  check_in_flag_terms(out.yaml);  // the loader's checks: divisibility, m % pp, dtype, ...
  return out;
}

}  // namespace pipescope
