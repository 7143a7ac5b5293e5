// The validation runtime in one process: workers as threads over LocalTransport. Exactness of pipelined,
// sliced and data-parallel runs against the single-process unsliced reference, what happens to schedules
// the checker would reject, the watchdog, traces and result encoding. The same runs under mpirun are the
// runtime_exactness CTest entries (tests/runtime_exactness.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>

#include "core/lower/checks.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"
#include "core/util/trace_check.h"
#include "runtime/exactness.h"
#include "runtime/job.h"
#include "runtime/local_transport.h"
#include "runtime/rank_job.h"
#include "runtime/scenario_fit.h"
#include "runtime/trace.h"

namespace pipescope::runtime {
namespace {

constexpr double kTol = 1e-10;

struct LocalRun {
  JobResult result;                   // worker 0's
  std::vector<std::string> errors;    // per failing worker
  std::vector<std::string> watchdog;  // watchdog reports, one per blocked worker
};

// Runs every worker (x TP rank) of `ls` as a thread. Checked runs pass `cs`; unchecked ones only `ls`.
LocalRun run_local(const LoweredSchedule& ls, const CheckedSchedule* cs, const ModelConfig& mc, const JobOptions& opt,
                   double watchdog_s = 0) {
  LocalFabric fabric(ls.workers(), ls.groups, ls.tp);
  LocalRun out;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int proc = 0; proc < ls.workers() * ls.tp; proc++)
    threads.emplace_back([&, proc] {
      const int w = proc / ls.tp, t = proc % ls.tp;
      // Like the MPI handler: report, give the other blocked workers a grace period to report too, then end
      // the run.
      Watchdog wd(watchdog_s, [&, w](std::int64_t op, double) {
        {
          std::lock_guard<std::mutex> l(mu);
          out.watchdog.push_back("rank " + std::to_string(w) + ": blocked on " + describe_position(ls, w, op));
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(watchdog_s));
        fabric.cancel();
      });
      try {
        LocalTransport tr(fabric, w, t);
        JobResult r = cs ? run_job(*cs, mc, tr, opt, &wd) : run_job_unchecked_for_testing(ls, mc, tr, opt, &wd);
        if (proc == 0) out.result = std::move(r);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> l(mu);
          out.errors.push_back(e.what());
        }
        fabric.cancel();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

ModelConfig model_of(const Scenario& s) {
  ModelConfig mc = ModelConfig::from(s.model);
  mc.perturb = 0.1;  // every LayerNorm / bias gradient path carries signal
  return mc;
}

Exactness exactness_of(const LocalRun& run, const Prepared& p, const ModelConfig& mc, const JobOptions& opt) {
  EXPECT_TRUE(run.errors.empty()) << (run.errors.empty() ? "" : run.errors.front());
  const SyntheticData data = make_data(p.lowered, mc);
  const ReferenceResult ref = reference_run(mc, data, opt.adam, run.result.steps);
  return compare_with_reference(run.result, ref, mc);
}

struct Case {
  const char* name;
  std::string schedule;
  int dp, pp, v, m, layers;
  int slices = 1;
  std::vector<int> slice_tokens = {};
  int mbs = 1;
  int tp = 1;  // tensor parallelism: 4 heads instead of 2
  bool scatter_gather = false;
};

// gtest (and CTest's test list) print the case by name, not as bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class RuntimeExactness : public ::testing::TestWithParam<Case> {};

TEST_P(RuntimeExactness, LossAndGradientsEqualUnslicedReference) {
  const Case& c = GetParam();
  Scenario s = tiny_scenario(c.schedule, c.dp, c.pp, c.v, c.m, c.layers, 16, c.tp > 1 ? 4 : 2, 12, 29, c.slices,
                             c.slice_tokens, c.tp);
  s.schedule.scatter_gather = c.scatter_gather;
  if (c.mbs != 1) {
    ScenarioOverrides o;
    o.micro_batch_size = c.mbs;
    o.global_batch = c.m * c.mbs * c.dp;
    s = fit_scenario(s, o);
  }
  auto p = prepare_with_constant_costs(s);
  if (c.scatter_gather) {  // the program really splits its messages
    int gathers = 0;
    for (const auto& prog : p->lowered.per_worker)
      gathers += static_cast<int>(
          std::count_if(prog.begin(), prog.end(), [](const LoweredOp& l) { return l.kind == LOpKind::AllGather; }));
    EXPECT_GT(gathers, 0);
  }
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  JobOptions opt;
  const LocalRun run = run_local(p->lowered, &cs, mc, opt);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  const Exactness e = exactness_of(run, *p, mc, opt);
  std::printf("[ %s ] %s\n", c.name, format_exactness(e).c_str());
  EXPECT_TRUE(e.problems.empty());
  EXPECT_EQ(e.modules, c.layers + 2);
  EXPECT_EQ(e.copies, (c.layers + 2) * c.dp * c.tp);
  EXPECT_LE(e.loss_rel_err, kTol);
  EXPECT_LE(e.grad_rel_err, kTol) << e.grad_worst;
  EXPECT_LE(e.param_rel_err, kTol) << e.param_worst;
  EXPECT_GT(e.loss, 1.0);  // ~ln(29) for an untrained model: the loss really was computed
  // A split-backward schedule really ran I and W ops.
  const bool split = schedule_entry(s.schedule.kind).traits.split_backward;
  int iw = 0;
  for (const auto& prog : p->lowered.per_worker)
    iw += static_cast<int>(std::count_if(prog.begin(), prog.end(), [](const LoweredOp& l) {
      return l.kind == LOpKind::Compute && (l.op.kind == OpKind::BackwardInput || l.op.kind == OpKind::BackwardWeight);
    }));
  EXPECT_EQ(iw > 0, split);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, RuntimeExactness,
    ::testing::Values(Case{"gpipe_pp4", "gpipe", 1, 4, 1, 4, 4}, Case{"1f1b_pp2_dp2", "1f1b", 2, 2, 1, 4, 4},
                      Case{"interleaved_pp2_v2", "interleaved", 1, 2, 2, 4, 4},
                      Case{"interleaved_pp1_v2_local_handoff", "interleaved", 1, 1, 2, 2, 2},
                      Case{"terapipe_pp2_slices_5_3_4", "terapipe", 1, 2, 1, 2, 4, 3, {5, 3, 4}},
                      Case{"terapipe_pp2_dp2_k2_mbs2", "terapipe", 2, 2, 1, 2, 2, 2, {}, 2},
                      Case{"seq1f1b_pp2_k3", "seq1f1b", 1, 2, 1, 4, 4, 3},
                      Case{"seq1f1b_pp2_dp2_k2", "seq1f1b", 2, 2, 1, 2, 2, 2},
                      Case{"seq1f1b_i_pp2_v2_k2", "seq1f1b-i", 1, 2, 2, 4, 4, 2}, Case{"dp4", "1f1b", 4, 1, 1, 2, 2},
                      Case{"1f1b_pp4", "1f1b", 1, 4, 1, 6, 4}, Case{"1f1b_pp2_tp2", "1f1b", 1, 2, 1, 4, 4, 1, {}, 1, 2},
                      Case{"1f1b_dp2_tp2", "1f1b", 2, 1, 1, 2, 2, 1, {}, 1, 2},
                      Case{"terapipe_pp2_tp2_slices_5_3_4", "terapipe", 1, 2, 1, 2, 4, 3, {5, 3, 4}, 1, 2},
                      Case{"seq1f1b_tp4_k2", "seq1f1b", 1, 1, 1, 2, 2, 2, {}, 1, 4},
                      Case{"interleaved_pp2_v2_tp2_scatter_gather", "interleaved", 1, 2, 2, 4, 4, 1, {}, 1, 2, true},
                      Case{"seq1f1b_pp2_dp2_tp2_scatter_gather", "seq1f1b", 2, 2, 1, 2, 2, 2, {}, 1, 2, true},
                      // Split backward (I and W ops): zero-bubble schedules.
                      Case{"zb_h1_pp2", "zb-h1", 1, 2, 1, 4, 4}, Case{"zb_h1_pp4", "zb-h1", 1, 4, 1, 6, 4},
                      Case{"zb_h2_pp4", "zb-h2", 1, 4, 1, 6, 4}, Case{"zb_h1_pp2_dp2", "zb-h1", 2, 2, 1, 4, 4},
                      Case{"zb_v_pp2", "zb-v", 1, 2, 2, 4, 4}, Case{"zb_v_pp1_local_handoff", "zb-v", 1, 1, 2, 2, 2},
                      Case{"zb_h1_pp2_tp2", "zb-h1", 1, 2, 1, 4, 4, 1, {}, 1, 2},
                      Case{"zb_v_pp2_tp2_scatter_gather", "zb-v", 1, 2, 2, 4, 4, 1, {}, 1, 2, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Several steps: the loss and gradients of step 3 still match (Adam moments carried along identically).
TEST(Runtime, ThreeStepsMatchReference) {
  const Scenario s = tiny_scenario("1f1b", 2, 2, 1, 2, 2, 16, 2, 8, 23);
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  JobOptions opt;
  opt.warmup = 1;
  opt.iterations = 2;
  const LocalRun run = run_local(p->lowered, &cs, mc, opt);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  EXPECT_EQ(run.result.steps, 3);
  ASSERT_EQ(run.result.workers.size(), 4u);
  EXPECT_EQ(run.result.workers[0].iterations.size(), 2u);
  const Exactness e = exactness_of(run, *p, mc, opt);
  EXPECT_TRUE(e.ok(kTol)) << format_exactness(e);
}

// The f32 CPU backend runs the same program; its error against the f64 reference is f32 rounding.
TEST(Runtime, Float32BackendIsCloseButNotExact) {
  const Scenario s = tiny_scenario("terapipe", 1, 2, 1, 2, 2, 16, 2, 12, 29, 3);
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  JobOptions opt;
  opt.backend = "cpu-f32";
  const LocalRun run = run_local(p->lowered, &cs, mc, opt);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  const Exactness e = exactness_of(run, *p, mc, opt);
  EXPECT_LT(e.loss_rel_err, 1e-5);
  EXPECT_LT(e.grad_rel_err, 1e-3) << e.grad_worst;
  EXPECT_GT(e.grad_rel_err, kTol);  // not bit-identical to f64: the comparison is sensitive
}

// ------------------------------------------------------------ what the checker prevents
int find_op(const std::vector<LoweredOp>& prog, LOpKind kind, const std::string& text) {
  for (std::size_t i = 0; i < prog.size(); i++)
    if (prog[i].kind == kind && (text.empty() || lowered_text(prog[i]) == text)) return static_cast<int>(i);
  return -1;
}

TEST(Runtime, SwappedDependentSlicesAreRejectedByCheckerAndFailUnchecked) {
  const Scenario s = tiny_scenario("terapipe", 1, 2, 1, 2, 2, 16, 2, 12, 29, 3, {5, 3, 4});
  auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  auto& prog = bad.per_worker[0];
  const int a = find_op(prog, LOpKind::Compute, "0F0"), b = find_op(prog, LOpKind::Compute, "0F0s1");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::swap(prog[a], prog[b]);  // slice 1 needs slice 0's K/V
  EXPECT_THROW(check(bad, p->placement), CheckError);

  const ModelConfig mc = model_of(s);
  const LocalRun run = run_local(bad, nullptr, mc, JobOptions{});
  ASSERT_FALSE(run.errors.empty());
  bool named = false;
  for (const auto& e : run.errors)
    named = named || (e.find("rank 0: op 0F0s1") != std::string::npos && e.find("layer_forward") != std::string::npos);
  EXPECT_TRUE(named) << run.errors.front();
}

TEST(Runtime, RecvAfterItsConsumerIsRejectedByCheckerAndFailsUnchecked) {
  const Scenario s = tiny_scenario("gpipe", 1, 2, 1, 2, 2, 16, 2, 8, 29);
  auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  auto& prog = bad.per_worker[1];
  const int r = find_op(prog, LOpKind::Recv, "recv(0F0<-0)"), f = find_op(prog, LOpKind::Compute, "1F0");
  ASSERT_GE(r, 0);
  ASSERT_EQ(f, r + 1);
  std::swap(prog[r], prog[f]);
  EXPECT_THROW(check(bad, p->placement), CheckError);
  const LocalRun run = run_local(bad, nullptr, model_of(s), JobOptions{});
  ASSERT_FALSE(run.errors.empty());
  EXPECT_NE(run.errors.front().find("input of 1F0 is missing"), std::string::npos) << run.errors.front();
}

// A schedule mixing split and fused backwards (ZB-H1 with every adjacent I + W of rank 0 merged into a B): stage 0's
// B takes its gradient from stage 1's I; exact, with both forms present.
TEST(Runtime, MixedSplitAndFusedBackwardIsExact) {
  const Scenario s = tiny_scenario("zb-h1", 1, 2, 1, 4, 4, 16, 2, 12, 29);
  auto p = prepare_with_constant_costs(s);
  p->schedule = fuse_adjacent_iw(p->schedule);
  p->lowered = lower(p->schedule, 1, 1, *p->cost);
  int fused = 0, split = 0;
  for (const auto& ops : p->schedule.per_rank)
    for (const Op& op : ops) (op.kind == OpKind::Backward ? fused : split) += op.kind != OpKind::Forward;
  EXPECT_GT(fused, 0);
  EXPECT_GT(split, 0);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  const LocalRun run = run_local(p->lowered, &cs, mc, JobOptions{});
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  const Exactness e = exactness_of(run, *p, mc, JobOptions{});
  EXPECT_LE(e.grad_rel_err, kTol) << e.grad_worst;
  EXPECT_LE(e.loss_rel_err, kTol);
}

// W before its I: the checker rejects it; run unchecked, the executor names the op instead of computing garbage.
TEST(Runtime, WeightBackwardBeforeItsInputBackwardFailsUnchecked) {
  const Scenario s = tiny_scenario("zb-h1", 1, 2, 1, 4, 4, 16, 2, 12, 29);
  auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  auto& prog = bad.per_worker[1];
  const int i = find_op(prog, LOpKind::Compute, "1I0"), w = find_op(prog, LOpKind::Compute, "1W0");
  ASSERT_GE(i, 0);
  ASSERT_GT(w, i);
  std::swap(prog[i], prog[w]);
  EXPECT_THROW(check(bad, p->placement), CheckError);
  const LocalRun run = run_local(bad, nullptr, model_of(s), JobOptions{}, 5);
  ASSERT_FALSE(run.errors.empty());
  bool named = false;
  for (const auto& e : run.errors)
    named = named || (e.find("op 1W0") != std::string::npos &&
                      e.find("backward for weights before its backward for inputs") != std::string::npos);
  EXPECT_TRUE(named) << run.errors.front();
}

// Moving the data-parallel all-reduce before the last backward: caught by the checker, or else the
// comparison with the reference fails (the last micro-batch's gradients are not averaged).
TEST(Runtime, EarlyAllReduceIsCaughtByCheckerOrComparison) {
  const Scenario s = tiny_scenario("1f1b", 2, 1, 1, 2, 2, 16, 2, 8, 29);
  auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  for (auto& prog : bad.per_worker) {
    const int ar = find_op(prog, LOpKind::AllReduce, "");
    ASSERT_GE(ar, 1);
    ASSERT_EQ(prog[ar - 1].kind, LOpKind::Compute);
    std::swap(prog[ar - 1], prog[ar]);
  }
  bool caught = false;
  try {
    check(bad, p->placement);
  } catch (const CheckError&) {
    caught = true;
  }
  if (!caught) {
    const ModelConfig mc = model_of(s);
    JobOptions opt;
    const LocalRun run = run_local(bad, nullptr, mc, opt);
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    const Exactness e = exactness_of(run, *p, mc, opt);
    std::printf("early all-reduce accepted by the checker; comparison: %s\n", format_exactness(e).c_str());
    EXPECT_GT(e.grad_rel_err, 1e-3);
  }
}

TEST(Runtime, WatchdogReportsTheBlockedOpInsteadOfHanging) {
  const Scenario s = tiny_scenario("1f1b", 1, 2, 1, 2, 2, 16, 2, 8, 29);
  auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  auto& prog = bad.per_worker[0];
  const int snd = find_op(prog, LOpKind::Send, "send(0F1->1)");
  ASSERT_GE(snd, 0);
  prog.erase(prog.begin() + snd);  // worker 1's recv(0F1<-0) never gets its message
  EXPECT_THROW(check(bad, p->placement), CheckError);
  const auto t0 = std::chrono::steady_clock::now();
  LocalRun run = run_local(bad, nullptr, model_of(s), JobOptions{}, 0.3);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 10.0);
  ASSERT_FALSE(run.errors.empty());
  std::sort(run.watchdog.begin(), run.watchdog.end());
  ASSERT_EQ(run.watchdog.size(), 2u);
  EXPECT_EQ(run.watchdog[0].rfind("rank 0: blocked on recv(1B1<-1)", 0), 0u) << run.watchdog[0];
  EXPECT_EQ(run.watchdog[1].rfind("rank 1: blocked on recv(0F1<-0)", 0), 0u) << run.watchdog[1];
}

// A timeout past int64_t nanoseconds (1e10 s, inf) overflowed the conversion and fired at once.
TEST(Runtime, WatchdogWithAHugeTimeoutDoesNotFire) {
  for (double timeout_s : {1e10, 1e300, std::numeric_limits<double>::infinity()}) {
    Watchdog wd(timeout_s, [](std::int64_t, double) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_FALSE(wd.fired()) << timeout_s;
  }
}

// ------------------------------------------------------------ unsupported programs fail up front
TEST(Runtime, RejectsTiedEmbeddingsAndTensorParallelismTheTransportLacks) {
  const Scenario s = tiny_scenario("1f1b", 1, 2, 1, 2, 2, 16, 2, 8, 29);
  auto p = prepare_with_constant_costs(s);
  const ModelConfig mc = model_of(s);
  const SyntheticData data = make_data(p->lowered, mc);
  auto be = make_backend("cpu-f64");
  LocalFabric fabric(2, p->lowered.groups);
  LocalTransport tr(fabric, 0);

  LoweredSchedule tied = p->lowered;
  tied.groups.push_back(CollGroup{CollTag::Embedding, {0, 1}});
  LoweredOp ar;
  ar.kind = LOpKind::AllReduce;
  ar.tag = CollTag::Embedding;
  ar.group = static_cast<int>(tied.groups.size() - 1);
  ar.bytes = 100;
  for (auto& prog : tied.per_worker) prog.insert(prog.end() - 1, ar);
  try {
    Executor ex(Executor::UncheckedForTesting{}, tied, 0, mc, data, *be, tr);
    FAIL() << "accepted an embedding all-reduce";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("tied_embeddings: false"), std::string::npos) << e.what();
  }
  LoweredSchedule tp = p->lowered;
  tp.tp = 2;  // a tp = 1 transport cannot run it
  EXPECT_THROW(Executor(Executor::UncheckedForTesting{}, tp, 0, mc, data, *be, tr), RuntimeError);
  // Without the GPU path or without a GPU a cuda backend is a clear error (with both it exists: see below).
  if (!built_with_nccl() || kernels::cuda_device_count() == 0) {
    EXPECT_THROW(make_backend("cuda-bf16"), RuntimeError);
  }
  EXPECT_THROW(make_backend("tpu"), RuntimeError);
  EXPECT_THROW(check_backend("tpu"), RuntimeError);
  EXPECT_NO_THROW(check_backend("null"));
  if (built_with_nccl()) {
    EXPECT_NO_THROW(check_backend("cuda-f16"));
  } else {
    EXPECT_THROW(check_backend("cuda-f16"), RuntimeError);
  }
}

// ------------------------------------------------------------ device timing seam (kernels::OpTimer)
// The CPU backend behind a timer that claims to be a device's, with a fake clock: mark k is at k seconds. The
// executor must take every compute / optimizer op's span from the timer's marks (exactly 1 s each here, since
// each such op gets two consecutive marks) and report their sum as kernel_s; on the CPU it keeps the host clock.
class FakeDeviceTimer final : public kernels::OpTimer {
 public:
  bool on_device() const override { return true; }
  void begin() override { n_ = 0; }
  int mark() override { return n_++; }
  std::vector<double> resolve() override {
    std::vector<double> s;
    for (int k = 0; k < n_; k++) s.push_back(k);
    return s;
  }

 private:
  int n_ = 0;
};

class FakeDeviceBackend final : public kernels::Backend {
 public:
  explicit FakeDeviceBackend(std::unique_ptr<kernels::Backend> be) : be_(std::move(be)) {}
  std::string name() const override { return "fake-device " + be_->name(); }
  kernels::DType dtype() const override { return be_->dtype(); }
  std::unique_ptr<kernels::Tensor> tensor(int r, int c) override { return be_->tensor(r, c); }
  std::unique_ptr<kernels::Params> params(kernels::ModuleKind k, const kernels::ModelShape& s) override {
    return be_->params(k, s);
  }
  std::unique_ptr<kernels::KVCache> kv_cache(const kernels::LayerShape& s, int b, int n) override {
    return be_->kv_cache(s, b, n);
  }
  std::unique_ptr<kernels::Record> record() override { return be_->record(); }
  void layer_forward(const kernels::Params& p, const kernels::Tensor& x, const kernels::Slice& sl, kernels::KVCache& kv,
                     kernels::Record& r, kernels::Tensor& y) override {
    be_->layer_forward(p, x, sl, kv, r, y);
  }
  void layer_backward(kernels::Params& p, const kernels::Record& r, kernels::KVCache& kv, const kernels::Tensor& dy,
                      kernels::Tensor& dx) override {
    be_->layer_backward(p, r, kv, dy, dx);
  }
  void layer_backward_input(const kernels::Params& p, kernels::Record& r, kernels::KVCache& kv,
                            const kernels::Tensor& dy, kernels::Tensor& dx) override {
    be_->layer_backward_input(p, r, kv, dy, dx);
  }
  void layer_backward_weight(kernels::Params& p, kernels::Record& r) override { be_->layer_backward_weight(p, r); }
  void embedding_forward(const kernels::Params& e, const std::vector<std::int32_t>& t, const kernels::Slice& sl,
                         kernels::Tensor& x) override {
    be_->embedding_forward(e, t, sl, x);
  }
  void embedding_backward(kernels::Params& e, const std::vector<std::int32_t>& t, const kernels::Slice& sl,
                          const kernels::Tensor& dx) override {
    be_->embedding_backward(e, t, sl, dx);
  }
  void head_forward(const kernels::Params& h, const kernels::Tensor& x, const std::vector<std::int32_t>& t,
                    const kernels::Slice& sl, double norm, double scale, kernels::Record& r) override {
    be_->head_forward(h, x, t, sl, norm, scale, r);
  }
  double head_loss(const kernels::Record& r) override { return be_->head_loss(r); }
  void head_backward(kernels::Params& h, const kernels::Record& r, kernels::Tensor& dx) override {
    be_->head_backward(h, r, dx);
  }
  void head_backward_input(const kernels::Params& h, kernels::Record& r, kernels::Tensor& dx) override {
    be_->head_backward_input(h, r, dx);
  }
  void head_backward_weight(kernels::Params& h, kernels::Record& r) override { be_->head_backward_weight(h, r); }
  void adam_step(kernels::Params& p, const kernels::AdamConfig& c, int step) override { be_->adam_step(p, c, step); }
  void synchronize() override { synchronized++; }
  void* stream() override { return nullptr; }
  std::unique_ptr<kernels::OpTimer> op_timer() override { return std::make_unique<FakeDeviceTimer>(); }
  int synchronized = 0;

 private:
  std::unique_ptr<kernels::Backend> be_;
};

TEST(Runtime, DeviceBackendsTimeComputeOpsWithTheirOpTimer) {
  const Scenario s = tiny_scenario("terapipe", 1, 1, 1, 2, 2, 16, 2, 12, 29, 1, {5, 3, 4});
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  const SyntheticData data = make_data(p->lowered, mc);
  LocalFabric fabric(1, p->lowered.groups);
  LocalTransport tr(fabric, 0);
  for (const bool device : {true, false}) {
    std::unique_ptr<kernels::Backend> be = kernels::make_cpu_backend(kernels::DType::kF64);
    FakeDeviceBackend* fake = nullptr;
    if (device) {
      be = std::make_unique<FakeDeviceBackend>(std::move(be));
      fake = static_cast<FakeDeviceBackend*>(be.get());
    }
    Executor ex(cs, 0, mc, data, *be, tr);
    const auto& prog = p->lowered.per_worker[0];
    const IterationStats st = ex.run_iteration(1, Clock::now());
    int timed = 0;
    for (std::size_t i = 0; i < prog.size(); i++) {
      if (prog[i].kind != LOpKind::Compute && prog[i].kind != LOpKind::Optimizer) continue;
      timed++;
      const double span = st.ops[i].end - st.ops[i].start;
      if (device)
        EXPECT_NEAR(span, 1.0, 1e-12) << lowered_text(prog[i]);
      else
        EXPECT_LT(span, 0.5) << lowered_text(prog[i]);  // the real host time of tiny kernels
    }
    ASSERT_EQ(timed, 13);  // 2 micro-batches x 3 slices, forward and backward, and the optimizer
    if (device) {
      EXPECT_NEAR(st.kernel_s, timed, 1e-12);
      EXPECT_GE(fake->synchronized, 1);  // an idle stream before the first event
      // Spans follow one another on the fake clock: op k's start is the previous timed op's end.
      EXPECT_GE(st.ops.back().start, timed - 1.0);
    } else {
      EXPECT_LT(st.kernel_s, 0.5);
    }
  }
}

// GPU tensors on a host transport would hand device pointers to memcpy: refused before anything runs, whichever
// reason applies on this machine (no GPU path, no GPU, or the host transport).
TEST(Runtime, CudaBackendNeedsADeviceTransport) {
  const Scenario s = tiny_scenario("1f1b", 1, 1, 1, 2, 2, 16, 2, 8, 29);
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  LocalFabric fabric(1, p->lowered.groups);
  LocalTransport tr(fabric, 0);
  EXPECT_FALSE(tr.device_buffers());
  JobOptions opt;
  opt.backend = "cuda-bf16";
  try {
    run_job(cs, model_of(s), tr, opt);
    FAIL() << "a cuda backend ran on the local (host) transport";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    const bool why = m.find("GPU path") != std::string::npos || m.find("on GPU 0") != std::string::npos ||
                     m.find("transport moves host memory") != std::string::npos;
    EXPECT_TRUE(why) << m;
  }
}

// Tensor-parallel programs must say what the sharded kernels do: a TP all-reduce marker after every compute op,
// covering its 2 calls per layer; with scatter/gather an all-gather after every receive.
TEST(Runtime, RejectsTensorParallelProgramsTheKernelsDoNotMatch) {
  const Scenario s = tiny_scenario("1f1b", 1, 2, 1, 2, 2, 16, 4, 8, 29, 1, {}, 2);
  auto p = prepare_with_constant_costs(s);
  const ModelConfig mc = model_of(s);
  const SyntheticData data = make_data(p->lowered, mc);
  auto be = make_backend("cpu-f64");
  LocalFabric fabric(2, p->lowered.groups, 2);
  LocalTransport tr(fabric, 0, 1);
  auto rejects = [&](const LoweredSchedule& ls, const std::string& what) {
    try {
      Executor ex(Executor::UncheckedForTesting{}, ls, 0, mc, data, *be, tr);
      ADD_FAILURE() << "accepted; expected: " << what;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const auto& prog = p->lowered.per_worker[0];
  ASSERT_EQ(prog[1].kind, LOpKind::AllReduce);
  EXPECT_EQ(prog[1].tag, CollTag::TensorParallel);
  EXPECT_EQ(prog[1].count, 2);  // one layer per stage
  Executor ok(Executor::UncheckedForTesting{}, p->lowered, 0, mc, data, *be, tr);
  EXPECT_EQ(ok.modules().at({kernels::ModuleKind::kLayer, 0})->size(),
            kernels::param_count(kernels::ModuleKind::kLayer, mc.shape) -
                (3 * 16 * 8 + 3 * 8 + 8 * 16 + 16 * 32 + 32 + 32 * 16));

  LoweredSchedule missing = p->lowered;
  for (auto& w : missing.per_worker)
    w.erase(std::remove_if(w.begin(), w.end(), [](const LoweredOp& l) { return l.tag == CollTag::TensorParallel; }),
            w.end());
  rejects(missing, "no tensor-parallel all-reduce follows it");
  LoweredSchedule few = p->lowered;
  few.per_worker[0][1].count = 1;
  rejects(few, "is less than the 2 all-reduces the layer kernels make");
  LoweredSchedule moved = p->lowered;
  moved.per_worker[0][1].op.microbatch = 1;  // the marker of another op
  rejects(moved, "must directly follow its compute op");
  // Scatter/gather: every receive is followed by the all-gather of its message.
  const LoweredSchedule sg = add_scatter_gather(p->lowered);
  Executor with_sg(Executor::UncheckedForTesting{}, sg, 0, mc, data, *be, tr);
  LoweredSchedule no_gather = sg;
  auto& w0 = no_gather.per_worker[0];
  w0.erase(std::find_if(w0.begin(), w0.end(), [](const LoweredOp& l) { return l.kind == LOpKind::AllGather; }));
  rejects(no_gather, "every receive must be followed by the all-gather of its message");
  // heads (4) not divisible by tp: the shard shape is refused with the kernels' reason.
  LoweredSchedule tp3 = p->lowered;
  tp3.tp = 3;
  LocalFabric fabric3(2, p->lowered.groups, 3);
  LocalTransport tr3(fabric3, 0, 0);
  try {
    Executor ex(Executor::UncheckedForTesting{}, tp3, 0, mc, data, *be, tr3);
    ADD_FAILURE() << "accepted tp = 3 with 4 heads";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("must be >= 1 and divide heads (4)"), std::string::npos) << e.what();
  }
}

// With tp = 2 every process holds its shard of each layer; the comparison cuts the reference the same way, so
// shards attributed to the wrong TP rank fail it.
TEST(Runtime, TensorParallelShardsAreComparedWithTheirCut) {
  const Scenario s = tiny_scenario("1f1b", 1, 2, 1, 2, 2, 16, 4, 12, 29, 1, {}, 2);
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  JobOptions opt;
  opt.backend = "null";  // timings only: the TP all-reduces are still made (2 per layer call)
  LocalRun nul = run_local(p->lowered, &cs, mc, opt);
  ASSERT_TRUE(nul.errors.empty()) << nul.errors.front();
  ASSERT_EQ(nul.result.workers.size(), 4u);
  const auto& prog = p->lowered.per_worker[0];
  const auto& it = nul.result.workers[1].iterations.at(0);
  EXPECT_EQ(nul.result.workers[1].tp_rank, 1);
  // The marker follows its compute op in the timings.
  EXPECT_EQ(prog[1].tag, CollTag::TensorParallel);
  EXPECT_DOUBLE_EQ(it.ops[1].start, it.ops[0].end);
  EXPECT_GE(it.ops[1].end, it.ops[1].start);

  opt.backend = "cpu-f64";
  LocalRun run = run_local(p->lowered, &cs, mc, opt);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  EXPECT_EQ(run.result.tp, 2);
  const Exactness e = exactness_of(run, *p, mc, opt);
  EXPECT_TRUE(e.ok(kTol)) << format_exactness(e);
  EXPECT_EQ(e.copies, 8);  // 2 workers x 2 TP ranks x (2 modules each)
  for (auto& w : run.result.workers) w.tp_rank = 1 - w.tp_rank;
  const Exactness swapped = exactness_of(run, *p, mc, opt);
  EXPECT_GT(swapped.grad_rel_err, 0.1) << format_exactness(swapped);
  EXPECT_NE(swapped.grad_worst.find("TP rank"), std::string::npos);
  run.result.workers.pop_back();  // worker 1's TP rank 1 is missing
  const Exactness partial = exactness_of(run, *p, mc, opt);
  ASSERT_FALSE(partial.problems.empty());
}

// ------------------------------------------------------------ timing, traces, encoding
TEST(Runtime, NullBackendTimesEveryOpAndWritesTraces) {
  const Scenario s = tiny_scenario("1f1b", 2, 2, 1, 4, 2, 16, 2, 8, 29);
  auto p = prepare_with_constant_costs(s);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  JobOptions opt;
  opt.backend = "null";
  opt.iterations = 2;
  const LocalRun run = run_local(p->lowered, &cs, model_of(s), opt);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  EXPECT_EQ(run.result.backend, "null");
  std::size_t events = 0;
  for (const WorkerResult& w : run.result.workers) {
    ASSERT_EQ(w.iterations.size(), 2u);
    for (const IterationStats& it : w.iterations) {
      ASSERT_EQ(it.ops.size(), p->lowered.per_worker[w.worker].size());
      double prev_end = 0;
      for (std::size_t i = 0; i < it.ops.size(); i++) {
        const OpTiming& t = it.ops[i];
        EXPECT_LE(t.start, t.end);
        EXPECT_LE(t.end, t.done + 1e-12);
        EXPECT_LE(t.done, it.end_s + 1e-12);
        if (p->lowered.per_worker[w.worker][i].kind != LOpKind::Send) {
          EXPECT_GE(t.start, prev_end);  // program order
          prev_end = t.end;
        }
      }
      EXPECT_GE(it.overhead_s, 0.0);
      EXPECT_NEAR(it.kernel_s, 0.0, 0.05);  // no compute
    }
    events += p->lowered.per_worker[w.worker].size();
  }
  std::ostringstream os;
  write_measured_trace(os, p->lowered, p->placement, run.result);
  const auto j = nlohmann::json::parse(os.str());
  std::size_t x = 0;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") {
      x++;
      const int w = e["args"]["worker"], i = e["args"]["index"];
      // The keys the simulated trace carries too (tests/test_traces.cc), so the two match op by op.
      for (const char* key :
           {"op", "kind", "worker", "pp_rank", "dp_replica", "micro_batch", "chunk", "slice", "tp_rank"})
        EXPECT_TRUE(e["args"].contains(key)) << key << " missing in " << e.dump();
      EXPECT_EQ(e["name"], lowered_op_name(p->lowered, w, static_cast<std::size_t>(i)));
      EXPECT_EQ(e["pid"], p->placement.gpu_of(w) / p->placement.gpus_per_node);
    }
  EXPECT_EQ(x, events);
  // Integer-ns clock: no overlaps on a track; every send has a flow to its receive.
  const TraceCheck tc = check_trace(os.str());
  EXPECT_TRUE(tc.problems.empty()) << tc.problems.front();
  EXPECT_GT(tc.flows, 0u);

  const std::string sim = R"({"otherData":{"iteration_s":1},"traceEvents":[
    {"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"node0"}},
    {"name":"process_sort_index","ph":"M","pid":0,"tid":0,"args":{"sort_index":0}},
    {"name":"0F0","ph":"X","pid":0,"tid":0,"ts":0,"dur":5}]})";
  const auto merged = nlohmann::json::parse(merge_traces(sim, os.str()));
  std::size_t mx = 0;
  bool sim_named = false, meas_named = false;
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "X") mx++;
    if (e["name"] == "process_name") {
      sim_named = sim_named || e["args"]["name"] == "simulated node0";
      meas_named = meas_named || (e["args"]["name"] == "measured node0" && e["pid"] == 1000);
    }
  }
  EXPECT_EQ(mx, events + 1);
  EXPECT_TRUE(sim_named);
  EXPECT_TRUE(meas_named);
  EXPECT_THROW(merge_traces("{", os.str()), RuntimeError);
}

TEST(Runtime, ResultEncodingRoundTrips) {
  JobResult r;
  r.backend = "cpu-f64";
  r.steps = 3;
  WorkerResult w;
  w.worker = 1;
  w.loss = 2.5;
  IterationStats it;
  it.ops = {{0.1, 0.2, 0.3}, {0.4, 0.5, 0.5}};
  it.end_s = 0.6;
  it.kernel_s = 0.25;
  it.comm_s = 0.125;
  it.overhead_s = 0.0625;
  w.iterations = {it};
  w.modules.push_back({{kernels::ModuleKind::kHead, 0}, {1, 2}, {3, 4}});
  w.modules.push_back({{kernels::ModuleKind::kLayer, 3}, {5}, {6}});
  w.modules.push_back({{kernels::ModuleKind::kEmbedding, 0}, {}, {}});
  r.workers = {w, w};
  r.workers[1].worker = 2;
  const JobResult b = unpack_job(pack(r), 4);
  EXPECT_EQ(b.backend, "cpu-f64");
  EXPECT_EQ(b.steps, 3);
  ASSERT_EQ(b.workers.size(), 2u);
  EXPECT_EQ(b.workers[1].worker, 2);
  EXPECT_EQ(b.workers[0].iterations[0].ops[1].end, 0.5);
  EXPECT_EQ(b.workers[0].modules[1].id, (ModuleId{kernels::ModuleKind::kLayer, 3}));
  EXPECT_EQ(b.workers[0].modules[0].params, (std::vector<double>{3, 4}));
  EXPECT_DOUBLE_EQ(b.loss(), 5.0);
  auto bad = pack(r);
  bad.pop_back();
  EXPECT_THROW(unpack_job(bad, 4), RuntimeError);
}

TEST(Runtime, ClocksAlignedOnTheEarliestBarrierExit) {
  JobResult r;
  WorkerResult a, b;
  IterationStats ia, ib;
  ia.t0_s = 100.0;  // process 0 left the barrier first
  ia.ops = {{0.0, 0.001, 0.002}};
  ia.end_s = 0.002;
  ib.t0_s = 100.004;  // 4 ms later: its times shift by 4 ms
  ib.ops = {{0.0, 0.0005, 0.0005}};
  ib.end_s = 0.0005;
  a.iterations = {ia};
  b.iterations = {ib};
  r.workers = {a, b};
  align_clocks(r);
  EXPECT_DOUBLE_EQ(r.workers[0].iterations[0].ops[0].start, 0.0);
  EXPECT_NEAR(r.workers[1].iterations[0].ops[0].start, 0.004, 1e-12);
  EXPECT_NEAR(r.workers[1].iterations[0].ops[0].done, 0.0045, 1e-12);
  EXPECT_NEAR(r.workers[1].iterations[0].end_s, 0.0045, 1e-12);
  EXPECT_DOUBLE_EQ(r.workers[1].iterations[0].t0_s, 100.0);
  const JobResult c = unpack_job(pack(r), 4);
  EXPECT_DOUBLE_EQ(c.workers[1].iterations[0].t0_s, 100.0);
}

TEST(Runtime, SyntheticDataAndStageSplit) {
  const SyntheticData d(4, 10, 13);
  EXPECT_EQ(d.tokens().size(), 40u);
  EXPECT_GT(d.loss_norm(), 20.0);
  EXPECT_LT(d.loss_norm(), 40.0);  // some targets are ignored
  const auto t = d.tokens(1, 2, 3, 6);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0], d.tokens()[13]);
  EXPECT_EQ(t[3], d.tokens()[23]);
  for (int i = 0; i < 39; i++)
    if (i % 10 != 9 && d.targets()[i] >= 0) {
      EXPECT_EQ(d.targets()[i], d.tokens()[i + 1]);
    }
  EXPECT_THROW(d.tokens(3, 2, 0, 1), RuntimeError);
  ModelConfig mc8;
  mc8.layers = 8;
  EXPECT_EQ(stage_layers(mc8, 4, 3).first, 6);
  EXPECT_EQ(stage_layers(mc8, 4, 3).count, 2);
  mc8.stage_layers = {1, 3, 3, 1};  // uneven: stage 2 holds layers 4..6
  EXPECT_EQ(stage_layers(mc8, 4, 2).first, 4);
  EXPECT_EQ(stage_layers(mc8, 4, 2).count, 3);
  EXPECT_THROW(stage_layers(mc8, 2, 0), RuntimeError);  // 4 entries for 2 stages
  ModelConfig mc6;
  mc6.layers = 6;
  EXPECT_THROW(stage_layers(mc6, 4, 0), RuntimeError);
  const SyntheticData same(4, 10, 13);
  EXPECT_EQ(same.tokens(), d.tokens());
}

