#pragma once
// Executes one worker's program of a checked, lowered schedule with real kernels and a real transport,
// under exactly the execution semantics of core/lower/lowering.h:
//   - Compute, Recv, AllReduce and Optimizer ops run in list order, each after the previous non-Send op;
//   - a Send is posted (non-blocking) once the previous non-Send op completed; later ops do not wait for it;
//   - a Recv completes when its message has arrived;
//   - the n-th collective call of a group is the same call on every member.
// The executor holds no schedule logic of its own: what runs, in which order, and what goes where all come
// from the LoweredSchedule. Op semantics:
//   - F(g, mb, i): stage g's layers on slice i of micro-batch mb; the input is the embedding of the slice's
//     tokens (g = 0) or the output of F(g-1, mb, i) (received, or computed on this worker); the last stage
//     runs the head and the loss (normalised by the global batch's target count).
//   - B(g, mb, i): the reverse, starting from the head's gradient (last stage) or the input gradient of stage g+1
//     (the output of its B or, split, its I: OpKeyIndex::grad_producer).
//   - Split backward (zero-bubble): I(g, mb, i) is B without parameter gradients (the kernels' backward for inputs):
//     its output, the gradient for stage g-1, is sent right after it; the records of the forward keep what W
//     needs. W(g, mb, i) then adds the parameter gradients of the stage's layers, of the head (last stage) and of
//     the embedding (stage 0: its backward is all weight gradient, from the gradient its I kept), and frees them.
//   - Send / Recv of a producer op carry its output (F: activation, B / I: gradient), MPI tag = the producer's
//     OpKeyIndex slot.
//   - AllReduce[dp]: in-place sum of every parameter gradient of the worker over the DP group, module by
//     module in a fixed order (with tp > 1: among the processes of the same TP rank). Embedding collectives
//     are rejected up front (the kernels' LM head is untied).
//   - Tensor parallelism (tp > 1): every TP rank of the worker runs this same program on its shard of each
//     layer (kernels/layer.h LayerShape::tp); embedding, head and activations are replicated. The layer
//     kernels make the TP all-reduces themselves (through Transport::tp_iallreduce_sum), so AllReduce[tp]
//     ops are markers: each must follow its compute op, and its count must cover the 2 calls per layer the
//     kernels made (checked); their time is taken out of the compute op and shown on the marker. F, B and I
//     make them (I: the input-gradient sums); W makes none and has no marker.
//   - Megatron scatter/gather (the lowering's AllGather after each Recv, schedule.scatter_gather): each TP rank
//     sends only its 1/tp chunk of the message (flat, bytes [t B/tp, (t+1) B/tp)) to the same TP rank of the
//     peer, and the AllGather rebuilds the whole tensor in the receiving worker's TP group before any use.
//   - Optimizer: one Adam step per module.
// Every op is timed with the steady clock, and the time spent inside kernels and inside the transport is
// accounted separately, so the rest is the runtime's own overhead (scheduling and bookkeeping). On a device
// backend (kernels::OpTimer::on_device, CUDA) compute and optimizer ops are timed instead by events on the
// backend's stream, read at the end of the iteration and placed on the host timeline at the iteration's first
// event (the stream is idle then); kernel_s is then the device time of those ops.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/lower/checks.h"
#include "core/lower/lowering.h"
#include "kernels/backend.h"
#include "runtime/model.h"
#include "runtime/transport.h"
#include "runtime/watchdog.h"

namespace pipescope::runtime {

using Clock = std::chrono::steady_clock;

// Times of one op of the program, in seconds since the iteration's common start: the earliest process's exit from
// the iteration's barrier, on process 0's clock (run_job aligns the processes' clocks; see align_clocks).
// Sends: [start, end] is the posting; `done` is when its completion was observed (polled between ops).
struct OpTiming {
  double start = 0, end = 0, done = 0;
};

struct IterationStats {
  std::vector<OpTiming> ops;  // per op of the worker's program
  double end_s = 0;           // last op done, outstanding sends included (since t0)
  double kernel_s = 0;        // inside backend calls
  double comm_s = 0;          // inside transport calls and waits
  double overhead_s = 0;      // the rest of [0, end_s] after the first op started: scheduling, bookkeeping
  double loss = 0;            // sum of this worker's slice losses (last stage only)
  double t0_s = 0;            // this process's barrier exit (its t0) on process 0's clock, seconds
};

struct ExecutorOptions {
  kernels::AdamConfig adam;  // its grad_scale must undo loss_scale (runtime/job.cc sets both)
  double loss_scale = 1.0;   // passed to head_forward: gradients are those of loss_scale * loss
};

class Executor {
 public:
  // The executor keeps references to everything passed in; they must outlive it.
  Executor(const CheckedSchedule& cs, int worker, const ModelConfig& model, const SyntheticData& data,
           kernels::Backend& backend, Transport& transport, Watchdog* watchdog = nullptr, ExecutorOptions opt = {});

  // TEST ONLY: runs a schedule the static checker has not accepted (to show what the checker prevents:
  // a run that fails, deadlocks into the watchdog, or computes wrong gradients).
  struct UncheckedForTesting {};
  Executor(UncheckedForTesting, const LoweredSchedule& ls, int worker, const ModelConfig& model,
           const SyntheticData& data, kernels::Backend& backend, Transport& transport, Watchdog* watchdog = nullptr,
           ExecutorOptions opt = {});

