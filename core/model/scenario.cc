#include "core/model/scenario.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ir/schedule_csv.h"
#include "core/model/placement.h"
#include "core/model/presets.h"
#include "core/model/profile.h"
#include "core/model/schedule_registry.h"
#include "core/model/yaml_aliases.h"
#include "core/util/input_file.h"
#include "core/util/ranges.h"
#include "core/util/units.h"

namespace pipescope {
namespace {

using Marks = std::map<std::string, YAML::Mark>;  // key path -> where its value is written ("" = document)

// ---------------------------------------------------------------- message helpers

std::string position(const std::string& source, const YAML::Mark& m) {
  // yaml-cpp marks are 0-based; a null mark (-1) means "no position", e.g. an empty document.
  const int line = m.line >= 0 ? m.line + 1 : 1;
  const int col = m.column >= 0 ? m.column + 1 : 1;
  return source + ":" + std::to_string(line) + ":" + std::to_string(col);
}

[[noreturn]] void fail_at(const std::string& source, const YAML::Mark& m, const std::string& path,
                          const std::string& msg) {
  throw ScenarioError(position(source, m) + ": " + path + ": " + msg);
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return quoted(n.Scalar());
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "nothing";
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); i++) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); j++) {
      const std::size_t up = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest candidate when it is plausibly a typo (or a prefix of / extension to it), else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best.empty()) return best;
  const std::size_t tolerance = std::max<std::size_t>(2, word.size() / 3);
  const bool prefix = word.size() >= 3 && (best.rfind(word, 0) == 0 || word.rfind(best, 0) == 0);
  if (best_d <= tolerance || prefix) return best;
  for (const auto& c : candidates)  // a prefix match further away than the typo tolerance
    if (word.size() >= 3 && (c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0)) return c;
  return "";
}

std::string unknown_value_message(const char* what, const std::string& got, const std::vector<std::string>& valid) {
  std::string msg = std::string("unknown ") + what + " " + quoted(got);
  const std::string near = closest(got, valid);
  if (!near.empty()) msg += " (did you mean " + quoted(near) + "?)";
  return msg + "; valid: " + join(valid);
}

// ---------------------------------------------------------------- scalar parsing

bool parse_int(const std::string& text, long long& out) {
  if (text.empty()) return false;
  std::size_t i = (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (i == text.size()) return false;
  for (std::size_t j = i; j < text.size(); j++)
    if (text[j] < '0' || text[j] > '9') return false;
  errno = 0;
  out = std::strtoll(text.c_str(), nullptr, 10);
  return errno == 0;
}

bool parse_double(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(text.c_str(), &end);
  // Only plain decimal/exponent notation: strtod would also take "inf", "nan" and hex floats.
  for (char c : text)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return false;
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(out);
}

enum class Num { Positive, NonNegative, Fraction };  // > 0, >= 0, (0, 1]

// ---------------------------------------------------------------- one YAML mapping with a fixed key set

class Section {
 public:
  // `node` may be undefined or null (section absent): then present() is false and every get() is a no-op.
  Section(const std::string& source, Marks& marks, const YAML::Node& node, const YAML::Mark& mark, std::string path,
          std::vector<std::string> keys)
      : source_(source), marks_(marks), mark_(mark), path_(std::move(path)), keys_(std::move(keys)) {
    if (!node.IsDefined() || node.IsNull()) return;
    if (!node.IsMap()) {
      std::string msg = "expected a mapping, got " + describe(node);
      if (node.IsScalar() && std::find(keys_.begin(), keys_.end(), "preset") != keys_.end())
        msg += " (write " + path_.substr(path_.rfind('.') + 1) + ": {preset: " + node.Scalar() + "})";
      fail_at(source_, mark, path_.empty() ? std::string("(document)") : path_, msg);
    }
    present_ = true;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // Copies: yaml-cpp's iterator yields its (key, value) pair as a temporary proxy, so a reference to
      // it->first dangles at the end of the statement (ASan stack-use-after-scope, found by fuzz_scenario).
      const YAML::Node k = it->first;
      const YAML::Node value = it->second;
      if (!k.IsScalar()) fail_at(source_, k.Mark(), path_or_root(), "keys must be plain names, got " + describe(k));
      const std::string key = k.Scalar();
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) {
        std::string msg = "unknown key " + quoted(key);
        const std::string near = closest(key, keys_);
        msg += near.empty() ? "; valid keys: " + join(keys_) : " (did you mean " + quoted(near) + "?)";
        fail_at(source_, k.Mark(), child(key), msg);
      }
      if (entries_.count(key)) fail_at(source_, k.Mark(), child(key), "duplicate key");
      // A null value's own mark points past the line; its key is the useful position.
      const YAML::Mark vm = value.IsNull() ? k.Mark() : value.Mark();
      entries_.emplace(key, Entry{value, vm});
      marks_[child(key)] = vm;
    }
  }

  bool present() const { return present_; }
  bool has(const std::string& key) const { return entries_.count(key) != 0; }
  const YAML::Mark& mark() const { return mark_; }
  const std::string& path() const { return path_; }
  std::string child(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    fail_at(source_, entries_.at(key).mark, child(key), msg);
  }
  // A required key that neither the file nor a preset supplied: point at this mapping.
  [[noreturn]] void missing(const std::string& key, const std::string& why) const {
    fail_at(source_, mark_, child(key), "missing" + (why.empty() ? std::string() : " (" + why + ")"));
  }

  Section sub(const std::string& key, std::vector<std::string> keys) const {
    auto it = entries_.find(key);
    if (it == entries_.end()) return Section(source_, marks_, YAML::Node(), mark_, child(key), std::move(keys));
    return Section(source_, marks_, it->second.node, it->second.mark, child(key), std::move(keys));
  }

  bool get(const std::string& key, int& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    long long v = 0;
    if (!n->IsScalar() || !parse_int(n->Scalar(), v) || v <= 0 || v > std::numeric_limits<int>::max())
      fail(key, "expected a positive integer, got " + describe(*n));
    typed(key, *n, "an integer");
    in_range(key, static_cast<double>(v));
    out = static_cast<int>(v);
    return true;
  }

  // An integer >= 0 (a count that may be zero).
  bool get_count(const std::string& key, int& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    long long v = 0;
    if (!n->IsScalar() || !parse_int(n->Scalar(), v) || v < 0 || v > std::numeric_limits<int>::max())
      fail(key, "expected an integer >= 0, got " + describe(*n));
    typed(key, *n, "an integer");
    in_range(key, static_cast<double>(v));
    out = static_cast<int>(v);
    return true;
  }

  // A dimensioned number; `scale` converts the key's unit to SI.
  bool get(const std::string& key, Num kind, double scale, double& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    static const char* const kExpect[] = {"a positive number", "a number >= 0", "a number in (0, 1]"};
    double v = 0;
    const bool ok = n->IsScalar() && parse_double(n->Scalar(), v) &&
                    (kind == Num::Positive      ? v > 0
                     : kind == Num::NonNegative ? v >= 0
                                                : v > 0 && v <= 1);
    if (!ok) fail(key, std::string("expected ") + kExpect[static_cast<int>(kind)] + ", got " + describe(*n));
    typed(key, *n, "a number");
    in_range(key, v);
    out = v * scale;
    return true;
  }

  bool get(const std::string& key, bool& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    const std::string t = n->IsScalar() ? n->Scalar() : std::string();
    if (n->IsScalar()) typed(key, *n, "true or false");
    const std::optional<bool> v = yaml_boolean(t);
    if (!v) fail(key, "expected true or false, got " + describe(*n));
    out = *v;
    return true;
  }

  bool get(const std::string& key, std::string& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    if (n->IsNull()) {
      out.clear();
      return true;
    }
    if (!n->IsScalar()) fail(key, "expected a string, got " + describe(*n));
    out = n->Scalar();
    return true;
  }

  template <typename E>
  bool get_enum(const std::string& key, const std::vector<std::pair<std::string, E>>& values, E& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    std::vector<std::string> names;
    for (const auto& [name, value] : values) {
      if (n->IsScalar() && n->Scalar() == name) {
        out = value;
        return true;
      }
      names.push_back(name);
    }
    if (!n->IsScalar()) fail(key, "expected one of " + join(names) + ", got " + describe(*n));
    fail(key, unknown_value_message("value", n->Scalar(), names));
  }

  // A list of enum spellings (each at most once); entry errors name key[i] at the entry's own position.
  template <typename E>
  bool get_enum_list(const std::string& key, const std::vector<std::pair<std::string, E>>& values,
                     std::vector<E>& out) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    std::vector<std::string> names;
    for (const auto& v : values) names.push_back(v.first);
    if (!n->IsSequence()) fail(key, "expected a list of " + join(names) + ", got " + describe(*n));
    out.clear();
    for (std::size_t i = 0; i < n->size(); i++) {
      const YAML::Node e = (*n)[i];
      const std::string at = child(key) + "[" + std::to_string(i) + "]";
      const YAML::Mark mark = e.IsNull() ? entries_.at(key).mark : e.Mark();
      const auto hit = std::find_if(values.begin(), values.end(),
                                    [&](const auto& v) { return e.IsScalar() && e.Scalar() == v.first; });
      if (hit == values.end())
        fail_at(source_, mark, at,
                e.IsScalar() ? unknown_value_message("value", e.Scalar(), names)
                             : "expected one of " + join(names) + ", got " + describe(e));
      if (std::find(out.begin(), out.end(), hit->second) != out.end())
        fail_at(source_, mark, at, "'" + hit->first + "' is listed twice");
      out.push_back(hit->second);
    }
    return true;
  }

  // A list of positive integers; entry errors name key[i] at the entry's own position.
  // A list of positive integers (of integers >= 0 with zero_ok).
  bool get(const std::string& key, std::vector<int>& out, bool zero_ok = false) const {
    const YAML::Node* n = find(key);
    if (!n) return false;
    if (!n->IsSequence())
      fail(key, std::string("expected a list of ") + (zero_ok ? "integers >= 0" : "positive integers") + ", got " +
                    describe(*n));
    out.clear();
    for (std::size_t i = 0; i < n->size(); i++) {
      const YAML::Node e = (*n)[i];
      long long v = 0;
      if (!e.IsScalar() || !parse_int(e.Scalar(), v) || v < (zero_ok ? 0 : 1) || v > std::numeric_limits<int>::max())
        fail_at(
            source_, e.IsNull() ? entries_.at(key).mark : e.Mark(), child(key) + "[" + std::to_string(i) + "]",
            std::string("expected ") + (zero_ok ? "an integer >= 0" : "a positive integer") + ", got " + describe(e));
      const std::string why = e.Tag() != "?" ? "a quoted or tagged value is not an integer; write it plain"
                                             : range_violation(child(key), static_cast<double>(v));
      if (!why.empty()) fail_at(source_, e.Mark(), child(key) + "[" + std::to_string(i) + "]", why);
      out.push_back(static_cast<int>(v));
    }
    return true;
  }

 private:
  // Strict typing: a number or boolean is a plain scalar. `pp: "4"` (quoted: a string) and `pp: !foo 4` (an
  // application tag) are refused rather than converted; the YAML core tags (!!int, !!float, !!bool) are accepted.
  void typed(const std::string& key, const YAML::Node& n, const char* what) const {
    const std::string& tag = n.Tag();
    if (tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
        tag == "tag:yaml.org,2002:bool")
      return;
    fail(key, std::string("expected ") + what + ", got " +
                  (tag == "!" ? "the quoted string " + describe(n) + " (write it without quotes)"
                              : "a value tagged " + tag + " (remove the tag)"));
  }
  // The documented plausible range of the key (core/util/ranges.h).
  void in_range(const std::string& key, double v) const {
    const std::string why = range_violation(child(key), v);
    if (!why.empty()) fail(key, why);
  }
  struct Entry {
    YAML::Node node;
    YAML::Mark mark;
  };
  const YAML::Node* find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second.node;
  }
  std::string path_or_root() const { return path_.empty() ? std::string("(document)") : path_; }

  const std::string& source_;
  Marks& marks_;
  YAML::Mark mark_;
  std::string path_;
  std::vector<std::string> keys_;
  std::map<std::string, Entry> entries_;
  bool present_ = false;
};

