// Scenario variants (core/model/scenario_vary.h): --vary arguments parsed, a value set at a YAML path of the scenario's
// text, the variant loaded by the scenario parser with its messages pointed back at the original file.
#include "core/model/scenario_vary.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <sstream>
#include <stdexcept>

#include "core/model/placement.h"
#include "core/model/schedule_registry.h"
#include "core/model/yaml_aliases.h"

namespace pipescope {
namespace {

// Splits on commas outside [...], {...} and quotes, so a flow sequence or a quoted string can be one value:
// slice_tokens=[8,8],[4,12]; name="a,b".
std::vector<std::string> split_values(const std::string& s, const std::string& what) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : s) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      cur += c;
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    if (c == '[' || c == '{') depth++;
    if (c == ']' || c == '}') depth--;
    if (depth < 0) throw std::invalid_argument("--vary " + what + ": unbalanced brackets");
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) throw std::invalid_argument("--vary " + what + ": unbalanced brackets");
  if (quote != 0) throw std::invalid_argument("--vary " + what + ": unterminated quote");
  out.push_back(cur);
  for (auto& v : out) {
    const auto b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
    v = b == std::string::npos ? "" : v.substr(b, e - b + 1);
    if (v.empty()) throw std::invalid_argument("--vary " + what + ": empty value (expected key=v1,v2,...)");
  }
  return out;
}

// The node at `path` in the original document, or an undefined node.
YAML::Node find(const YAML::Node& root, const std::vector<std::string>& path) {
  YAML::Node cur = root;
  for (const auto& seg : path) {
    if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node next = cur[seg];
    if (!next.IsDefined()) return next;
    cur.reset(next);
  }
  return cur;
}

}  // namespace

VaryAxis parse_vary_axis(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("--vary " + arg +
                                ": expected key=v1,v2,... with key a scenario path such as schedule.seq_slices");
  VaryAxis a;
  a.key = arg.substr(0, eq);
  std::string seg;
  for (char c : a.key + ".") {
    if (c == '.') {
      if (seg.empty()) throw std::invalid_argument("--vary " + arg + ": malformed key '" + a.key + "'");
      a.path.push_back(seg);
      seg.clear();
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') {
      seg += c;
    } else {
      throw std::invalid_argument("--vary " + arg + ": malformed key '" + a.key +
                                  "' (letters, digits, '_' and '.' only)");
    }
  }
  a.values = split_values(arg.substr(eq + 1), a.key);
  return a;
}

// The base document with one value per axis set (missing mappings are created; the loader rejects unknown keys).
namespace {

// A swept schedule.kind takes the chunk count `simulate --compare` gives it (with_schedule: interleaving gets v = 2
// where the scenario has 1, a schedule of one chunk gets 1), unless parallel.v is swept too.
void fit_chunks_to_kind(YAML::Node& root, const std::vector<VaryAxis>& axes) {
  bool kind_swept = false;
  for (const VaryAxis& ax : axes) {
    if (ax.key == "parallel.v") return;
    kind_swept = kind_swept || ax.key == "schedule.kind";
  }
  if (!kind_swept || !root["schedule"].IsMap() || !root["schedule"]["kind"].IsScalar()) return;
  const ScheduleEntry* e = find_schedule(root["schedule"]["kind"].Scalar());
  if (e == nullptr) return;  // the loader names the unknown kind
  int v = 1;
  if (root["parallel"].IsMap() && root["parallel"]["v"].IsScalar()) {
    try {
      v = root["parallel"]["v"].as<int>();
    } catch (const YAML::Exception&) {
      return;  // the loader names the bad value
    }
  }
  if (e->traits.fit_v(v) == v) return;
  if (!root["parallel"].IsMap()) root["parallel"] = YAML::Node(YAML::NodeType::Map);
  root["parallel"]["v"] = e->traits.fit_v(v);
}

}  // namespace

