// The closed loop as a benchmark: calibrate this machine once (a fresh profile of the CPU backend at the shape of
// scenarios/calib/cpu-2rank.yaml), then run `pipescope validate --profile` (the CPU runtime under mpirun against
// its simulation) over a grid of schedules, parallel layouts and two model shapes, one of which the profile has no
// layer table for (it is timed by the kernel model). Prints one row per configuration and the summary the
// targets are stated in: iteration error <= 10% each and <= 5% median, forward / backward op means <= 15%, p2p
// within 30%. Timing: run it on a quiet machine (`uptime` is printed); several ranks share the cores, so the
// load of other processes shows up as error. The drift column is validate's check of the machine against the
// profile (its layer point re-timed before and after each run): a row's error of that size is the machine's.
//
//   build/bench/bench_closed_loop [--profile FILE] [--out DIR] [--iterations N] [--only NAME] [--repetitions N]
// --profile reuses a profile instead of calibrating; --out keeps the profile, logs and JSON (default
// build/closed_loop_bench). --repetitions N runs the whole loop N times, each with its own fresh profile unless
// --profile is given (a profile of a machine whose speed moves between phases is one sample of it, like any one
// run), prints each repetition's table and then, as google/benchmark aggregates repetitions, every row's median,
// minimum and maximum error over them, with the targets restated on the medians; closed_loop.json in --out holds
// all of it. Exit 0 when every run completed (targets met or not: they are reported), 1 otherwise.
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