// ---------------------------------------------------------------- enum tables (YAML spellings)

template <typename E>
std::vector<std::pair<std::string, E>> enum_table(std::initializer_list<E> all) {
  std::vector<std::pair<std::string, E>> t;
  for (E e : all) t.emplace_back(to_string(e), e);
  return t;
}

const std::vector<std::pair<std::string, ScheduleKind>>& schedule_kinds() {
  static const auto t = [] {
    std::vector<std::pair<std::string, ScheduleKind>> v;
    for (const ScheduleEntry& e : schedule_registry()) v.emplace_back(e.name, e.kind);
    return v;
  }();
  return t;
}
const std::vector<std::pair<std::string, IntraNodeFabric>>& fabrics() {
  static const auto t = enum_table({IntraNodeFabric::NVSwitch, IntraNodeFabric::CubeMesh, IntraNodeFabric::PCIe});
  return t;
}
const std::vector<std::pair<std::string, FfnKind>>& ffn_kinds() {
  static const auto t = enum_table({FfnKind::Gelu, FfnKind::SwiGlu});
  return t;
}
const std::vector<std::pair<std::string, NormKind>>& norm_kinds() {
  static const auto t = enum_table({NormKind::LayerNorm, NormKind::RmsNorm});
  return t;
}
const std::vector<std::pair<std::string, PositionKind>>& position_kinds() {
  static const auto t = enum_table({PositionKind::Learned, PositionKind::Rope});
  return t;
}
const std::vector<std::pair<std::string, Recompute>>& recompute_modes() {
  static const auto t = enum_table({Recompute::None, Recompute::Selective, Recompute::Full});
  return t;
}

const std::vector<std::pair<std::string, RecomputeModule>>& recompute_module_names() {
  static const auto t =
      enum_table({RecomputeModule::CoreAttn, RecomputeModule::LayerNorm, RecomputeModule::Mlp, RecomputeModule::MoeAct,
                  RecomputeModule::Moe, RecomputeModule::SharedExperts, RecomputeModule::MlaUpProj});
  return t;
}
const std::vector<std::pair<std::string, InterNodeTopology>>& topologies() {
  static const auto t = enum_table({InterNodeTopology::Star, InterNodeTopology::FatTree, InterNodeTopology::Rail});
  return t;
}

std::vector<std::pair<std::string, std::string>> string_table(std::initializer_list<const char*> names) {
  std::vector<std::pair<std::string, std::string>> t;
  for (const char* n : names) t.emplace_back(n, n);
  return t;
}
const std::vector<std::pair<std::string, CpCommType>>& cp_comm_types() {
  static const auto t = enum_table({CpCommType::P2P, CpCommType::AllGather, CpCommType::A2A, CpCommType::A2AP2P});
  return t;
}

const auto& slicings() {
  static const auto t = string_table({"uniform", "dp", "cwp", "explicit"});
  return t;
}
const auto& dtypes() {
  static const auto t = string_table({"fp16", "bf16", "fp32", "fp64", "fp8"});
  return t;
}
const auto& collective_models() {
  static const auto t = string_table({"ring", "aggregate", "analytic", "auto"});
  return t;
}
const auto& moe_dispatchers() {
  static const auto t = string_table({"alltoall", "deepep"});
  return t;
}
const auto& moe_routings() {
  static const auto t = string_table({"balanced", "trained"});
  return t;
}
const auto& wgrad_accumulations() {
  static const auto t = string_table({"fused", "autograd"});
  return t;
}
const auto& p2p_modes() {
  static const auto t = string_table({"eager", "blocking"});
  return t;
}
const auto& placements() {
  static const auto t = string_table({"megatron", "stage-major", "replica-major", "terapipe"});
  return t;
}

template <typename T>
bool one_of(const std::vector<std::pair<std::string, T>>& table, const std::string& s) {
  return std::any_of(table.begin(), table.end(), [&](const auto& p) { return p.first == s; });
}
template <typename T>
std::vector<std::string> names_of(const std::vector<std::pair<std::string, T>>& table) {
  std::vector<std::string> v;
  for (const auto& p : table) v.push_back(p.first);
  return v;
}

// Generic analytic-model parameters for a device given only by its datasheet numbers.
DeviceSpec custom_device() {
  DeviceSpec d;
  d.name = "custom";
  d.peak_flops_bf16 = 0;
  d.gemm_efficiency = 0.8;
  d.gemm_half_sat_flops = 2e9;
  d.kernel_launch_s = 4 * units::kUs;
  d.memory_efficiency = 0.8;
  return d;
}

const double kUnset = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- sections

ModelSpec parse_model(const Section& root) {
  const Section m = root.sub("model", {"preset",
                                       "layers",
                                       "hidden",
                                       "heads",
                                       "ffn_hidden",
                                       "vocab",
                                       "seq_len",
                                       "tied_embeddings",
                                       "query_groups",
                                       "ffn",
                                       "norm",
                                       "position",
                                       "linear_bias",
                                       "head_dim",
                                       "num_experts",
                                       "moe_top_k",
                                       "moe_ffn_hidden",
                                       "moe_shared_ffn_hidden",
                                       "moe_dense_layers",
                                       "moe_layer_freq",
                                       "q_lora_rank",
                                       "kv_lora_rank",
                                       "qk_rope_head_dim",
                                       "v_head_dim",
                                       "sliding_window",
                                       "sliding_window_pattern"});
  ModelSpec model;
  std::string preset;
  const bool from_preset = m.get("preset", preset);
  if (from_preset) {
    auto p = model_preset(preset);
    if (!p) m.fail("preset", unknown_value_message("model preset", preset, model_preset_names()));
    model = *p;
  } else {
    model.name = "custom";
  }
  m.get("layers", model.layers);
  const bool hidden_given = m.get("hidden", model.hidden);
  m.get("heads", model.heads);
  // FFN follows the hidden size (4h) unless given, also when a preset's hidden size is overridden.
  if (!m.get("ffn_hidden", model.ffn_hidden) && (hidden_given || !from_preset)) {
    if (model.hidden > std::numeric_limits<int>::max() / 4)
      m.fail("hidden", "is too large: the default ffn_hidden = 4 * hidden does not fit in an int");
    model.ffn_hidden = 4 * model.hidden;
  }
  m.get("vocab", model.vocab);
  m.get("seq_len", model.seq_len);
  m.get("tied_embeddings", model.tied_embeddings);
  m.get("query_groups", model.query_groups);
  m.get_enum("ffn", ffn_kinds(), model.ffn);
  m.get_enum("norm", norm_kinds(), model.norm);
  m.get_enum("position", position_kinds(), model.position);
  m.get("linear_bias", model.linear_bias);
  m.get("head_dim", model.head_dim);
  m.get_count("num_experts", model.moe_experts);
  m.get("moe_top_k", model.moe_top_k);
  m.get("moe_ffn_hidden", model.moe_ffn_hidden);
  m.get_count("moe_shared_ffn_hidden", model.moe_shared_ffn_hidden);
  m.get_count("moe_dense_layers", model.moe_dense_layers);
  m.get("moe_layer_freq", model.moe_layer_freq);
  m.get_count("q_lora_rank", model.q_lora_rank);
  m.get_count("kv_lora_rank", model.kv_lora_rank);
  m.get_count("qk_rope_head_dim", model.qk_rope_head_dim);
  m.get_count("v_head_dim", model.v_head_dim);
  m.get_count("sliding_window", model.sliding_window);
  m.get_count("sliding_window_pattern", model.sliding_window_pattern);
  if (!from_preset)
    for (const char* key : {"layers", "hidden", "heads", "vocab", "seq_len"})
      if (!m.has(key)) m.missing(key, "required when model.preset is not given");
  return model;
}

DeviceSpec parse_device(const Section& c, const ClusterSpec& base, bool cluster_from_preset) {
  const Section d =
      c.sub("device", {"preset", "peak_tflops_fp16", "peak_tflops_bf16", "peak_tflops_fp32", "peak_tflops_fp64",
                       "peak_tflops_fp8", "memory_GB", "hbm_bw_GBps", "gemm_efficiency", "gemm_half_sat_gflop",
                       "kernel_launch_us", "memory_efficiency", "sm_count", "comm_sm_count", "gemm_epilogue_hidden",
                       "flash_fwd_efficiency", "flash_bwd_efficiency"});
  if (!d.present() && !cluster_from_preset) c.missing("device", "required when cluster.preset is not given");
  DeviceSpec dev = base.device;
  std::string preset;
  const bool from_preset = d.get("preset", preset);
  if (from_preset) {
    auto p = device_preset(preset);
    if (!p) d.fail("preset", unknown_value_message("device preset", preset, device_preset_names()));
    dev = *p;
  } else if (!cluster_from_preset) {
    dev = custom_device();
    dev.peak_flops_fp16 = dev.peak_flops_fp32 = dev.memory_bytes = dev.hbm_bw_Bps = kUnset;
  }
  using namespace units;
  d.get("peak_tflops_fp16", Num::Positive, kTflops, dev.peak_flops_fp16);
  d.get("peak_tflops_bf16", Num::NonNegative, kTflops, dev.peak_flops_bf16);
  d.get("peak_tflops_fp32", Num::Positive, kTflops, dev.peak_flops_fp32);
  d.get("peak_tflops_fp64", Num::NonNegative, kTflops, dev.peak_flops_fp64);
  d.get("peak_tflops_fp8", Num::NonNegative, kTflops, dev.peak_flops_fp8);
  d.get("memory_GB", Num::Positive, kGB, dev.memory_bytes);
  d.get("hbm_bw_GBps", Num::Positive, kGBps, dev.hbm_bw_Bps);
  d.get("gemm_efficiency", Num::Fraction, 1.0, dev.gemm_efficiency);
  d.get("gemm_half_sat_gflop", Num::NonNegative, 1e9, dev.gemm_half_sat_flops);
  d.get("kernel_launch_us", Num::NonNegative, kUs, dev.kernel_launch_s);
  d.get("memory_efficiency", Num::Fraction, 1.0, dev.memory_efficiency);
  d.get("sm_count", dev.sm_count);                  // GEMM wave quantisation (core/cost/gemm_model.h); absent: none
  d.get_count("comm_sm_count", dev.comm_sm_count);  // held by overlapped communication (core/lower/overlap.h)
  if (dev.comm_sm_count > 0 && dev.comm_sm_count >= dev.sm_count)
    d.fail("comm_sm_count", "must be below sm_count (" + std::to_string(dev.sm_count) +
                                "): the SMs communication holds are a part of the device's");
  d.get("gemm_epilogue_hidden", dev.gemm_epilogue_hidden);                      // persistent GEMM kernels (Hopper)
  d.get("flash_fwd_efficiency", Num::Fraction, 1.0, dev.flash_fwd_efficiency);  // fused attention; 0 = gemm share
  d.get("flash_bwd_efficiency", Num::Fraction, 1.0, dev.flash_bwd_efficiency);
  const std::pair<const char*, double> required[] = {{"peak_tflops_fp16", dev.peak_flops_fp16},
                                                     {"peak_tflops_fp32", dev.peak_flops_fp32},
                                                     {"memory_GB", dev.memory_bytes},
                                                     {"hbm_bw_GBps", dev.hbm_bw_Bps}};
  for (const auto& [key, value] : required)
    if (std::isnan(value)) d.missing(key, "required when neither cluster.preset nor cluster.device.preset is given");
  return dev;
}

