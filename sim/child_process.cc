#include "sim/child_process.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace pipescope::sim {
namespace {

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of the child's answer pipe
  std::size_t task = 0;
  std::string got;
};

// A simulation child ends with its parent: SIGTERM or SIGKILL to the command (not to its process group) must not
// leave simulations running with no one to read their answers.
void die_with_parent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);  // the parent died before prctl
}

// Forks a child that runs fn and writes "OK <answer>" or "ERR <message>" to a pipe; the parent gets the read end.
Child start(const std::function<std::string()>& fn, const ChildOptions& o) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe() failed");
  pid_t pid = -1;
  const pid_t parent = getpid();
  try {
    pid = fork_child(
        [&] {
          die_with_parent(parent);
          // The parent's handlers (a comparison's trace clean-up) are not the child's: it ends with its parent.
          for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
          close(fd[0]);
          if (o.cap_GB > 0) {
            const auto cap = static_cast<rlim_t>(o.cap_GB * (1ull << 30));
            const rlimit lim{cap, cap};
            setrlimit(RLIMIT_AS, &lim);
          }
          std::string out;
          try {
            out = "OK " + fn();
          } catch (const std::exception& e) {
            out = std::string("ERR ") + e.what();
          } catch (...) {
            out = "ERR unknown exception";
          }
          for (std::size_t done = 0; done < out.size();) {
            const ssize_t n = write(fd[1], out.data() + done, out.size() - done);
            if (n <= 0) break;
            done += static_cast<std::size_t>(n);
          }
          close(fd[1]);
          _exit(0);
        },
        "simulation");
  } catch (...) {
    close(fd[0]);
    close(fd[1]);
    throw;
  }
  close(fd[1]);
  Child c;
  c.pid = pid;
  c.fd = fd[0];
  return c;
}

// Reads what is available; false at end of file.
bool read_some(Child& c) {
  char buf[65536];
  const ssize_t n = read(c.fd, buf, sizeof buf);
  if (n > 0) {
    c.got.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  if (n < 0 && errno == EINTR) return true;
  return false;
}

ChildAnswer finish(Child& c, const ChildOptions& o) {
  close(c.fd);
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (c.got.rfind("OK ", 0) == 0) return {true, c.got.substr(3)};
  if (c.got.rfind("ERR ", 0) == 0) return {false, c.got.substr(4)};
  std::string why = "simulation process died (status " + std::to_string(status) + ")";
  if (o.cap_GB > 0) why += "; over the " + std::to_string(static_cast<int>(o.cap_GB)) + " GB address-space cap?";
  return {false, why};
}

}  // namespace

pid_t fork_child(const std::function<void()>& child, const std::string& what) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(what + ": fork() failed: " + std::strerror(errno));
  if (pid > 0) return pid;
  try {
    child();
  } catch (...) {
  }
  _exit(127);
}

std::string run_in_child(const std::function<std::string()>& child, const ChildOptions& o) {
  Child c = start(child, o);
  while (read_some(c)) {
  }
  ChildAnswer a = finish(c, o);
  if (!a.ok) throw std::runtime_error(a.text);
  return a.text;
}

std::vector<ChildAnswer> run_children(std::size_t n, const std::function<std::string(std::size_t)>& task, int jobs,
                                      const std::function<void(std::size_t, const ChildAnswer&)>& done,
                                      const ChildOptions& o, const std::function<bool()>& stop) {
  if (jobs < 1) throw std::invalid_argument("run_children: jobs must be >= 1");
  std::vector<ChildAnswer> out(n, ChildAnswer{false, kNotRun});
  std::vector<Child> running;
  std::size_t next = 0;
  while (next < n || !running.empty()) {
    if (stop && stop()) {
      next = n;  // start nothing more; wait for the running children
      if (running.empty()) break;
    }
    while (next < n && static_cast<int>(running.size()) < jobs) {
      const std::size_t i = next++;
      Child c = start([&task, i] { return task(i); }, o);
      c.task = i;
      running.push_back(std::move(c));
    }
    std::vector<pollfd> fds;
    for (const Child& c : running) fds.push_back(pollfd{c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("poll() failed");
    }
    for (std::size_t k = running.size(); k-- > 0;) {
      if (fds[k].revents == 0 || read_some(running[k])) continue;
      Child c = std::move(running[k]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      out[c.task] = finish(c, o);
      if (done) done(c.task, out[c.task]);
    }
  }
  return out;
}

}  // namespace pipescope::sim
