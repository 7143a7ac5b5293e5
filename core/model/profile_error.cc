#include "core/model/profile_error.h"

namespace pipescope {

namespace {

// "file:line:col" of n in source (just the file when n has no position).
std::string node_position(const std::string& src, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return src;
  return src + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

}  // namespace

void fail_profile_key(const std::string& source, const YAML::Node& n, const std::string& key, const std::string& msg) {
  throw ProfileError(node_position(source, n) + ": " + key + ": " + msg);
}

}  // namespace pipescope