ClusterSpec parse_cluster(const Section& root) {
  const Section c = root.sub("cluster", {"preset", "nodes", "gpus_per_node", "device", "intra_node", "network",
                                         "gpu_speed_sigma_pct", "variation_seed"});
  ClusterSpec cl;
  std::string preset;
  const bool from_preset = c.get("preset", preset);
  if (from_preset) {
    auto p = cluster_preset(preset);
    if (!p) c.fail("preset", unknown_value_message("cluster preset", preset, cluster_preset_names()));
    cl = *p;
  } else {
    cl.nodes = 1;
    cl.gpus_per_node = 0;
    cl.nvlink_bw_Bps = cl.nvlink_latency_s = cl.pcie_bw_Bps = cl.pcie_latency_s = kUnset;
    cl.nic_bw_Bps = cl.nic_latency_s = kUnset;
  }
  c.get("nodes", cl.nodes);
  c.get("gpus_per_node", cl.gpus_per_node);
  if (!from_preset && !c.has("gpus_per_node")) c.missing("gpus_per_node", "required when cluster.preset is not given");
  cl.device = parse_device(c, cl, from_preset);
  c.get("gpu_speed_sigma_pct", Num::NonNegative, 0.01, cl.gpu_speed_sigma);  // core/cost/gpu_variation.h
  int seed = 0;
  if (c.get("variation_seed", seed)) {
    if (seed < 0) c.fail("variation_seed", "expected an integer >= 0, got " + std::to_string(seed));
    cl.variation_seed = static_cast<std::uint64_t>(seed);
  }

  using namespace units;
  const Section in =
      c.sub("intra_node", {"fabric", "nvlink_bw_GBps", "nvlink_latency_us", "pcie_bw_GBps", "pcie_latency_us"});
  if (!in.get_enum("fabric", fabrics(), cl.fabric) && !from_preset) {
    if (!in.present()) c.missing("intra_node", "required when cluster.preset is not given");
    in.missing("fabric", "required when cluster.preset is not given; one of " + join(names_of(fabrics())));
  }
  in.get("nvlink_bw_GBps", Num::Positive, kGBps, cl.nvlink_bw_Bps);
  in.get("nvlink_latency_us", Num::NonNegative, kUs, cl.nvlink_latency_s);
  in.get("pcie_bw_GBps", Num::Positive, kGBps, cl.pcie_bw_Bps);
  in.get("pcie_latency_us", Num::NonNegative, kUs, cl.pcie_latency_s);
  // Which links the fabric uses decides what must be given; unused ones stay 0.
  const bool uses_nvlink = cl.fabric != IntraNodeFabric::PCIe && cl.gpus_per_node > 1;
  const bool uses_pcie = cl.fabric != IntraNodeFabric::NVSwitch;
  const std::string fabric_why = std::string("required for fabric ") + to_string(cl.fabric);
  const std::tuple<const char*, double*, bool> intra[] = {{"nvlink_bw_GBps", &cl.nvlink_bw_Bps, uses_nvlink},
                                                          {"nvlink_latency_us", &cl.nvlink_latency_s, uses_nvlink},
                                                          {"pcie_bw_GBps", &cl.pcie_bw_Bps, uses_pcie},
                                                          {"pcie_latency_us", &cl.pcie_latency_s, uses_pcie}};
  for (const auto& [key, value, needed] : intra) {
    if (!std::isnan(*value)) continue;
    if (needed) {
      if (!in.present()) c.missing("intra_node", fabric_why);
      in.missing(key, fabric_why);
    }
    *value = 0;
  }

  const Section net = c.sub(
      "network", {"nics_per_node", "nic_bw_Gbps", "nic_latency_us", "topology", "nodes_per_leaf", "oversubscription"});
  net.get("nics_per_node", cl.nics_per_node);
  net.get("nic_bw_Gbps", Num::Positive, kGbps, cl.nic_bw_Bps);
  net.get("nic_latency_us", Num::NonNegative, kUs, cl.nic_latency_s);
  net.get_enum("topology", topologies(), cl.topology);
  net.get("nodes_per_leaf", cl.nodes_per_leaf);
  net.get("oversubscription", Num::Positive, 1.0, cl.oversubscription);
  for (const char* key : {"nodes_per_leaf", "oversubscription"})
    if (net.has(key) && cl.topology == InterNodeTopology::Star)
      net.fail(key, "applies to topology fat-tree or rail only (this cluster's topology is star)");
  for (auto [key, value] : {std::pair<const char*, double*>{"nic_bw_Gbps", &cl.nic_bw_Bps},
                            std::pair<const char*, double*>{"nic_latency_us", &cl.nic_latency_s}}) {
    if (!std::isnan(*value)) continue;
    if (cl.nodes > 1) {
      if (!net.present()) c.missing("network", "required with more than one node");
      net.missing(key, "required with more than one node");
    }
    *value = 0;
  }
  return cl;
}

// ---------------------------------------------------------------- cross-field validation

class Validator {
 public:
  Validator(const Scenario& s, const Marks* marks) : s_(s), marks_(marks) {}

  // Names the first candidate key the file wrote (at its position); without one, the first candidate at
  // the document start. Scenarios built in code (no marks) get "<source>: <key>: <message>".
  [[noreturn]] void fail(std::initializer_list<const char*> keys, const std::string& msg) const {
    try {
      if (marks_) {
        for (const char* k : keys)
          if (auto it = marks_->find(k); it != marks_->end()) fail_at(s_.source, it->second, k, msg);
        auto root = marks_->find("");
        fail_at(s_.source, root != marks_->end() ? root->second : YAML::Mark::null_mark(), *keys.begin(), msg);
      }
      throw ScenarioError(s_.source + ": " + *keys.begin() + ": " + msg);
    } catch (const ScenarioError& e) {
      throw ScenarioCombinationError(e.what());  // well-formed fields, impossible together (sweep: a row)
    }
  }

  void run() const;

 private:
  void check_stage_layers_key(const ModelSpec& m, const ParallelSpec& p) const;
  void check_ranges() const;
  void check_context_parallel() const;  // parallel.cp (core/cost/context_parallel.h)
  void check_cp_comm_type() const;      // parallel.cp_comm_type, cp_a2a
  void check_moe() const;               // model.num_experts and the MoE keys, parallel.ep (docs/moe.md)
  void check_router_groups() const;     // training.moe_router_groups and moe_router_group_topk
  void check_expert_parallel() const;
  void check_latent_attention() const;   // model.kv_lora_rank and the other MLA keys
  void check_sliding_window() const;     // model.sliding_window and its pattern
  void check_recompute_modules() const;  // schedule.recompute_modules against the model
  const Scenario& s_;
  const Marks* marks_;
};

std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

void Validator::check_stage_layers_key(const ModelSpec& m, const ParallelSpec& p) const {
  if (p.stage_layers.empty()) return;
  const long long stages = scenario_model_stages(s_);
  if (stages != 1LL * p.pp * p.v) {  // DualPipe: its two copies share one list
    if (static_cast<long long>(p.stage_layers.size()) != stages)
      fail({"parallel.stage_layers"}, "lists " + std::to_string(p.stage_layers.size()) +
                                          " stages, but needs one entry per model stage: pp = " +
                                          std::to_string(stages) + " (schedule dualpipe holds each model stage twice)");
  }
  const std::string per = p.v > 1 ? "one entry per virtual stage: pp * v = " + std::to_string(p.pp) + " * " +
                                        std::to_string(p.v) + " = " + std::to_string(stages)
                                  : "one entry per pipeline stage: pp = " + std::to_string(p.pp);
  if (static_cast<long long>(p.stage_layers.size()) != stages)
    fail({"parallel.stage_layers"}, "lists " + std::to_string(p.stage_layers.size()) + " stages, but needs " + per);
  long long sum = 0;
  // The first and last virtual stages may hold no transformer layer: the embedding or the loss alone (Megatron's
  // --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split).
  for (std::size_t g = 0; g < p.stage_layers.size(); g++) {
    const bool end = g == 0 || g + 1 == p.stage_layers.size();
    if (p.stage_layers[g] < (end ? 0 : 1))
      fail({"parallel.stage_layers"}, "entry " + std::to_string(g) + " is " + std::to_string(p.stage_layers[g]) +
                                          "; a stage between the first and the last needs at least one layer");
    sum += p.stage_layers[g];
  }
  if (sum != m.layers)
    fail({"parallel.stage_layers", "model.layers"},
         "the stages hold " + std::to_string(sum) + " layers in all, but model.layers = " + std::to_string(m.layers));
}