ScenarioVariant make_scenario_variant(const std::string& source, const std::string& base_text,
                                      const std::vector<VaryAxis>& axes, const std::vector<std::size_t>& pick) {
  YAML::Node root = YAML::Load(base_text);  // the base text parsed once already: no syntax errors here
  const YAML::Node original = YAML::Load(base_text);
  ScenarioVariant v;
  for (std::size_t a = 0; a < axes.size(); a++) {
    const VaryAxis& ax = axes[a];
    const std::string& value = ax.values[pick[a]];
    v.values.push_back(value);
    v.text += (v.text.empty() ? "" : " ") + ax.key + "=" + value;
    YAML::Node cur = root;
    for (std::size_t i = 0; i + 1 < ax.path.size(); i++) {
      YAML::Node next = cur[ax.path[i]];
      if (next.IsDefined() && !next.IsMap()) {
        std::string at;
        for (std::size_t j = 0; j <= i; j++) at += (j ? "." : "") + ax.path[j];
        throw ScenarioError(source + ": --vary " + ax.key + ": " + at + " is not a mapping");
      }
      if (!next.IsDefined()) cur[ax.path[i]] = YAML::Node(YAML::NodeType::Map);
      YAML::Node n = cur[ax.path[i]];
      cur.reset(n);
    }
    YAML::Node val;
    try {
      YAML::Mark at;
      const std::string alias = yaml_alias_problem(value, at);
      if (!alias.empty()) throw ScenarioError(source + ": --vary " + ax.key + "=" + value + ": " + alias);
      val = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      throw ScenarioError(source + ": --vary " + ax.key + "=" + value + ": not a YAML value: " + e.msg);
    }
    cur[ax.path.back()] = val;
  }
  fit_chunks_to_kind(root, axes);
  YAML::Emitter out;
  out << root;
  const std::string tag = source + " [" + v.text + "]";
  try {
    v.scenario = parse_scenario(out.c_str(), tag, source);  // relative paths: from the file, not the tag
  } catch (const ScenarioError& e) {
    // Messages read "<tag>:L:C: key: message" with L:C in the rewritten text: point at the key in the original
    // file when it is written there, else name the file alone.
    std::string msg = e.what();
    if (msg.rfind(tag, 0) == 0) {
      msg = msg.substr(tag.size());
      if (!msg.empty() && msg[0] == ':') {
        const auto sp = msg.find(": ");
        msg = sp == std::string::npos ? msg.substr(1) : msg.substr(sp + 2);
      }
    }
    std::string where = source;
    const auto colon = msg.find(": ");
    if (colon != std::string::npos) {
      std::vector<std::string> path;
      std::stringstream ks(msg.substr(0, colon));
      for (std::string seg; std::getline(ks, seg, '.');) path.push_back(seg);
      const YAML::Node n = find(original, path);
      if (n.IsDefined() && n.Mark().line >= 0)
        where += ":" + std::to_string(n.Mark().line + 1) + ":" + std::to_string(n.Mark().column + 1);
    }
    const std::string full = where + ": " + msg + " (with --vary " + v.text + ")";
    if (dynamic_cast<const ScenarioCombinationError*>(&e) == nullptr) throw ScenarioError(full);
    v.invalid = full;
    return v;
  }
  v.scenario.source = source;
  return v;
}

void drop_slicing(ScheduleSpec& s) {
  s.seq_slices = 1;
  s.slice_tokens.clear();
  s.slicing = "uniform";
}

Scenario with_schedule(const Scenario& base, ScheduleKind kind) {
  const ScheduleEntry& e = schedule_entry(kind);
  Scenario s = base;
  s.schedule.kind = kind;
  s.parallel.v = e.traits.fit_v(base.parallel.v);
  if (!e.traits.sliced()) drop_slicing(s.schedule);
  if (!e.traits.from_file) s.schedule.file.clear(), s.schedule.file_style = ScheduleSpec{}.file_style;
  if (!e.traits.combined_1f1b) s.schedule.overlap_moe_a2a = false;  // pairs: the kind's own, or none
  // A layer list written for the old chunk count, re-split over the new one.
  const int model_stages = scenario_model_stages(s);
  if (!base.parallel.stage_layers.empty() && static_cast<int>(base.parallel.stage_layers.size()) != model_stages) {
    long long layers = 0;
    for (int x : base.parallel.stage_layers) layers += x;
    s.parallel.stage_layers = ends_lighter_split(static_cast<int>(layers), model_stages);
  }
  return s;
}

std::vector<VaryAxis> parse_vary_axes(const std::vector<std::string>& args) {
  std::vector<VaryAxis> axes;
  for (const auto& arg : args) {
    axes.push_back(parse_vary_axis(arg));
    for (std::size_t i = 0; i + 1 < axes.size(); i++)
      if (axes[i].key == axes.back().key) throw std::invalid_argument("--vary " + axes.back().key + ": given twice");
  }
  if (axes.empty()) throw std::invalid_argument("sweep: give at least one --vary key=v1,v2,...");
  return axes;
}

Scenario with_token_slices(Scenario s, const std::vector<int>& slice_tokens) {
  s.schedule.kind = ScheduleKind::TeraPipe;
  s.schedule.slicing = "explicit";
  s.schedule.slice_tokens = slice_tokens;
  s.schedule.seq_slices = static_cast<int>(slice_tokens.size());
  s.parallel.micro_batch_size = 1;
  return s;
}

}  // namespace pipescope
