#include "core/model/megatron_import.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

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
                                                 "--fp8-amax-compute-algo"};
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
                                             "--transformer-impl"};
// Known, change the time, not modelled.
const std::map<std::string, std::string> kUnsupported = {
    {"--num-experts", "mixture of experts"},
    {"--expert-model-parallel-size", "expert parallelism"},
    {"--recompute-method", "partial recomputation (recompute is all layers or none)"},
    {"--recompute-num-layers", "partial recomputation"}};

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
                                                   "--recompute-granularity",
                                                   "--vocab-size",
                                                   "--padded-vocab-size",
                                                   "--make-vocab-size-divisible-by",
                                                   "--num-query-groups",
                                                   "--position-embedding-type",
                                                   "--normalization",
                                                   "--num-experts",
                                                   "--expert-model-parallel-size",
                                                   "--recompute-method",
                                                   "--recompute-num-layers",
                                                   "--decoder-first-pipeline-num-layers",
                                                   "--decoder-last-pipeline-num-layers",
                                                   "--transformer-impl",
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
    const bool known_value = takes_value(flag);
    if (known_value && !has_value) {
      if (i + 1 >= args.size()) throw std::invalid_argument(flag + ": missing value");
      value = args[++i];
      has_value = true;
    }
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
                                                   "--untie-embeddings-and-output-weights",
                                                   "--use-flash-attn",
                                                   "--no-scatter-gather-tensors-in-pipeline",
                                                   "--fp32",
                                                   "--group-query-attention",
                                                   "--swiglu",
                                                   "--disable-bias-linear",
                                                   "--use-distributed-optimizer",
                                                   "--overlap-grad-reduce",
                                                   "--overlap-param-gather",
                                                   "--accumulate-allreduce-grads-in-fp32"};
    if (!known_value && !switches.count(flag)) {
      // Unknown: take the next word as its value when it is not a flag, so that it is not misread as one.
      if (!has_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) value = args[++i], has_value = true;
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
  if (values.count("--num-layers-per-virtual-pipeline-stage")) {
    const int per =
        positive("--num-layers-per-virtual-pipeline-stage", values["--num-layers-per-virtual-pipeline-stage"]);
    if (1LL * pp * per > layers || layers % (pp * per) != 0)
      throw std::invalid_argument("--num-layers-per-virtual-pipeline-stage " + std::to_string(per) + ": " +
                                  std::to_string(layers) + " layers do not split into pp " + std::to_string(pp) +
                                  " x chunks of " + std::to_string(per));
    v = layers / (pp * per);
  }
  // Uneven first / last pipeline stages (Megatron-Core): the other stages split the remaining layers evenly.
  std::vector<int> stage_layers;
  if (values.count("--decoder-first-pipeline-num-layers") || values.count("--decoder-last-pipeline-num-layers")) {
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
  const bool grad_fp32 = values.count("--accumulate-allreduce-grads-in-fp32") || values.count("--bf16");
  // Transformer Engine FP8 (core/cost/fp8.h): hybrid = E4M3 forward, E5M2 gradients; e4m3 everywhere. Same cost here.
  if (values.count("--fp8-format")) {
    const std::string f = values["--fp8-format"];
    if (f != "hybrid" && f != "e4m3") throw std::invalid_argument("--fp8-format: '" + f + "' is not hybrid or e4m3");
    dtype = "fp8";
  }
  std::string recompute = "none";
  if (values.count("--recompute-activations")) recompute = "selective";  // Megatron's alias for selective
  if (values.count("--recompute-granularity")) {
    const std::string g = values["--recompute-granularity"];
    if (g != "full" && g != "selective")
      throw std::invalid_argument("--recompute-granularity: '" + g + "' is not full or selective");
    recompute = g;
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
  const bool dist_opt = values.count("--use-distributed-optimizer") != 0;

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
    << ", position: " << position << ", linear_bias: " << (values.count("--disable-bias-linear") ? "false" : "true")
    << "}\n";
  y << "cluster: {preset: " << opt.cluster << ", nodes: " << nodes << "}\n";
  y << "parallel: {dp: " << dp << ", pp: " << pp << ", tp: " << tp;
  if (cp > 1) y << ", cp: " << cp;  // context parallelism: Transformer Engine's ring attention (flash kernels)
  y << ", v: " << v << ", micro_batch_size: " << mbs << ", global_batch: " << gbs
    << ", sequence_parallel: " << (values.count("--sequence-parallel") ? "true" : "false");
  if (!stage_layers.empty()) {
    y << ", stage_layers: [";
    for (std::size_t i = 0; i < stage_layers.size(); i++) y << (i ? ", " : "") << stage_layers[i];
    y << "]";
  }
  y << "}\n";
  y << "schedule: {kind: " << to_string(v > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB)
    << ", recompute: " << recompute
    << ", scatter_gather: " << (values.count("--no-scatter-gather-tensors-in-pipeline") ? "false" : "true") << "}\n";
  // Context parallelism runs Transformer Engine's fused attention, whatever --use-flash-attn says.
  const bool flash = values.count("--use-flash-attn") || cp > 1;
  y << "training: {dtype: " << dtype << ", flash_attention: " << (flash ? "true" : "false")
    << ", grad_fp32: " << (grad_fp32 ? "true" : "false") << ", distributed_optimizer: " << (dist_opt ? "true" : "false")
    << ", overlap_grad_reduce: " << (values.count("--overlap-grad-reduce") ? "true" : "false")
    << ", overlap_param_gather: " << (dist_opt && values.count("--overlap-param-gather") ? "true" : "false") << "}\n";
  y << "sim: {placement: megatron, p2p: blocking}  # Megatron-LM's p2p calls block\n";
  out.yaml = y.str();
  parse_scenario(out.yaml, "<import megatron>");  // the loader's checks: divisibility, m % pp, dtype, ...
  return out;
}

}  // namespace pipescope
