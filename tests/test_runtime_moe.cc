// Mixture-of-experts layers in the kernels and the validation runtime: the top-k tie rule, the MoE layer's
// gradients against finite differences, and expert-parallel runs (workers as threads over LocalTransport) whose
// loss, gradients and parameters equal the single-process reference that holds every expert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/lower/checks.h"
#include "core/model/scenario.h"
#include "kernels/reference.h"
#include "runtime/exactness.h"
#include "runtime/job.h"
#include "runtime/local_transport.h"
#include "runtime/scenario_fit.h"

namespace pipescope::runtime {
namespace {

using kernels::LayerShape;
using kernels::ModelShape;
using kernels::ModuleKind;
using Mat = kernels::ref::Mat<double>;

TEST(KernelsMoe, TopKTakesTheLargestLogitsAndTheLowerIndexOnTies) {
  const double a[] = {1.0, 3.0, 3.0, 2.0};
  EXPECT_EQ(kernels::top_k_experts(a, 4, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(kernels::top_k_experts(a, 4, 3), (std::vector<int>{1, 2, 3}));
  const double tie[] = {0.5, 0.5, 0.5, 0.5};
  EXPECT_EQ(kernels::top_k_experts(tie, 4, 2), (std::vector<int>{0, 1}));
  const double last[] = {-1.0, 0.0, -2.0, 7.0};
  EXPECT_EQ(kernels::top_k_experts(last, 4, 1), (std::vector<int>{3}));
  EXPECT_THROW(kernels::top_k_experts(a, 4, 5), kernels::KernelError);
}

ModelShape moe_shape(int shared_ffn) {
  ModelShape m;
  m.layer = LayerShape{16, 2, shared_ffn};
  m.layer.experts = 4;
  m.layer.top_k = 2;
  m.layer.expert_ffn = 8;
  m.vocab = 11;
  m.max_seq = 6;
  return m;
}

// sum(y .* w) of one MoE layer's forward on [b * l, h] inputs.
double weighted_output(const ModelShape& m, const std::vector<double>& P, const std::vector<double>& X, const Mat& x,
                       const Mat& w, const kernels::Slice& sl) {
  kernels::ref::KVCache<double> kv(m.layer, sl.batch, m.max_seq);
  kernels::ref::LayerRecord<double> rec;
  Mat y;
  kernels::ref::moe_layer_forward(m.layer, P.data(), X.data(), x, sl, kv, rec, y, {});
  return y.cwiseProduct(w).sum();
}

class MoeGradient : public ::testing::TestWithParam<int> {};

// Every parameter of the layer, router and experts included, and the input: central differences of a weighted sum
// of the outputs. The step is far below the gaps between routed and unrouted logits, so routing does not change.
TEST_P(MoeGradient, MatchesFiniteDifferences) {
  const ModelShape m = moe_shape(GetParam());
  const kernels::Slice sl{2, 0, 5};
  std::vector<double> P = kernels::init_params(ModuleKind::kLayer, m, 3, 0.3, 0.1);
  std::vector<double> X = kernels::init_params(ModuleKind::kExperts, m, 4, 0.3, 0.1);
  Mat x = Mat::Random(sl.rows(), 16), w = Mat::Random(sl.rows(), 16);

  kernels::ref::KVCache<double> kv(m.layer, sl.batch, m.max_seq);
  kernels::ref::LayerRecord<double> rec;
  Mat y, dx;
  kernels::ref::moe_layer_forward(m.layer, P.data(), X.data(), x, sl, kv, rec, y, {});
  std::vector<double> G(P.size(), 0.0), GX(X.size(), 0.0);
  kernels::ref::moe_layer_backward(m.layer, P.data(), X.data(), rec, kv, w, G.data(), GX.data(), dx, {});

  const double eps = 1e-5;
  auto check = [&](std::vector<double>& v, const std::vector<double>& g, const char* what) {
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < v.size(); i++) {
      const double keep = v[i];
      v[i] = keep + eps;
      const double up = weighted_output(m, P, X, x, w, sl);
      v[i] = keep - eps;
      const double down = weighted_output(m, P, X, x, w, sl);
      v[i] = keep;
      worst = std::max(worst, std::abs((up - down) / (2 * eps) - g[i]));
      scale = std::max(scale, std::abs(g[i]));
    }
    EXPECT_GT(scale, 0) << what;
    EXPECT_LT(worst / scale, 1e-6) << what;
  };
  check(P, G, "layer (attention, shared experts, router)");
  check(X, GX, "routed experts");
  std::vector<double> xv(x.data(), x.data() + x.size()), dxv(dx.data(), dx.data() + dx.size());
  double worst = 0;
  for (std::size_t i = 0; i < xv.size(); i++) {
    const double keep = x.data()[i];
    x.data()[i] = keep + eps;
    const double up = weighted_output(m, P, X, x, w, sl);
    x.data()[i] = keep - eps;
    const double down = weighted_output(m, P, X, x, w, sl);
    x.data()[i] = keep;
    worst = std::max(worst, std::abs((up - down) / (2 * eps) - dxv[i]));
  }
  EXPECT_LT(worst / dx.cwiseAbs().maxCoeff(), 1e-6);
  // The router's gradient comes through the gates only: it must not be zero.
  const kernels::LayerLayout L = kernels::LayerLayout::of(m.layer);
  EXPECT_GT(std::abs(*std::max_element(G.begin() + static_cast<long>(L.w_router), G.end(),
                                       [](double a, double b) { return std::abs(a) < std::abs(b); })),
            0);
}

INSTANTIATE_TEST_SUITE_P(SharedExperts, MoeGradient, ::testing::Values(0, 12));

TEST(KernelsMoe, ExpertParallelLayerRefusesToRunWithoutItsExchange) {
  ModelShape m = moe_shape(0);
  const std::vector<double> P = kernels::init_params(ModuleKind::kLayer, m, 3);
  const std::vector<double> all = kernels::init_params(ModuleKind::kExperts, m, 4);
  m.layer.ep = 2;
  const std::vector<double> X = kernels::expert_shard(m, 1, all);
  ASSERT_EQ(X.size(), all.size() / 2);
  EXPECT_TRUE(std::equal(X.begin(), X.end(), all.begin() + static_cast<long>(X.size())));
  const kernels::Slice sl{1, 0, 4};
  kernels::ref::KVCache<double> kv(m.layer, 1, m.max_seq);
  kernels::ref::LayerRecord<double> rec;
  Mat y;
  EXPECT_THROW(
      kernels::ref::moe_layer_forward(m.layer, P.data(), X.data(), Mat(Mat::Random(4, 16)), sl, kv, rec, y, {}),
      kernels::KernelError);
}

struct LocalRun {
  JobResult result;
  std::vector<std::string> errors;
};

LocalRun run_local(const LoweredSchedule& ls, const CheckedSchedule* cs, const ModelConfig& mc, const JobOptions& opt) {
  LocalFabric fabric(ls.workers(), ls.groups, ls.tp);
  LocalRun out;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int w = 0; w < ls.workers(); w++)
    threads.emplace_back([&, w] {
      try {
        LocalTransport tr(fabric, w);
        JobResult r = cs ? run_job(*cs, mc, tr, opt) : run_job_unchecked_for_testing(ls, mc, tr, opt);
        if (w == 0) out.result = std::move(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> l(mu);
        out.errors.push_back(e.what());
        fabric.cancel();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

struct MoeCase {
  const char* name;
  std::string schedule;
  int dp, pp, ep, m, layers;
  int slices = 1;
  int shared_ffn = 0, dense_layers = 0, freq = 1;
};
void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

Scenario moe_scenario(const MoeCase& c) {
  Scenario base = default_scenario();
  base.name = "tiny-moe";
  base.source = "<tiny-moe>";
  base.model.moe_shared_ffn_hidden = c.shared_ffn;
  base.model.moe_dense_layers = c.dense_layers;
  base.model.moe_layer_freq = c.freq;
  base.schedule.scatter_gather = false;
  ScenarioOverrides o;
  o.schedule = c.schedule;
  o.layers = c.layers;
  o.hidden = 16;
  o.ffn = 64;
  o.heads = 2;
  o.seq_len = 8;
  o.vocab = 23;
  o.dp = c.dp;
  o.pp = c.pp;
  o.tp = 1;
  o.v = 1;
  o.micro_batch_size = 1;
  o.global_batch = c.m * c.dp;
  o.slices = c.slices;
  o.experts = 4;
  o.top_k = 2;
  o.expert_ffn = 24;
  o.ep = c.ep;
  return fit_scenario(base, o);
}

ModelConfig model_of(const Scenario& s) {
  ModelConfig mc = ModelConfig::from(s.model);
  mc.perturb = 0.1;
  return mc;
}

int count_ops(const LoweredSchedule& ls, LOpKind kind, CollTag tag) {
  int n = 0;
  for (const auto& prog : ls.per_worker)
    for (const LoweredOp& l : prog) n += l.kind == kind && l.tag == tag ? 1 : 0;
  return n;
}

class RuntimeMoe : public ::testing::TestWithParam<MoeCase> {};

TEST_P(RuntimeMoe, ExpertParallelRunEqualsTheReferenceWithAllExperts) {
  const MoeCase c = GetParam();
  const Scenario s = moe_scenario(c);
  const auto p = prepare_with_constant_costs(s);
  ASSERT_GT(count_ops(p->lowered, LOpKind::AllToAll, CollTag::ExpertParallel), 0);
  const CheckedSchedule cs = check(p->lowered, p->placement);
  const ModelConfig mc = model_of(s);
  JobOptions opt;
  opt.iterations = 2;  // two Adam steps: the second starts from parameters the first moved
  const LocalRun run = run_local(p->lowered, &cs, mc, opt);
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  const SyntheticData data = make_data(p->lowered, mc);
  const Exactness e = compare_with_reference(run.result, reference_run(mc, data, opt.adam, run.result.steps), mc);
  EXPECT_TRUE(e.ok(1e-10)) << format_exactness(e);
  std::printf("%s\n", format_exactness(e).c_str());
  int experts = 0;
  for (const auto& w : run.result.workers)
    for (const auto& m : w.modules) experts += m.id.kind == ModuleKind::kExperts ? 1 : 0;
  EXPECT_GT(experts, 0);
  // The all-to-all markers carry the time of the exchanges their compute op made.
  const auto& prog = p->lowered.per_worker[0];
  const auto& ops = run.result.workers[0].iterations.back().ops;
  for (std::size_t i = 0; i < prog.size(); i++)
    if (prog[i].kind == LOpKind::AllToAll) {
      EXPECT_GT(ops[i].end, ops[i].start) << i;
      EXPECT_DOUBLE_EQ(ops[i].start, ops[i - 1].end) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RuntimeMoe,
                         ::testing::Values(MoeCase{"gpipe_pp2_dp2_ep2", "gpipe", 2, 2, 2, 2, 2},
                                           MoeCase{"onef1b_pp2_dp2_ep2_shared", "1f1b", 2, 2, 2, 4, 4, 1, 32},
                                           MoeCase{"onef1b_dp4_ep2_edp2", "1f1b", 4, 1, 2, 2, 2},
                                           MoeCase{"onef1b_dp4_ep4_dense_first", "1f1b", 4, 1, 4, 2, 3, 1, 0, 1, 1},
                                           MoeCase{"terapipe_pp2_dp2_ep2_slices", "terapipe", 2, 2, 2, 2, 2, 2},
                                           MoeCase{"onef1b_pp2_ep1", "1f1b", 1, 2, 1, 3, 2}),
                         [](const ::testing::TestParamInfo<MoeCase>& i) { return std::string(i.param.name); });

// The experts' gradients must be summed over the expert-data-parallel group: without that reduction (forced through
// the unchecked path) the comparison fails.
TEST(RuntimeMoeBroken, MissingExpertDataReductionIsCaught) {
  const Scenario s = moe_scenario({"dp4_ep2", "1f1b", 4, 1, 2, 2, 2});
  const auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  ASSERT_GT(count_ops(bad, LOpKind::AllReduce, CollTag::ExpertData), 0);
  for (auto& prog : bad.per_worker)
    prog.erase(
        std::remove_if(prog.begin(), prog.end(),
                       [](const LoweredOp& l) { return l.kind == LOpKind::AllReduce && l.tag == CollTag::ExpertData; }),
        prog.end());
  const ModelConfig mc = model_of(s);
  const LocalRun run = run_local(bad, nullptr, mc, JobOptions{});
  ASSERT_TRUE(run.errors.empty()) << run.errors.front();
  const Exactness e = compare_with_reference(run.result, reference_run(mc, make_data(bad, mc), {}, 1), mc);
  EXPECT_FALSE(e.ok(1e-10)) << format_exactness(e);
  EXPECT_NE(e.grad_worst.find("experts"), std::string::npos) << e.grad_worst;
}

TEST(RuntimeMoeBroken, ComputeOpWithoutItsAllToAllIsRefused) {
  const Scenario s = moe_scenario({"pp2_dp2_ep2", "1f1b", 2, 2, 2, 2, 2});
  const auto p = prepare_with_constant_costs(s);
  LoweredSchedule bad = p->lowered;
  auto& prog = bad.per_worker[0];
  prog.erase(std::find_if(prog.begin(), prog.end(), [](const LoweredOp& l) { return l.kind == LOpKind::AllToAll; }));
  const LocalRun run = run_local(bad, nullptr, model_of(s), JobOptions{});
  ASSERT_FALSE(run.errors.empty());
  EXPECT_NE(run.errors.front().find("all-to-all"), std::string::npos) << run.errors.front();
}

TEST(RuntimeMoeFit, RefusesWhatTheMoeRuntimeDoesNotRun) {
  MoeCase c{"x", "1f1b", 2, 1, 2, 2, 2};
  Scenario base = moe_scenario(c);
  ScenarioOverrides o;
  o.tp = 2;
  o.heads = 2;
  try {
    fit_scenario(base, o);
    ADD_FAILURE() << "tp 2 with experts was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp"), std::string::npos) << e.what();
  }
  base.training.distributed_optimizer = true;
  try {
    fit_scenario(base, {});
    ADD_FAILURE() << "the distributed optimizer with experts was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("training.distributed_optimizer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipescope::runtime
