#pragma once
// A command line given as one string (`--launcher "srun --export=ALL,FOO='a b'"`) split into words the way a
// POSIX shell does for quoting: '...' literal, "..." with \" \\ \$ \` escapes, a backslash outside quotes escapes
// the next character. No expansion of variables, globs or substitutions. Throws std::invalid_argument on an
// unterminated quote or a trailing backslash.

#include <string>
#include <vector>

namespace pipescope {

std::vector<std::string> split_shell_words(const std::string& line);

}  // namespace pipescope