// ------------------------------------------------------------ shrinking and the rank flags
TEST(Runtime, FitScenarioShrinksAndRefitsTheCluster) {
  const Scenario base = default_scenario();  // gpt3-1b, 2 x 8 A100, dp 2 x pp 4 x tp 2, tied embeddings
  ScenarioOverrides o;
  o.hidden = 64;
  o.heads = 4;
  o.layers = 4;
  o.tp = 1;
  o.pp = 2;
  const Scenario s = fit_scenario(base, o);
  EXPECT_EQ(s.model.hidden, 64);
  EXPECT_EQ(s.model.ffn_hidden, 64 * base.model.ffn_hidden / base.model.hidden);
  EXPECT_FALSE(s.model.tied_embeddings);
  EXPECT_EQ(s.cluster.total_gpus(), 4);
  EXPECT_EQ(s.cluster.nodes, 1);
  ScenarioOverrides bad = o;
  bad.pp = 3;  // 4 layers over 3 stages
  EXPECT_THROW(fit_scenario(base, bad), ScenarioError);
  ScenarioOverrides tera = o;
  tera.schedule = "terapipe";
  tera.seq_len = 12;
  tera.slice_tokens = std::vector<int>{5, 3, 4};
  const Scenario t = fit_scenario(base, tera);
  EXPECT_EQ(t.schedule.slicing, "explicit");
  EXPECT_EQ(t.schedule.seq_slices, 3);
  tera.slice_tokens = std::vector<int>{5, 3, 3};
  EXPECT_THROW(fit_scenario(base, tera), ScenarioError);
}