// The documented ranges (core/util/ranges.h) also for values set in code: command-line overrides (validate --pp,
// calibrate shapes), sweep variants and profiles applied after loading.
void Validator::check_ranges() const {
  using namespace units;
  const ModelSpec& m = s_.model;
  const ClusterSpec& c = s_.cluster;
  const DeviceSpec& d = c.device;
  const ParallelSpec& p = s_.parallel;
  const std::pair<const char*, double> values[] = {
      {"model.layers", m.layers},
      {"model.hidden", m.hidden},
      {"model.heads", m.heads},
      {"model.ffn_hidden", m.ffn_hidden},
      {"model.vocab", m.vocab},
      {"model.seq_len", m.seq_len},
      {"cluster.nodes", c.nodes},
      {"cluster.gpus_per_node", c.gpus_per_node},
      {"cluster.network.nics_per_node", c.nics_per_node},
      {"cluster.gpu_speed_sigma_pct", c.gpu_speed_sigma * 100},
      {"cluster.device.peak_tflops_fp16", d.peak_flops_fp16 / kTflops},
      {"cluster.device.peak_tflops_bf16", d.peak_flops_bf16 / kTflops},
      {"cluster.device.peak_tflops_fp32", d.peak_flops_fp32 / kTflops},
      {"cluster.device.peak_tflops_fp64", d.peak_flops_fp64 / kTflops},
      {"cluster.device.peak_tflops_fp8", d.peak_flops_fp8 / kTflops},
      {"cluster.device.memory_GB", d.memory_bytes / kGB},
      {"cluster.device.hbm_bw_GBps", d.hbm_bw_Bps / kGBps},
      {"cluster.device.gemm_efficiency", d.gemm_efficiency},
      {"cluster.device.gemm_half_sat_gflop", d.gemm_half_sat_flops / 1e9},
      {"cluster.device.kernel_launch_us", d.kernel_launch_s / kUs},
      {"cluster.device.memory_efficiency", d.memory_efficiency},
      {"cluster.intra_node.nvlink_latency_us", c.nvlink_latency_s / kUs},
      {"cluster.intra_node.pcie_latency_us", c.pcie_latency_s / kUs},
      {"cluster.network.nic_latency_us", c.nic_latency_s / kUs},
      {"parallel.dp", p.dp},
      {"parallel.pp", p.pp},
      {"parallel.tp", p.tp},
      {"parallel.cp", p.cp},
      {"parallel.cp_a2a", p.cp_a2a},
      {"parallel.ep", p.ep},
      {"parallel.etp", p.etp},
      {"model.num_experts", s_.model.moe_experts},
      {"model.moe_layer_freq", s_.model.moe_layer_freq},
      {"model.q_lora_rank", s_.model.q_lora_rank},
      {"model.kv_lora_rank", s_.model.kv_lora_rank},
      {"model.qk_rope_head_dim", s_.model.qk_rope_head_dim},
      {"model.v_head_dim", s_.model.v_head_dim},
      {"model.sliding_window", s_.model.sliding_window},
      {"training.moe_router_groups", s_.training.moe_router_groups},
      {"training.moe_router_group_topk", s_.training.moe_router_group_topk},
      {"model.sliding_window_pattern", s_.model.sliding_window_pattern},
      {"parallel.v", p.v},
      {"parallel.micro_batch_size", p.micro_batch_size},
      {"parallel.global_batch", p.global_batch},
      {"schedule.seq_slices", s_.schedule.seq_slices},
  };
  for (const auto& [key, v] : values)
    if (const std::string why = range_violation(key, v); !why.empty()) fail({key}, why);
  // < 0 is "derive from the dtypes" (TrainingSpec::param_bytes), set only in code; a given value is checked.
  if (const double b = s_.training.optimizer_bytes_per_param; b >= 0)
    if (const std::string why = range_violation("training.optimizer_bytes_per_param", b); !why.empty())
      fail({"training.optimizer_bytes_per_param"}, why);
  // Bandwidths of unused link classes stay 0 (core/model/scenario.cc parse_cluster); a given one must be in range.
  const std::pair<const char*, double> links[] = {{"cluster.intra_node.nvlink_bw_GBps", c.nvlink_bw_Bps / kGBps},
                                                  {"cluster.intra_node.pcie_bw_GBps", c.pcie_bw_Bps / kGBps},
                                                  {"cluster.network.nic_bw_Gbps", c.nic_bw_Bps / kGbps}};
  for (const auto& [key, v] : links)
    if (v != 0)
      if (const std::string why = range_violation(key, v); !why.empty()) fail({key}, why);
}

// The MoE keys belong to an MoE model (num_experts > 0), and describe one.
void Validator::check_moe() const {
  const ModelSpec& m = s_.model;
  const TrainingSpec& t = s_.training;
  const TrainingSpec plain;
  if (!m.moe()) {
    for (const auto& [key, set] : {std::pair<const char*, bool>{"model.moe_top_k", m.moe_top_k != 0},
                                   {"model.moe_ffn_hidden", m.moe_ffn_hidden != 0},
                                   {"model.moe_shared_ffn_hidden", m.moe_shared_ffn_hidden != 0},
                                   {"model.moe_dense_layers", m.moe_dense_layers != 0},
                                   {"model.moe_layer_freq", m.moe_layer_freq != 1},
                                   {"training.moe_routing", t.moe_routing != plain.moe_routing},
                                   {"training.moe_expert_load_cv", t.moe_expert_load_cv != plain.moe_expert_load_cv},
                                   {"training.moe_routing_seed", t.moe_routing_seed != plain.moe_routing_seed},
                                   {"training.moe_capacity_factor", t.moe_capacity_factor != plain.moe_capacity_factor},
                                   {"training.moe_pad_to_capacity", t.moe_pad_to_capacity},
                                   {"training.moe_dispatch_fp8", t.moe_dispatch_fp8},
                                   {"training.moe_router_groups", t.moe_router_groups != 0},
                                   {"training.moe_router_group_topk", t.moe_router_group_topk != 0}})
      if (set)
        fail({key, "model.num_experts"},
             "is a mixture-of-experts key, but the model has no experts (set model.num_experts)");
    return;
  }
  if (t.moe_routing == "balanced")
    for (const auto& [key, set] :
         {std::pair<const char*, bool>{"training.moe_expert_load_cv", t.moe_expert_load_cv != plain.moe_expert_load_cv},
          {"training.moe_routing_seed", t.moe_routing_seed != plain.moe_routing_seed}})
      if (set) fail({key, "training.moe_routing"}, "describes a trained router: set training.moe_routing: trained");
  if (t.moe_dispatch_fp8 && t.act_bytes_per_elem() != 2)
    fail({"training.moe_dispatch_fp8", "training.dtype"},
         "quantises 16-bit activations to FP8 for the dispatch: it needs dtype bf16, fp16 or fp8, got " + t.dtype);
  if (t.moe_pad_to_capacity && !(t.moe_capacity_factor > 0))
    fail({"training.moe_pad_to_capacity", "training.moe_capacity_factor"},
         "pads each expert's input to its capacity: give training.moe_capacity_factor");
  check_router_groups();
  const std::string E = std::to_string(m.moe_experts);
  if (m.moe_top_k < 1 || m.moe_top_k > m.moe_experts)
    fail({"model.moe_top_k", "model.num_experts"}, "each token goes to moe_top_k of the num_experts = " + E +
                                                       " experts: it must be in 1.." + E + ", got " +
                                                       std::to_string(m.moe_top_k));
  if (m.moe_ffn_hidden < 1)
    fail({"model.moe_ffn_hidden", "model.num_experts"}, "an MoE model needs the inner size of one expert's MLP");
  if (m.moe_dense_layers >= m.layers)
    fail({"model.moe_dense_layers", "model.layers"}, "moe_dense_layers = " + std::to_string(m.moe_dense_layers) +
                                                         " leaves no MoE layer of the " + std::to_string(m.layers));
  if (m.moe_shared_ffn_hidden % s_.parallel.tp != 0)
    fail({"model.moe_shared_ffn_hidden", "parallel.tp"},
         "the shared experts are split like the dense MLP: moe_shared_ffn_hidden = " +
             std::to_string(m.moe_shared_ffn_hidden) + " is not divisible by tp = " + std::to_string(s_.parallel.tp));
  if (s_.parallel.tp > 1 && !s_.parallel.sequence_parallel)
    fail({"parallel.sequence_parallel", "parallel.tp", "model.num_experts"},
         "a mixture-of-experts model with tp = " + std::to_string(s_.parallel.tp) +
             " needs parallel.sequence_parallel: true (Megatron-Core requires it: each GPU of a tensor-parallel "
             "group dispatches its own share of the tokens)");
  if (!s_.sim.profile.empty())
    fail({"model.num_experts", "sim.profile", "calibration"},
         "a calibration profile times dense layers; a mixture-of-experts model needs the analytic model");
}

// A module to recompute must exist in the model: MoE parts need experts, shared_experts shared ones, mla_up_proj
// latent attention, mlp a dense layer.
void Validator::check_recompute_modules() const {
  const ModelSpec& m = s_.model;
  const ScheduleSpec& sc = s_.schedule;
  if (sc.recompute != Recompute::Selective) return;
  int dense_layers = 0;
  for (int i = 0; i < m.layers; i++) dense_layers += m.moe_layer(i) ? 0 : 1;
  const std::pair<RecomputeModule, std::pair<bool, const char*>> needs[] = {
      {RecomputeModule::MoeAct, {m.moe(), "the model has no experts (model.num_experts)"}},
      {RecomputeModule::Moe, {m.moe(), "the model has no experts (model.num_experts)"}},
      {RecomputeModule::SharedExperts, {m.moe_shared_ffn_hidden > 0, "the model has no shared experts"}},
      {RecomputeModule::MlaUpProj, {m.mla(), "the model has no latent attention (model.kv_lora_rank)"}},
      {RecomputeModule::Mlp, {dense_layers > 0, "every layer of the model is an MoE layer"}},
  };
  for (const auto& [mod, need] : needs)
    if ((sc.recompute_modules & module_bit(mod)) && !need.first)
      fail({"schedule.recompute_modules"}, std::string("lists ") + to_string(mod) + ", but " + need.second);
}

// Multi-head latent attention: all its sizes or none, no grouped-query attention, the fused attention kernels.
void Validator::check_latent_attention() const {
  const ModelSpec& m = s_.model;
  if (!m.mla()) {
    for (const auto& [key, set] : {std::pair<const char*, bool>{"model.q_lora_rank", m.q_lora_rank != 0},
                                   {"model.qk_rope_head_dim", m.qk_rope_head_dim != 0},
                                   {"model.v_head_dim", m.v_head_dim != 0}})
      if (set) fail({key, "model.kv_lora_rank"}, "is a multi-head latent attention key, but model.kv_lora_rank is 0");
    return;
  }
  if (m.head_dim < 1 || m.qk_rope_head_dim < 1 || m.v_head_dim < 1)
    fail({"model.head_dim", "model.qk_rope_head_dim", "model.v_head_dim", "model.kv_lora_rank"},
         "multi-head latent attention needs head_dim (the non-rotary part of a Q/K head), qk_rope_head_dim and "
         "v_head_dim");
  if (m.kv_heads() != m.heads)
    fail({"model.query_groups", "model.kv_lora_rank"}, "multi-head latent attention has no grouped-query attention");
  if (!s_.training.flash_attention)
    fail({"training.flash_attention", "model.kv_lora_rank"},
         "multi-head latent attention runs in the fused attention kernels: set training.flash_attention: true");
  if (s_.parallel.cp > 1)
    fail({"parallel.cp", "model.kv_lora_rank"}, "context parallelism with multi-head latent attention: not modelled");
}

