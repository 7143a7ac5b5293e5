// The closed loop as a benchmark: calibrate this machine once (a fresh profile of the CPU backend at the shape of
// scenarios/calib/cpu-2rank.yaml), then run `pipescope validate --profile` (the CPU runtime under mpirun against
// its simulation) over a grid of schedules, parallel layouts and two model shapes, one of which the profile has no
// layer table for (it is timed by the kernel model). Prints one row per configuration and the summary the issue's
// targets are stated in: iteration error <= 10% each and <= 5% median, forward / backward op means <= 15%, p2p
// within 30%. Timing: run it on a quiet machine (`uptime` is printed); several ranks share the cores, so the
// load of other processes shows up as error. The drift column is validate's check of the machine against the
// profile (its layer point re-timed before and after each run): a row's error of that size is the machine's.
//
//   build/bench/bench_closed_loop [--profile FILE] [--out DIR] [--iterations N] [--only NAME]
// --profile reuses a profile instead of calibrating; --out keeps the profile, logs and JSON (default
// build/closed_loop_bench). Exit 0 when every run completed (targets met or not: they are reported), 1 otherwise.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Config {
  std::string name, flags;
  int ranks = 2;
};

// Shape A = the calibrated shape (hidden 128, 4 heads, ffn 512); shape B (hidden 64, 2 heads, ffn 256) has no
// layer table in the profile. 2-4 ranks on 4 layers, 4 sequences of 256 tokens per iteration.
const char* const kShapeB = " --hidden 64 --heads 2 --ffn 256";
std::vector<Config> grid() {
  const std::string B = kShapeB;
  return {
      {"gpipe pp2 A", "--schedule gpipe --pp 2"},
      {"1f1b pp2 A", "--schedule 1f1b --pp 2"},
      {"interleaved pp2 v2 A", "--schedule interleaved --pp 2 --v 2"},
      {"terapipe 128,64,64 pp2 A", "--schedule terapipe --pp 2 --slice-tokens 128,64,64"},
      {"seq1f1b 4 slices pp2 A", "--schedule seq1f1b --pp 2 --slices 4"},
      {"1f1b dp2 A", "--schedule 1f1b --pp 1 --dp 2"},
      {"gpipe tp2 B", "--schedule gpipe --pp 1 --tp 2 --dp 1" + B},
      {"1f1b pp2 dp2 A", "--schedule 1f1b --pp 2 --dp 2", 4},
      {"gpipe pp2 B", "--schedule gpipe --pp 2" + B},
      {"1f1b pp2 tp2 B", "--schedule 1f1b --pp 2 --tp 2 --dp 1" + B, 4},
      {"terapipe 96,64,48,48 pp4 B", "--schedule terapipe --pp 4 --dp 1 --slice-tokens 96,64,48,48" + B, 4},
      {"interleaved pp2 v2 dp2 B", "--schedule interleaved --pp 2 --v 2 --dp 2" + B, 4},
      {"seq1f1b 4 slices pp2 B", "--schedule seq1f1b --pp 2 --slices 4" + B},
  };
}

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string load() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double rel(const nlohmann::json& j, const char* kind) {
  if (!j.contains("per_op_kind") || !j["per_op_kind"].contains(kind)) return NAN;
  return j["per_op_kind"][kind]["rel_error"].get<double>();
}

// The machine's drift since the profile during the row (validate's re-timed layer point, mean of the readings
// before and after the measured run); NaN when validate could not check it.
double drift(const nlohmann::json& j) {
  if (!j.contains("device_drift") || !j["device_drift"].value("checked", false)) return NAN;
  const auto& d = j["device_drift"];
  return 0.5 * (d["before"]["change"].get<double>() + d["after"]["change"].get<double>());
}

