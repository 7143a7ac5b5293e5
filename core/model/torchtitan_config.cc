#include "core/model/torchtitan_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"

namespace pipescope {
namespace {

// TorchTitan's model flavors that have a pipescope preset ([model] name, flavor; torchtitan/models/*/__init__.py).
struct Flavor {
  const char* name;
  const char* flavor;
  const char* preset;
};
constexpr Flavor kFlavors[] = {{"llama3", "8B", "llama3-8b"},
                               {"llama3", "70B", "llama3-70b"},
                               {"llama3", "405B", "llama3-405b"},
                               {"deepseek_v3", "671B", "deepseek-v3"}};

// TorchTitan's pipeline schedule names (torch.distributed.pipelining) and pipescope's kinds; multi-stage schedules
// hold several stages per rank (two by default).
struct TitanSchedule {
  const char* name;
  ScheduleKind kind;
  bool multi_stage;
};
constexpr TitanSchedule kSchedules[] = {{"GPipe", ScheduleKind::GPipe, false},
                                        {"1F1B", ScheduleKind::OneFOneB, false},
                                        {"Interleaved1F1B", ScheduleKind::Interleaved, true},
                                        {"ZBVZeroBubble", ScheduleKind::ZeroBubbleV, true},
                                        {"DualPipeV", ScheduleKind::DualPipeV, true}};
bool multi_stage_name(const std::string& n) { return n == "LoopedBFS" || n == "InterleavedZeroBubble"; }

// Sections whose keys never change an iteration's time.
const std::set<std::string> kIgnoredSections = {
    "job",        "profiling", "metrics",         "optimizer",    "lr_scheduler",      "checkpoint",
    "validation", "comm",      "fault_tolerance", "experimental", "memory_estimation", "dataloader"};
// Keys read (section.key); a known section's other keys are ignored, with the reason "no effect on the time".
const std::set<std::string> kRead = {"model.name",
                                     "model.flavor",
                                     "model.converters",
                                     "training.local_batch_size",
                                     "training.global_batch_size",
                                     "training.seq_len",
                                     "training.mixed_precision_param",
                                     "training.mixed_precision_reduce",
                                     "parallelism.data_parallel_replicate_degree",
                                     "parallelism.data_parallel_shard_degree",
                                     "parallelism.fsdp_reshard_after_forward",
                                     "parallelism.tensor_parallel_degree",
                                     "parallelism.enable_async_tensor_parallel",
                                     "parallelism.context_parallel_degree",
                                     "parallelism.pipeline_parallel_degree",
                                     "parallelism.pipeline_parallel_schedule",
                                     "parallelism.pipeline_parallel_schedule_csv",
                                     "parallelism.pipeline_parallel_microbatch_size",
                                     "parallelism.pipeline_parallel_layers_per_stage",
                                     "parallelism.pipeline_parallel_first_stage_less_layers",
                                     "parallelism.pipeline_parallel_last_stage_less_layers",
                                     "parallelism.expert_parallel_degree",
                                     "parallelism.expert_tensor_parallel_degree",
                                     "parallelism.expert_parallel_comm_backend",
                                     "activation_checkpoint.mode",
                                     "activation_checkpoint.selective_ac_option",
                                     "compile.enable"};
// Read, and what pipescope cannot model as TorchTitan runs it.
const std::map<std::string, std::string> kUnsupported = {
    {"parallelism.module_fqns_per_model_part", "an explicit module split (give parallel.stage_layers)"}};
const std::set<std::string> kKnownSections = {"model",   "training", "parallelism", "activation_checkpoint",
                                              "compile", "float8",   "quantize",    "mx"};

using Keys = std::map<std::string, std::string>;  // "section.key" -> value as text (arrays joined by ",")

void flatten(const toml::table& t, const std::string& prefix, Keys& out) {
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = v.as_table()) {
      flatten(*sub, key, out);
    } else if (const toml::array* a = v.as_array()) {
      std::string joined;
      for (const auto& e : *a) joined += (joined.empty() ? "" : ",") + e.value_or(std::string());
      out[key] = joined;
    } else if (v.is_string()) {
      out[key] = *v.value<std::string>();
    } else if (v.is_boolean()) {
      out[key] = *v.value<bool>() ? "true" : "false";
    } else if (v.is_integer()) {
      out[key] = std::to_string(*v.value<std::int64_t>());
    } else if (v.is_floating_point()) {
      std::ostringstream s;
      s << *v.value<double>();
      out[key] = s.str();
    } else {
      out[key] = "?";
    }
  }
}

