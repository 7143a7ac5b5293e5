#include "core/util/data_path.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace pipescope {
namespace fs = std::filesystem;

namespace {
// The running executable's directory (Linux /proc), empty when unknown.
fs::path exe_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}
}  // namespace

std::vector<std::string> data_roots() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("PIPESCOPE_DATA_DIR"); env && *env) candidates.emplace_back(env);
  if (const fs::path dir = exe_dir(); !dir.empty()) candidates.push_back(dir.parent_path() / "share" / "pipescope");
#if defined(PIPESCOPE_SOURCE_DIR) && defined(PIPESCOPE_BINARY_DIR)
  // Only a binary still inside its build tree reads the source tree; an installed one has share/pipescope.
  const fs::path build = fs::weakly_canonical(PIPESCOPE_BINARY_DIR);
  const fs::path dir = fs::weakly_canonical(exe_dir());
  const auto rel = dir.lexically_relative(build);
  if (!rel.empty() && *rel.begin() != "..") candidates.emplace_back(PIPESCOPE_SOURCE_DIR);
#endif
  std::vector<std::string> roots;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_directory(c, ec)) roots.push_back(c.lexically_normal().string());
  }
  return roots;
}

std::string data_path(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path, ec)) return path;
  std::string looked = "./" + path;
  for (const std::string& root : data_roots()) {
    const fs::path p = fs::path(root) / path;
    if (fs::exists(p, ec)) return p.string();
    looked += ", " + p.string();
  }
  throw std::invalid_argument(path + ": not found (looked at " + looked +
                              "; set PIPESCOPE_DATA_DIR to the folder holding scenarios/)");
}

}  // namespace pipescope
