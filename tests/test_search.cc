// `pipescope search`: the search's top configurations against exhaustive simulation of the same space
// on three small scenarios, stage 2's reused DAGs against fresh estimates, the distributed optimizer dimension,
// identical outputs for -j 1, -j 2 and mpirun -n 2, --emit reproduced by `simulate`, and
// bad input (no layout, a memory limit nothing fits, unknown schedule) exiting 1 with a clear message.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gpt3_search.h"
#include "core/ir/schedule_csv.h"
#include "core/lower/cost_model.h"
#include "core/lower/grad_sync.h"
#include "core/lower/lowering.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/plan/search.h"
#include "core/plan/search_estimate.h"
#include "sim/run_scenario.h"
#include "sim/search_run.h"
#include "tests/cli_run.h"

namespace pipescope {
namespace {

using test::kExe;
using test::Result;
using test::slurp;
Result run(const std::string& args) { return test::run(args, "search_run"); }

// Small enough to simulate every candidate: one or two nodes, short sequences.
const char* kScenarios[] = {
    "name: one-node\n"
    "model: {preset: gpt3-1b, seq_len: 512}\n"
    "cluster: {preset: dgx-a100, nodes: 1}\n"
    "parallel: {dp: 2, pp: 2, tp: 2, micro_batch_size: 1, global_batch: 16}\n"
    "schedule: {kind: 1f1b}\n",
    "name: two-nodes\n"
    "model: {preset: gpt3-1b, seq_len: 1024}\n"
    "cluster: {preset: dgx-a100, nodes: 2}\n"
    "parallel: {dp: 2, pp: 4, tp: 2, micro_batch_size: 1, global_batch: 32}\n"
    "schedule: {kind: gpipe}\n",
    "name: v100-cube\n"
    "model: {preset: megatron-1.7b, seq_len: 512}\n"
    "cluster: {preset: aws-p3.16xlarge, nodes: 1}\n"
    "parallel: {dp: 1, pp: 4, tp: 2, micro_batch_size: 1, global_batch: 16}\n"
    "schedule: {kind: 1f1b}\n",
};

SearchSpace small_space() {
  SearchSpace sp;
  sp.schedules = {"gpipe", "1f1b", "interleaved", "zb-h1"};
  sp.micro_batch_sizes = {1, 2};
  sp.v = {2};
  sp.recompute = {Recompute::None};
  return sp;
}

TEST(Search, TopMatchesExhaustiveSimulation) {
#ifdef PIPESCOPE_SANITIZED
  const std::vector<const char*> texts = {kScenarios[0]};  // each space's exhaustive simulation is slow there
#else
  const std::vector<const char*> texts(std::begin(kScenarios), std::end(kScenarios));
#endif
  for (const char* text : texts) {
    const Scenario base = parse_scenario(text, "<test>");
    SCOPED_TRACE(base.name);
    const SearchSpace sp = small_space();
    // Exhaustive: every configuration that passes stage 1, simulated.
    const Stage1 s1 = enumerate_candidates(base, sp);
    ASSERT_GE(s1.survivors.size(), 5u);
    std::vector<Scenario> all;
    for (const auto& c : s1.survivors) all.push_back(c.scenario);
    const auto out = sim::run_scenarios(all, {}, 2);
    std::vector<std::pair<double, std::string>> truth;
    for (std::size_t i = 0; i < out.size(); i++)
      if (out[i].ok()) truth.push_back({-out[i].result.tokens_per_s, s1.survivors[i].label});
    std::sort(truth.begin(), truth.end());
    ASSERT_GE(truth.size(), 5u);
    // The search: estimate all, simulate the best 5.
    sim::SearchOptions o;
    o.space = sp;
    o.keep = 5;
    o.jobs = 2;
    o.as_written = false;
    o.tie_band = 0;  // throughput order alone, as the exhaustive truth is ordered
    const sim::SearchResult r = sim::run_search(base, o);
    ASSERT_EQ(r.rows.size(), 5u);
    EXPECT_EQ(r.rows[0].label, truth[0].second);
    std::set<std::string> top;
    for (int i = 0; i < 5; i++) top.insert(truth[static_cast<std::size_t>(i)].second);
    int overlap = 0;
    for (const auto& row : r.rows) overlap += top.count(row.label) ? 1 : 0;
    EXPECT_GE(overlap, 4);
  }
}

// Mixture of experts: ep is a dimension of the space (divisors of the experts that the folding takes), each
// candidate's stage-2 estimate carries its all-to-alls, and the search's best is the exhaustive simulation's best.
TEST(Search, ExpertParallelDegrees) {
  const Scenario base = parse_scenario(
      "name: moe\n"
      "model: {preset: qwen3-30b-a3b, seq_len: 1024}\n"
      "cluster: {preset: dgx-h100, nodes: 2}\n"
      "parallel: {dp: 8, pp: 2, tp: 1, ep: 8, micro_batch_size: 1, global_batch: 32}\n"
      "training: {dtype: bf16, flash_attention: true, distributed_optimizer: true}\n",
      "<test>");
  SearchSpace sp;
  sp.schedules = {"1f1b"};
  sp.tp = {1, 2};
  sp.pp = {2};
  sp.micro_batch_sizes = {1};
  sp.recompute = {Recompute::Full};
  sp.distributed_optimizer = {true};
  const Stage1 s1 = enumerate_candidates(base, sp);
  std::set<int> eps, etps;
  for (const Candidate& c : s1.survivors) {
    eps.insert(c.scenario.parallel.ep);
    etps.insert(c.scenario.parallel.etp);
    EXPECT_NE(c.label.find(" ep" + std::to_string(c.scenario.parallel.ep)), std::string::npos) << c.label;
    EXPECT_EQ(c.label.find(" etp") != std::string::npos, c.scenario.parallel.etp > 1) << c.label;
    EXPECT_TRUE(c.scenario.parallel.etp == 1 || c.scenario.parallel.etp == c.scenario.parallel.tp) << c.label;
    if (c.scenario.parallel.tp > 1) {
      EXPECT_TRUE(c.scenario.parallel.sequence_parallel) << c.label;
    }
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4, 8}));  // 16 does not divide the 8 GPUs of a stage
  EXPECT_EQ(etps, (std::set<int>{1, 2}));       // 1 and Megatron-Core's default etp = tp
  std::vector<Scenario> all;
  for (const auto& c : s1.survivors) all.push_back(c.scenario);
  const auto out = sim::run_scenarios(all, {}, 2);
  std::string best;
  double best_s = 1e300;
  Stage2Estimator e;
  for (std::size_t i = 0; i < out.size(); i++) {
    ASSERT_TRUE(out[i].ok()) << s1.survivors[i].label;
    const double est = e.estimate(all[i]), simulated = out[i].result.iteration_s;
    EXPECT_NEAR(est, simulated, 0.05 * simulated) << s1.survivors[i].label;  // a one-replica estimate
    if (simulated < best_s) best_s = simulated, best = s1.survivors[i].label;
  }
  sim::SearchOptions o;
  o.space = sp;
  o.keep = 3;
  o.jobs = 2;
  o.as_written = false;
  o.tie_band = 0;  // the fastest first, as the exhaustive best is found
  const sim::SearchResult r = sim::run_search(base, o);
  ASSERT_FALSE(r.rows.empty());
  EXPECT_EQ(r.rows[0].label, best);
  // --ep on a dense model is refused.
  SearchSpace dense = sp;
  dense.ep = {2};
  EXPECT_THROW(enumerate_candidates(parse_scenario(kScenarios[0], "<test>"), dense), std::invalid_argument);
  dense.ep.clear(), dense.etp = {2};
  EXPECT_THROW(enumerate_candidates(parse_scenario(kScenarios[0], "<test>"), dense), std::invalid_argument);
}

