// `pipescope calibrate --backend cpu-f64|cpu-f32|cuda-bf16|cuda-f16 --out FILE [SCENARIO] [shape flags] [links]`
// Times the layer / embedding / head / Adam / GEMM kernels of the scenario's model shape on this machine (calib/),
// runs the link benchmarks as an MPI job (pipescope-linkbench, nccl-tests flags -b -e -f -n -w), fits them and
// writes a device profile that `simulate --profile FILE` (or `calibration: FILE` in a scenario) reads. What is
// measured: calib/calibrate_request.h; the programs it starts: sim/launch.h.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "calib/calibrate.h"
#include "calib/calibrate_request.h"
#include "calib/gates.h"
#include "cli/commands.h"
#include "cli/fork_run.h"
#include "cli/validators.h"
#include "core/model/backends.h"
#include "core/model/profile.h"
#include "core/model/scenario.h"
#include "core/util/atomic_file.h"

namespace pipescope::cli {
namespace {

bool measures(const BackendInfo& b) { return b.device != BackendDevice::None; }

int write_out(DeviceProfile p, const std::string& out) {
  p.source = out;
  calib::write_profile_file(p, out);
  std::printf("%s", calib::fit_report(p).c_str());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

// The CUDA work runs in programs of its own (calib/cuda_check_main.cc, calib/cuda_main.cc), so that this one loads
// no CUDA library. Their exit code, when not 0, is calibrate's (they have printed the reason): 1 bad options,
// 3 no usable GPU, 5 refused by a quality gate; a crash is an internal error.
int run_cuda_program(const std::string& program, const std::string& backend, const std::vector<std::string>& args) {
  return run_sibling(program, args, "--backend " + backend + ": this pipescope was built without CUDA");
}

// The link benchmarks as an MPI job; their JSON goes to `results`.
void run_link_job(const calib::CalibrateRequest& c, const std::string& results) {
  const std::vector<std::string> args = calib::linkbench_args(c, results);
  const std::string exe = sibling_exe("pipescope-linkbench");
  if (access(exe.c_str(), X_OK) != 0) throw InputError(exe + ": not an executable (build pipescope-linkbench)");
  const int rc =
      launch_mpi(c.launcher, c.link_ranks, exe, args,
                 "calibrate: link benchmarks, " + std::to_string(c.link_ranks) + " ranks (" + c.launcher + ")\n");
  if (rc != 0)  // its flags were checked above: a launcher or rank that failed is the environment's (exit 3)
    throw EnvironmentError("the link benchmark job failed (exit " + std::to_string(rc) +
                           "); see its messages above, or pass --no-links");
}

int run(const calib::CalibrateRequest& c) {
  if (c.out.empty()) throw InputError("--out: required (the profile file to write)");
  check_output_paths({{"--out", c.out}});  // before minutes of measuring
  if (!c.analytic.empty())
    return write_out(calib::analytic_profile(c.analytic, "pipescope calibrate --analytic " + c.analytic), c.out);
  const Scenario s = c.scenario.empty() ? default_scenario() : load_scenario(c.scenario);
  check_output_paths({{"--out", c.out}});  // again, now that the inputs are read: --out may not overwrite one
  calib::CalibrateOptions o = calib::calibrate_options(c, s, calib::process_command_line());
  const bool cuda = backend_on(c.backend, BackendDevice::Cuda);
  // Before the link benchmarks: is there a GPU that runs the backend (3 otherwise)? pipescope-cuda-check links
  // cudart alone, so that this refusal stays small and fast.
  if (cuda)
    if (const int rc = run_cuda_program("pipescope-cuda-check", c.backend, {c.backend})) return rc;
  const TempDir dir("pipescope-calibrate");
  if (!c.no_links) {
    o.link_results = dir.path + "/links.json";
    run_link_job(c, o.link_results);
  }
  std::fprintf(stderr, "calibrate: compute benchmarks on %s, h=%d heads=%d ffn=%d vocab=%d, l up to %d\n",
               c.backend.c_str(), o.compute.shape.layer.hidden, o.compute.shape.layer.heads, o.compute.shape.layer.ffn,
               o.compute.shape.vocab, o.compute.shape.max_seq);
  if (cuda) {  // the compute benchmarks and fits in pipescope-calibrate-cuda; the profile comes back through `dir`
    if (const int rc = run_cuda_program("pipescope-calibrate-cuda", c.backend, calib::write_gpu_request(o, dir.path)))
      return rc;
    return write_out(calib::read_gpu_result(dir.path), c.out);
  }
  try {
    return write_out(calib::calibrate(o), c.out);
  } catch (const calib::CalibrationRefused& e) {
    std::fprintf(stderr, "error: %s\nno profile written (--accept-poor-fit writes it with the failures recorded)\n",
                 e.what());
    return kExitPoorFit;
  }
}

}  // namespace

Command add_calibrate(CLI::App& app) {
  auto o = std::make_shared<calib::CalibrateRequest>();
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
