#include "sim/launch.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
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

#include "core/util/shell_words.h"

namespace pipescope::sim {

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

namespace {

// The process group being waited for and the first SIGINT / SIGTERM / SIGHUP received meanwhile.
volatile sig_atomic_t g_job_pgid = 0;
volatile sig_atomic_t g_signal = 0;

// Forwards the first signal only: the guard is in the group it forwards to and would otherwise signal itself
// forever.
extern "C" void forward_signal(int sig) {
  if (g_signal) return;
  g_signal = sig;
  if (g_job_pgid > 0) kill(-static_cast<pid_t>(g_job_pgid), sig);
}

void remove_temp_dirs();  // below, with TempDir

// Waits for `pid`; once a signal was recorded, polls and kills the group `pgid` after 10 s.
int wait_for(pid_t pid, pid_t pgid) {
  int status = 0, waited_ms = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, g_signal ? WNOHANG : 0);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return status;
    if (g_signal) {
      if (waited_ms == 10000) kill(-pgid, SIGKILL);  // a job ignoring the forwarded signal
      usleep(50 * 1000);
      waited_ms += 50;
    }
  }
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The guard: a forked copy of this process between it and the job. It leads the job's process group, starts the
// job and waits for it. When this process dies (even by SIGKILL) the guard gets SIGTERM (PR_SET_PDEATHSIG),
// forwards it to the job, waits for it and removes the temporary directories, so that nothing is left behind.
[[noreturn]] void run_guard(const std::vector<std::string>& argv, pid_t parent) {
  setpgid(0, 0);
  g_signal = 0;
  g_job_pgid = getpid();
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) forward_signal(SIGTERM);  // the parent died before prctl
  pid_t job = -1;
  try {
    job = fork_child(
        [&] {
          for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
          if (g_signal) _exit(128 + g_signal);
          std::vector<char*> a;
          for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
          a.push_back(nullptr);
          execvp(a[0], a.data());
          std::fprintf(stderr, "error: cannot run '%s': %s\n", a[0], std::strerror(errno));
          _exit(127);
        },
        "launch");
  } catch (const std::exception&) {
    _exit(127);
  }
  const int status = wait_for(job, getpid());
  if (getppid() != parent) remove_temp_dirs();  // orphaned: nobody else will
  _exit(exit_code(status));
}

}  // namespace

void require_program(const std::string& name, const std::string& flag) {
  auto runnable = [](const std::string& p) { return access(p.c_str(), X_OK) == 0; };
  if (name.find('/') != std::string::npos) {
    if (!runnable(name)) throw EnvironmentError(flag + ": cannot run '" + name + "': " + std::strerror(errno));
    return;
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');)
    if (runnable((d.empty() ? std::string(".") : d) + "/" + name)) return;
  throw EnvironmentError(flag + ": '" + name +
                         "' not found in PATH (install an MPI launcher, e.g. Open MPI's mpirun, or " +
                         "name one with " + flag + ")");
}

int launch(const std::vector<std::string>& argv) {
  if (argv.empty()) throw std::runtime_error("launch: empty command");
  const pid_t parent = getpid();
  const pid_t guard = fork_child([&] { run_guard(argv, parent); }, "launch");
  setpgid(guard, guard);  // also here: no window in which a forwarded signal would miss the group
  // Forward SIGINT / SIGTERM / SIGHUP to the job's group while waiting; restore the previous handlers afterwards.
  g_signal = 0;
  g_job_pgid = guard;
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  const int status = wait_for(guard, guard);
  g_job_pgid = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (g_signal) throw Interrupted(g_signal);  // unwinds: temporary directories are removed on the way out
  return exit_code(status);
}

int launch_mpi(const std::string& launcher, int ranks, const std::string& exe, const std::vector<std::string>& args,
               const std::string& announce) {
  std::vector<std::string> argv = launcher_argv(launcher);
  if (argv.empty()) throw std::invalid_argument("--launcher: empty command");
  require_program(argv[0], "--launcher");
  argv.insert(argv.end(), {"-n", std::to_string(ranks), exe});
  argv.insert(argv.end(), args.begin(), args.end());
  std::fputs(announce.c_str(), stderr);
  return launch(argv);
}

int run_sibling(const std::string& program, const std::vector<std::string>& args, const std::string& missing) {
  const std::string exe = sibling_exe(program);
  if (access(exe.c_str(), X_OK) != 0) throw EnvironmentError(missing + " (no " + exe + ")");
  std::vector<std::string> argv{exe};
  argv.insert(argv.end(), args.begin(), args.end());
  const int rc = launch(argv);
  if (rc > 128) throw std::runtime_error(program + " died of signal " + std::to_string(rc - 128));
  return rc;
}

namespace {

// Live temporary directories, removed by the handler below when a signal ends the process outside launch()
// (calibrate's compute phase, validate's simulation). Fixed storage: the handler must not allocate.
constexpr int kMaxTempDirs = 8;
char g_temp_dirs[kMaxTempDirs][PATH_MAX];
struct sigaction g_prev_int, g_prev_term, g_prev_hup;
int g_live_temp_dirs = 0;

void remove_tree(const char* path) {
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      char f[PATH_MAX];
      std::snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      unlink(f);
    }
    closedir(d);
  }
  rmdir(path);
}

void remove_temp_dirs() {
  for (auto& dir : g_temp_dirs)
    if (dir[0]) remove_tree(dir);
}

extern "C" void remove_temp_dirs_and_die(int sig) {
  remove_temp_dirs();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> b(tmpl.begin(), tmpl.end());
  b.push_back('\0');
  if (!mkdtemp(b.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  path = b.data();
  for (auto& dir : g_temp_dirs)
    if (!dir[0] && path.size() < sizeof dir) {
      std::memcpy(dir, path.c_str(), path.size() + 1);
      break;
    }
  if (g_live_temp_dirs++ == 0) {
    struct sigaction sa {};
    sa.sa_handler = remove_temp_dirs_and_die;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g_prev_int);
    sigaction(SIGTERM, &sa, &g_prev_term);
    sigaction(SIGHUP, &sa, &g_prev_hup);
  }
}

TempDir::~TempDir() {
  if (--g_live_temp_dirs == 0) {
    sigaction(SIGINT, &g_prev_int, nullptr);
    sigaction(SIGTERM, &g_prev_term, nullptr);
    sigaction(SIGHUP, &g_prev_hup, nullptr);
  }
  for (auto& dir : g_temp_dirs)
    if (path == dir) dir[0] = '\0';
  remove_tree(path.c_str());
}

}  // namespace pipescope::sim