// Stage 2 re-times a DAG built for an earlier candidate of the same structure: every value must be the one a fresh
// estimate gives, whatever the gradient-sync options, p2p mode and collective model.
TEST(Search, ReusedStructuresGiveTheFreshEstimate) {
  const std::string variants[] = {
      "",
      "training: {distributed_optimizer: true, overlap_grad_reduce: true, overlap_param_gather: true, "
      "grad_bucket_MB: 8}\n",
      "training: {overlap_grad_reduce: true}\nsim: {p2p: blocking, collectives: ring}\n",
      // The Seq1F1B scenarios' setting: the backward's TP all-reduces partly hidden (core/cost/tp_overlap.h).
      "training: {async_tp_allreduce: true}\nsim: {p2p: blocking}\n",
  };
  for (const char* text : kScenarios)
    for (const std::string& extra : variants) {
      const Scenario base = parse_scenario(std::string(text) + extra, "<test>");
      SCOPED_TRACE(base.name + " " + extra);
      SearchSpace sp = small_space();
      sp.recompute = {Recompute::None, Recompute::Full};
      Stage1 s1 = enumerate_candidates(base, sp);
      ASSERT_GE(s1.survivors.size(), 5u);
      order_by_structure(s1.survivors);
      Stage2Estimator e;
      for (const Candidate& c : s1.survivors)
        EXPECT_EQ(e.estimate(c.scenario), estimate_iteration_s(c.scenario)) << c.label;
      EXPECT_LT(e.structures_built(), s1.survivors.size());
    }
}

