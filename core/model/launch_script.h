#pragma once
// A training launch script (`import megatron --script run.sh`): the `pretrain_*.py` command's arguments, with the
// script's shell variables expanded the way bash expands them for simple assignments: `NAME=value`, `export NAME=...`,
// arrays `NAME=( ... )` over several lines, appends `NAME+=value` and `NAME+=( ... )`, `$NAME`, `${NAME}`,
// `${NAME:-default}`, `${NAME[@]}`; quotes and backslash line continuations; `#` comments; commands separated by `;`;
// `if` / `elif` / `else` / `fi` whose tests need nothing from outside the script (`[[ A == B ]]`, `!=`, `-z`, `-n`,
// joined by `||` / `&&`, also in `[ ]`): the branch bash takes; another test (a file test, a command) is taken as
// false and listed. An unquoted expansion is split into words, a quoted one is not, an array expands to its elements
// (each split into words when unquoted). What bash would take from outside the script (positional parameters, variables
// the script does not set, command and arithmetic substitutions) stays as written ("$4") and is listed: an argument's
// value keeps its place, and nothing is guessed silently.

#include <string>
#include <vector>

namespace pipescope {

struct LaunchScript {
  std::vector<std::string> args;        // the words after the pretrain_*.py word
  int line = 0;                         // the command's first line (1-based)
  std::vector<std::string> unresolved;  // "$1", "$DATA_PATH", "$(...)": left as written
};

// Throws std::invalid_argument "<source>:<line>: ..." on an unterminated quote or array, or when no line runs a
// pretrain_*.py script.
LaunchScript read_launch_script(const std::string& text, const std::string& source);

}  // namespace pipescope
