// `pipescope repro seq1f1b [--dir D] [--models 2.7b,7b,...]`: the Seq1F1B paper's grid (spec/seq1f1b.md 11) in
// simulation. For every model, sequence length and micro-batch count it simulates the four methods (1F1B, 1F1B-I,
// Seq1F1B, Seq1F1B-I; scenarios/seq1f1b/<model>-s<s>-m<M>-<method>.yaml), each in its own process, and prints
// TFLOP/s per GPU, the Seq1F1B speedups over 1F1B, and the peak memory per GPU (worst stage) with the stage-0
// in-flight activation units, flagging OOM on the 80 GB A100. The paper's measured values are not in the spec
// (seq1f1b.md gives the set-up only), so there is no error column.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/fork_run.h"
#include "cli/repro.h"
#include "core/memory_model.h"
#include "core/pipeline.h"
#include "core/scenario.h"
#include "core/seq1f1b.h"
#include "sim/engine.h"
#include "sim/report.h"

namespace pipescope::cli {
namespace {

struct Cell {
  const char* model;
  int seq;
  int m;
};
std::vector<Cell> grid() {
  std::vector<Cell> out;
  const struct {
    const char* model;
    int seqs[3];
    int ms[2];
  } rows[] = {{"2.7b", {16384, 24576, 32768}, {16, 32}},
              {"7b", {32768, 65536, 131072}, {8, 16}},
              {"13b", {32768, 49152, 65536}, {8, 16}},
              {"30b", {32768, 49152, 65536}, {8, 16}}};
  for (const auto& r : rows)
    for (int s : r.seqs)
      for (int m : r.ms) out.push_back({r.model, s, m});
  return out;
}
const char* kMethods[] = {"1f1b", "interleaved", "seq1f1b", "seq1f1b-i"};

struct SimOut {
  double tflops = 0, peak_GB = 0, in_flight0 = 0;
  bool oom = false;
};

SimOut simulate_in_child(const Scenario& s) {
  const std::string out = run_in_child([&] {
    auto prep = prepare(s);
    CheckedSchedule cs = check(prep->lowered, prep->placement);
    sim::EngineOptions eo;
    eo.collectives = s.sim.collectives;
    sim::SimResult r = sim::simulate(s.cluster, cs, eo);
    sim::Report rep = sim::make_report(s, cs, r);
    double peak = 0;
    for (const auto& rm : rep.memory.ranks) peak = std::max(peak, rm.peak_bytes);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.17g %.17g %.17g %d", rep.tflops_per_gpu, peak / 1e9,
                  rep.memory.ranks.at(0).max_in_flight, rep.memory.any_oom() ? 1 : 0);
    return std::string(buf);
  });
  SimOut o;
  int oom = 0;
  if (std::sscanf(out.c_str(), "%lf %lf %lf %d", &o.tflops, &o.peak_GB, &o.in_flight0, &oom) != 4)
    throw std::runtime_error("repro seq1f1b: malformed answer from the simulation process: " + out);
  o.oom = oom != 0;
  return o;
}

struct ReproOptions {
  std::string dir = "scenarios/seq1f1b";
  std::vector<std::string> models;
};

int run_repro(const ReproOptions& o) {
  std::printf("Seq1F1B grid (spec/seq1f1b.md 11), k = 4, n = 2, cwp; scenarios from %s/\n", o.dir.c_str());
  std::printf(
      "TFLOP/s per GPU (spec/seq1f1b.md 11.5) | speedup over 1F1B | peak GB per GPU, worst stage "
      "(stage-0 in-flight micro-batch units), * = OOM on 80 GB\n");
  std::printf("%-5s %6s %3s | %6s %6s %6s %6s | %5s %5s | %-14s %-14s %-14s %-14s | cwp splits\n", "model", "s", "M",
              "1f1b", "1f1b-i", "seq", "seq-i", "seq", "seq-i", "1f1b", "1f1b-i", "seq", "seq-i");
  bool failed = false;
  for (const Cell& c : grid()) {
    if (!o.models.empty() && std::find(o.models.begin(), o.models.end(), c.model) == o.models.end()) continue;
    SimOut r[4];
    Scenario seq;
    try {
      for (int i = 0; i < 4; i++) {
        const std::string f = o.dir + "/" + c.model + "-s" + std::to_string(c.seq) + "-m" + std::to_string(c.m) + "-" +
                              kMethods[i] + ".yaml";
        const Scenario s = load_scenario(f);
        if (i == 2) seq = s;
        std::fprintf(stderr, "%s ...\n", f.c_str());
        r[i] = simulate_in_child(s);
      }
    } catch (const std::exception& e) {
      std::printf("%-5s %6d %3d | error: %s\n", c.model, c.seq, c.m, e.what());
      failed = true;
      continue;
    }
    char mem[4][32];
    for (int i = 0; i < 4; i++)
      std::snprintf(mem[i], sizeof mem[i], "%7.1f%s(%.2f)", r[i].peak_GB, r[i].oom ? "*" : " ", r[i].in_flight0);
    std::string splits;
    for (int x : split_points(seq1f1b_split_lengths(seq))) splits += (splits.empty() ? "" : ",") + std::to_string(x);
    std::printf("%-5s %6d %3d | %6.1f %6.1f %6.1f %6.1f | %5.2f %5.2f | %-14s %-14s %-14s %-14s | %s\n", c.model, c.seq,
                c.m, r[0].tflops, r[1].tflops, r[2].tflops, r[3].tflops, r[2].tflops / r[0].tflops,
                r[3].tflops / r[0].tflops, mem[0], mem[1], mem[2], mem[3], splits.c_str());
  }
  return failed ? kExitSchedule : 0;
}

}  // namespace

