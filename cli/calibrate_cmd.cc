// `pipescope calibrate --backend cpu-f64|cpu-f32|cuda-bf16|cuda-f16 --out FILE [SCENARIO] [shape flags] [links]`
// Times the layer / embedding / head / Adam / GEMM kernels of the scenario's model shape on this machine (calib/),
// runs the link benchmarks as an MPI job (pipescope-linkbench, nccl-tests flags -b -e -f -n -w), fits them and
// writes a device profile that `simulate --profile FILE` (or `calibration: FILE` in a scenario) reads.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "calib/calibrate.h"
#include "calib/links.h"
#include "calib/options_json.h"
#include "cli/commands.h"
#include "cli/fork_run.h"
#include "cli/validators.h"
#include "core/atomic_file.h"
#include "core/backends.h"
#include "core/profile.h"
#include "core/scenario.h"

namespace pipescope::cli {
namespace {

struct CalibrateCli {
  std::string scenario, backend = "cpu-f64", out, device_preset, analytic;
  int hidden = -1, heads = -1, ffn = -1, seq_len = -1, vocab = -1;  // -1: the scenario's
  std::vector<int> micro_batches;
  int grain = 8, context_steps = 8, tp = 1;
  bool cold = false;
  bool quick = false, no_links = false, no_progress = false, accept_poor_fit = false;
  double budget_s = -1;  // -1: 100 s with --quick, none otherwise
  std::string clock = "cpu";
  int link_ranks = 2;
  std::string launcher = "mpirun --oversubscribe", link_class = "intra";
  std::string min_bytes = "8", max_bytes = "", step_factor = "2";  // max: 32M, with --quick 4M
  bool context_steps_given = false;
  int iters = 20, warmup = 5;
};

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  for (char c : all) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Atomically: a temporary file next to `out`, renamed over it once complete, so an interrupted run never leaves a
// partial profile (and an existing one stays intact until the new one is whole).
int write_out(const DeviceProfile& p, const std::string& out) {
  std::ostringstream text;
  write_profile(p, text);
  parse_profile(text.str(), out);  // what we write must read back
  write_file_atomic(out, text.str(), "--out");
  std::printf("%s", calib::fit_report(p).c_str());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

bool is_cuda(const std::string& backend) { return backend_on(backend, BackendDevice::Cuda); }
bool measures(const BackendInfo& b) { return b.device != BackendDevice::None; }

// The CUDA work runs in programs of its own (calib/cuda_check_main.cc, calib/cuda_main.cc), so that this one loads
// no CUDA library. Their exit code, when not 0, is calibrate's (they have printed the reason): 1 bad options,
// 3 no usable GPU, 5 refused by a quality gate; a crash is an internal error.
int run_cuda_program(const std::string& program, const std::string& backend, std::vector<std::string> args) {
  const std::string exe = sibling_exe(program);
  if (access(exe.c_str(), X_OK) != 0)
    throw EnvironmentError("--backend " + backend + ": this pipescope was built without CUDA (no " + exe + ")");
  args.insert(args.begin(), exe);
  const int rc = launch(args);
  if (rc > 128) throw std::runtime_error(program + " died of signal " + std::to_string(rc - 128));
  return rc;
}

// Before the link benchmarks: is there a GPU that runs the backend (3 otherwise)? pipescope-cuda-check links
// cudart alone, so that this refusal stays small and fast.
int check_cuda_backend(const std::string& backend) {
  return run_cuda_program("pipescope-cuda-check", backend, {backend});
}

// The compute benchmarks and fits of `o` in pipescope-calibrate-cuda; the profile comes back through `dir`.
int calibrate_on_gpu(const calib::CalibrateOptions& o, const TempDir& dir, DeviceProfile& p) {
  const std::string opts = dir.path + "/options.json", prof = dir.path + "/profile.yaml";
  write_file_atomic(opts, calib::options_to_json(o), "calibrate options");
  const int rc = run_cuda_program("pipescope-calibrate-cuda", o.backend, {opts, prof});
  if (rc == 0) p = load_profile(prof);
  return rc;
}

int positive_override(int v, int scenario_value, const char* flag) {
  if (v == -1) return scenario_value;
  if (v < 1) throw InputError(std::string(flag) + ": must be >= 1, got " + std::to_string(v));
  return v;
}

int run(const CalibrateCli& c) {
  if (c.out.empty()) throw InputError("--out: required (the profile file to write)");
  check_output_paths({{"--out", c.out}});  // before minutes of measuring
  if (!c.analytic.empty()) {
    DeviceProfile p = calib::analytic_profile(c.analytic, "pipescope calibrate --analytic " + c.analytic);
    p.source = c.out;
    return write_out(p, c.out);
  }
  const Scenario s = c.scenario.empty() ? default_scenario() : load_scenario(c.scenario);
  check_output_paths({{"--out", c.out}});  // again, now that the inputs are read: --out may not overwrite one
  calib::CalibrateOptions o;
  o.backend = c.backend;
  o.device_preset = c.device_preset;
  o.link_class = c.link_class;
  o.command = command_line();
  auto& sh = o.compute.shape;
  sh.layer.hidden = positive_override(c.hidden, s.model.hidden, "--hidden");
  sh.layer.heads = positive_override(c.heads, s.model.heads, "--heads");
  sh.layer.ffn = positive_override(c.ffn, c.hidden != -1 ? 4 * sh.layer.hidden : s.model.ffn_hidden, "--ffn");
  sh.vocab = positive_override(c.vocab, s.model.vocab, "--vocab");
  sh.max_seq = positive_override(c.seq_len, s.model.seq_len, "--seq-len");
  if (c.grain < 1) throw InputError("--grain: must be >= 1, got " + std::to_string(c.grain));
  if (c.context_steps < 0) throw InputError("--context-steps: must be >= 0 (0: no context grid)");
  try {
    sh.validate();
  } catch (const std::exception& e) {
    throw InputError(std::string("model shape: ") + e.what());
  }
  o.compute.grain = c.grain;
  o.compute.context_steps = c.context_steps;
  o.compute.tp = c.tp;
  o.compute.policy.cold = c.cold;
  if (c.tp < 1 || sh.layer.hidden % c.tp || sh.layer.ffn % c.tp || sh.vocab % c.tp)
    throw InputError("--tp " + std::to_string(c.tp) + ": must divide hidden, ffn and vocab");
  o.compute.progress = !c.no_progress;
  if (c.quick) {
    if (!c.context_steps_given) o.compute.context_steps = std::min(o.compute.context_steps, 4);
    o.compute.policy = calib::quick_policy();
    o.compute.policy.cold = c.cold;
    o.compute.sparse_lengths = true;
  }
  o.budget_s = c.budget_s >= 0 ? c.budget_s : (c.quick ? 100.0 : 0.0);
  o.accept_poor_fit = c.accept_poor_fit;
  o.clock = c.clock;
  // Test hook (calib/README.md): noise on every compute reading, to show that the gates refuse it.
  if (const char* noise = std::getenv("PIPESCOPE_CALIB_INJECT_NOISE"); noise && *noise) {
    char* end = nullptr;
    o.timer_noise = std::strtod(noise, &end);
    if (end == noise || *end || !(o.timer_noise >= 0))
      throw InputError(std::string("PIPESCOPE_CALIB_INJECT_NOISE: expected a number >= 0, got '") + noise + "'");
  }
  o.micro_batches = c.micro_batches.empty() ? std::vector<int>{s.parallel.micro_batch_size} : c.micro_batches;
  if (c.link_class != "intra" && c.link_class != "inter") throw InputError("--link-class: intra or inter");
  if (const BackendInfo* b = find_backend(c.backend); b == nullptr || !measures(*b))
    throw InputError("--backend: unknown backend '" + c.backend + "' (" + backend_names(measures) + ")");
  if (is_cuda(c.backend))
    if (const int rc = check_cuda_backend(c.backend)) return rc;

  const std::string max_bytes = !c.max_bytes.empty() ? c.max_bytes : (c.quick ? "4M" : "32M");
  auto dir = std::make_unique<TempDir>("pipescope-calibrate");
  if (!c.no_links) {
    if (c.link_ranks < 2) throw InputError("--link-ranks: at least 2");
    for (const auto* v : {&c.min_bytes, &max_bytes}) {
      try {
        calib::parse_size(*v);
      } catch (const std::invalid_argument& e) {
        throw InputError(std::string(v == &c.min_bytes ? "-b" : "-e") + ": " + e.what());
      }
    }
    o.link_results = dir->path + "/links.json";
    std::vector<std::string> argv = launcher_argv(c.launcher);
    if (argv.empty()) throw InputError("--launcher: empty command");
    const std::string exe = sibling_exe("pipescope-linkbench");
    if (access(exe.c_str(), X_OK) != 0) throw InputError(exe + ": not an executable (build pipescope-linkbench)");
    argv.insert(argv.end(),
                {"-n", std::to_string(c.link_ranks), exe, "-b", c.min_bytes, "-e", max_bytes, "-f", c.step_factor, "-n",
                 std::to_string(c.iters), "-w", std::to_string(c.warmup), "--out", o.link_results});
    require_program(argv[0], "--launcher");
    std::fprintf(stderr, "calibrate: link benchmarks, %d ranks (%s)\n", c.link_ranks, c.launcher.c_str());
    const int rc = launch(argv);
    if (rc != 0)
      throw std::runtime_error("the link benchmark job failed (exit " + std::to_string(rc) +
                               "); see its messages above, or pass --no-links");
  }
  std::fprintf(stderr, "calibrate: compute benchmarks on %s, h=%d heads=%d ffn=%d vocab=%d, l up to %d\n",
               c.backend.c_str(), sh.layer.hidden, sh.layer.heads, sh.layer.ffn, sh.vocab, sh.max_seq);
  DeviceProfile p;
  if (is_cuda(c.backend)) {
    if (const int rc = calibrate_on_gpu(o, *dir, p)) return rc;
  } else {
    try {
      p = calib::calibrate(o);
    } catch (const calib::CalibrationRefused& e) {
      std::fprintf(stderr, "error: %s\nno profile written (--accept-poor-fit writes it with the failures recorded)\n",
                   e.what());
      return kExitPoorFit;
    }
  }
  p.source = c.out;
  return write_out(p, c.out);
}

}  // namespace

Command add_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibrateCli>();
  CLI::App* sub =
      app.add_subcommand("calibrate", "Measure this machine's kernels and links and write a device profile");
  sub->add_option("scenario", o->scenario, "Scenario whose model shape to measure (default: the built-in default)");
  sub->add_option("--backend", o->backend, backend_names(measures))->capture_default_str();
  sub->add_option("--out", o->out, "Profile file to write (YAML)")->required();
  sub->add_option("--hidden", o->hidden, "Override the model's hidden size");
  sub->add_option("--heads", o->heads, "Override the number of attention heads");
  sub->add_option("--ffn", o->ffn, "Override the MLP width (default 4 x hidden when --hidden is given)");
  sub->add_option("--seq-len", o->seq_len, "Override the sequence length (longest slice + context measured)");
  sub->add_option("--vocab", o->vocab, "Override the vocabulary size");
  sub->add_option("--micro-batch", o->micro_batches, "Micro-batch sizes to measure (default: the scenario's)")
      ->delimiter(',');
  sub->add_option("--grain", o->grain, "Slice-length grid step in tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--context-steps", o->context_steps,
                  "Context grid: steps of seq_len / N for (l, c); 0 = none (default 8, with --quick 4)")
      ->check(CLI::Range(0, 1000))
      ->each([o](const std::string&) { o->context_steps_given = true; });
  sub->add_flag("--quick", o->quick,
                "Fewer samples per point, about two lengths per octave, 4 context steps, a link sweep to 4M and a "
                "time budget (--budget, 100 s)");
  sub->add_option("--budget", o->budget_s,
                  "Seconds the compute benchmarks may take: the longest measured length is halved until the "
                  "estimate fits (default 100 with --quick, none otherwise)")
      ->check(finite_range(0, 1e7));
  sub->add_option("--clock", o->clock,
                  "CPU backends: cpu = thread CPU time (robust on a shared machine; a quiet machine's times), wall = "
                  "steady clock (what validate's measured run sees, load included)")
      ->capture_default_str();
  sub->add_flag("--accept-poor-fit", o->accept_poor_fit,
                "Write the profile even when a quality gate fails, with the failures in its provenance");
  sub->add_flag("--cold", o->cold, "Cold cache: flush 256 MiB before every sample (default: hot)");
  sub->add_option("--tp", o->tp, "Tensor-parallel degree of the GEMM shapes")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_option("--analytic", o->analytic,
                  "Write the analytic profile of a cluster preset (public peak specs, nothing measured) and exit");
  sub->add_option("--device-preset", o->device_preset, "GPU peak specs to record (default: from the GPU's name)");
  sub->add_flag("--no-links", o->no_links, "Skip the link benchmarks");
  sub->add_option("--link-ranks", o->link_ranks, "Ranks of the link benchmark job")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  sub->add_option("--link-class", o->link_class, "What the link job's ranks span: intra (one node) | inter")
      ->capture_default_str();
  sub->add_option("--launcher", o->launcher, "MPI launcher for the link job")->capture_default_str();
  sub->add_option("-b,--minbytes", o->min_bytes, "Link sweep: smallest size (nccl-tests -b)")->capture_default_str();
  sub->add_option("-e,--maxbytes", o->max_bytes, "Link sweep: largest size (nccl-tests -e; default 32M, --quick 4M)");
  sub->add_option("-f,--stepfactor", o->step_factor, "Link sweep: size factor (nccl-tests -f)")->capture_default_str();
  sub->add_option("-n,--iters", o->iters, "Link sweep: timed operations per size (nccl-tests -n)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sub->add_option("-w,--warmup_iters", o->warmup, "Link sweep: warm-up operations per size (nccl-tests -w)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  sub->add_flag("--no-progress", o->no_progress, "No progress lines on stderr");
  return {sub, [o] { return run(*o); }};
}

}  // namespace pipescope::cli
