#include "core/util/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace pipescope {

std::string utf8_problem(const std::string& text, int* line_out, int* column_out) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    std::size_t len = 0;
    unsigned cp = 0, min = 0;
    if (c < 0x80)
      len = 1, cp = c;
    else if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07, min = 0x10000;
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; k++) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (ok && len > 1) ok = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (c == 0) {  // valid UTF-8, but no text file holds one (YAML forbids it; yaml-cpp misreads what follows)
      if (line_out) *line_out = static_cast<int>(line);
      if (column_out) *column_out = static_cast<int>(col);
      return "line " + std::to_string(line) + ", column " + std::to_string(col) +
             ": a NUL byte (0x00); input files must be UTF-8 text";
    }
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      if (line_out) *line_out = static_cast<int>(line);
      if (column_out) *column_out = static_cast<int>(col);
      return "line " + std::to_string(line) + ", column " + std::to_string(col) + ": invalid UTF-8 (byte " + hex +
             "); input files must be UTF-8 text";
    }
    if (c == '\n')
      line++, col = 1;
    else
      col++;
    i += len;
  }
  return "";
}

namespace {

struct InputRead {
  unsigned long long dev, ino;
  std::string path;
};

std::vector<InputRead>& inputs_read() {
  static std::vector<InputRead> v;
  return v;
}

}  // namespace

std::string input_file_read(unsigned long long dev, unsigned long long ino) {
  for (const InputRead& r : inputs_read())
    if (r.dev == dev && r.ino == ino) return r.path;
  return "";
}

std::string read_input_file(const std::string& path, const char* what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputFileError(path + ": cannot open " + what + ": " + std::strerror(errno));
  struct stat st {};
  std::string fail;
  if (fstat(fd, &st) != 0)
    fail = std::string("cannot stat: ") + std::strerror(errno);
  else if (S_ISDIR(st.st_mode))
    fail = std::string("is a directory, not a ") + what;
  else if (!S_ISREG(st.st_mode))
    fail = std::string("is not a regular file (a device, FIFO or socket), not a ") + what;
  else if (static_cast<std::size_t>(st.st_size) > kMaxInputBytes)
    fail = std::to_string(st.st_size) + " bytes: larger than the " + std::to_string(kMaxInputBytes >> 20) +
           " MiB limit on input files";
  std::string text;
  if (fail.empty()) {
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t r = read(fd, text.data() + got, text.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        fail = std::string("read error: ") + std::strerror(errno);
        break;
      }
      if (r == 0) break;  // shrank while reading
      got += static_cast<std::size_t>(r);
    }
    text.resize(got);
  }
  close(fd);
  if (!fail.empty()) throw InputFileError(path + ": " + fail);
  inputs_read().push_back(
      {static_cast<unsigned long long>(st.st_dev), static_cast<unsigned long long>(st.st_ino), path});
  int line = 0, col = 0;
  const std::string bad = utf8_problem(text, &line, &col);
  if (!bad.empty())
    throw InputFileError(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " +
                         bad.substr(bad.find(": ") + 2));
  return text;
}

}  // namespace pipescope