TEST(Runtime, RankJobFlagsRoundTrip) {
  RankJob a;
  a.scenario = "x.yaml";
  a.schedule = "terapipe";
  a.layers = 4;
  a.hidden = 32;
  a.dp = 2;
  a.slice_tokens = {5, 3, 4};
  a.backend = "cpu-f32";
  a.iterations = 2;
  a.warmup = 0;
  a.watchdog_s = 12.5;
  a.no_check = true;
  RankJob b;
  CLI::App app;
  b.add_scenario_option(app);
  b.add_shrink_options(app);
  b.add_run_options(app);
  std::vector<std::string> args = a.args();
  std::reverse(args.begin(), args.end());  // CLI11 parses a vector in reverse order
  app.parse(args);
  EXPECT_EQ(b.args(), a.args());
  EXPECT_EQ(b.scenario, "x.yaml");
  EXPECT_EQ(b.slice_tokens, a.slice_tokens);
  EXPECT_EQ(b.watchdog_s, 12.5);
  EXPECT_TRUE(b.no_check);
  EXPECT_FALSE(b.job_options().collect_modules);
  RankJob tp2;  // the default scenario has tp = 2: the runtime runs it as 2 processes per worker
  EXPECT_EQ(tp2.fitted_scenario().parallel.tp, 2);
}

}  // namespace
}  // namespace pipescope::runtime