class Mapper {
 public:
  Mapper(Keys keys, std::string source, const TorchTitanImportOptions& opt)
      : k_(std::move(keys)), source_(std::move(source)), opt_(opt) {}

  TorchTitanImport run() {
    sort_keys();
    const Layout l = layout();
    const std::string rc = recompute(), dt = dtype();  // before the header: they add to the lists it prints
    std::ostringstream y;
    header(y);
    y << "name: " << opt_.name << "\n";
    y << "model: {preset: " << preset() << ", seq_len: " << num("training.seq_len", 2048) << "}\n";
    y << "cluster: {preset: " << opt_.cluster << ", nodes: " << l.nodes << "}\n";
    y << "parallel: {dp: " << l.dp << ", pp: " << l.pp << ", tp: " << l.tp;
    if (l.cp > 1) y << ", cp: " << l.cp;
    if (l.ep > 1) y << ", ep: " << l.ep;
    if (l.etp > 1) y << ", etp: " << l.etp;
    y << ", v: " << l.v << ", micro_batch_size: " << l.mbs << ", global_batch: " << l.global
      << ", sequence_parallel: " << (l.tp > 1 ? "true" : "false");
    if (!l.stage_layers.empty()) {
      y << ", stage_layers: [";
      for (std::size_t i = 0; i < l.stage_layers.size(); i++) y << (i ? ", " : "") << l.stage_layers[i];
      y << "]";
    }
    y << "}\n";
    y << "schedule: {kind: " << to_string(l.kind) << ", recompute: " << rc;
    if (!l.csv.empty()) y << ", file: " << l.csv;
    y << "}\n";
    y << "training: {dtype: " << dt << ", flash_attention: true, grad_fp32: "
      << (text("training.mixed_precision_reduce", "float32") == "float32" ? "true" : "false")
      << ", fsdp: " << (l.shard > 1 ? "true" : "false");
    if (l.reshard) y << ", fsdp_reshard_after_forward: true";
    // Async tensor parallelism (collective matmuls: each all-gather / reduce-scatter decomposed beside its matmul),
    // the decomposition of Megatron's userbuffers overlap.
    if (l.tp > 1 && text("parallelism.enable_async_tensor_parallel", "false") == "true") y << ", tp_comm_overlap: true";
    if (text("parallelism.expert_parallel_comm_backend", "standard") == "deepep") y << ", moe_dispatcher: deepep";
    y << "}\n";
    y << "sim: {placement: megatron}  # TorchTitan's device mesh: tp innermost, then cp, dp, pp (Megatron's order)\n";
    out_.yaml = y.str();
    parse_scenario(out_.yaml, source_ + " (imported)");  // the loader's checks
    return out_;
  }

