#pragma once
// A whole run on one worker: model, data and executor set up from a checked schedule, warm-up and timed
// iterations (each started together after a barrier), then every worker's timings (and final gradients and
// parameters) gathered on worker 0. All workers call run_job with the same arguments.

#include <cstdint>
#include <string>
#include <vector>

#include "core/lower/checks.h"
#include "runtime/executor.h"
#include "runtime/model.h"
#include "runtime/transport.h"
#include "runtime/watchdog.h"

namespace pipescope::runtime {

struct JobOptions {
  std::string backend = "cpu-f64";  // runtime/model.h make_backend
  int device = 0;                   // GPU of the cuda backends (pipescope-rank: local rank modulo the GPU count)
  int warmup = 0;                   // untimed iterations first
  int iterations = 1;               // timed iterations
  kernels::AdamConfig adam;
  // Static loss scale S: the loss is multiplied by S before backward, Adam and the collected gradients divide
  // it out. 0 = the backend's default: 1024 for fp16 (whose gradients underflow at real vocabulary and batch
  // sizes otherwise), 1 for the others.
  double loss_scale = 0;
  bool collect_modules = true;  // gather the final gradients and parameters on worker 0
};

struct ModuleState {
  ModuleId id;
  std::vector<double> grads, params;  // after the last iteration (gradients before zeroing, parameters after Adam)
};

struct WorkerResult {
  int worker = 0;
  int tp_rank = 0;                         // which of the worker's tp processes (tensor parallelism)
  int ep_rank = 0;                         // its place in its expert-parallel group (its experts modules' share)
  std::vector<IterationStats> iterations;  // the timed iterations
  double loss = 0;                         // this worker's loss share in the last iteration
  std::vector<ModuleState> modules;        // when collected (layers: this TP rank's shards)
};

struct JobResult {
  std::string backend;
  int steps = 0;  // Adam steps taken (warm-up + timed)
  int tp = 1;     // tensor-parallel processes per worker
  // On process 0: every process (worker x TP rank), in process order (worker * tp + tp_rank); elsewhere empty.
  std::vector<WorkerResult> workers;
  // Loss of the last iteration: the sum of the workers' shares (the slices' losses are normalised by the
  // global batch's target count, so the sum is the global mean); TP rank 0's (the TP ranks compute the same).
  double loss() const;
};

// The synthetic batch a schedule trains on: dp replicas x (the schedule's micro-batches' sequences).
SyntheticData make_data(const LoweredSchedule& ls, const ModelConfig& mc);

JobResult run_job(const CheckedSchedule& cs, const ModelConfig& mc, Transport& tr, const JobOptions& opt,
                  Watchdog* watchdog = nullptr);
// TEST ONLY: the same without the checker's token (see Executor::UncheckedForTesting).
JobResult run_job_unchecked_for_testing(const LoweredSchedule& ls, const ModelConfig& mc, Transport& tr,
                                        const JobOptions& opt, Watchdog* watchdog = nullptr);

// Flat encodings used by the gather (and by `pipescope validate` to hand results between processes).
// Puts every process's times of each iteration on one time line (since the earliest barrier exit, on process 0's
// clock) using each iteration's t0_s; run_job calls it on the gathered results.
void align_clocks(JobResult& r);
std::vector<double> pack(const WorkerResult& w);
WorkerResult unpack(const std::vector<double>& v, int layers);
std::vector<double> pack(const JobResult& r);
JobResult unpack_job(const std::vector<double>& v, int layers);

// What the watchdog reports for op position `op` of `worker` (an op's canonical name, or a phase).
std::string describe_position(const LoweredSchedule& ls, int worker, std::int64_t op);

}  // namespace pipescope::runtime
