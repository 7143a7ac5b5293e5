#pragma once
// YAML aliases checked before a document is loaded. An alias to a node that is still open (its own anchor or an
// enclosing one: `m: &m {x: *m}`) makes yaml-cpp build a node that contains itself, and every walk over it recurses
// until the stack overflows; aliases of aliases ("billion laughs") let a few hundred bytes stand for millions of
// nodes that the loader would then walk. AliasCheck is the event handler that finds both, from the parser's events,
// before any node is built.

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pipescope {

// yaml-cpp's message, except where it says "bad file": its nesting limit (DeepRecursion) has that message.
inline std::string yaml_error_text(const YAML::Exception& e) {
  if (const auto* d = dynamic_cast<const YAML::DeepRecursion*>(&e))
    return "lists or mappings nested more than " + std::to_string(d->depth()) + " levels deep (yaml-cpp's limit)";
  return e.msg;
}

class AliasCheck : public YAML::EventHandler {
 public:
  // Nodes the document may stand for with its aliases expanded (a scenario or profile has a few thousand); also the
  // limit without aliases.
  static constexpr std::size_t kMaxExpandedNodes = 1000000;

  YAML::Mark start = YAML::Mark::null_mark();  // where the document starts
  std::string problem;                         // "" or what is wrong, at problem_mark
  YAML::Mark problem_mark = YAML::Mark::null_mark();

  void OnDocumentStart(const YAML::Mark& m) override { start = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t a) override { leaf(m, a); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t a) override;
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t a, const std::string&) override { leaf(m, a); }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t a, YAML::EmitterStyle::value) override {
    open(a);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t a, YAML::EmitterStyle::value) override {
    open(a);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    std::size_t nodes;  // expanded nodes inside so far
  };
  std::vector<Open> open_;
  std::vector<std::size_t> anchored_;  // expanded nodes of each anchor (index = anchor id)
  std::size_t total_ = 0;
  bool aliases_ = false;
  void open(YAML::anchor_t a);
  void close();
  void leaf(const YAML::Mark& m, YAML::anchor_t a);
  void add(const YAML::Mark& m, std::size_t nodes);
  void fail(const YAML::Mark& m, const std::string& what);
};

// Runs AliasCheck over the first document of `text`; "" when it is fine, else the problem with `mark` set.
// YAML syntax errors are left to the loader (YAML::Exception passes through).
std::string yaml_alias_problem(const std::string& text, YAML::Mark& mark);

}  // namespace pipescope