 private:
  struct Layout {
    int tp = 1, pp = 1, cp = 1, dp = 1, shard = 1, ep = 1, etp = 1, v = 1, mbs = 1, global = 1, nodes = 1;
    ScheduleKind kind = ScheduleKind::OneFOneB;
    std::vector<int> stage_layers;
    std::string csv;
    bool reshard = false;  // FSDP resharding after every forward (training.fsdp_reshard_after_forward)
  };

  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    throw std::invalid_argument(source_ + ": " + key + ": " + why);
  }
  std::string text(const std::string& key, const std::string& def) const {
    const auto it = k_.find(key);
    return it == k_.end() ? def : it->second;
  }
  long long num(const std::string& key, long long def) const {
    const auto it = k_.find(key);
    if (it == k_.end()) return def;
    char* end = nullptr;
    const long long x = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || x < -1 || x > 1 << 30) bad(key, "'" + it->second + "' is not an integer");
    return x;
  }
  int positive(const std::string& key, long long def) const {
    const long long x = num(key, def);
    if (x < 1) bad(key, "must be >= 1");
    return static_cast<int>(x);
  }

  void sort_keys() {
    for (const auto& [key, value] : k_) {
      const std::string section = key.substr(0, key.find('.'));
      const std::string what = key + " = " + value;
      if (kRead.count(key)) continue;
      if (const auto u = kUnsupported.find(key); u != kUnsupported.end()) {
        out_.unsupported.push_back(what + ": " + u->second);
      } else if (section == "float8" || section == "quantize" || section == "mx") {
        if (key.find("float8") == std::string::npos && section != "float8")
          out_.unsupported.push_back(what + ": not modelled (MX formats)");
        else
          out_.ignored.push_back(what);  // float8's recipe details; float8 itself comes from model.converters
      } else if (kIgnoredSections.count(section) || kKnownSections.count(section)) {
        out_.ignored.push_back(what);
      } else {
        out_.unknown.push_back(what);
      }
    }
    if (text("compile.enable", "false") == "true")
      out_.unsupported.push_back("compile.enable = true: torch.compile's kernel fusion (the eager kernels are timed)");
  }

  std::string preset() const {
    if (!opt_.model.empty()) return opt_.model;
    const std::string name = text("model.name", ""), flavor = text("model.flavor", "");
    for (const Flavor& f : kFlavors)
      if (name == f.name && flavor == f.flavor) return f.preset;
    std::string known;
    for (const Flavor& f : kFlavors) known += std::string(known.empty() ? "" : ", ") + f.name + " " + f.flavor;
    bad("model.name / model.flavor",
        "'" + name + " " + flavor + "' has no pipescope preset (known: " + known + "; give --model PRESET)");
  }

  std::string recompute() {
    const std::string mode = text("activation_checkpoint.mode", "selective");
    if (mode == "none" || mode == "full") return mode;
    if (mode != "selective") bad("activation_checkpoint.mode", "'" + mode + "' is not none, selective or full");
    const std::string option = text("activation_checkpoint.selective_ac_option", "2");
    if (option == "op") {
      out_.unsupported.push_back(
          "activation_checkpoint.selective_ac_option = op: TorchTitan's op-level policy, taken as selective "
          "recomputation of the attention core");
      return "selective";
    }
    const long long every = num("activation_checkpoint.selective_ac_option", 2);
    if (every < 1) bad("activation_checkpoint.selective_ac_option", "must be 'op' or a layer period >= 1");
    if (every > 1)
      out_.unsupported.push_back("activation_checkpoint.selective_ac_option = " + option + ": every " + option +
                                 "-th layer checkpointed, taken as full recomputation");
    return "full";
  }

  std::string dtype() const {
    const std::string conv = text("model.converters", "");
    if (("," + conv + ",").find(",float8,") != std::string::npos ||
        conv.find("quantize.linear.float8") != std::string::npos)
      return "fp8";
    const std::string p = text("training.mixed_precision_param", "bfloat16");
    if (p != "bfloat16" && p != "float32")
      bad("training.mixed_precision_param", "'" + p + "' is not bfloat16 or float32");
    return p == "bfloat16" ? "bf16" : "fp32";
  }

  Layout layout() {
    Layout l;
    l.tp = positive("parallelism.tensor_parallel_degree", 1);
    l.pp = positive("parallelism.pipeline_parallel_degree", 1);
    l.cp = positive("parallelism.context_parallel_degree", 1);
    l.ep = positive("parallelism.expert_parallel_degree", 1);
    l.etp = positive("parallelism.expert_tensor_parallel_degree", 1);
    const int replicate = positive("parallelism.data_parallel_replicate_degree", 1);
    const long long shard = num("parallelism.data_parallel_shard_degree", -1);
    if (shard == 0 || shard < -1) bad("parallelism.data_parallel_shard_degree", "must be -1 (the rest) or >= 1");
    const std::optional<ClusterSpec> cluster = cluster_preset(opt_.cluster);
    if (!cluster) throw std::invalid_argument("--cluster: unknown cluster preset '" + opt_.cluster + "'");
    const long long gpn = cluster->gpus_per_node, fixed = 1LL * l.tp * l.pp * l.cp * replicate;
    if (fixed > 8000000) bad("parallelism", "the degrees multiply to over 8000000 GPUs (docs/limits.md)");
    const long long want = shard > 0 ? fixed * shard : fixed;
    l.nodes = opt_.nodes > 0 ? opt_.nodes : static_cast<int>((want + gpn - 1) / gpn);
    const long long gpus = 1LL * l.nodes * gpn;
    if (gpus % fixed != 0 || (shard > 0 && gpus != fixed * shard))
      throw std::invalid_argument(source_ + ": " + std::to_string(l.nodes) + " nodes x " + std::to_string(gpn) +
                                  " GPUs do not hold replicate x shard x tp x cp x pp (give --nodes)");
    l.shard = static_cast<int>(shard > 0 ? shard : gpus / fixed);
    l.dp = replicate * l.shard;
    if (l.shard > 1 && replicate > 1)
      out_.unsupported.push_back("parallelism.data_parallel_replicate_degree = " + std::to_string(replicate) +
                                 " with data_parallel_shard_degree = " + std::to_string(l.shard) +
                                 ": HSDP (sharded within a group, replicated across groups) is simulated as FSDP "
                                 "sharded over all " +
                                 std::to_string(l.dp) + " data-parallel GPUs");
    // "default" is `not pp_enabled`: kept gathered under pipelining, resharded after every forward without it
    // (training.fsdp_reshard_after_forward).
    const std::string reshard = text("parallelism.fsdp_reshard_after_forward", "default");
    if (reshard != "default" && reshard != "always" && reshard != "never")
      bad("parallelism.fsdp_reshard_after_forward", "must be default, always or never, got '" + reshard + "'");
    l.reshard = l.shard > 1 && (reshard == "always" || (reshard == "default" && l.pp == 1));
    const int local = positive("training.local_batch_size", 8);
    const long long global = num("training.global_batch_size", -1);
    l.global = static_cast<int>(global > 0 ? global : 1LL * local * l.dp);
    l.mbs = l.pp > 1 ? positive("parallelism.pipeline_parallel_microbatch_size", 1) : local;
    pipeline(l);
    return l;
  }

  // The schedule and TorchTitan's layer split: (layers + first_less + last_less) over the stages, the remainder to
  // the first stages, the first stage less first_less and the last less last_less (generate_llm_fqn_per_model_part).
  void pipeline(Layout& l) {
    const std::string name = text("parallelism.pipeline_parallel_schedule", "1F1B");
    const std::string csv = text("parallelism.pipeline_parallel_schedule_csv", "");
    bool multi = multi_stage_name(name);
    if (!csv.empty()) {
      l.kind = ScheduleKind::File;
      // Under a schedule CSV PyTorch's runtime gathers and reshards the stages by its actions
      // (docs/schedule-ir.md, "FSDP actions").
      if (l.reshard)
        out_.unsupported.push_back(
            "parallelism.fsdp_reshard_after_forward = always with a schedule CSV: simulated with the FSDP actions "
            "PyTorch's runtime places in the file");
      l.reshard = false;
      l.csv = csv;
      multi = true;
    } else if (l.pp > 1) {
      const TitanSchedule* found = nullptr;
      for (const TitanSchedule& t : kSchedules)
        if (name == t.name) found = &t;
      if (!found) bad("parallelism.pipeline_parallel_schedule", "'" + name + "' has no pipescope schedule");
      l.kind = found->kind;
      multi = found->multi_stage;
    }
    if (l.pp == 1) return;
    const int layers = preset_layers();
    const int in = static_cast<int>(num("parallelism.pipeline_parallel_first_stage_less_layers", 1));
    const int out = static_cast<int>(num("parallelism.pipeline_parallel_last_stage_less_layers", 1));
    int stages = l.pp * (multi ? 2 : 1);
    if (k_.count("parallelism.pipeline_parallel_layers_per_stage")) {
      const int per = positive("parallelism.pipeline_parallel_layers_per_stage", 1);
      stages = (layers + in + out + per - 1) / per;
    }
    if (stages % l.pp != 0)
      bad("parallelism.pipeline_parallel_layers_per_stage",
          std::to_string(stages) + " stages do not spread evenly over pp " + std::to_string(l.pp));
    l.v = stages / l.pp;
    l.stage_layers = titan_split(stages, layers, in, out);
    if (std::all_of(l.stage_layers.begin(), l.stage_layers.end(), [&](int x) { return x == l.stage_layers[0]; }))
      l.stage_layers.clear();  // even: the scenario's own split
  }

  int preset_layers() const {
    const std::optional<ModelSpec> m = model_preset(preset());
    if (!m) throw std::invalid_argument("--model: unknown model preset '" + preset() + "'");
    return m->layers;
  }

 public:
  static std::vector<int> titan_split(int stages, int layers, int in, int out) {
    const int effective = layers + in + out, per = effective / stages, extra = effective % stages;
    std::vector<int> s(static_cast<std::size_t>(stages));
    for (int i = 0; i < stages; i++)
      s[static_cast<std::size_t>(i)] = per + (i < extra ? 1 : 0) - (i == 0 ? in : 0) - (i == stages - 1 ? out : 0);
    return s;
  }

 private:
  void header(std::ostringstream& y) const {
    y << "# Imported from a TorchTitan job configuration (pipescope import torchtitan).\n";
    for (const auto& u : out_.unsupported) y << "# not modelled: " << u << "\n";
    for (const auto& u : out_.unknown) y << "# unknown key: " << u << "\n";
    if (!out_.ignored.empty())
      y << "# ignored (no effect on an iteration's time): " << out_.ignored.size() << " keys\n";
  }

  Keys k_;
  std::string source_;
  const TorchTitanImportOptions& opt_;
  TorchTitanImport out_;
};

}  // namespace

