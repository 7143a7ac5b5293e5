#include "cli/fork_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

namespace pipescope::cli {

std::string run_in_child(const std::function<std::string()>& child) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    throw std::runtime_error("fork() failed");
  }
  if (pid == 0) {
    close(fd[0]);
    std::string out;
    try {
      out = "OK " + child();
    } catch (const std::exception& e) {
      out = std::string("ERR ") + e.what();
    }
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = write(fd[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    close(fd[1]);
    _exit(0);
  }
  close(fd[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got.rfind("OK ", 0) == 0) return got.substr(3);
  if (got.rfind("ERR ", 0) == 0) throw std::runtime_error(got.substr(4));
  throw std::runtime_error("simulation process died (status " + std::to_string(status) + ")");
}

}  // namespace pipescope::cli
