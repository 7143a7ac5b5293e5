#pragma once
// Output files are written whole or not at all. A command renders its outputs in memory and writes them only
// after the run succeeded: the text goes to a temporary file in the target's directory, is flushed and synced,
// then renamed over the target, so a failed or interrupted run leaves the previous file as it was. Special files
// (/dev/null, /dev/full, a FIFO) are written in place, with their write errors reported; "-" is standard output.

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pipescope {

// An output path that cannot be used (missing directory, not writable, a directory, given twice): bad input.
class OutputPathError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Writing failed (disk full, I/O error): an environment problem.
class OutputWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `content` to `path` atomically; `flag` names the option in messages ("--json"). Throws OutputWriteError
// (and OutputPathError when the directory is not usable).
void write_file_atomic(const std::string& path, const std::string& content, const std::string& flag);

// The same, for an output too large to render in memory first (the merged traces of simulate --compare): appended
// piece by piece to a temporary file in the target's directory, synced and renamed over the target by commit().
// Destroyed without commit() (an error, a signal's unwinding), it removes the temporary file and leaves the target
// as it was. "-" and special files (/dev/null, a FIFO) are written in place. Throws as write_file_atomic.
class AtomicFileWriter {
 public:
  AtomicFileWriter(std::string path, std::string flag);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();
  void append(const std::string& text);
  void commit();

 private:
  [[noreturn]] void fail(const std::string& err);
  std::string path_, flag_, temp_;  // temp_ empty: written in place
  int fd_ = -1;
};

// Checks output paths before any work: each (flag, path) with a non-empty path must be "-" or name a file in an
// existing, writable directory, must not be a directory or a file this process read as input (a scenario, profile
// or schedule file), and no two may name the same file. Throws OutputPathError.
void check_output_paths(const std::vector<std::pair<std::string, std::string>>& outputs);

}  // namespace pipescope
