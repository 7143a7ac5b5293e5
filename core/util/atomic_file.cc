#include "core/util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/util/input_file.h"

namespace pipescope {
namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of `content` to fd; "" or the error.
std::string write_all(int fd, const std::string& content) {
  for (std::size_t done = 0; done < content.size();) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::strerror(n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  return "";
}

// Identity of the file a path would name: (device, inode) of an existing file, else the canonical directory + name.
std::string identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) return "inode " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  char buf[PATH_MAX];
  const std::string dir = dir_of(path);
  const std::string dir_real = realpath(dir.c_str(), buf) ? std::string(buf) : dir;
  return "path " + dir_real + "/" +
         path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
}

}  // namespace

void check_output_paths(const std::vector<std::pair<std::string, std::string>>& outputs) {
  std::vector<std::pair<std::string, std::string>> seen;  // identity -> flag
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    if (path == "-") {  // standard output: at most one output there
      for (const auto& [other_id, other_flag] : seen)
        if (other_id == "-") throw OutputPathError(flag + " -: standard output is already taken by " + other_flag);
      seen.emplace_back("-", flag);
      continue;
    }
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw OutputPathError(flag + " " + path + ": is a directory (give a file name)");
    if (stat(path.c_str(), &st) == 0)
      if (const std::string input = input_file_read(st.st_dev, st.st_ino); !input.empty())
        throw OutputPathError(flag + " " + path + ": the input file " + input + " (an output must not overwrite it)");
    const std::string dir = dir_of(path);
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw OutputPathError(flag + " " + path + ": directory " + dir + " does not exist");
    if (access(dir.c_str(), W_OK | X_OK) != 0)
      throw OutputPathError(flag + " " + path + ": directory " + dir + " is not writable");
    const std::string id = identity(path);
    for (const auto& [other_id, other_flag] : seen)
      if (other_id == id)
        throw OutputPathError(flag + " " + path + ": the same file as " + other_flag +
                              " (give each output its own file)");
    seen.emplace_back(id, flag);
  }
}

void write_file_atomic(const std::string& path, const std::string& content, const std::string& flag) {
  AtomicFileWriter w(path, flag);
  w.append(content);
  w.commit();
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string flag)
    : path_(std::move(path)), flag_(std::move(flag)) {
  if (path_ == "-") {
    std::fflush(stdout);
    fd_ = STDOUT_FILENO;
    return;
  }
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw OutputPathError(flag_ + " " + path_ + ": is a directory (give a file name)");
    // A device or FIFO: no rename over it; write in place and report its errors (/dev/full: ENOSPC).
    fd_ = open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw OutputWriteError(flag_ + " " + path_ + ": cannot open for writing: " + std::strerror(errno));
    return;
  }
  std::string tmpl = dir_of(path_) + "/." +
                     path_.substr(path_.find_last_of('/') == std::string::npos ? 0 : path_.find_last_of('/') + 1) +
                     ".tmp-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  fd_ = mkstemp(name.data());
  if (fd_ < 0)
    throw OutputPathError(flag_ + " " + path_ + ": cannot create a file in " + dir_of(path_) + ": " +
                          std::strerror(errno));
  temp_ = name.data();
  // mkstemp makes 0600; an output file gets the usual permissions (0666 less the umask).
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd_, 0666 & ~mask);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0 && fd_ != STDOUT_FILENO) close(fd_);
  if (!temp_.empty()) unlink(temp_.c_str());
}

void AtomicFileWriter::fail(const std::string& err) {
  if (fd_ >= 0 && fd_ != STDOUT_FILENO) close(fd_);
  fd_ = -1;
  if (path_ == "-") throw OutputWriteError(flag_ + " -: cannot write to standard output: " + err);
  if (temp_.empty()) throw OutputWriteError(flag_ + " " + path_ + ": write failed: " + err);
  unlink(temp_.c_str());
  temp_.clear();
  throw OutputWriteError(flag_ + " " + path_ + ": write failed (" + err + "); the previous file, if any, is unchanged");
}

void AtomicFileWriter::append(const std::string& text) {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter: append after commit or failure");
  const std::string err = write_all(fd_, text);
  if (!err.empty()) fail(err);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter: commit twice or after failure");
  if (fd_ == STDOUT_FILENO) {
    fd_ = -1;
    return;
  }
  if (!temp_.empty() && fsync(fd_) != 0) fail(std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) fail(std::strerror(errno));
  if (temp_.empty()) return;
  if (rename(temp_.c_str(), path_.c_str()) != 0) fail(std::string("rename: ") + std::strerror(errno));
  temp_.clear();
}

}  // namespace pipescope
