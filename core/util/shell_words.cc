#include "core/util/shell_words.h"

#include <stdexcept>

namespace pipescope {

std::vector<std::string> split_shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  const auto fail = [&](const char* what) {
    throw std::invalid_argument(std::string(what) + " in command line: " + line);
  };
  for (std::size_t i = 0; i < line.size(); i++) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(cur), cur.clear(), in_word = false;
    } else if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string::npos) fail("unterminated '");
      cur += line.substr(i + 1, end - i - 1);
      i = end;
      in_word = true;
    } else if (c == '"') {
      for (i++;; i++) {
        if (i >= line.size()) fail("unterminated \"");
        if (line[i] == '"') break;
        if (line[i] == '\\' && i + 1 < line.size() && std::string("\"\\$`").find(line[i + 1]) != std::string::npos) i++;
        cur += line[i];
      }
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= line.size()) fail("trailing backslash");
      cur += line[++i];
      in_word = true;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(cur);
  return words;
}

}  // namespace pipescope