// The same over every candidate of two whole searches: the default scenario's and GPT-3 175B's on 1,024 GPUs (the
// benchmark's, with v 2 and 4; most candidates re-timed without lowering).
TEST(Search, EveryCandidateOfWholeSearchesIsReTimedExactly) {
  std::vector<Scenario> bases = {load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml")};
#ifndef PIPESCOPE_SANITIZED
  // Under the sanitizers the 175B search's large lowerings took most of a minute of CI; release runs it.
  bases.push_back(parse_scenario(kGpt3SearchYaml, "<test>"));
#endif
  // The default space with two chunk counts (every divisor adds structures of the same kind, not new checks).
  SearchSpace space;
  space.v = {2, 4};
  for (const Scenario& base : bases) {
    SCOPED_TRACE(base.name);
    Stage1 s1 = enumerate_candidates(base, space);
    ASSERT_GE(s1.survivors.size(), 20u);
    order_by_structure(s1.survivors);
    Stage2Estimator e;
    for (const Candidate& c : s1.survivors)
      EXPECT_EQ(e.estimate(c.scenario), estimate_iteration_s(c.scenario)) << c.label;
    EXPECT_LT(e.structures_built(), s1.survivors.size() * 2 / 3);
  }
}

// lower_one_replica puts the data-parallel collectives where the passes, called one by one in lower()'s order, put
// them.
TEST(Search, OneReplicaLoweringIsThePassesInOrder) {
  const std::string variants[] = {
      "", "training: {distributed_optimizer: true, overlap_grad_reduce: true, overlap_param_gather: true}\n",
      "training: {overlap_grad_reduce: true, grad_bucket_MB: 4}\n"};
  int compared = 0;
  for (const char* text : kScenarios)
    for (const std::string& extra : variants) {
      const Scenario base = parse_scenario(std::string(text) + extra, "<test>");
      for (const Candidate& c : enumerate_candidates(base, small_space()).survivors) {
        const Scenario& s = c.scenario;
        if (s.parallel.dp == 1) continue;
        SCOPED_TRACE(c.label + " " + extra);
        const auto cost = make_cost_model(s);
        const Schedule sch = make_schedule(s);
        const GradSyncOptions o = grad_sync_options(s.training);
        LoweredSchedule want = add_p2p(lower_compute(sch, 1, s.parallel.tp, *cost), *cost);
        if (s.schedule.scatter_gather) want = add_scatter_gather(want);
        want = add_tp_allreduce(want, *cost);
        add_dp_grad_sync(want, *cost, o);
        want = add_optimizer(add_grad_sync(want, *cost, o), *cost, o);
        add_param_gather(want, *cost, o);
        const LoweredSchedule got = lower_one_replica(s, sch, *cost);
        ASSERT_EQ(got.groups.size(), want.groups.size());
        for (std::size_t g = 0; g < got.groups.size(); g++) {
          EXPECT_EQ(got.groups[g].tag, want.groups[g].tag);
          EXPECT_EQ(got.groups[g].workers, want.groups[g].workers);
        }
        ASSERT_EQ(got.per_worker.size(), want.per_worker.size());
        for (std::size_t w = 0; w < got.per_worker.size(); w++) {
          ASSERT_EQ(got.per_worker[w].size(), want.per_worker[w].size());
          for (std::size_t i = 0; i < got.per_worker[w].size(); i++) {
            const LoweredOp &x = got.per_worker[w][i], &y = want.per_worker[w][i];
            EXPECT_TRUE(x.kind == y.kind && x.tag == y.tag && x.op == y.op && x.peer == y.peer && x.group == y.group &&
                        x.count == y.count && x.seconds == y.seconds && x.bytes == y.bytes && x.async == y.async &&
                        x.lead_s == y.lead_s)
                << "worker " << w << " op " << i << ": " << lowered_text(x) << " vs " << lowered_text(y);
          }
        }
        compared++;
      }
    }
  EXPECT_GT(compared, 10);
}

// The distributed optimizer is a dimension where dp > 1 only; it shards the optimizer state (less memory) and
// replaces the all-reduce by a reduce-scatter and a parameter all-gather (another estimate).
TEST(Search, DistributedOptimizerWhereDataParallel) {
  const Scenario base = parse_scenario(kScenarios[1], "<test>");
  SearchSpace sp = small_space();
  sp.schedules = {"1f1b"};
  const Stage1 s1 = enumerate_candidates(base, sp);
  std::map<std::string, const Candidate*> by_label;
  for (const Candidate& c : s1.survivors) by_label[c.label] = &c;
  int pairs = 0;
  for (const Candidate& c : s1.survivors) {
    const bool dist = c.scenario.training.distributed_optimizer;
    EXPECT_EQ(dist, c.label.size() > 3 && c.label.compare(c.label.size() - 3, 3, " do") == 0) << c.label;
    if (c.scenario.parallel.dp == 1) {
      EXPECT_FALSE(dist) << c.label;
    }
    if (!dist || !by_label.count(c.label.substr(0, c.label.size() - 3))) continue;
    const Candidate& plain = *by_label[c.label.substr(0, c.label.size() - 3)];
    EXPECT_LT(c.peak_bytes, plain.peak_bytes) << c.label;
    EXPECT_NE(estimate_iteration_s(c.scenario), estimate_iteration_s(plain.scenario)) << c.label;
    pairs++;
  }
  EXPECT_GT(pairs, 0);
}

// A scenario whose schedule is a file: its layouts of generated kinds are candidates (the file names one
// layout's schedule and goes with that kind), the file itself is the scenario as written.
TEST(Search, ScheduleFileScenarioSearchesGeneratedKinds) {
  const Scenario written = parse_scenario(kScenarios[0], "<test>");
  const std::string csv = ::testing::TempDir() + "/search_file_" + std::to_string(getpid()) + ".csv";
  std::ofstream(csv) << schedule_to_csv(make_schedule(written));
  std::string text = kScenarios[0];
  text.replace(text.find("schedule: {kind: 1f1b}"), 22, "schedule: {kind: file, file: " + csv + "}");
  const Scenario base = parse_scenario(text, "<test>");
  SearchSpace sp = small_space();
  sp.schedules = {"1f1b"};
  const Stage1 s1 = enumerate_candidates(base, sp);
  ASSERT_FALSE(s1.survivors.empty());
  for (const Candidate& c : s1.survivors) EXPECT_EQ(c.scenario.schedule.file, "") << c.label;
  EXPECT_EQ(s1.survivors.size(), enumerate_candidates(written, sp).survivors.size());
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/search_" + name + "_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(Search, IdenticalForEveryJobCountAndEmitReproduces) {
  const std::string yaml = write("jobs", kScenarios[0]);
  const std::string dir = ::testing::TempDir() + "/search_" + std::to_string(getpid());
  const std::string args = " --schedules 1f1b,interleaved,zb-v,seq1f1b,terapipe -K 6 -q ";
  Result a = run("search " + yaml + args + "-j 1 --json " + dir + "a.json --csv " + dir + "a.csv");
  ASSERT_EQ(a.rc, 0) << a.err;
  Result b = run("search " + yaml + args + "-j 2 --json " + dir + "b.json --csv " + dir + "b.csv --svg " + dir +
                 "b.svg --emit " + dir + "best.yaml");
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(slurp(dir + "a.json"), slurp(dir + "b.json"));
  EXPECT_EQ(slurp(dir + "a.csv"), slurp(dir + "b.csv"));
  EXPECT_NE(slurp(dir + "b.svg").find("<svg"), std::string::npos);
  EXPECT_NE(a.out.find("rejected: "), std::string::npos);
  const auto j = nlohmann::json::parse(slurp(dir + "a.json"));
  ASSERT_FALSE(j["results"].empty());
  const auto& best = j["results"][0];
  EXPECT_LE(best["peak_memory_GB"].get<double>(), j["memory_limit_GB"].get<double>());
  // The best row beats (or equals) the scenario as written.
  for (const auto& row : j["results"])
    if (row["as_written"].get<bool>()) {
      EXPECT_GE(best["tokens_per_s"].get<double>(), row["tokens_per_s"].get<double>());
    }
  // `simulate` of the emitted scenario runs exactly the best configuration.
  Result s = run("simulate " + dir + "best.yaml --json " + dir + "best.json");
  ASSERT_EQ(s.rc, 0) << s.err;
  const auto sj = nlohmann::json::parse(slurp(dir + "best.json"));
  EXPECT_EQ(sj["iteration_s"].get<double>(), best["iteration_s"].get<double>());
}

// --distributed-optimizer narrows the dimension: "on" alone gives every dp > 1 row the distributed optimizer.
TEST(Search, DistributedOptimizerOption) {
  const std::string yaml = write("dopt", kScenarios[0]);
  for (const char* value : {"on", "off"}) {
    Result r = run("search " + yaml + " -q --schedules 1f1b -K 4 --distributed-optimizer " + value);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::istringstream lines(r.out);
    int rows = 0;
    for (std::string l; std::getline(lines, l);) {
      if (l.find(" dp") == std::string::npos || l.find("rc-") == std::string::npos ||
          l.find("as written") != std::string::npos)
        continue;
      const bool dp1 = l.find(" dp1 ") != std::string::npos;
      EXPECT_EQ(l.find(" do ") != std::string::npos, std::string(value) == "on" && !dp1) << l;
      rows++;
    }
    EXPECT_GE(rows, 4) << r.out;
  }
}

// `mpirun -n 2 pipescope search`: the ranks share stages 2 and 3 through pipescope-mpi-relay; rank 0's outputs
// are byte-identical to a local run's.
TEST(Search, MpiRanksGiveTheLocalResult) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const std::string yaml = write("mpi", kScenarios[1]);
  const std::string dir = ::testing::TempDir() + "/search_mpi_" + std::to_string(getpid());
  const std::string args = " --schedules 1f1b,zb-h1,interleaved -K 5 -q --json ";
  Result local = run("search " + yaml + args + dir + "b.json -j 1");
  ASSERT_EQ(local.rc, 0) << local.err;
  const std::string root = geteuid() == 0 ? " --allow-run-as-root" : "";
  const std::string cmd = "mpirun" + root + " --oversubscribe -n 2 " + kExe + " search " + yaml + args + dir +
                          "a.json > " + dir + "a.out 2> " + dir + "a.err";
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(dir + "a.err");
  EXPECT_EQ(slurp(dir + "a.out"), local.out);
  EXPECT_EQ(slurp(dir + "a.json"), slurp(dir + "b.json"));
}

// Ctrl-C: the search stops starting work, prints what it found so far and exits 130.
TEST(Search, InterruptPrintsTheBestSoFar) {
  const std::string yaml = write("int", kScenarios[1]);
  const std::string out = ::testing::TempDir() + "/search_int_" + std::to_string(getpid()) + ".out";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen((out + ".err").c_str(), "w", stderr);
    execl(kExe.c_str(), kExe.c_str(), "search", yaml.c_str(), "-K", "400", "-j", "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Interrupted once stage 3 (hundreds of simulations, far longer than stages 1 and 2) has begun.
  for (int i = 0; i < 600 && slurp(out + ".err").find("stage 2:") == std::string::npos; i++) usleep(100000);
  usleep(300000);
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(WEXITSTATUS(st), 130);
  EXPECT_NE(slurp(out).find("interrupted (Ctrl-C): the best found so far"), std::string::npos) << slurp(out);
}

// The scenario as written with an uneven layout is its own row (labelled with its layers) and --emit keeps the
// layers; a profile the scenario names relative to itself is emitted absolute, so the emitted file loads anywhere.
TEST(Search, EmitKeepsTheAsWrittenLayoutAndPaths) {
  const std::string dir = ::testing::TempDir() + "/search_emit_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/sub && cp " + std::string(PIPESCOPE_SOURCE_DIR) +
                         "/calib/profiles/dgx-a100.analytic.yaml " + dir + "/sub/prof.yaml")
                            .c_str()),
            0);
  std::ofstream(dir + "/sub/uneven.yaml") << "model: {preset: gpt3-1b, layers: 16, vocab: 128000}\n"
                                             "cluster: {preset: dgx-a100, nodes: 1}\n"
                                             "parallel: {dp: 1, pp: 4, tp: 2, global_batch: 16, "
                                             "stage_layers: [5, 5, 5, 1]}\n"
                                             "schedule: {kind: 1f1b}\n"
                                             "sim: {profile: prof.yaml}\n";
  Result r = run("search " + dir + "/sub/uneven.yaml -q -K 1 --pp 4 --tp 2 --schedules 1f1b --emit " + dir +
                 "/best.yaml --json -");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // --json -: stdout is the JSON alone, the table on stderr
  EXPECT_EQ(j["results"][0]["configuration"], "1f1b dp1 pp4 tp2 v1 b1 layers 5,5,5,1 rc-none");
  EXPECT_NE(r.err.find("layers 5,5,5,1"), std::string::npos) << r.err;
  const std::string emitted = slurp(dir + "/best.yaml");
  EXPECT_NE(emitted.find("stage_layers: [5, 5, 5, 1]"), std::string::npos) << emitted;
  const Scenario e = load_scenario(dir + "/best.yaml");
  EXPECT_EQ(e.sim.profile, dir + "/sub/prof.yaml");
  EXPECT_EQ(e.parallel.stage_layers, (std::vector<int>{5, 5, 5, 1}));
  const Result sim = test::run("simulate " + dir + "/best.yaml --json -", "search_emit");
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim.out)["iteration_s"].get<double>(),
                   j["results"][0]["iteration_s"].get<double>());
}