  ~Executor();

  // One training iteration (Adam step `step` >= 1): zeroes the gradients, runs the program, waits for the
  // outstanding sends. Throws RuntimeError naming the worker and the op on any failure.
  IterationStats run_iteration(int step, Clock::time_point t0);

  int worker() const { return worker_; }
  // The modules this worker holds (its stages' layers, the embedding on stage 0, the head on the last stage);
  // with tp > 1 this process's shard of each layer.
  const std::map<ModuleId, std::unique_ptr<kernels::Params>>& modules() const { return modules_; }
  std::size_t program_size() const { return prog_.size(); }
  // This worker's place in its expert-parallel group (MoE layers; 0 without one): its experts modules hold experts
  // [ep_rank E / ep, (ep_rank + 1) E / ep) of each MoE layer.
  int ep_rank() const { return ep_rank_; }

 private:
  struct State;
  void validate_program() const;
  void run_op(std::size_t i, IterationStats& st, Clock::time_point t0);
  void forward(const Op& op, IterationStats& st);
  using Records = std::vector<std::unique_ptr<kernels::Record>>;
  void backward(const Op& op, IterationStats& st);         // B
  void backward_input(const Op& op, IterationStats& st);   // I
  void backward_weight(const Op& op, IterationStats& st);  // W
  Records& forward_records(const Op& op);                  // the records of op's forward, checked to be there
  // B or I: the head's backward (last stage) or the next stage's input gradient, back through the stage's layers;
  // returns the gradient w.r.t. the stage's input. split: the kernels' input halves, the records stay for W.
  std::shared_ptr<kernels::Tensor> backward_through(const Op& op, Records& recs, bool split, IterationStats& st);
  void embedding_backward(const Op& op, const kernels::Tensor& dx, IterationStats& st);
  void put_output(const Op& op, std::shared_ptr<kernels::Tensor> t);  // for a Send or a consumer on this worker
  void send(const LoweredOp& l, std::size_t i);
  void recv(const LoweredOp& l, OpTiming& t_op, Clock::time_point t0, IterationStats& st);
  void allreduce(const LoweredOp& l, IterationStats& st);
  // The distributed optimizer: gradient reduce-scatter, this replica's shard [begin, end) of an n-element module,
  // parameter all-gather (executor.cc says how they run on the host transports).
  void reduce_scatter(const LoweredOp& l, IterationStats& st);
  // Elements [begin, end) of n that shard `shard` of `shards` owns (the optimizer step and the parameter gather).
  static std::pair<std::size_t, std::size_t> shard_range(std::size_t n, int shard, int shards);
  void param_gather(const LoweredOp& l, IterationStats& st);
  void allgather(const LoweredOp& l, IterationStats& st);
  void poll_sends(Clock::time_point t0, std::vector<OpTiming>& ops);
  void wait(Request& r, const char* what);
  void tp_all_reduce(void* data, std::size_t count, kernels::DType dtype);
  int layer_tp_calls(const Op& op) const;  // TP all-reduces the layer kernels make for a compute op: 2 per layer
  // MoE layers (runtime/README.md "Mixture of experts"): the expert-parallel group, the kernels' all-to-alls.
  void find_ep_group();
  int stage_moe_layers(int stage) const;
  int layer_ep_calls(const Op& op) const;            // token all-to-alls of a compute op: 2 per MoE layer (F, B)
  kernels::ModelShape layer_shard(int layer) const;  // shard_ with `layer`'s shape and this run's ep
  void ep_all_to_all(kernels::EpExchange what, const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                     const std::vector<std::size_t>& recv_bytes);
  void expert_allreduce(const LoweredOp& l, IterationStats& st);  // the experts' gradients over the ExpertData group
  std::shared_ptr<kernels::Tensor> take_input(const Op& consumer, const OpKey& producer);
  std::string op_name(std::size_t i) const;
  std::string who() const;  // "rank W" (MPI rank = worker); with tp > 1 "rank R (worker W, TP rank t)"

  const LoweredSchedule& ls_;
  const std::vector<LoweredOp>& prog_;
  int worker_, replica_, rank_, tp_rank_;
  const ModelConfig& model_;
  const SyntheticData& data_;
  kernels::Backend& be_;
  Transport& tr_;
  Watchdog* wd_;
  ExecutorOptions opt_;
  int replica_seqs_ = 0;
  bool scatter_gather_ = false;     // p2p messages are split over the TP ranks (an AllGather follows each Recv)
  int shard_of_ = -1, shards_ = 1;  // after a reduce-scatter: this replica's shard of the optimizer step
  kernels::ModelShape shard_;       // the model's shape with layer.tp = the schedule's tp
  // The kernels' TP all-reduces during the current compute op: calls and seconds.
  int tp_calls_ = 0;
  double tp_s_ = 0;
  // The expert-parallel group (-1: none), its size and this worker's place; the all-to-alls of the current compute
  // op (token exchanges counted, all timed).
  int ep_group_ = -1, ep_size_ = 1, ep_rank_ = 0;
  int ep_calls_ = 0;
  double ep_s_ = 0;
  std::map<ModuleId, std::unique_ptr<kernels::Params>> modules_;
  std::unique_ptr<kernels::OpTimer> device_timer_;  // set for device backends only
  std::unique_ptr<State> st_;
};

}  // namespace pipescope::runtime
