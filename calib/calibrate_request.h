#pragma once
// `pipescope calibrate`'s command line as values (CalibrateRequest) and what it asks for: the options of one
// calibration (calibrate.h) on a scenario's model shape, the link benchmark job's flags, the request handed to
// pipescope-calibrate-cuda and the profile file written at the end. The programs themselves are started by the
// command (sim/launch.h). Bad values are std::invalid_argument naming the flag.

#include <string>
#include <vector>

#include "calib/calibrate.h"
#include "core/model/config.h"
#include "core/model/profile.h"

namespace pipescope::calib {

struct CalibrateRequest {
  std::string scenario, backend = "cpu-f64", out, device_preset, analytic;
  int hidden = -1, heads = -1, ffn = -1, seq_len = -1, vocab = -1;  // -1: the scenario's
  std::vector<int> micro_batches;                                   // empty: the scenario's micro-batch size
  int grain = 8, context_steps = 8, tp = 1;
  bool context_steps_given = false;  // --context-steps on the command line (--quick lowers only the default)
  bool cold = false, quick = false, no_links = false, no_progress = false, accept_poor_fit = false;
  double budget_s = -1;  // -1: 100 s with --quick, none otherwise
  std::string clock = "cpu";
  // The link benchmark job (pipescope-linkbench, nccl-tests flags).
  int link_ranks = 2;
  std::string launcher = "mpirun --oversubscribe", link_class = "intra";
  std::string min_bytes = "8", max_bytes = "", step_factor = "2";  // max: 32M, with --quick 4M
  int iters = 20, warmup = 5;
};

// The calibration of `r` on `s`'s model shape (the request's overrides first); `command` goes into the profile's
// provenance. The environment variable PIPESCOPE_CALIB_INJECT_NOISE (a test hook, calib/README.md) adds noise to
// every compute reading.
CalibrateOptions calibrate_options(const CalibrateRequest& r, const Scenario& s, const std::string& command);
// pipescope-linkbench's flags for `r` (after --link-ranks and the sizes are checked), writing its JSON to `results`.
std::vector<std::string> linkbench_args(const CalibrateRequest& r, const std::string& results);
// pipescope-calibrate-cuda's arguments for `o`: its options as JSON in `dir`, and the profile file it writes there.
std::vector<std::string> write_gpu_request(const CalibrateOptions& o, const std::string& dir);
DeviceProfile read_gpu_result(const std::string& dir);  // that profile, once the program succeeded

// This process's command line (/proc/self/cmdline, arguments joined by spaces), for the provenance.
std::string process_command_line();
// `p` written to `out` atomically (an interrupted run leaves no partial profile and an older one intact), after
// checking that the text reads back.
void write_profile_file(const DeviceProfile& p, const std::string& out);

}  // namespace pipescope::calib