// Group-limited routing: both keys or neither; groups of whole experts, enough experts in the picked groups.
void Validator::check_router_groups() const {
  const TrainingSpec& t = s_.training;
  const ModelSpec& m = s_.model;
  const int G = t.moe_router_groups, M = t.moe_router_group_topk;
  if (G == 0 && M == 0) return;
  if (G == 0 || M == 0)
    fail({G == 0 ? "training.moe_router_group_topk" : "training.moe_router_groups",
          G == 0 ? "training.moe_router_groups" : "training.moe_router_group_topk"},
         "group-limited routing needs both training.moe_router_groups and training.moe_router_group_topk");
  if (m.moe_experts % G != 0)
    fail({"training.moe_router_groups", "model.num_experts"},
         "num_experts = " + std::to_string(m.moe_experts) + " is not divisible into " + std::to_string(G) + " groups");
  if (M > G)
    fail({"training.moe_router_group_topk", "training.moe_router_groups"},
         "picks " + std::to_string(M) + " of " + std::to_string(G) + " groups");
  if (1LL * M * (m.moe_experts / G) < m.moe_top_k)
    fail({"training.moe_router_group_topk", "model.moe_top_k"},
         std::to_string(M) + " groups of " + std::to_string(m.moe_experts / G) +
             " experts hold fewer than moe_top_k = " + std::to_string(m.moe_top_k));
}

// Sliding-window attention: a pattern needs a window; context parallelism's ring would skip the steps outside the
// window, which the ring model does not.
void Validator::check_sliding_window() const {
  const ModelSpec& m = s_.model;
  if (m.sliding_window_pattern > 0 && m.sliding_window == 0)
    fail({"model.sliding_window_pattern", "model.sliding_window"},
         "says which layers slide, but the model has no window (set model.sliding_window)");
  if (m.sliding_window > 0 && s_.parallel.cp > 1)
    fail({"parallel.cp", "model.sliding_window"}, "context parallelism with sliding-window attention: not modelled");
}

// Megatron-Core's parallel folding: the tp * cp * dp GPUs of a pipeline stage hold the experts in groups of
// etp * ep consecutive ranks (etp innermost). The simulator needs each group inside one worker's tp * cp GPUs or made
// of whole workers.
void Validator::check_expert_parallel() const {
  const ParallelSpec& p = s_.parallel;
  const ModelSpec& m = s_.model;
  if (p.ep == 1 && p.etp == 1) return;
  const std::string ep = std::to_string(p.ep), etp = std::to_string(p.etp);
  if (!m.moe()) {
    if (p.ep > 1) fail({"parallel.ep", "model.num_experts"}, "ep = " + ep + " spreads experts, but the model has none");
    fail({"parallel.etp", "model.num_experts"}, "etp = " + etp + " splits experts, but the model has none");
  }
  if (m.moe_experts % p.ep != 0)
    fail({"parallel.ep", "model.num_experts"},
         "num_experts = " + std::to_string(m.moe_experts) + " is not divisible by ep = " + ep);
  if (m.moe_ffn_hidden % p.etp != 0)
    fail({"parallel.etp", "model.moe_ffn_hidden"},
         "moe_ffn_hidden = " + std::to_string(m.moe_ffn_hidden) + " is not divisible by etp = " + etp);
  const long long width = 1LL * p.tp * p.cp, stage = width * p.dp, group = p.expert_group_gpus();
  const std::string what = p.etp == 1 ? "ep = " + ep : "etp * ep = " + etp + " * " + ep;
  const char* first = p.etp == 1 ? "parallel.ep" : "parallel.etp";  // the key the message points at
  if (stage % group != 0)
    fail({first, "parallel.ep", "parallel.dp"},
         what + " does not divide the " + std::to_string(stage) + " GPUs of a pipeline stage (tp * cp * dp)");
  if (width % group != 0 && group % width != 0)
    fail({first, "parallel.ep", "parallel.tp"},
         "an expert group is a divisor or a multiple of the tp * cp = " + std::to_string(width) +
             " GPUs of one model replica's stage, got " + what);
}

// Context parallelism as Megatron-LM runs it (Transformer Engine's ring attention): whole sequences in 2 * cp
// load-balanced chunks, attention in the fused (flash) kernels, no token slicing on top, no measured profile.
void Validator::check_context_parallel() const {
  const ParallelSpec& p = s_.parallel;
  if (p.cp_a2a != 1 && p.cp_comm_type != CpCommType::A2AP2P)
    fail({"parallel.cp_a2a", "parallel.cp_comm_type"},
         "cp_a2a = " + std::to_string(p.cp_a2a) +
             " sizes the all-to-all level of cp_comm_type a2a+p2p; cp_comm_type is " + to_string(p.cp_comm_type));
  if (p.cp == 1) return;
  const std::string cp = std::to_string(p.cp);
  check_cp_comm_type();
  if (s_.model.seq_len % (2 * p.cp) != 0)
    fail({"parallel.cp", "model.seq_len"},
         "context parallelism cuts each sequence into 2 * cp = " + std::to_string(2 * p.cp) +
             " equal chunks (causal load balancing), "
             "but seq_len = " +
             std::to_string(s_.model.seq_len) + " is not divisible");
  if (!s_.training.flash_attention)
    fail({"parallel.cp", "training.flash_attention"},
         "cp = " + cp +
             " runs attention as ring steps of the fused (flash) attention kernel, as Transformer Engine "
             "does: set training.flash_attention: true");
  if (schedule_entry(s_.schedule.kind).traits.sliced())
    fail({"parallel.cp", "schedule.kind"}, std::string("schedule ") + schedule_entry(s_.schedule.kind).name +
                                               " slices sequences into tokens; context parallelism (cp = " + cp +
                                               ") splits them over ranks instead: use one or the other");
  if (s_.sim.placement == "terapipe")
    fail({"parallel.cp", "sim.placement"}, "placement terapipe has no context-parallel ranks (cp = " + cp + ")");
  if (!s_.sim.profile.empty())
    fail({"parallel.cp", "sim.profile", "calibration"},
         "a calibration profile times whole-sequence layers; cp = " + cp + " needs the analytic model");
}

// The all-to-all forms hand each context-parallel rank whole sequences of a share of the heads: the query and the K/V
// heads of a tensor-parallel rank must split evenly over the all-to-all group (Transformer Engine asserts it).
void Validator::check_cp_comm_type() const {
  const ParallelSpec& p = s_.parallel;
  const std::string cp = std::to_string(p.cp);
  if (p.cp_comm_type == CpCommType::A2AP2P && (p.cp_a2a < 2 || p.cp_a2a >= p.cp || p.cp % p.cp_a2a != 0))
    fail({"parallel.cp_a2a", "parallel.cp", "parallel.cp_comm_type"},
         "cp_comm_type a2a+p2p needs cp_a2a, the all-to-all level, to be a divisor of cp = " + cp +
             " between 2 and cp / 2 (the ring level is cp / cp_a2a), got " + std::to_string(p.cp_a2a) +
             (p.cp_a2a == p.cp ? ": cp_comm_type a2a is that layout" : ""));
  const int group = p.cp_comm_type == CpCommType::A2A ? p.cp : p.cp_comm_type == CpCommType::A2AP2P ? p.cp_a2a : 1;
  if (group == 1) return;
  const ModelSpec& m = s_.model;
  const int heads = m.heads / p.tp, kv_heads = m.kv_heads() / p.tp;
  if (heads % group != 0 || kv_heads % group != 0)
    fail({"parallel.cp_comm_type", "parallel.cp", "model.heads", "model.query_groups"},
         std::string("cp_comm_type ") + to_string(p.cp_comm_type) + " spreads the heads of a tensor-parallel rank (" +
             std::to_string(heads) + " query, " + std::to_string(kv_heads) + " K/V heads) over all-to-all groups of " +
             std::to_string(group) + " ranks: both counts must be divisible by it");
}

