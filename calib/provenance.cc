// Where and how a profile was measured (docs/calibration.md): host, date, git commit, CPU or GPU, library
// versions, the command and the statistics policy.
#include "calib/provenance.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <Eigen/Core>
#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>

namespace pipescope::calib {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') i++;
  return s.substr(i);
}

std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return "";
  std::string out;
  std::array<char, 256> buf{};
  while (fgets(buf.data(), buf.size(), p.get())) out += buf.data();
  return trim(out);
}

}  // namespace

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return trim(line.substr(line.find(':') + 1));
  utsname u{};
  return uname(&u) == 0 ? std::string(u.machine) : "unknown CPU";
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * size : 0.0;
}

std::map<std::string, std::string> base_provenance(const std::string& command) {
  std::map<std::string, std::string> p;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p["host"] = host;
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p["date"] = date;
  std::string commit = command_output("git -C '" PIPESCOPE_SOURCE_DIR "' rev-parse --short=12 HEAD 2>/dev/null");
  if (!commit.empty() &&
      !command_output("git -C '" PIPESCOPE_SOURCE_DIR "' status --porcelain --untracked-files=no 2>/dev/null").empty())
    commit += "-dirty";
  p["git_commit"] = commit.empty() ? "unknown" : commit;
  p["command"] = command;
  p["cpu"] = cpu_model();
  p["cores"] = std::to_string(sysconf(_SC_NPROCESSORS_ONLN));
  p["compiler"] = __VERSION__;
  p["eigen"] = std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
               std::to_string(EIGEN_MINOR_VERSION);
  return p;
}

}  // namespace pipescope::calib
