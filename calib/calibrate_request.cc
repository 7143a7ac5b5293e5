#include "calib/calibrate_request.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "calib/driver.h"
#include "calib/options_json.h"
#include "core/model/backends.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"

namespace pipescope::calib {
namespace {

int positive_override(int v, int scenario_value, const char* flag) {
  if (v == -1) return scenario_value;
  if (v < 1) throw std::invalid_argument(std::string(flag) + ": must be >= 1, got " + std::to_string(v));
  return v;
}

bool measures(const BackendInfo& b) { return b.device != BackendDevice::None; }

// The model shape to measure: the scenario's, with the request's overrides (ffn follows a given hidden size, 4h).
kernels::ModelShape request_shape(const CalibrateRequest& r, const Scenario& s) {
  kernels::ModelShape sh;
  sh.layer.hidden = positive_override(r.hidden, s.model.hidden, "--hidden");
  sh.layer.heads = positive_override(r.heads, s.model.heads, "--heads");
  sh.layer.ffn = positive_override(r.ffn, r.hidden != -1 ? 4 * sh.layer.hidden : s.model.ffn_hidden, "--ffn");
  sh.vocab = positive_override(r.vocab, s.model.vocab, "--vocab");
  sh.max_seq = positive_override(r.seq_len, s.model.seq_len, "--seq-len");
  return sh;
}

// Test hook (calib/README.md): noise on every compute reading, to show that the gates refuse it.
double injected_noise() {
  const char* noise = std::getenv("PIPESCOPE_CALIB_INJECT_NOISE");
  if (!noise || !*noise) return 0;
  char* end = nullptr;
  const double v = std::strtod(noise, &end);
  if (end == noise || *end || !(v >= 0))
    throw std::invalid_argument(std::string("PIPESCOPE_CALIB_INJECT_NOISE: expected a number >= 0, got '") + noise +
                                "'");
  return v;
}

void configure_compute(const CalibrateRequest& r, ComputeConfig& c) {
  if (r.grain < 1) throw std::invalid_argument("--grain: must be >= 1, got " + std::to_string(r.grain));
  if (r.context_steps < 0) throw std::invalid_argument("--context-steps: must be >= 0 (0: no context grid)");
  try {
    c.shape.validate();
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("model shape: ") + e.what());
  }
  c.grain = r.grain;
  c.context_steps = r.context_steps;
  c.tp = r.tp;
  c.policy.cold = r.cold;
  const kernels::ModelShape& sh = c.shape;
  if (r.tp < 1 || sh.layer.hidden % r.tp || sh.layer.ffn % r.tp || sh.vocab % r.tp)
    throw std::invalid_argument("--tp " + std::to_string(r.tp) + ": must divide hidden, ffn and vocab");
  c.progress = !r.no_progress;
  if (r.quick) {
    if (!r.context_steps_given) c.context_steps = std::min(c.context_steps, 4);
    c.policy = quick_policy();
    c.policy.cold = r.cold;
    c.sparse_lengths = true;
  }
}

// A CPU backend measures in host memory: a micro-batch whose tensors cannot fit there is refused before anything
// runs (links included). Per token of the largest micro-batch, about: the layer's saved activations (16 h + 2 ffn),
// its K/V cache (2 h), one head's row of attention scores over the sequence (the reference kernels materialise
// them per head), and the logits with their gradient (2 V); in the backend's value size.
void check_micro_batch_memory(const std::vector<int>& sizes, const kernels::ModelShape& sh,
                              const std::string& backend) {
  for (int b : sizes)
    if (b < 1) throw std::invalid_argument("--micro-batch: sizes must be >= 1, got " + std::to_string(b));
  if (backend.rfind("cpu-", 0) != 0 || sizes.empty()) return;
  const double value_bytes = backend == "cpu-f64" ? 8 : 4;
  const double per_token = 18.0 * sh.layer.hidden + 2.0 * sh.layer.ffn + sh.max_seq + 2.0 * sh.vocab;
  const int b = *std::max_element(sizes.begin(), sizes.end());
  const double need = static_cast<double>(b) * sh.max_seq * per_token * value_bytes;
  const double have = available_memory_bytes();
  if (have > 0 && need > have)
    throw std::invalid_argument(
        "--micro-batch " + std::to_string(b) + ": one micro-batch of " + std::to_string(b) + " x " +
        std::to_string(sh.max_seq) + " tokens needs about " + std::to_string(static_cast<long long>(need / 1e9)) +
        " GB of host memory, more than the " + std::to_string(static_cast<long long>(have / 1e9)) + " GB available");
}

// The link sweep's flags, here rather than in the job: a bad one is bad input (exit 1), not a failed job.
double sweep_size(const std::string& v, const char* flag) {
  try {
    return parse_size(v);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(flag) + ": " + e.what());
  }
}