// One configuration's outcome in one repetition (NaN where validate has no such figure).
struct Row {
  std::string name;
  int ranks = 0;
  bool completed = false;
  bool shared = false;  // more ranks than cores: printed, kept out of the targets
  double measured_s = NAN, simulated_s = NAN;
  double iter = NAN, f = NAN, b = NAN, p2p = NAN, drift = NAN, at_drift = NAN;
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

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double worst(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

struct Paths {
  std::string bin, scen, scen4, dir;
};

// Runs `validate --profile` on one configuration and reads its JSON. `tag` names its log and JSON in the out dir.
Row run_config(const Paths& p, const Config& c, const std::string& profile, int iterations, const std::string& tag,
               int cores) {
  Row r;
  r.name = c.name;
  const std::string json = p.dir + "/validate-" + tag + ".json", log = p.dir + "/validate-" + tag + ".log";
  const int rc = run(p.bin + " validate " + (c.ranks == 4 ? p.scen4 : p.scen) + " " + c.flags +
                     " --backend cpu-f64 --profile '" + profile + "' --iterations " + std::to_string(iterations) +
                     " --warmup 1 --json '" + json + "' > '" + log + "' 2>&1");
  if (rc != 0) {
    std::printf("%-28s failed (exit %d): see %s\n", c.name.c_str(), rc, log.c_str());
    return r;
  }
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  r.completed = true;
  r.measured_s = j["iteration_s"]["measured"].get<double>();
  r.simulated_s = j["iteration_s"]["simulated"].get<double>();
  r.iter = (r.simulated_s - r.measured_s) / r.measured_s;
  r.f = rel(j, "F");
  r.b = rel(j, "B");
  r.p2p = rel(j, "p2p");
  r.drift = drift(j);
  // The simulation at the speed the machine had during the row (the drift probe re-times the profile's own layer
  // point): the model's error with the machine's phase taken out, shown beside the raw error, never instead.
  r.at_drift = std::isnan(r.drift) ? NAN : (r.simulated_s * (1 + r.drift) - r.measured_s) / r.measured_s;
  const std::string src = j["cost_model"].get<std::string>();
  const char* timed = src.find("kernel model") != std::string::npos            ? "kernel model"
                      : src.find("measured layer tables") != std::string::npos ? "layer table"
                                                                               : "analytic";
  r.ranks = j["dp"].get<int>() * j["pp"].get<int>() * j["tp"].get<int>();
  // A rank is a "device" only while it has a core to itself: with more ranks than cores they time-share, and
  // every measured op is slower than any per-device model says.
  r.shared = r.ranks > cores;
  std::printf("%-28s %5d %-13s %10.4f %10.4f %+7.1f%% %s %s %s %s %s%s\n", c.name.c_str(), r.ranks, timed, r.measured_s,
              r.simulated_s, 100 * r.iter, percent(r.f).c_str(), percent(r.b).c_str(), percent(r.p2p).c_str(),
              percent(r.drift).c_str(), percent(r.at_drift).c_str(), r.shared ? " *" : "");
  std::fflush(stdout);
  return r;
}

// The summary the targets are stated in, over the rows that had a core per rank.
void print_summary(const std::vector<Row>& rows, int cores) {
  std::vector<double> iter_err, f_err, b_err, p2p_err, shared_iter_err, drifts, at_drift_err;
  std::vector<std::string> drifted;  // rows over the 10% target while the machine had moved by more than 5%
  for (const Row& r : rows) {
    if (!r.completed) continue;
    if (r.shared) {
      shared_iter_err.push_back(std::abs(r.iter));
      continue;
    }
    iter_err.push_back(std::abs(r.iter));
    if (!std::isnan(r.drift)) drifts.push_back(std::abs(r.drift));
    if (!std::isnan(r.at_drift)) at_drift_err.push_back(std::abs(r.at_drift));
    if (std::abs(r.iter) > 0.10 && std::abs(r.drift) > 0.05) drifted.push_back(r.name);
    if (!std::isnan(r.f)) f_err.push_back(r.f);
    if (!std::isnan(r.b)) b_err.push_back(r.b);
    if (!std::isnan(r.p2p)) p2p_err.push_back(std::abs(r.p2p));
  }
  if (!shared_iter_err.empty())
    std::printf(
        "\n* %zu configurations have more ranks than this machine's %d cores (median |iteration error| %.1f%%): "
        "not comparable, left out of the targets below\n",
        shared_iter_err.size(), cores, 100 * median(shared_iter_err));
  std::printf("\n%zu configurations: |iteration error| median %.1f%% (target <= 5%%), worst %.1f%% (target <= 10%%)\n",
              iter_err.size(), 100 * median(iter_err), 100 * worst(iter_err));
  std::printf(
      "mean op error: forward %+.1f%%, backward %+.1f%% (targets within 15%%); p2p |error| median %.1f%% "
      "(target 30%%)\n",
      100 * mean(f_err), 100 * mean(b_err), 100 * median(p2p_err));
  if (!drifts.empty())
    std::printf(
        "machine drift since the profile (validate's re-timed layer point): |drift| median %.1f%%, worst %.1f%%\n",
        100 * median(drifts), 100 * worst(drifts));
  if (!at_drift_err.empty())
    std::printf(
        "at the machine's speed during each row (simulated x (1 + drift)): |iteration error| median %.1f%%, worst "
        "%.1f%%\n",
        100 * median(at_drift_err), 100 * worst(at_drift_err));
  for (const std::string& name : drifted)
    std::printf("  %s: over the 10%% target while the machine ran more than 5%% off its profile\n", name.c_str());
}

// A field of every repetition's row `i` that completed.
std::vector<double> across(const std::vector<std::vector<Row>>& reps, std::size_t i, double Row::*field) {
  std::vector<double> v;
  for (const auto& rows : reps)
    if (i < rows.size() && rows[i].completed && !std::isnan(rows[i].*field)) v.push_back(rows[i].*field);
  return v;
}

// Per row, the median, minimum and maximum over the repetitions (each repetition with its own profile), and the
// targets restated on the per-row medians; a row's median keeps its sign, so the median row is as signed as
// a single run's.
void print_aggregate(const std::vector<std::vector<Row>>& reps, int cores, bool fresh_profiles) {
  std::printf("\nover %zu repetitions, %s: per row the median (min .. max) error\n", reps.size(),
              fresh_profiles ? "each with its own fresh profile" : "all on the one --profile");
  std::printf("%-28s %5s %26s %8s %8s %8s %8s\n", "configuration", "ranks", "iter median (min .. max)", "F", "B", "p2p",
              "drift");
  std::vector<Row> medians;
  for (std::size_t i = 0; i < reps.front().size(); i++) {
    // Ranks and sharing from a repetition where the row ran (a failed run has neither).
    const Row* first = &reps.front()[i];
    for (const auto& rows : reps)
      if (rows[i].completed) {
        first = &rows[i];
        break;
      }
    const std::vector<double> it = across(reps, i, &Row::iter);
    Row m;
    m.name = first->name;
    m.ranks = first->ranks;
    m.shared = first->shared;
    m.completed = !it.empty();
    if (m.completed) {
      m.iter = median(it);
      m.f = median(across(reps, i, &Row::f));
      m.b = median(across(reps, i, &Row::b));
      const auto p = across(reps, i, &Row::p2p), d = across(reps, i, &Row::drift), a = across(reps, i, &Row::at_drift);
      m.p2p = p.empty() ? NAN : median(p);
      m.drift = d.empty() ? NAN : median(d);
      m.at_drift = a.empty() ? NAN : median(a);
      char range[64];
      std::snprintf(range, sizeof range, "%+7.1f%% (%+.1f .. %+.1f%%)", 100 * m.iter,
                    100 * *std::min_element(it.begin(), it.end()), 100 * *std::max_element(it.begin(), it.end()));
      std::printf("%-28s %5d %26s %s %s %s %s%s\n", m.name.c_str(), m.ranks, range, percent(m.f).c_str(),
                  percent(m.b).c_str(), percent(m.p2p).c_str(), percent(m.drift).c_str(), m.shared ? " *" : "");
    }
    medians.push_back(m);
  }
  print_summary(medians, cores);
}

nlohmann::json to_json(const Row& r) {
  auto num = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {{"configuration", r.name},         {"ranks", r.ranks},
          {"completed", r.completed},        {"shared_cores", r.shared},
          {"measured_s", num(r.measured_s)}, {"simulated_s", num(r.simulated_s)},
          {"iteration_error", num(r.iter)},  {"forward_error", num(r.f)},
          {"backward_error", num(r.b)},      {"p2p_error", num(r.p2p)},
          {"drift", num(r.drift)},           {"error_at_drift", num(r.at_drift)}};
}

}  // namespace

int main(int argc, char** argv) {
  Paths p{PIPESCOPE_BINARY_DIR "/pipescope", PIPESCOPE_SOURCE_DIR "/scenarios/calib/cpu-2rank.yaml", "",
          PIPESCOPE_BINARY_DIR "/closed_loop_bench"};
  std::string fixed_profile, only;
  int iterations = 3, repetitions = 1;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--profile") {
      fixed_profile = argv[++i];
    } else if (i + 1 < argc && a == "--out") {
      p.dir = argv[++i];
    } else if (i + 1 < argc && a == "--iterations") {
      iterations = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--only") {
      only = argv[++i];
    } else if (i + 1 < argc && a == "--repetitions") {
      repetitions = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--profile FILE] [--out DIR] [--iterations N] [--only NAME] [--repetitions N]\n",
                   argv[0]);
      return 1;
    }
  }
  if (iterations < 1 || repetitions < 1) {
    std::fprintf(stderr, "--iterations and --repetitions must be at least 1\n");
    return 1;
  }
  if (run("mkdir -p '" + p.dir + "'") != 0) return 1;
  // The shipped scenario has 2 "GPUs" per node; the 4-rank configurations need all 4 on one node (the profile's
  // intra link): a copy with 4 per node and dp 2 (their flags set dp).
  p.scen4 = p.dir + "/cpu-4rank.yaml";
  if (run("sed -e 's/gpus_per_node: 2/gpus_per_node: 4/' -e 's/^  dp: 1/  dp: 2/' '" + p.scen + "' > '" + p.scen4 +
          "'") != 0)
    return 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Config> configs;
  for (const Config& c : grid())
    if (only.empty() || c.name.find(only) != std::string::npos) configs.push_back(c);
  std::vector<std::vector<Row>> reps;
  nlohmann::json out = {{"load_before", load()}, {"repetitions", nlohmann::json::array()}};
  bool ok = true;
  for (int rep = 0; rep < repetitions; rep++) {
    const std::string suffix = repetitions > 1 ? "-" + std::to_string(rep) : "";
    if (repetitions > 1) std::printf("%srepetition %d of %d\n", rep ? "\n" : "", rep + 1, repetitions);
    std::printf("closed loop: load average before %s (2-4 MPI ranks share this machine's cores)\n", load().c_str());
    std::string profile = fixed_profile;
    if (profile.empty()) {
      profile = p.dir + "/cpu-f64" + suffix + ".yaml";
      std::printf("calibrating %s ...\n", profile.c_str());
      std::fflush(stdout);
      if (run(p.bin + " calibrate " + p.scen +
              " --backend cpu-f64 --grain 32 --context-steps 4 -e 4M -n 10 --no-progress" + " --out '" + profile +
              "' > '" + p.dir + "/calibrate" + suffix + ".log' 2>&1") != 0) {
        std::fprintf(stderr, "calibration failed: see %s/calibrate%s.log\n", p.dir.c_str(), suffix.c_str());
        return 1;
      }
    }
    std::printf("%-28s %5s %-13s %10s %10s %8s %8s %8s %8s %8s %8s\n", "configuration", "ranks", "layers timed",
                "measured_s", "simulated", "iter", "F", "B", "p2p", "drift", "at drift");
    std::vector<Row> rows;
    for (std::size_t i = 0; i < configs.size(); i++) {
      rows.push_back(run_config(p, configs[i], profile, iterations, std::to_string(i) + suffix, cores));
      ok = ok && rows.back().completed;
    }
    print_summary(rows, cores);
    std::printf("load average after %s\n", load().c_str());
    nlohmann::json jr = {{"profile", profile}, {"load_after", load()}, {"rows", nlohmann::json::array()}};
    for (const Row& r : rows) jr["rows"].push_back(to_json(r));
    out["repetitions"].push_back(jr);
    reps.push_back(std::move(rows));
  }
  if (repetitions > 1) print_aggregate(reps, cores, fixed_profile.empty());
  std::ofstream(p.dir + "/closed_loop.json") << out.dump(2) << "\n";
  return ok ? 0 : 1;
}
