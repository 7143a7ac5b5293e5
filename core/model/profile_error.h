#pragma once
// How a device profile's reader reports what is wrong with the file: every error names the file, line, column and key.

#include <yaml-cpp/yaml.h>

#include <stdexcept>
#include <string>

namespace pipescope {

// A malformed or implausible profile; the message names the file, line and key.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ProfileError "file:line:col: key: message" (n's position in source): every profile reading error.
[[noreturn]] void fail_profile_key(const std::string& source, const YAML::Node& n, const std::string& key,
                                   const std::string& msg);

}  // namespace pipescope