void check_link_sweep(const std::string& min_bytes, const std::string& max_bytes, const std::string& factor) {
  const double lo = sweep_size(min_bytes, "-b"), hi = sweep_size(max_bytes, "-e");
  if (lo > hi) throw std::invalid_argument("-b " + min_bytes + ": larger than -e " + max_bytes);
  char* end = nullptr;
  const double f = std::strtod(factor.c_str(), &end);
  if (factor.empty() || *end != '\0' || !(f > 1) || !std::isfinite(f))
    throw std::invalid_argument("-f " + factor + ": the step factor must be a number > 1");
}

}  // namespace

CalibrateOptions calibrate_options(const CalibrateRequest& r, const Scenario& s, const std::string& command) {
  CalibrateOptions o;
  o.backend = r.backend;
  o.device_preset = r.device_preset;
  o.link_class = r.link_class;
  o.command = command;
  o.compute.shape = request_shape(r, s);
  configure_compute(r, o.compute);
  o.budget_s = r.budget_s >= 0 ? r.budget_s : (r.quick ? 100.0 : 0.0);
  o.accept_poor_fit = r.accept_poor_fit;
  o.clock = r.clock;
  o.timer_noise = injected_noise();
  o.micro_batches = r.micro_batches.empty() ? std::vector<int>{s.parallel.micro_batch_size} : r.micro_batches;
  check_micro_batch_memory(o.micro_batches, o.compute.shape, o.backend);
  if (r.link_class != "intra" && r.link_class != "inter") throw std::invalid_argument("--link-class: intra or inter");
  if (const BackendInfo* b = find_backend(r.backend); b == nullptr || !measures(*b))
    throw std::invalid_argument("--backend: unknown backend '" + r.backend + "' (" + backend_names(measures) + ")");
  return o;
}

std::vector<std::string> linkbench_args(const CalibrateRequest& r, const std::string& results) {
  if (r.link_ranks < 2) throw std::invalid_argument("--link-ranks: at least 2");
  const std::string max_bytes = !r.max_bytes.empty() ? r.max_bytes : (r.quick ? "4M" : "32M");
  check_link_sweep(r.min_bytes, max_bytes, r.step_factor);
  return {"-b",    r.min_bytes,
          "-e",    max_bytes,
          "-f",    r.step_factor,
          "-n",    std::to_string(r.iters),
          "-w",    std::to_string(r.warmup),
          "--out", results};
}

std::vector<std::string> write_gpu_request(const CalibrateOptions& o, const std::string& dir) {
  const std::string opts = dir + "/options.json";
  write_file_atomic(opts, options_to_json(o), "calibrate options");
  return {opts, dir + "/profile.yaml"};
}

DeviceProfile read_gpu_result(const std::string& dir) { return load_profile(dir + "/profile.yaml"); }

std::string process_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  for (char c : all) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

void write_profile_file(const DeviceProfile& p, const std::string& out) {
  std::ostringstream text;
  write_profile(p, text);
  parse_profile(text.str(), out);  // what we write must read back
  write_file_atomic(out, text.str(), "--out");
}

}  // namespace pipescope::calib