void Validator::run() const {
  check_ranges();
  const ModelSpec& m = s_.model;
  const ClusterSpec& c = s_.cluster;
  const DeviceSpec& d = c.device;
  const ParallelSpec& p = s_.parallel;
  const ScheduleSpec& sch = s_.schedule;
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto non_negative = [](double x) { return std::isfinite(x) && x >= 0; };

  // Counts and sizes: check_ranges() above (every one of them >= 1).
  const std::pair<const char*, double> pos[] = {{"cluster.device.peak_tflops_fp16", d.peak_flops_fp16},
                                                {"cluster.device.peak_tflops_fp32", d.peak_flops_fp32},
                                                {"cluster.device.memory_GB", d.memory_bytes},
                                                {"cluster.device.hbm_bw_GBps", d.hbm_bw_Bps}};
  for (const auto& [key, value] : pos)
    if (!positive(value)) fail({key}, "must be > 0, got " + num(value));
  const std::pair<const char*, double> nonneg[] = {{"cluster.device.peak_tflops_bf16", d.peak_flops_bf16},
                                                   {"cluster.device.peak_tflops_fp8", d.peak_flops_fp8},
                                                   {"cluster.device.gemm_half_sat_gflop", d.gemm_half_sat_flops},
                                                   {"cluster.device.kernel_launch_us", d.kernel_launch_s},
                                                   {"cluster.intra_node.nvlink_latency_us", c.nvlink_latency_s},
                                                   {"cluster.intra_node.pcie_latency_us", c.pcie_latency_s},
                                                   {"cluster.network.nic_latency_us", c.nic_latency_s}};
  for (const auto& [key, value] : nonneg)
    if (!non_negative(value)) fail({key}, "must be >= 0, got " + num(value));
  // < 0 = from the dtypes (TrainingSpec::param_bytes); files can only write values >= 0.
  if (!std::isfinite(s_.training.optimizer_bytes_per_param))
    fail({"training.optimizer_bytes_per_param"}, "must be >= 0, got " + num(s_.training.optimizer_bytes_per_param));
  for (const auto& [key, value] : {std::pair<const char*, double>{"cluster.device.gemm_efficiency", d.gemm_efficiency},
                                   {"cluster.device.memory_efficiency", d.memory_efficiency}})
    if (!(value > 0 && value <= 1)) fail({key}, "must be in (0, 1], got " + num(value));
  if (c.fabric != IntraNodeFabric::PCIe && c.gpus_per_node > 1 && !positive(c.nvlink_bw_Bps))
    fail({"cluster.intra_node.nvlink_bw_GBps", "cluster.intra_node.fabric"},
         std::string("must be > 0 for fabric ") + to_string(c.fabric));
  if (c.fabric != IntraNodeFabric::NVSwitch && !positive(c.pcie_bw_Bps))
    fail({"cluster.intra_node.pcie_bw_GBps", "cluster.intra_node.fabric"},
         std::string("must be > 0 for fabric ") + to_string(c.fabric));
  if (c.nodes > 1 && !positive(c.nic_bw_Bps))
    fail({"cluster.network.nic_bw_Gbps", "cluster.nodes"}, "must be > 0 with more than one node");
  if (!(std::isfinite(c.oversubscription) && c.oversubscription > 0))
    fail({"cluster.network.oversubscription"}, "must be > 0, got " + num(c.oversubscription));
  if (c.nodes_per_leaf < 0) fail({"cluster.network.nodes_per_leaf"}, "must be a positive integer");
  if (c.nodes_per_leaf > 0 && c.nodes % c.nodes_per_leaf != 0)
    fail({"cluster.network.nodes_per_leaf", "cluster.nodes"},
         "cluster.nodes = " + std::to_string(c.nodes) + " is not a multiple of nodes_per_leaf = " +
             std::to_string(c.nodes_per_leaf) + " (every leaf switch holds the same number of nodes)");
  if (c.fabric == IntraNodeFabric::CubeMesh && c.gpus_per_node > 8)
    fail({"cluster.gpus_per_node", "cluster.intra_node.fabric", "cluster.preset"},
         "the cube-mesh fabric has at most 8 GPUs per node, got " + std::to_string(c.gpus_per_node));

  // Parallel layout vs cluster size.
  // 64-bit products: fuzzed sizes overflow int (UB, and a zero divisor below).
  const long long used = 1LL * p.dp * p.pp * p.tp * p.cp;
  const long long total = 1LL * c.nodes * c.gpus_per_node;
  const std::string cp_text = p.cp > 1 ? " * " + std::to_string(p.cp) : "";
  if (used != total)
    fail({"parallel.dp", "parallel.pp", "parallel.tp", "parallel.cp", "parallel", "cluster.nodes", "cluster"},
         std::string("dp * pp * tp") + (p.cp > 1 ? " * cp" : "") + " = " + std::to_string(p.dp) + " * " +
             std::to_string(p.pp) + " * " + std::to_string(p.tp) + cp_text + " = " + std::to_string(used) +
             " GPUs, but the cluster has nodes * gpus_per_node = " + std::to_string(c.nodes) + " * " +
             std::to_string(c.gpus_per_node) + " = " + std::to_string(total));

  // Model split: even (layers / (pp * v) per virtual stage) or parallel.stage_layers (core/model/placement.h).
  // Every chunk holds a layer, but the first and last of an uneven split (check_stage_layers_key).
  const long long chunks = scenario_model_stages(s_), ends = p.stage_layers.empty() ? 0 : std::min(2LL, chunks - 1);
  const bool copies = chunks != 1LL * p.pp * p.v;  // DualPipe: pp model stages, each held twice
  const std::string chunks_name = copies ? "the model stages, pp" : "pp * v";
  if (chunks > m.layers + ends)
    fail({"parallel.pp", "parallel.v", "model.layers"},
         chunks_name + " = " + std::to_string(chunks) + " model chunks but the model has only " +
             std::to_string(m.layers) + " layers (every chunk needs at least one" +
             (ends > 0 ? ", but the first and the last" : "") + ")");
  if (p.stage_layers.empty() && m.layers % chunks != 0)
    fail({"parallel.pp", "parallel.v", "model.layers"},
         "model.layers = " + std::to_string(m.layers) + " is not divisible by " + chunks_name + " = " +
             (copies ? "" : std::to_string(p.pp) + " * " + std::to_string(p.v) + " = ") + std::to_string(chunks) +
             " (give parallel.stage_layers for an uneven split)");
  check_stage_layers_key(m, p);
  if (m.head_dim == 0 && m.hidden % m.heads != 0)
    fail({"model.heads", "model.hidden"}, "model.hidden = " + std::to_string(m.hidden) +
                                              " is not divisible by model.heads = " + std::to_string(m.heads) +
                                              " (give model.head_dim when the heads are not hidden / heads wide)");
  if (m.heads % p.tp != 0)
    fail({"parallel.tp", "model.heads"},
         "model.heads = " + std::to_string(m.heads) + " is not divisible by tp = " + std::to_string(p.tp));
  // Grouped-query attention: K/V heads divide the query heads, and tensor parallelism splits whole groups.
  if (m.query_groups < 0)
    fail({"model.query_groups"}, "must be a positive integer, got " + std::to_string(m.query_groups));
  if (m.heads % m.kv_heads() != 0)
    fail({"model.query_groups", "model.heads"},
         "model.heads = " + std::to_string(m.heads) +
             " is not divisible by model.query_groups = " + std::to_string(m.kv_heads()));
  if (m.kv_heads() % p.tp != 0)
    fail({"parallel.tp", "model.query_groups"}, "model.query_groups = " + std::to_string(m.kv_heads()) +
                                                    " is not divisible by tp = " + std::to_string(p.tp) +
                                                    " (tensor parallelism splits whole K/V groups)");
  if (m.ffn_hidden % p.tp != 0)
    fail({"parallel.tp", "model.ffn_hidden"},
         "model.ffn_hidden = " + std::to_string(m.ffn_hidden) + " is not divisible by tp = " + std::to_string(p.tp));

  // Batch.
  const long long per_step = 1LL * p.micro_batch_size * p.dp;
  if (p.global_batch < per_step)
    fail({"parallel.global_batch", "parallel.micro_batch_size", "parallel.dp"},
         "global_batch = " + std::to_string(p.global_batch) + " does not fill one micro-batch per replica: " +
             "micro_batch_size * dp = " + std::to_string(p.micro_batch_size) + " * " + std::to_string(p.dp) + " = " +
             std::to_string(per_step) + " sequences");
  if (p.global_batch % per_step != 0)
    fail({"parallel.global_batch", "parallel.micro_batch_size", "parallel.dp"},
         "global_batch = " + std::to_string(p.global_batch) + " is not divisible by micro_batch_size * dp = " +
             std::to_string(p.micro_batch_size) + " * " + std::to_string(p.dp) + " = " + std::to_string(per_step));
  const int mb = p.micro_batches();

  // Schedule constraints.
  const ScheduleEntry& entry = schedule_entry(sch.kind);
  const char* kind = entry.name;
  const bool interleaved = entry.traits.interleaved;
  const bool sliced = entry.traits.sliced();
  if (interleaved && p.v < 2)
    fail({"parallel.v", "schedule.kind"},
         std::string("schedule ") + kind + " needs v > 1 model chunks per rank, got v = " + std::to_string(p.v));
  if (entry.traits.fixed_v > 0 && p.v != entry.traits.fixed_v)
    fail({"parallel.v", "schedule.kind"}, std::string("schedule ") + kind +
                                              " needs exactly v = " + std::to_string(entry.traits.fixed_v) +
                                              " model chunks per rank, got v = " + std::to_string(p.v));
  if (!interleaved && !entry.traits.from_file && p.v > 1)
    fail({"parallel.v", "schedule.kind"}, "v = " + std::to_string(p.v) + " model chunks per rank needs schedule.kind " +
                                              schedule_names_if([](const ScheduleTraits& t) { return t.interleaved; }) +
                                              ", got " + kind);
  if (entry.traits.from_file && sch.file.empty())
    fail({"schedule.kind"}, "schedule kind file needs schedule.file (a CSV in PyTorch pipelining's format)");
  if (!entry.traits.from_file && !sch.file.empty())
    fail({"schedule.file", "schedule.kind"},
         std::string("schedule.file is read only with kind: file, got kind ") + kind);
  // Megatron's interleaved schedule asserts m % p == 0; Seq1F1B-I inherits it.
  if (entry.traits.m_multiple_of_p && mb % p.pp != 0)
    fail({"parallel.global_batch", "parallel.pp", "schedule.kind"},
         std::string("schedule ") + kind +
             " needs the micro-batch count m = global_batch / (micro_batch_size * dp) = " + std::to_string(mb) +
             " to be a multiple of pp = " + std::to_string(p.pp));
  if (entry.traits.min_m_per_rank > 0 && mb < entry.traits.min_m_per_rank * p.pp)
    fail({"parallel.global_batch", "parallel.pp", "schedule.kind"},
         std::string("schedule ") + kind + " needs at least " + std::to_string(entry.traits.min_m_per_rank) +
             " micro-batches per pipeline rank: m = global_batch / (micro_batch_size * dp) = " + std::to_string(mb) +
             " < " + std::to_string(entry.traits.min_m_per_rank) +
             " * pp = " + std::to_string(entry.traits.min_m_per_rank * p.pp));
  if (scenario_stage_style(s_) == StageStyle::Dual && (p.pp % 2 != 0 || mb % 2 != 0))
    fail({"parallel.pp", "parallel.global_batch", "schedule.kind"},
         std::string("schedule ") + kind + " sends half the micro-batches each way and pairs rank r with pp - 1 - r: " +
             "it needs an even pp and an even micro-batch count, got pp = " + std::to_string(p.pp) +
             ", m = " + std::to_string(mb));
  if (sch.overlap_moe_a2a && !entry.traits.combined_1f1b)
    fail({"schedule.overlap_moe_a2a", "schedule.kind"},
         std::string("overlap_moe_a2a runs the steady state of ") + schedule_names_if([](const ScheduleTraits& t) {
           return t.combined_1f1b;
         }) + " as overlapped forward-backward pairs (Megatron's combined 1F1B); schedule " +
             kind + (entry.traits.overlapped ? " pairs its own ops already" : " has no such steady state"));
  if (sch.seq_slices > m.seq_len)
    fail({"schedule.seq_slices", "model.seq_len"},
         "seq_slices = " + std::to_string(sch.seq_slices) + " exceeds seq_len = " + std::to_string(m.seq_len));
  if (sliced && sch.slicing == "uniform" && sch.slice_tokens.empty() && m.seq_len % sch.seq_slices != 0)
    fail({"schedule.seq_slices", "model.seq_len"}, "uniform slicing needs seq_len = " + std::to_string(m.seq_len) +
                                                       " divisible by seq_slices = " + std::to_string(sch.seq_slices) +
                                                       " (give uneven slices explicitly with schedule.slice_tokens)");
  if (!one_of(slicings(), sch.slicing))
    fail({"schedule.slicing"}, unknown_value_message("value", sch.slicing, names_of(slicings())));
  if (!sliced) {
    const std::string slicers = schedule_names_if([](const ScheduleTraits& t) { return t.sliced(); });
    if (sch.seq_slices != 1)
      fail({"schedule.seq_slices", "schedule.kind"},
           std::string("schedule ") + kind + " runs whole sequences: seq_slices must be 1 (token slicing needs " +
               slicers + "), got " + std::to_string(sch.seq_slices));
    if (!sch.slice_tokens.empty())
      fail({"schedule.slice_tokens", "schedule.kind"},
           std::string("schedule ") + kind + " runs whole sequences: slice_tokens needs " + slicers);
    if (sch.slicing != "uniform")
      fail({"schedule.slicing", "schedule.kind"},
           std::string("schedule ") + kind + " runs whole sequences: slicing must be uniform, got " + sch.slicing);
  }
  // The planned slicings belong to one slice plan each; elsewhere they would silently become uniform slices.
  if (sliced && sch.slicing == "cwp" && entry.traits.slicing != SlicePlan::Seq1F1B)
    fail({"schedule.slicing", "schedule.kind"},
         std::string("slicing cwp is Seq1F1B's equal-FLOPs split (schedules ") +
             schedule_names_if([](const ScheduleTraits& t) { return t.slicing == SlicePlan::Seq1F1B; }) +
             "); schedule " + kind + " takes uniform or explicit slices");
  if (sliced && sch.slicing == "dp" && (entry.traits.slicing != SlicePlan::TeraPipe || entry.traits.from_file))
    fail({"schedule.slicing", "schedule.kind"}, std::string("slicing dp is TeraPipe's planner (schedule ") +
                                                    to_string(ScheduleKind::TeraPipe) + "); schedule " + kind +
                                                    " takes uniform or explicit slices");
  if (sch.slicing == "explicit" && sch.slice_tokens.empty())
    fail({"schedule.slicing", "schedule.slice_tokens"}, "slicing explicit needs a non-empty schedule.slice_tokens");
  if (!sch.slice_tokens.empty()) {
    if (sch.slicing != "explicit")
      fail({"schedule.slicing", "schedule.slice_tokens"},
           "slicing " + sch.slicing + " conflicts with the explicit schedule.slice_tokens (use slicing: explicit)");
    long long sum = 0;
    for (std::size_t i = 0; i < sch.slice_tokens.size(); i++) {
      if (sch.slice_tokens[i] < 1)
        fail({"schedule.slice_tokens"}, "entry " + std::to_string(i) + " is " + std::to_string(sch.slice_tokens[i]) +
                                            "; every slice needs at least one token");
      sum += sch.slice_tokens[i];
    }
    if (sum != m.seq_len)
      fail({"schedule.slice_tokens", "model.seq_len"},
           "slices sum to " + std::to_string(sum) + " tokens, but seq_len = " + std::to_string(m.seq_len));
    if (static_cast<int>(sch.slice_tokens.size()) != sch.seq_slices)
      fail({"schedule.seq_slices", "schedule.slice_tokens"}, "seq_slices = " + std::to_string(sch.seq_slices) +
                                                                 " but slice_tokens lists " +
                                                                 std::to_string(sch.slice_tokens.size()) + " slices");
  }

  // Numerics and simulation knobs.
  const auto& t = s_.training;
  if (!one_of(dtypes(), t.dtype)) fail({"training.dtype"}, unknown_value_message("value", t.dtype, names_of(dtypes())));
  // FlashAttention kernels exist for 16-bit inputs only (FP8 training keeps attention in bf16).
  if (t.flash_attention && t.dtype != "fp16" && t.dtype != "bf16" && !t.fp8())
    fail({"training.flash_attention", "training.dtype"}, "flash attention needs dtype fp16 or bf16, got " + t.dtype);
  // FP8 GEMMs need FP8 tensor cores (Hopper and later); the rest of an FP8 run is bf16.
  if (t.fp8() && d.peak_flops_fp8 > 0 && !(d.peak_flops_bf16 > 0))
    fail({"training.dtype", "cluster.device.peak_tflops_bf16", "cluster.device.preset", "cluster.preset"},
         "fp8 runs everything but its linear GEMMs in bf16; " + d.name + " has no bf16 peak (peak_tflops_bf16 = 0)");
  if (t.fp8() && !(d.peak_flops_fp8 > 0))
    fail({"training.dtype", "cluster.device.peak_tflops_fp8", "cluster.device.preset", "cluster.preset"},
         "fp8 needs a device with FP8 tensor cores (H100, H200); " + d.name +
             (s_.sim.profile.empty() ? std::string() : " as described by the profile " + s_.sim.profile) +
             " has none (peak_tflops_fp8 = " + num(d.peak_flops_fp8 / units::kTflops) +
             (s_.sim.profile.empty() ? "): use bf16" : "; calibration profiles carry no FP8 rate): use bf16"));
  if (t.dtype == "bf16" && !(d.peak_flops_bf16 > 0))
    fail({"training.dtype", "cluster.device.peak_tflops_bf16", "cluster.device.preset", "cluster.preset"},
         "bf16 needs a device with bf16 support; " + d.name + " has none (peak_tflops_bf16 = 0): use fp16");
  if (t.dtype == "fp64" && !(d.peak_flops_fp64 > 0))
    fail({"training.dtype", "cluster.device.peak_tflops_fp64", "sim.profile"},
         "fp64 needs a device with a known fp64 peak; " + d.name +
             " has none: give cluster.device.peak_tflops_fp64 or a calibration profile of the CPU backend");
  if (!(std::isfinite(t.grad_bucket_bytes) && t.grad_bucket_bytes > 0))
    fail({"training.grad_bucket_MB"}, "must be > 0, got " + num(t.grad_bucket_bytes / units::kMB));
  if (t.tp_comm_overlap && !(s_.parallel.tp > 1 && s_.parallel.sequence_parallel))
    fail({"training.tp_comm_overlap", "parallel.tp", "parallel.sequence_parallel"},
         "the userbuffers overlap splits sequence parallelism's all-gathers and reduce-scatters: it needs tp > 1 and "
         "sequence_parallel: true (Megatron-LM asserts the same)");
  if (t.fsdp_reshard_after_forward && !t.fsdp)
    fail({"training.fsdp_reshard_after_forward", "training.fsdp"},
         "resharding after forward is FSDP's: set fsdp: true");
  if (t.fsdp_reshard_after_forward && schedule_entry(s_.schedule.kind).traits.from_file)
    fail({"training.fsdp_reshard_after_forward", "schedule.kind"},
         "a schedule file runs with the FSDP actions it names or those PyTorch's runtime places (docs/schedule-ir.md, "
         "\"FSDP actions\"): leave fsdp_reshard_after_forward off");
  if (t.fsdp && t.distributed_optimizer)
    fail({"training.fsdp", "training.distributed_optimizer"},
         "fsdp shards the optimizer state itself (and the gradients and weights): leave distributed_optimizer off");
  if (t.overlap_param_gather && !t.distributed_optimizer)
    fail({"training.overlap_param_gather", "training.distributed_optimizer"},
         "overlap_param_gather overlaps the distributed optimizer's parameter all-gather: it needs "
         "training.distributed_optimizer: true");
  if (!one_of(collective_models(), s_.sim.collectives))
    fail({"sim.collectives"}, unknown_value_message("value", s_.sim.collectives, names_of(collective_models())));
  if (!one_of(wgrad_accumulations(), s_.training.wgrad_accumulation))
    fail({"training.wgrad_accumulation"},
         unknown_value_message("value", s_.training.wgrad_accumulation, names_of(wgrad_accumulations())));
  if (!one_of(p2p_modes(), s_.sim.p2p))
    fail({"sim.p2p"}, unknown_value_message("value", s_.sim.p2p, names_of(p2p_modes())));
  if (!one_of(placements(), s_.sim.placement))
    fail({"sim.placement"}, unknown_value_message("value", s_.sim.placement, names_of(placements())));
  check_context_parallel();
  check_moe();
  check_sliding_window();
  check_expert_parallel();
  check_latent_attention();
  check_recompute_modules();
  // TeraPipe's layout keeps each tensor-parallel group inside one node.
  if (s_.sim.placement == "terapipe" && c.gpus_per_node % p.tp != 0)
    fail({"sim.placement", "parallel.tp"},
         "placement terapipe keeps tensor-parallel groups inside a node, but tp = " + std::to_string(p.tp) +
             " does not divide gpus_per_node = " + std::to_string(c.gpus_per_node));
}

