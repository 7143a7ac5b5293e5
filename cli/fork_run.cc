#include "cli/fork_run.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/shell_words.h"

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

std::vector<std::string> launcher_argv(const std::string& launcher) {
  std::vector<std::string> w = split_shell_words(launcher);  // quoted arguments stay whole
  if (w.empty()) return w;
  const std::string tool = w[0].substr(w[0].find_last_of('/') == std::string::npos ? 0 : w[0].find_last_of('/') + 1);
  if (geteuid() == 0 && (tool == "mpirun" || tool == "mpiexec")) w.push_back("--allow-run-as-root");
  return w;
}

std::string sibling_exe(const std::string& name) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find the pipescope executable (/proc/self/exe)");
  const std::string self(buf, static_cast<std::size_t>(n));
  return self.substr(0, self.find_last_of('/') + 1) + name;
}

int launch(const std::vector<std::string>& argv) {
  if (argv.empty()) throw std::runtime_error("launch: empty command");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    std::fprintf(stderr, "error: cannot run '%s': %s\n", a[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> b(tmpl.begin(), tmpl.end());
  b.push_back('\0');
  if (!mkdtemp(b.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  path = b.data();
}

TempDir::~TempDir() {
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") std::remove((path + "/" + n).c_str());
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

}  // namespace pipescope::cli