int print_seq1f1b_plan(const Scenario& s) {
  const std::vector<int> len = seq1f1b_split_lengths(s);
  const CausalCost c = seq1f1b_flop_cost(s.model);
  std::printf("scenario %s (%s): %s, k = %zu segments, slicing %s, s = %d, tp = %d\n", s.name.c_str(), s.source.c_str(),
              to_string(s.schedule.kind), len.size(), s.schedule.slicing.c_str(), s.model.seq_len, s.parallel.tp);
  std::string pts, lens, ratios;
  for (int x : split_points(len)) pts += (pts.empty() ? "" : " ") + std::to_string(x);
  for (int x : len) lens += (lens.empty() ? "" : " ") + std::to_string(x);
  char buf[32];
  for (double r : segment_cost_ratios(len, c))
    std::snprintf(buf, sizeof buf, "%s%.3f", ratios.empty() ? "" : " ", r), ratios += buf;
  std::printf("split points      %s\nsegment tokens    %s\nsegment FLOPs     %s (relative to segment 1)\n", pts.c_str(),
              lens.c_str(), ratios.c_str());
  // Peak memory of the four methods on this scenario's model and layout (core/memory_model.h, no simulation).
  std::printf(
      "\npeak memory per GPU (GB), worst stage; activations; stage-0 in-flight micro-batch units; 80 GB A100\n");
  std::printf("%-12s %10s %10s %10s  %s\n", "method", "peak_GB", "act_GB", "in_flight", "oom");
  for (const char* kind : kMethods) {
    Scenario v = s;
    const std::string k = kind;
    const bool inter = k == "interleaved" || k == "seq1f1b-i";
    const bool seq = k == "seq1f1b" || k == "seq1f1b-i";
    v.schedule.kind = k == "1f1b"          ? ScheduleKind::OneFOneB
                      : k == "interleaved" ? ScheduleKind::Interleaved
                      : k == "seq1f1b"     ? ScheduleKind::Seq1F1B
                                           : ScheduleKind::Seq1F1BInterleaved;
    v.parallel.v = inter ? (s.parallel.v > 1 ? s.parallel.v : 2) : 1;
    if (!seq) {
      v.schedule.seq_slices = 1;
      v.schedule.slicing = "uniform";
      v.schedule.slice_tokens.clear();
    }
    try {
      const MemoryReport rep = memory_report(v, make_schedule(v));
      double peak = 0, act = 0;
      for (const auto& r : rep.ranks) peak = std::max(peak, r.peak_bytes), act = std::max(act, r.activation_peak_bytes);
      std::printf("%-12s %10.1f %10.1f %10.2f  %s\n", kind, peak / 1e9, act / 1e9, rep.ranks.at(0).max_in_flight,
                  rep.any_oom() ? "OOM" : "-");
    } catch (const std::exception& e) {
      std::printf("%-12s n/a: %s\n", kind, e.what());
    }
  }
  return 0;
}

Command add_repro_seq1f1b(CLI::App& repro) {
  auto o = std::make_shared<ReproOptions>();
  auto* sub = repro.add_subcommand(
      "seq1f1b", "Seq1F1B grid: TFLOP/s, speedups and peak memory of 1F1B, 1F1B-I, Seq1F1B and Seq1F1B-I");
  sub->add_option("--dir", o->dir, "Directory with the grid scenarios (default scenarios/seq1f1b)");
  sub->add_option("--models", o->models, "Only these models, e.g. 2.7b,7b")
      ->delimiter(',')
      ->check(CLI::IsMember({"2.7b", "7b", "13b", "30b"}));
  return {sub, [o] { return run_repro(*o); }};
}

}  // namespace pipescope::cli