std::string file_stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const auto dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// Records where a document starts; the events themselves are not needed.
class DocumentStart : public YAML::EventHandler {
 public:
  YAML::Mark mark = YAML::Mark::null_mark();
  void OnDocumentStart(const YAML::Mark& m) override { mark = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// yaml-cpp 0.7 takes a quoted scalar left open to the end of the file as closed there, so `name: "abc` swallows the
// rest of the document and the error would be a missing section. Each quoted scalar must close in the text.
bool quote_closes(const std::string& text, std::size_t at) {
  const char q = text[at];
  for (std::size_t i = at + 1; i < text.size(); i++) {
    if (q == '"' && text[i] == '\\') {
      i++;
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        i++;
        continue;
      }
      return true;
    }
  }
  return false;
}

void check_quotes(const YAML::Node& n, const std::string& text, const std::string& source) {
  if (n.IsScalar()) {
    const int pos = n.Mark().pos;
    if (pos >= 0 && static_cast<std::size_t>(pos) < text.size() && (text[pos] == '"' || text[pos] == '\'') &&
        !quote_closes(text, static_cast<std::size_t>(pos)))
      fail_at(source, n.Mark(), "(syntax)", std::string("unterminated quoted string (no closing ") + text[pos] + ")");
  } else if (n.IsSequence()) {
    for (const YAML::Node& e : n) check_quotes(e, text, source);
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;
      const YAML::Node v = it->second;
      check_quotes(k, text, source);
      check_quotes(v, text, source);
    }
  }
}

// `path` as written in the scenario: relative to the directory of `base` (the scenario file), absolute as is.
std::string relative_to(const std::string& base, const std::string& path) {
  const auto slash = base.find_last_of('/');
  return path.empty() || path[0] == '/' || slash == std::string::npos ? path : base.substr(0, slash + 1) + path;
}