// "+12.3%" in 8 columns, "n/a" for an op kind the configuration does not have (p2p without a pipeline).
std::string percent(double x) {
  char b[32];
  if (std::isnan(x))
    std::snprintf(b, sizeof b, "%8s", "n/a");
  else
    std::snprintf(b, sizeof b, "%+7.1f%%", 100 * x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string bin = PIPESCOPE_BINARY_DIR "/pipescope";
  const std::string scen = PIPESCOPE_SOURCE_DIR "/scenarios/calib/cpu-2rank.yaml";
  std::string dir = PIPESCOPE_BINARY_DIR "/closed_loop_bench", profile, only;
  int iterations = 3;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--profile") {
      profile = argv[++i];
    } else if (i + 1 < argc && a == "--out") {
      dir = argv[++i];
    } else if (i + 1 < argc && a == "--iterations") {
      iterations = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--only") {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--profile FILE] [--out DIR] [--iterations N] [--only NAME]\n", argv[0]);
      return 1;
    }
  }
  if (run("mkdir -p '" + dir + "'") != 0) return 1;
  // The shipped scenario has 2 "GPUs" per node; the 4-rank configurations need all 4 on one node (the profile's
  // intra link): a copy with 4 per node and dp 2 (their flags set dp).
  const std::string scen4 = dir + "/cpu-4rank.yaml";
  if (run("sed -e 's/gpus_per_node: 2/gpus_per_node: 4/' -e 's/^  dp: 1/  dp: 2/' '" + scen + "' > '" + scen4 + "'") !=
      0)
    return 1;
  std::printf("closed loop: load average before %s (2-4 MPI ranks share this machine's cores)\n", load().c_str());
  if (profile.empty()) {
    profile = dir + "/cpu-f64.yaml";
    std::printf("calibrating %s ...\n", profile.c_str());
    std::fflush(stdout);
    if (run(bin + " calibrate " + scen + " --backend cpu-f64 --grain 32 --context-steps 4 -e 4M -n 10 --no-progress" +
            " --out '" + profile + "' > '" + dir + "/calibrate.log' 2>&1") != 0) {
      std::fprintf(stderr, "calibration failed: see %s/calibrate.log\n", dir.c_str());
      return 1;
    }
  }
  std::printf("%-28s %5s %-13s %10s %10s %8s %8s %8s %8s %8s %8s\n", "configuration", "ranks", "layers timed",
              "measured_s", "simulated", "iter", "F", "B", "p2p", "drift", "at drift");
  // A rank is a "device" only while it has a core to itself: with more ranks than cores they time-share, and
  // every measured op is slower than any per-device model says. Such rows are printed (marked *) but kept out of
  // the targets; the summary says how many.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<double> iter_err, f_err, b_err, p2p_err, shared_iter_err, drifts, at_drift_err;
  std::vector<std::string> drifted;  // rows over the 10% target while the machine had moved by more than 5%
  bool ok = true;
  int n = 0;
  for (const Config& c : grid()) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    const std::string json = dir + "/validate-" + std::to_string(n) + ".json";
    const std::string log = dir + "/validate-" + std::to_string(n++) + ".log";
    const int rc = run(bin + " validate " + (c.ranks == 4 ? scen4 : scen) + " " + c.flags +
                       " --backend cpu-f64 --profile '" + profile + "' --iterations " + std::to_string(iterations) +
                       " --warmup 1 --json '" + json + "' > '" + log + "' 2>&1");
    if (rc != 0) {
      std::printf("%-28s failed (exit %d): see %s\n", c.name.c_str(), rc, log.c_str());
      ok = false;
      continue;
    }
    std::ifstream f(json);
    const nlohmann::json j = nlohmann::json::parse(f);
    const double meas = j["iteration_s"]["measured"].get<double>(), sim = j["iteration_s"]["simulated"].get<double>();
    const double e = (sim - meas) / meas, ef = rel(j, "F"), eb = rel(j, "B"), ep = rel(j, "p2p"), dr = drift(j);
    // The simulation at the speed the machine had during the row (the drift probe re-times the profile's own layer
    // point): the model's error with the machine's phase taken out, shown beside the raw error, never instead.
    const double e_at = std::isnan(dr) ? NAN : (sim * (1 + dr) - meas) / meas;
    const std::string src = j["cost_model"].get<std::string>();
    const char* timed = src.find("kernel model") != std::string::npos            ? "kernel model"
                        : src.find("measured layer tables") != std::string::npos ? "layer table"
                                                                                 : "analytic";
    const int ranks = j["dp"].get<int>() * j["pp"].get<int>() * j["tp"].get<int>();
    const bool shared = ranks > cores;
    std::printf("%-28s %5d %-13s %10.4f %10.4f %+7.1f%% %s %s %s %s %s%s\n", c.name.c_str(), ranks, timed, meas, sim,
                100 * e, percent(ef).c_str(), percent(eb).c_str(), percent(ep).c_str(), percent(dr).c_str(),
                percent(e_at).c_str(), shared ? " *" : "");
    std::fflush(stdout);
    if (shared) {
      shared_iter_err.push_back(std::abs(e));
      continue;
    }
    iter_err.push_back(std::abs(e));
    if (!std::isnan(dr)) drifts.push_back(std::abs(dr));
    if (!std::isnan(e_at)) at_drift_err.push_back(std::abs(e_at));
    if (std::abs(e) > 0.10 && std::abs(dr) > 0.05) drifted.push_back(c.name);
    if (!std::isnan(ef)) f_err.push_back(ef);
    if (!std::isnan(eb)) b_err.push_back(eb);
    if (!std::isnan(ep)) p2p_err.push_back(std::abs(ep));
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  const double worst = iter_err.empty() ? 0 : *std::max_element(iter_err.begin(), iter_err.end());
  if (!shared_iter_err.empty())
    std::printf(
        "\n* %zu configurations have more ranks than this machine's %d cores (median |iteration error| %.1f%%): "
        "not comparable, left out of the targets below\n",
        shared_iter_err.size(), cores, 100 * median(shared_iter_err));
  std::printf("\n%zu configurations: |iteration error| median %.1f%% (target <= 5%%), worst %.1f%% (target <= 10%%)\n",
              iter_err.size(), 100 * median(iter_err), 100 * worst);
  std::printf(
      "mean op error: forward %+.1f%%, backward %+.1f%% (targets within 15%%); p2p |error| median %.1f%% "
      "(target 30%%)\n",
      100 * mean(f_err), 100 * mean(b_err), 100 * median(p2p_err));
  if (!drifts.empty())
    std::printf(
        "machine drift since the profile (validate's re-timed layer point): |drift| median %.1f%%, worst %.1f%%\n",
        100 * median(drifts), 100 * *std::max_element(drifts.begin(), drifts.end()));
  if (!at_drift_err.empty())
    std::printf(
        "at the machine's speed during each row (simulated x (1 + drift)): |iteration error| median %.1f%%, worst "
        "%.1f%%\n",
        100 * median(at_drift_err), 100 * *std::max_element(at_drift_err.begin(), at_drift_err.end()));
  for (const std::string& name : drifted)
    std::printf("  %s: over the 10%% target while the machine ran more than 5%% off its profile\n", name.c_str());
  std::printf("load average after %s\n", load().c_str());
  return ok ? 0 : 1;
}
