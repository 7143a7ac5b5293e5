#pragma once
// The checks every input file gets before it is parsed (scenarios, profiles, schedule CSVs): a regular file
// (a directory is not a scenario; /dev/zero or a FIFO never ends), at most kMaxInputBytes (a 24 MB list took
// 34 s and 6 GB to reject inside the YAML parser), and valid UTF-8 text (names end up in JSON outputs).

#include <cstddef>
#include <stdexcept>
#include <string>

namespace pipescope {

inline constexpr std::size_t kMaxInputBytes = std::size_t{16} << 20;  // 16 MiB

// A refused input file; the message starts with the path.
class InputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads `path` whole; `what` names it in messages ("scenario file", "profile"). Throws InputFileError.
std::string read_input_file(const std::string& path, const char* what);
// The path this process read through read_input_file that is the file (device, inode) `dev`:`ino`; "" if none.
// core/util/atomic_file.h refuses an output that would overwrite an input.
std::string input_file_read(unsigned long long dev, unsigned long long ino);
// "" when `text` is valid UTF-8 (no overlong forms, no surrogates), else "line L, column C: invalid UTF-8 ...";
// `line` / `column` (1-based), when given, receive the position.
std::string utf8_problem(const std::string& text, int* line = nullptr, int* column = nullptr);

}  // namespace pipescope
