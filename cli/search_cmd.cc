// `pipescope search [SCENARIO] [--schedules a,b] [--framework F] [--tp 2,4] [--pp 4,8] [--v 2,5] [--ep 8,16] [--etp
// 1,2] [--micro-batch-sizes 1,2] [--recompute none,selective,full] [--max-memory-GB X] [--headroom-GB X] [--tie-band
// PCT] [--keep K] [-j N] [--json F] [--csv F] [--svg F] [--emit F.yaml]`: the best layout,
// schedule and slicing for the scenario's model, cluster, global batch and sequence length (sim/search_run.h,
// docs/search.md). The ranked table goes to stdout, progress to stderr. Under `mpirun -n N` the ranks share
// stages 2 and 3 (sim/mpi_group.h) and rank 0 alone prints and writes.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/fork_run.h"
#include "cli/validators.h"
#include "core/model/megatron_emit.h"
#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"
#include "core/model/torchtitan_config.h"
#include "core/plan/search.h"
#include "core/plan/search_work.h"
#include "core/plan/work_estimate.h"
#include "core/util/atomic_file.h"
#include "sim/search_run.h"

namespace pipescope::cli {
namespace {

constexpr Recompute kRecomputeModes[] = {Recompute::None, Recompute::Selective, Recompute::Full};

struct SearchCmdOptions {
  std::string scenario;
  std::vector<std::string> schedules;
  std::vector<int> tp, pp, cp, ep, etp, micro_batch_sizes, v;
  std::vector<std::string> dist_opt;   // "off", "on"
  std::vector<std::string> fsdp;       // "off", "on"
  std::vector<std::string> cp_comm;    // parallel.cp_comm_type names
  std::vector<std::string> recompute;  // "none", "selective", "full"
  std::string framework = "any";
  double max_memory_GB = 0;
  double headroom_GB = kDefaultHeadroomBytes / 1e9;
  double tie_band_pct = -1;
  int keep = 20, jobs = 1;
  bool quiet = false;
  std::string json, csv, svg, emit;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ScenarioError(path + ": cannot open scenario file");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Atomically (core/util/atomic_file.h): a failed or interrupted write leaves an older file as it was.
template <class Write>
void write_file(const std::string& path, const char* flag, Write write) {
  std::ostringstream text;
  write(text);
  write_file_atomic(path, text.str(), flag);
}

int run_search_cmd(const SearchCmdOptions& o) {
  // The scenario's own layout is only the starting point: one that does not fit its cluster is not a row, and the
  // search still runs over its model and cluster.
  Scenario base;
  std::string not_a_layout;
  try {
    base = o.scenario.empty() ? default_scenario() : load_scenario(o.scenario);
  } catch (const ScenarioCombinationError& e) {
    base = load_scenario_fields(o.scenario);
    not_a_layout = e.what();
  }
  sim::SearchOptions so;
  so.space.schedules = o.schedules;
  so.space.tp = o.tp;
  so.space.pp = o.pp;
  so.space.cp = o.cp;
  so.space.ep = o.ep;
  so.space.etp = o.etp;
  so.space.micro_batch_sizes = o.micro_batch_sizes;
  so.space.v = o.v;
  if (!o.recompute.empty()) so.space.recompute.clear();
  for (const std::string& r : o.recompute)
    for (Recompute m : kRecomputeModes)
      if (r == to_string(m)) so.space.recompute.push_back(m);
  so.space.one_framework = o.framework != "any";
  if (so.space.one_framework) find_framework(o.framework, so.space.framework);
  so.space.headroom_bytes = o.headroom_GB * 1e9;
  so.tie_band = o.tie_band_pct < 0 ? -1 : o.tie_band_pct / 100;
  if (!o.dist_opt.empty()) so.space.distributed_optimizer.clear();
  for (const std::string& v : o.dist_opt) so.space.distributed_optimizer.push_back(v == "on");
  for (const std::string& v : o.fsdp) so.space.fsdp.push_back(v == "on");
  for (const std::string& v : o.cp_comm)
    for (CpCommType t : {CpCommType::P2P, CpCommType::AllGather, CpCommType::A2A, CpCommType::A2AP2P})
      if (v == to_string(t)) so.space.cp_comm_types.push_back(t);
  so.space.max_memory_bytes = o.max_memory_GB * 1e9;
  so.keep = o.keep;
  so.jobs = o.jobs;
  so.progress = !o.quiet;
  so.as_written = not_a_layout.empty();
  // Under `mpirun -n N pipescope search`: the ranks share the work through the MPI relay; rank 0 reports.
  const auto group = sim::MpiGroup::from_environment(sibling_exe("pipescope-mpi-relay"));
  so.group = group.get();
  if (group && group->rank() != 0) so.progress = false;
  if (group && so.progress) std::fprintf(stderr, "search: %d MPI ranks x %d local workers\n", group->size(), o.jobs);
  // The best row as a framework's launch (Megatron-LM arguments, a TorchTitan TOML), on stdout.
  const bool emit_launch = o.emit == "megatron" || o.emit == "torchtitan";
  check_output_paths({{"--json", o.json}, {"--csv", o.csv}, {"--svg", o.svg}, {"--emit", emit_launch ? "" : o.emit}});
  check_grid(estimate_search(base, so.space, so.keep, so.jobs));  // before stage 1 (core/plan/search_work.h)
  sim::SearchResult r = sim::run_search(base, so);
  if (!not_a_layout.empty())
    r.as_written_note = "the scenario as written is not a layout of its cluster: " + not_a_layout;
  if (group && group->rank() != 0) return 0;
  // An output on standard output ("-") gets it alone; the table then goes to stderr.
  const bool stdout_taken = o.json == "-" || o.csv == "-" || o.svg == "-" || o.emit == "-" || emit_launch;
  sim::print_search_table(stdout_taken ? std::cerr : std::cout, r);
  if (!o.json.empty()) write_file(o.json, "--json", [&](std::ostream& f) { sim::write_search_json(f, r); });
  if (!o.csv.empty()) write_file(o.csv, "--csv", [&](std::ostream& f) { sim::write_search_csv(f, r); });
  if (!o.svg.empty()) write_file(o.svg, "--svg", [&](std::ostream& f) { sim::write_search_svg(f, r); });
  if (!o.emit.empty()) {
    if (r.rows.empty() || !r.rows.front().error.empty())
      throw InputError("--emit: no configuration was simulated successfully");
    if (emit_launch) {
      try {
        const Scenario& best = r.rows.front().scenario;
        std::cout << (o.emit == "megatron" ? megatron_command(best) : torchtitan_toml(best));
      } catch (const std::invalid_argument& e) {
        throw InputError(std::string(e.what()) + " (search --framework " + o.emit + " keeps its schedules)");
      }
      return r.interrupted ? kExitInterrupted : 0;
    }
    const std::string text = o.scenario.empty() ? default_scenario_yaml() : read_text(o.scenario);
    write_file(o.emit, "--emit", [&](std::ostream& f) { f << sim::emit_scenario_yaml(text, r.rows.front().scenario); });
  }
  return r.interrupted ? kExitInterrupted : 0;
}

}  // namespace

Command add_search(CLI::App& app) {
  auto o = std::make_shared<SearchCmdOptions>();
  auto* sub = app.add_subcommand(
      "search", "Find the fastest layout, schedule and slicing that fits in memory (prune, estimate, simulate top K)");
  sub->add_option("scenario", o->scenario,
                  "Scenario YAML file: model, cluster, global batch, sequence length (default: the built-in one)");
  sub->add_option("--schedules", o->schedules,
                  "Only these registered schedules (default: all; see simulate "
                  "--list-schedules)")
      ->delimiter(',');
  sub->add_option("--tp", o->tp, "Only these tensor-parallel degrees, e.g. 2,4")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--pp", o->pp, "Only these pipeline depths, e.g. 4,8")->delimiter(',')->check(CLI::Range(1, 1 << 20));
  sub->add_option("--cp", o->cp,
                  "Only these context-parallel degrees, e.g. 1,2 (default: 1 and the powers of two that leave 4096 "
                  "tokens per rank)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--ep", o->ep, "Mixture-of-experts models: only these expert-parallel degrees, e.g. 8,16")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--etp", o->etp,
                  "Mixture-of-experts models: only these expert-tensor-parallel degrees (default 1 and tp), e.g. 1,2")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  sub->add_option("--micro-batch-sizes", o->micro_batch_sizes, "Micro-batch sizes to try (default 1,2,4,8)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option(
         "--v", o->v,
         "Interleaved schedules: only these chunks per rank (default: every v > 1 dividing the layers per rank)")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20));
  std::vector<std::string> recompute_names;  // the scenario's spellings (to_string), not a second list
  for (Recompute m : kRecomputeModes) recompute_names.emplace_back(to_string(m));
  sub->add_option("--recompute", o->recompute,
                  "Activation recomputation to try: none, selective, full or a list (default: all three)")
      ->delimiter(',')
      ->check(CLI::IsMember(recompute_names));
  std::vector<std::string> frameworks = {"any"};
  for (Framework f : all_frameworks()) frameworks.emplace_back(to_string(f));
  sub->add_option("--framework", o->framework,
                  "Only the schedules this framework runs: megatron, torchtitan, deepspeed or any (default; "
                  "simulate --list-schedules shows who runs what)")
      ->check(CLI::IsMember(frameworks));
  sub->add_option("--headroom-GB", o->headroom_GB,
                  "Per-GPU memory kept free for what the memory model does not count: CUDA context, NCCL buffers, "
                  "workspaces (default 2.15 = 2 GiB; docs/search.md)")
      ->check(finite_range(0, 1e6));
  sub->add_option("--tie-band", o->tie_band_pct,
                  "Rows within this percentage of the best throughput are ties, ordered by memory (default: the "
                  "device's smallest development-set error; 0: off)")
      ->check(finite_range(0, 100));
  sub->add_option("--distributed-optimizer", o->dist_opt,
                  "Distributed optimizer values to try where dp > 1: off, on or off,on (default)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "on"}));
  sub->add_option("--cp-comm-type", o->cp_comm,
                  "Context-parallel communication types to try where cp > 1: p2p, allgather, a2a, a2a+p2p (every "
                  "all-to-all level dividing cp); default: the scenario's")
      ->delimiter(',')
      ->check(CLI::IsMember({"p2p", "allgather", "a2a", "a2a+p2p"}));
  sub->add_option("--fsdp", o->fsdp,
                  "FSDP (training.fsdp, in place of the distributed optimizer) values to try where dp > 1: off, on or "
                  "off,on (default: the scenario's)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "on"}));
  sub->add_option("--max-memory-GB", o->max_memory_GB,
                  "Per-GPU memory limit (default: the device's memory less --headroom-GB)")
      ->check(finite_range(1e-3, 1e6));
  sub->add_option("--keep,-K", o->keep, "Simulate the best K estimates (default 20)")->check(CLI::Range(1, 100000));
  sub->add_option("-j,--jobs", o->jobs, "Worker processes (default 1); results are identical for every N")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
  sub->add_option("--json", o->json, "Write the ranked results as JSON (- for stdout; the table then goes to stderr)");
  sub->add_option("--csv", o->csv, "Write the ranked results as CSV");
  sub->add_option("--svg", o->svg, "Plot throughput against peak memory, Pareto front marked");
  sub->add_option(
      "--emit", o->emit,
      "Write the best configuration as a scenario YAML (`pipescope simulate` runs it), or with `megatron` / "
      "`torchtitan` print its Megatron-LM arguments / TorchTitan TOML on stdout (the table then goes to "
      "stderr)");
  return {sub, [o] { return run_search_cmd(*o); }};
}

}  // namespace pipescope::cli
