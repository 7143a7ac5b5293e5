#include "sim/mpi_group.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "sim/child_process.h"

namespace pipescope::sim {
namespace {

void put(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw std::runtime_error("mpi: the relay process went away (write)");
    c += k, n -= static_cast<std::size_t>(k);
  }
}

void get(int fd, void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw std::runtime_error("mpi: the relay process went away (read); is pipescope-mpi-relay built?");
    c += k, n -= static_cast<std::size_t>(k);
  }
}

}  // namespace

std::unique_ptr<MpiGroup> MpiGroup::from_environment(const std::string& relay_exe) {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!n || std::atoi(n) <= 1) return nullptr;
  return std::unique_ptr<MpiGroup>(new MpiGroup(relay_exe));
}

MpiGroup::MpiGroup(const std::string& relay_exe) {
  int in[2], out[2];
  if (pipe(in) != 0) throw std::runtime_error("mpi: pipe() failed");
  if (pipe(out) != 0) throw std::runtime_error("mpi: pipe() failed");
  pid_ = fork_child(
      [&] {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execl(relay_exe.c_str(), relay_exe.c_str(), static_cast<char*>(nullptr));
        std::fprintf(stderr, "error: cannot run %s: %s\n", relay_exe.c_str(), std::strerror(errno));
        _exit(127);
      },
      "mpi");
  close(in[0]), close(out[1]);
  to_ = in[1], from_ = out[0];
  std::uint64_t hello[2];
  get(from_, hello, sizeof hello);
  rank_ = static_cast<int>(hello[0]);
  size_ = static_cast<int>(hello[1]);
}

MpiGroup::~MpiGroup() {
  if (to_ >= 0) close(to_);  // end of input: the relay leaves its loop and finalizes
  if (from_ >= 0) close(from_);
  int status = 0;
  if (pid_ > 0)
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
}

std::vector<std::string> MpiGroup::allgather(const std::string& mine) {
  const std::uint64_t len = mine.size();
  put(to_, &len, sizeof len);
  put(to_, mine.data(), mine.size());
  std::vector<std::string> all(static_cast<std::size_t>(size_));
  for (auto& s : all) {
    std::uint64_t l = 0;
    get(from_, &l, sizeof l);
    s.resize(l);
    get(from_, s.data(), l);
  }
  return all;
}

}  // namespace pipescope::sim