// `path_base`: the file relative paths (schedule.file, sim.profile) are taken from; `source` names the text in
// messages (a sweep variant's source is "f.yaml [key=value]", whose value may itself hold a '/').
Scenario parse_impl(const std::string& text, const std::string& source, const std::string& profile_override,
                    const std::string& path_base, bool cross_field_checks = true) {
  // The limits of core/util/input_file.h also for text that did not come from a file (sweep variants, tests).
  if (text.size() > kMaxInputBytes)
    throw ScenarioError(source + ": " + std::to_string(text.size()) + " bytes: larger than the " +
                        std::to_string(kMaxInputBytes >> 20) + " MiB limit on input files");
  int bad_line = 0, bad_col = 0;
  if (const std::string bad = utf8_problem(text, &bad_line, &bad_col); !bad.empty())
    throw ScenarioError(source + ":" + std::to_string(bad_line) + ":" + std::to_string(bad_col) +
                        ": (encoding): " + bad.substr(bad.find(": ") + 2));
  // The path names the scenario in JSON reports, which must be UTF-8 (nlohmann refuses to write it otherwise).
  if (!utf8_problem(source).empty())
    throw ScenarioError(source + ": the file name is not valid UTF-8 (rename the file)");
  // YAML::LoadAll loops forever (allocating empty documents) on a ',' outside a flow collection
  // (yaml-cpp 0.7, found by fuzz_scenario), so load the first document only and look for a second one with
  // the event parser, which stops after two documents whatever follows.
  YAML::Node doc;
  bool has_doc = false;
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    AliasCheck first;  // and where the document starts
    DocumentStart second;
    has_doc = parser.HandleNextDocument(first);
    if (!first.problem.empty()) fail_at(source, first.problem_mark, "(syntax)", first.problem);
    if (has_doc && parser.HandleNextDocument(second)) {
      const auto pos = static_cast<std::size_t>(std::max(0, second.mark.pos));
      if (pos < text.size() && text[pos] == ',')
        fail_at(source, second.mark, "(syntax)", "unexpected ',' outside a flow collection ([...] or {...})");
      fail_at(source, second.mark, "(syntax)",
              "a second YAML document starts here (a scenario is one document; check the indentation)");
    }
    if (has_doc) doc = YAML::Load(text);
    check_quotes(doc, text, source);
  } catch (const YAML::Exception& e) {
    fail_at(source, e.mark, "(syntax)", yaml_error_text(e));
  }
  Marks marks;
  const YAML::Mark doc_mark = !has_doc || doc.IsNull() ? YAML::Mark::null_mark() : doc.Mark();
  marks[""] = doc_mark;
  const Section root(source, marks, doc, doc_mark, "",
                     {"name", "model", "cluster", "parallel", "schedule", "training", "sim", "calibration"});

  Scenario s;
  s.source = source;
  if (!root.get("name", s.name) || s.name.empty()) s.name = file_stem(path_base);  // the file's, not a message tag's
  if (!root.has("model"))
    fail_at(source, doc_mark, "model", "missing required section (e.g. model: {preset: gpt3-1b})");
  if (!root.has("cluster"))
    fail_at(source, doc_mark, "cluster", "missing required section (e.g. cluster: {preset: dgx-a100, nodes: 2})");
  s.model = parse_model(root);
  s.cluster = parse_cluster(root);

  const Section par =
      root.sub("parallel", {"dp", "pp", "tp", "cp", "v", "micro_batch_size", "global_batch", "sequence_parallel",
                            "stage_layers", "ep", "etp", "cp_comm_type", "cp_a2a"});
  par.get("dp", s.parallel.dp);
  par.get("pp", s.parallel.pp);
  par.get("tp", s.parallel.tp);
  par.get("cp", s.parallel.cp);
  par.get("v", s.parallel.v);
  par.get("micro_batch_size", s.parallel.micro_batch_size);
  par.get("global_batch", s.parallel.global_batch);
  par.get("sequence_parallel", s.parallel.sequence_parallel);
  par.get("stage_layers", s.parallel.stage_layers, true);  // 0: an end stage (check_stage_layers_key)
  par.get("ep", s.parallel.ep);
  par.get("etp", s.parallel.etp);
  par.get_enum("cp_comm_type", cp_comm_types(), s.parallel.cp_comm_type);
  par.get("cp_a2a", s.parallel.cp_a2a);

  const Section sch = root.sub("schedule", {"kind", "seq_slices", "slice_tokens", "slicing", "recompute",
                                            "recompute_modules", "scatter_gather", "overlap_moe_a2a", "file"});
  sch.get_enum("kind", schedule_kinds(), s.schedule.kind);
  const bool slices_given = sch.get("seq_slices", s.schedule.seq_slices);
  sch.get("slice_tokens", s.schedule.slice_tokens);
  const bool slicing_given = sch.get_enum("slicing", slicings(), s.schedule.slicing);
  // Explicit slice lengths imply the slicing mode and the slice count unless those are written too.
  if (!s.schedule.slice_tokens.empty()) {
    if (!slicing_given) s.schedule.slicing = "explicit";
    if (!slices_given) s.schedule.seq_slices = static_cast<int>(s.schedule.slice_tokens.size());
  }
  // true / false stay readable: the key was a boolean (full recomputation) before selective recomputation.
  // Read as a boolean then, so that a quoted "true" is refused like any quoted boolean (strict typing).
  if (std::string rc; sch.get("recompute", rc)) {
    bool full = false;
    if (yaml_boolean(rc)) {
      sch.get("recompute", full);
      s.schedule.recompute = full ? Recompute::Full : Recompute::None;
    } else if (!sch.get_enum("recompute", recompute_modes(), s.schedule.recompute))
      sch.fail("recompute", "missing");
  }
  if (std::vector<RecomputeModule> mods; sch.get_enum_list("recompute_modules", recompute_module_names(), mods)) {
    if (s.schedule.recompute != Recompute::Selective)
      sch.fail("recompute_modules",
               std::string("lists what selective recomputation reruns, but schedule.recompute is ") +
                   to_string(s.schedule.recompute) + " (write recompute: selective)");
    if (mods.empty()) sch.fail("recompute_modules", "lists no module (leave the key out for core_attn alone)");
    s.schedule.recompute_modules = 0;
    for (RecomputeModule x : mods) s.schedule.recompute_modules |= module_bit(x);
  }
  sch.get("scatter_gather", s.schedule.scatter_gather);
  sch.get("overlap_moe_a2a", s.schedule.overlap_moe_a2a);
  if (sch.get("file", s.schedule.file) && !s.schedule.file.empty()) {
    // Relative to the scenario file, like sim.profile; the stage placement is read now (core/ir/schedule_csv.h).
    std::string& path = s.schedule.file;
    path = relative_to(path_base, path);
    try {
      s.schedule.file_style = csv_stage_style(path, s.parallel.pp);
    } catch (const std::invalid_argument& e) {
      fail_at(source, marks.at("schedule.file"), "schedule.file", e.what());
    }
  }

  const Section tr = root.sub("training", {"dtype",
                                           "optimizer_bytes_per_param",
                                           "grad_fp32",
                                           "flash_attention",
                                           "wgrad_accumulation",
                                           "distributed_optimizer",
                                           "overlap_grad_reduce",
                                           "grad_bucket_MB",
                                           "overlap_param_gather",
                                           "fsdp",
                                           "fsdp_reshard_after_forward",
                                           "async_tp_allreduce",
                                           "tp_comm_overlap",
                                           "dropout",
                                           "softmax_fp32",
                                           "moe_dispatcher",
                                           "moe_routing",
                                           "moe_expert_load_cv",
                                           "moe_routing_seed",
                                           "moe_capacity_factor",
                                           "moe_pad_to_capacity",
                                           "moe_dispatch_fp8",
                                           "moe_router_groups",
                                           "moe_router_group_topk"});
  tr.get_enum("dtype", dtypes(), s.training.dtype);
  tr.get("optimizer_bytes_per_param", Num::NonNegative, 1.0, s.training.optimizer_bytes_per_param);
  tr.get("grad_fp32", s.training.grad_fp32);
  tr.get("flash_attention", s.training.flash_attention);
  tr.get_enum("wgrad_accumulation", wgrad_accumulations(), s.training.wgrad_accumulation);
  tr.get("distributed_optimizer", s.training.distributed_optimizer);
  tr.get("overlap_grad_reduce", s.training.overlap_grad_reduce);
  tr.get("grad_bucket_MB", Num::Positive, units::kMB, s.training.grad_bucket_bytes);
  tr.get("overlap_param_gather", s.training.overlap_param_gather);
  tr.get("fsdp", s.training.fsdp);
  tr.get("fsdp_reshard_after_forward", s.training.fsdp_reshard_after_forward);
  tr.get("async_tp_allreduce", s.training.async_tp_allreduce);
  tr.get("tp_comm_overlap", s.training.tp_comm_overlap);
  tr.get("dropout", s.training.dropout);
  tr.get("softmax_fp32", s.training.softmax_fp32);
  tr.get_enum("moe_dispatcher", moe_dispatchers(), s.training.moe_dispatcher);
  tr.get_enum("moe_routing", moe_routings(), s.training.moe_routing);
  tr.get("moe_expert_load_cv", Num::NonNegative, 1.0, s.training.moe_expert_load_cv);
  tr.get_count("moe_routing_seed", s.training.moe_routing_seed);
  tr.get("moe_capacity_factor", Num::Positive, 1.0, s.training.moe_capacity_factor);
  tr.get("moe_pad_to_capacity", s.training.moe_pad_to_capacity);
  tr.get("moe_dispatch_fp8", s.training.moe_dispatch_fp8);
  tr.get_count("moe_router_groups", s.training.moe_router_groups);
  tr.get_count("moe_router_group_topk", s.training.moe_router_group_topk);

  const Section sim = root.sub("sim", {"collectives", "placement", "profile", "p2p"});
  sim.get_enum("collectives", collective_models(), s.sim.collectives);
  sim.get_enum("placement", placements(), s.sim.placement);
  sim.get_enum("p2p", p2p_modes(), s.sim.p2p);
  sim.get("profile", s.sim.profile);
  std::string calibration;
  if (root.get("calibration", calibration)) {
    if (!s.sim.profile.empty())
      fail_at(source, marks.at("calibration"), "calibration", "give either calibration or sim.profile, not both");
    s.sim.profile = calibration;
  }
  if (!profile_override.empty()) {
    try {
      s = apply_profile(s, load_profile(profile_override), profile_override);
    } catch (const ProfileError& e) {
      throw ScenarioError(source + ": --profile " + e.what());
    }
  } else if (!s.sim.profile.empty()) {
    // The profile's device (and measured link classes) replace the cluster's before validation. A relative
    // path is relative to the scenario file, so scenarios can be run from anywhere.
    const std::string key = marks.count("calibration") ? "calibration" : "sim.profile";
    const std::string path = relative_to(path_base, s.sim.profile);
    try {
      s = apply_profile(s, load_profile(path), path);
    } catch (const ProfileError& e) {
      // The profile's own position first: the error is in that file, not in the scenario.
      throw ScenarioError(std::string(e.what()) + " (the profile of " + position(source, marks.at(key)) + ": " + key +
                          ")");
    }
  }

  if (cross_field_checks) Validator(s, &marks).run();
  return s;
}

}  // namespace

Scenario parse_scenario(const std::string& yaml_text, const std::string& source, const std::string& path_base) {
  return parse_impl(yaml_text, source, "", path_base.empty() ? source : path_base);
}

Scenario load_scenario(const std::string& path, const std::string& profile) {
  std::string text;
  try {
    text = read_input_file(path, "scenario file");
  } catch (const InputFileError& e) {
    throw ScenarioError(e.what());
  }
  return parse_impl(text, path, profile, path);
}

Scenario load_scenario_fields(const std::string& path) {
  std::string text;
  try {
    text = read_input_file(path, "scenario file");
  } catch (const InputFileError& e) {
    throw ScenarioError(e.what());
  }
  return parse_impl(text, path, "", path, false);
}

const char* default_scenario_yaml() {
  return R"(# The built-in default scenario (`pipescope simulate` with no argument). Identical to
# default_scenario_yaml() in core/model/scenario.cc; a test keeps the two in sync.
# A GPT3-1B-sized model on two DGX A100 nodes: 16 GPUs = dp 2 x pp 4 x tp 2, 1F1B with
# m = 32 / (1 * 2) = 16 micro-batches per replica. Megatron layout: TP pairs and DP peers inside a node,
# stages 0-1 on node 0 and 2-3 on node 1, so one pipeline hop crosses the network.
name: default
model:
  preset: gpt3-1b
cluster:
  preset: dgx-a100
  nodes: 2
parallel:
  dp: 2
  pp: 4
  tp: 2
  v: 1
  micro_batch_size: 1
  global_batch: 32
schedule:
  kind: 1f1b
  seq_slices: 1
  recompute: false
  scatter_gather: true
training:
  dtype: fp16
  optimizer_bytes_per_param: 16
  grad_fp32: false
sim:
  collectives: auto
  placement: megatron
)";
}

Scenario default_scenario() { return parse_impl(default_scenario_yaml(), "<builtin>", "", "<builtin>"); }

void validate_scenario(const Scenario& s) { Validator(s, nullptr).run(); }

Scenario use_profile(const Scenario& s, const std::string& path) {
  Scenario out = apply_profile(s, load_profile(path), path);
  try {
    validate_scenario(out);
  } catch (const ScenarioError& e) {
    // The scenario was valid on its own: what its checks now refuse came from the profile.
    throw ProfileError(path + ": this profile's values make " + s.source + " invalid: " + e.what());
  }
  return out;
}

}  // namespace pipescope
