#pragma once
// The booleans scenario and profile files accept (YAML 1.2's core schema).

#include <optional>
#include <string>

namespace pipescope {

// true / True / TRUE, false / False / FALSE; nullopt for any other scalar.
inline std::optional<bool> yaml_boolean(const std::string& scalar) {
  if (scalar == "true" || scalar == "True" || scalar == "TRUE") return true;
  if (scalar == "false" || scalar == "False" || scalar == "FALSE") return false;
  return std::nullopt;
}

}  // namespace pipescope