TorchTitanImport import_torchtitan_toml(const std::string& text, const std::string& source,
                                        const TorchTitanImportOptions& opt) {
  toml::table t;
  try {
    t = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw std::invalid_argument(source + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                                ": (TOML) " + std::string(e.description()));
  }
  Keys keys;
  flatten(t, "", keys);
  return Mapper(std::move(keys), source, opt).run();
}

TorchTitanImport import_torchtitan_flags(const std::vector<std::string>& args, const TorchTitanImportOptions& opt) {
  Keys keys;
  for (std::size_t i = 0; i < args.size(); i++) {
    std::string flag = args[i], value;
    if (flag.rfind("--", 0) != 0 || flag.find('.') == std::string::npos)
      throw std::invalid_argument("import torchtitan: '" + flag + "' is not a --section.key flag");
    if (const auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1), flag = flag.substr(0, eq);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
    } else {
      value = "true";  // a boolean switch (tyro's --section.flag)
    }
    std::replace(flag.begin(), flag.end(), '-', '_');
    keys[flag.substr(2)] = value;
  }
  return Mapper(std::move(keys), "<import torchtitan>", opt).run();
}

std::string torchtitan_toml(const Scenario& s) {
  auto cannot = [&](const std::string& why) { throw std::invalid_argument(s.source + ": --emit torchtitan: " + why); };
  const Flavor* flavor = nullptr;
  for (const Flavor& f : kFlavors)
    if (s.model.name == f.preset) flavor = &f;
  if (!flavor)
    cannot("model '" + s.model.name + "' has no TorchTitan flavor (llama3 8B / 70B / 405B, deepseek_v3 671B)");
  const std::optional<ModelSpec> preset = model_preset(flavor->preset);
  const ParallelSpec& p = s.parallel;
  const TrainingSpec& t = s.training;
  const char* schedule = nullptr;
  bool multi = false;
  for (const TitanSchedule& x : kSchedules)
    if (x.kind == s.schedule.kind) schedule = x.name, multi = x.multi_stage;
  if (s.schedule.kind == ScheduleKind::File) multi = true;
  if (!schedule && s.schedule.kind != ScheduleKind::File)
    cannot(std::string("schedule ") + to_string(s.schedule.kind) + " is not one of PyTorch pipelining's");
  if (t.dtype != "bf16" && t.dtype != "fp8" && t.dtype != "fp32")
    cannot("training.dtype " + t.dtype + " (TorchTitan trains in bfloat16, float32 or float8)");
  std::ostringstream o;
  o << "# " << s.name << ": written by pipescope --emit torchtitan (" << s.cluster.total_gpus() << " GPUs)\n";
  o << "[model]\nname = \"" << flavor->name << "\"\nflavor = \"" << flavor->flavor << "\"\n";
  if (t.fp8()) o << "converters = [\"float8\"]\n";
  o << "\n[training]\nlocal_batch_size = " << p.global_batch / p.dp << "\nglobal_batch_size = " << p.global_batch
    << "\nseq_len = " << s.model.seq_len << "\nmixed_precision_param = \""
    << (t.dtype == "fp32" ? "float32" : "bfloat16") << "\"\nmixed_precision_reduce = \"float32\"\n";
  if (!t.grad_fp32) cannot("training.grad_fp32 false: TorchTitan reduces gradients in float32");
  o << "\n[parallelism]\n";
  // FSDP is TorchTitan's sharding; the distributed optimizer (ZeRO-1) has no TorchTitan form nearer than it.
  const bool shard = t.fsdp || t.distributed_optimizer;
  o << "data_parallel_replicate_degree = " << (shard ? 1 : p.dp)
    << "\ndata_parallel_shard_degree = " << (shard ? p.dp : 1);
  if (shard && p.dp > 1)
    o << "\nfsdp_reshard_after_forward = "
      << (t.fsdp_reshard_after_forward ? "\"always\"  # gathered for every forward and backward"
                                       : "\"never\"  # gathered once per iteration, as simulated");
  if (t.tp_comm_overlap) o << "\nenable_async_tensor_parallel = true";
  o << "\ntensor_parallel_degree = " << p.tp << "\ncontext_parallel_degree = " << p.cp
    << "\npipeline_parallel_degree = " << p.pp << "\n";
  if (p.pp > 1) {
    if (schedule) o << "pipeline_parallel_schedule = \"" << schedule << "\"\n";
    if (!s.schedule.file.empty()) o << "pipeline_parallel_schedule_csv = \"" << s.schedule.file << "\"\n";
    o << "pipeline_parallel_microbatch_size = " << p.micro_batch_size << "\n";
    // The split: TorchTitan's for some first / last stage allowance, with the stage count it would infer.
    const int stages = p.pp * p.v, layers = preset ? preset->layers : s.model.layers;
    std::vector<int> want = p.stage_layers;
    if (want.empty()) want.assign(static_cast<std::size_t>(stages), layers / stages);
    bool written = false;
    for (const auto& [in, out] : {std::pair{1, 1}, std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
      if (Mapper::titan_split(stages, layers, in, out) != want) continue;
      o << "pipeline_parallel_first_stage_less_layers = " << in
        << "\npipeline_parallel_last_stage_less_layers = " << out << "\n";
      if (stages != p.pp * (multi ? 2 : 1)) {
        const int per = (layers + in + out + stages - 1) / stages;
        if ((layers + in + out + per - 1) / per != stages)
          cannot("no layers-per-stage gives " + std::to_string(stages) + " stages");
        o << "pipeline_parallel_layers_per_stage = " << per << "\n";
      }
      written = true;
      break;
    }
    if (!written) cannot("parallel.stage_layers is not a split TorchTitan makes");
  }
  if (p.ep > 1) o << "expert_parallel_degree = " << p.ep << "\n";
  if (p.etp > 1) o << "expert_tensor_parallel_degree = " << p.etp << "\n";
  if (t.moe_dispatcher == "deepep") o << "expert_parallel_comm_backend = \"deepep\"\n";
  o << "\n[activation_checkpoint]\nmode = \"" << to_string(s.schedule.recompute) << "\"\n";
  if (s.schedule.recompute == Recompute::Selective) o << "selective_ac_option = \"op\"\n";
  return o.str();
}

}  // namespace pipescope
