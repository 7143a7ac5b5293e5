#include "core/model/yaml_aliases.h"

#include <sstream>

namespace pipescope {

void AliasCheck::fail(const YAML::Mark& m, const std::string& what) {
  if (problem.empty()) problem = what, problem_mark = m;
}

void AliasCheck::add(const YAML::Mark& m, std::size_t nodes) {
  total_ += nodes;
  if (!open_.empty()) open_.back().nodes += nodes;
  if (total_ > kMaxExpandedNodes)
    fail(m, aliases_ ? "YAML aliases expand the document to more than " + std::to_string(kMaxExpandedNodes) +
                           " nodes (aliases of aliases): write the values out"
                     : "the document has more than " + std::to_string(kMaxExpandedNodes) +
                           " values (a scenario or profile has a few thousand)");
}

void AliasCheck::open(YAML::anchor_t a) { open_.push_back({a, 1}); }

void AliasCheck::close() {
  if (open_.empty()) return;
  const Open o = open_.back();
  open_.pop_back();
  if (o.anchor != YAML::NullAnchor) {
    if (anchored_.size() <= o.anchor) anchored_.resize(o.anchor + 1, 1);
    anchored_[o.anchor] = o.nodes;
  }
  total_ += 1;  // the collection itself; its contents were counted as they came
  if (!open_.empty()) open_.back().nodes += o.nodes;
}

void AliasCheck::leaf(const YAML::Mark& m, YAML::anchor_t a) {
  if (a != YAML::NullAnchor) {
    if (anchored_.size() <= a) anchored_.resize(a + 1, 1);
    anchored_[a] = 1;
  }
  add(m, 1);
}

void AliasCheck::OnAlias(const YAML::Mark& m, YAML::anchor_t a) {
  aliases_ = true;
  for (const Open& o : open_)
    if (o.anchor == a) {
      fail(m, "this alias refers to a node that contains it (a recursive YAML alias)");
      return;
    }
  add(m, a < anchored_.size() ? anchored_[a] : 1);
}

std::string yaml_alias_problem(const std::string& text, YAML::Mark& mark) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  AliasCheck check;
  parser.HandleNextDocument(check);
  mark = check.problem_mark;
  return check.problem;
}

}  // namespace pipescope