// A scenario whose own layout does not fit its cluster still gives its model and cluster to the search: its layout
// is only the starting point (exit 1 before, "dp*pp*tp = 1 ... but the cluster has 16").
TEST(Search, ScenarioLayoutThatDoesNotFitIsOnlyANote) {
  const std::string yaml = write("nolayout",
                                 "model: {preset: gpt3-1b, seq_len: 512}\n"
                                 "cluster: {preset: dgx-a100, nodes: 1}\n"
                                 "parallel: {global_batch: 16}\n");
  const Result r = run("search " + yaml + " -q -K 1 --schedules 1f1b --tp 1,2");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("note: the scenario as written is not a layout of its cluster: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   1  1f1b dp"), std::string::npos) << r.out;
  EXPECT_EQ(run("search " + yaml + " -q -K 1 --schedules 1f1b --tp 3").rc, 1);  // bad flags stay errors
}

TEST(Search, BadInputExitsOneWithAReason) {
  const std::string yaml = write("bad", kScenarios[0]);
  Result r = run("search " + yaml + " -q --max-memory-GB 0.5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("fits in 0.50 GB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("memory: the worst rank's peak exceeds the --max-memory-GB limit"), std::string::npos) << r.err;
  r = run("search " + yaml + " -q --pp 3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("none of the 0 configurations"), std::string::npos) << r.err;
  r = run("search " + yaml + " -q --tp 3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--tp"), std::string::npos) << r.err;
  r = run("search " + yaml + " -q --distributed-optimizer maybe");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--distributed-optimizer"), std::string::npos) << r.err;
  r = run("search " + yaml + " -q --max-memory-GB nan");  // NaN passed CLI11's PositiveNumber
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--max-memory-GB"), std::string::npos) << r.err;
  // A context-parallel degree below 1; a headroom that leaves nothing of the device: refused naming the flag.
  r = run("search " + yaml + " -q --cp 0");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--cp"), std::string::npos) << r.err;
  r = run("search " + yaml + " -q --headroom-GB 1000");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--headroom-GB"), std::string::npos) << r.err;
  r = run("search " + yaml + " -q --schedules 1f1b,nosuch");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("unknown schedule 'nosuch'"), std::string::npos) << r.err;
  // A cluster no layout can use: a global batch of 1 sequence with 24 layers cut over... every GPU must hold a
  // pipeline stage or a replica, and 8 GPUs cannot share one 2-layer model.
  const std::string tiny = write("tiny",
                                 "name: tiny\n"
                                 "model: {preset: gpt3-1b, layers: 2, seq_len: 512}\n"
                                 "cluster: {preset: dgx-a100, nodes: 1}\n"
                                 "parallel: {dp: 1, pp: 2, tp: 4, micro_batch_size: 1, global_batch: 1}\n"
                                 "schedule: {kind: 1f1b}\n");
  r = run("search " + tiny + " -q --tp 1,2");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.err.find("none of the"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pipescope

namespace pipescope {
namespace {

// What the space holds: a framework's schedules only, every chunk count dividing a rank's layers, the three
// recomputation modes; the headroom taken off the device's memory (not off --max-memory-GB).
TEST(Search, FrameworksChunksRecomputationAndHeadroom) {
  const Scenario base = parse_scenario(kScenarios[1], "<test>");  // gpt3-1b: 24 layers
  SearchSpace sp;
  sp.one_framework = true;
  sp.framework = Framework::Megatron;
  std::set<std::string> kinds;
  std::map<int, std::set<int>> chunks;  // pp -> interleaved v values
  std::set<Recompute> modes;
  for_each_point(base, sp, [&](const SearchPoint& p) {
    kinds.insert(p.kind->name);
    modes.insert(p.recompute);
    if (p.kind->kind == ScheduleKind::Interleaved) chunks[p.pp].insert(p.v);
  });
  EXPECT_EQ(kinds, (std::set<std::string>{"1f1b", "interleaved"}));
  EXPECT_EQ(modes, (std::set<Recompute>{Recompute::None, Recompute::Selective, Recompute::Full}));
  EXPECT_EQ(chunks[2], (std::set<int>{2, 3, 4, 6, 12}));  // 12 layers per rank
  EXPECT_EQ(chunks[8], (std::set<int>{3}));               // 3 layers per rank
  sp.schedules = {"zb-v"};
  EXPECT_THROW(for_each_point(base, sp, [](const SearchPoint&) {}), std::invalid_argument);
  sp = SearchSpace{};
  EXPECT_DOUBLE_EQ(search_memory_limit(base, sp), base.cluster.device.memory_bytes - kDefaultHeadroomBytes);
  sp.max_memory_bytes = 40e9;
  EXPECT_DOUBLE_EQ(search_memory_limit(base, sp), 40e9);
  sp = SearchSpace{};
  sp.headroom_bytes = base.cluster.device.memory_bytes;
  EXPECT_THROW(search_memory_limit(base, sp), std::invalid_argument);
}

// Rows within the tie band of the best throughput come first, least peak memory first, marked; each row says why.
TEST(Search, TiesOrderedByMemoryAndWhy) {
  const Scenario base = parse_scenario(kScenarios[0], "<test>");
  sim::SearchOptions o;
  o.space = small_space();
  o.keep = 6;
  o.jobs = 2;
  o.as_written = false;
  o.tie_band = 0.5;  // wide: several rows tie
  const sim::SearchResult r = sim::run_search(base, o);
  EXPECT_DOUBLE_EQ(r.tie_band, 0.5);
  double best = 0;
  for (const auto& row : r.rows) best = std::max(best, row.result.tokens_per_s);
  std::size_t tied = 0;
  while (tied < r.rows.size() && r.rows[tied].tied) tied++;
  ASSERT_GE(tied, 2u);
  for (std::size_t i = 0; i < r.rows.size(); i++) {
    EXPECT_EQ(r.rows[i].tied, i < tied);
    EXPECT_EQ(r.rows[i].tied, r.rows[i].result.tokens_per_s >= best * 0.5) << r.rows[i].label;
    EXPECT_FALSE(sim::why_text(r.rows[i].result).empty());
    if (i > 0 && i < tied) {
      EXPECT_LE(r.rows[i - 1].result.peak_memory_bytes, r.rows[i].result.peak_memory_bytes) << r.rows[i].label;
    }
  }
  // The default band: the device's smallest development-set error (A100: Megatron's Table 1).
  std::string basis;
  EXPECT_GT(sim::search_tie_band(base.cluster.device, basis), 0.0);
  EXPECT_NE(basis.find("A100"), std::string::npos) << basis;
  // why: the largest parts beside forward and backward compute, largest first.
  sim::RunResult x;
  x.breakdown.forward_s = 5, x.breakdown.backward_s = 3, x.breakdown.tp_comm_s = 1, x.breakdown.bubble_s = 0.5;
  x.breakdown.dp_comm_s = 0.05;  // 0.5%: left out
  EXPECT_EQ(sim::why_text(x), "TP 10.5%, bubble 5.2%");
  x.breakdown.tp_comm_s = 0, x.breakdown.bubble_s = 0;
  EXPECT_EQ(sim::why_text(x), "compute");
}

}  // namespace
}  // namespace pipescope

namespace pipescope {
namespace {

// Context parallelism as a search dimension: the default degrees follow the sequence length, and a cp candidate's
// stage-2 estimate (its K/V rings and its gradient reduction over dp x cp) is within a few per cent of its simulation.
TEST(Search, ContextParallelCandidates) {
  auto base_at = [](int seq) {
    return parse_scenario("model: {preset: llama3-8b, seq_len: " + std::to_string(seq) +
                              "}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                              "parallel: {dp: 1, pp: 2, tp: 4, global_batch: 8}\n"
                              "training: {dtype: bf16, flash_attention: true}\n",
                          "<test>");
  };
  auto degrees = [](const Scenario& base) {
    SearchSpace sp;
    sp.schedules = {"1f1b"};
    std::set<int> cps;
    for_each_point(base, sp, [&](const SearchPoint& p) { cps.insert(p.cp); });
    return cps;
  };
  EXPECT_EQ(degrees(base_at(2048)), (std::set<int>{1}));
  EXPECT_EQ(degrees(base_at(8192)), (std::set<int>{1, 2}));
  EXPECT_EQ(degrees(base_at(32768)), (std::set<int>{1, 2, 4, 8}));
  const Scenario base = base_at(8192);
  SearchSpace sp;
  sp.schedules = {"1f1b"};
  sp.cp = {2};
  sp.tp = {2};
  sp.micro_batch_sizes = {1};
  sp.recompute = {Recompute::None};
  const Stage1 s1 = enumerate_candidates(base, sp);
  ASSERT_FALSE(s1.survivors.empty());
  std::vector<Scenario> runs;
  for (const Candidate& c : s1.survivors) {
    EXPECT_NE(c.label.find(" cp2"), std::string::npos) << c.label;
    runs.push_back(c.scenario);
  }
  // With flash attention, selective recomputation of the attention core reruns nothing: its candidates are their
  // rc-none twins, counted once.
  SearchSpace both = sp;
  both.recompute = {Recompute::None, Recompute::Selective};
  const Stage1 twins = enumerate_candidates(base, both);
  EXPECT_EQ(twins.survivors.size(), s1.survivors.size());
  bool reason = false;
  for (const auto& [why, n] : twins.rejected) reason = reason || why.find("reruns nothing") != std::string::npos;
  EXPECT_TRUE(reason);
  const auto out = sim::run_scenarios(runs, {}, 2);
  Stage2Estimator e;
  for (std::size_t i = 0; i < runs.size(); i++) {
    ASSERT_TRUE(out[i].ok()) << s1.survivors[i].label << ": " << out[i].error;
    const double simulated = out[i].result.iteration_s;
    EXPECT_NEAR(e.estimate(runs[i]), simulated, 0.05 * simulated) << s1.survivors[i].label;
  }
}

}  // namespace
}  // namespace pipescope
