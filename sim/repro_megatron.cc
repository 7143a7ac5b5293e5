// `pipescope repro megatron`: Megatron-LM's Table 1 and the Figure 12 / 18 ablations in simulation
// (sim/repro_megatron.h).
#include "sim/repro_megatron.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/model/scenario.h"
#include "core/plan/paper_tables.h"
#include "sim/repro.h"

namespace pipescope::sim {
namespace {

// Table 1's measured TFLOP/s per GPU: core/plan/paper_tables.h.
using MegatronRow = MegatronTable1Row;

// Table 1 as it is built, and the ablation's --json rows.
struct Table1 {
  double ape_sum = 0;
  int n_ape = 0;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array(), ablation = nlohmann::ordered_json::array();
  std::exception_ptr failed;  // the first row that failed
};

// Megatron-LM's p2p calls block (docs/papers.md#megatron); the scenarios say so, and a copy that does not is flagged.
SimFigures simulate_megatron_run(const Scenario& s) {
  if (s.sim.p2p != "blocking")
    std::fprintf(stderr, "repro megatron: warning: %s has sim.p2p: %s; Megatron-LM's p2p calls block\n",
                 s.source.c_str(), s.sim.p2p.c_str());
  return simulate_figures(s);
}

bool row_selected(const ReproMegatronOptions& o, std::size_t i) {
  return o.rows.empty() || std::find(o.rows.begin(), o.rows.end(), static_cast<int>(i) + 1) != o.rows.end();
}

void print_table1_header(const ReproMegatronOptions& o, std::FILE* out) {
  std::fprintf(out,
               "Megatron-LM Table 1 (docs/papers.md#megatron) on simulated DGX A100 (fat tree); scenarios from %s/\n",
               o.dir.c_str());
  std::fprintf(out, "p2p calls block the sending stage, as Megatron-LM's do (docs/papers.md#megatron)\n");
  std::fprintf(out, "%-7s %5s %4s %3s %3s %5s %4s | %7s %7s %7s | %9s %8s\n", "params", "GPUs", "t", "p", "v", "b", "m",
               "paper", "sim", "err", "iter_s", "peak_GB");
}

void run_table1_row(const MegatronRow& row, const std::string& dir, Table1& t, std::FILE* out) {
  const Scenario s = load_scenario(dir + "/" + row.file + ".yaml");
  const ParallelSpec& par = s.parallel;
  if (par.dp * par.pp * par.tp != row.gpus)
    throw std::invalid_argument(s.source + ": parallel: dp * pp * tp = " + std::to_string(par.dp * par.pp * par.tp) +
                                ", but the paper's row " + row.params + " uses " + std::to_string(row.gpus) + " GPUs");
  std::fprintf(stderr, "row %s: simulating %d GPUs ...\n", row.params, row.gpus);
  SimFigures r;
  try {
    r = simulate_megatron_run(s);
  } catch (const std::exception& e) {
    std::fprintf(out, "%-7s | error: %s\n", row.params, e.what());
    if (!t.failed) t.failed = std::current_exception();
    return;
  }
  const double err = (r.tflops_per_gpu - row.tflops) / row.tflops;
  t.ape_sum += std::fabs(err);
  t.n_ape++;
  t.rows.push_back({{"params", row.params},
                    {"gpus", row.gpus},
                    {"tp", par.tp},
                    {"pp", par.pp},
                    {"v", par.v},
                    {"micro_batch_size", par.micro_batch_size},
                    {"micro_batches", par.micro_batches()},
                    {"paper_tflops_per_gpu", row.tflops},
                    {"simulated_tflops_per_gpu", r.tflops_per_gpu},
                    {"iteration_s", r.iteration_s},
                    {"peak_mem_GB", r.peak_mem_GB},
                    {"oom", r.oom}});
  std::fprintf(out, "%-7s %5d %4d %3d %3d %5d %4d | %7.1f %7.1f %+6.1f%% | %9.3f %8.1f%s\n", row.params, row.gpus,
               par.tp, par.pp, par.v, par.micro_batch_size, par.micro_batches(), row.tflops, r.tflops_per_gpu,
               100 * err, r.iteration_s, r.peak_mem_GB, r.oom ? " OOM" : "");
}

// Interleaving and scatter/gather on GPT-3 175B at several batch sizes, next to the paper's quoted gains.
void run_ablation(Table1& t, std::FILE* out) {
  std::fprintf(out,
               "\nGPT-3 175B, 96 GPUs (t 8, p 12, b 1; Figures 12 and 18), TFLOP/s per GPU:\n"
               "paper: interleaved + scatter/gather beats the default schedule by up to 10%% (gap closes as B grows);\n"
               "       scatter/gather adds up to 11%% to the interleaved schedule (larger at large batch)\n");
  std::fprintf(out, "%6s | %9s %9s %9s | %12s %12s\n", "B", "1f1b+sg", "int+sg", "int-sg", "interleave", "scat/gath");
  for (int batch : {12, 24, 48, 96, 192}) {
    std::fprintf(stderr, "GPT-3 175B, B = %d ...\n", batch);
    try {
      const SimFigures d = simulate_megatron_run(megatron_gpt3_175b(batch, false, true));
      const SimFigures i = simulate_megatron_run(megatron_gpt3_175b(batch, true, true));
      const SimFigures n = simulate_megatron_run(megatron_gpt3_175b(batch, true, false));
      t.ablation.push_back({{"global_batch", batch},
                            {"onef1b_sg_tflops_per_gpu", d.tflops_per_gpu},
                            {"interleaved_sg_tflops_per_gpu", i.tflops_per_gpu},
                            {"interleaved_no_sg_tflops_per_gpu", n.tflops_per_gpu}});
      std::fprintf(out, "%6d | %9.1f %9.1f %9.1f | %+11.1f%% %+11.1f%%\n", batch, d.tflops_per_gpu, i.tflops_per_gpu,
                   n.tflops_per_gpu, 100 * (i.tflops_per_gpu / d.tflops_per_gpu - 1),
                   100 * (i.tflops_per_gpu / n.tflops_per_gpu - 1));
    } catch (const std::exception& e) {
      std::fprintf(out, "%6d | error: %s\n", batch, e.what());
      if (!t.failed) t.failed = std::current_exception();
    }
  }
}

void write_table1_json(const ReproMegatronOptions& o, Table1& t) {
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.repro.megatron/1";
  j["scenarios"] = o.dir;
  j["rows"] = std::move(t.rows);
  j["mape"] = t.n_ape > 0 ? t.ape_sum / t.n_ape : 0.0;
  j["ablation"] = std::move(t.ablation);
  write_repro_json(o.json, j.dump(2));
}

}  // namespace

Scenario megatron_gpt3_175b(int batch, bool interleaved, bool scatter_gather) {
  char yaml[1024];
  std::snprintf(yaml, sizeof yaml,
                "name: gpt3-175b-fig12\n"
                "model: {preset: gpt3-175b}\n"
                "cluster: {preset: dgx-a100, nodes: 12}\n"
                "parallel: {dp: 1, pp: 12, tp: 8, v: %d, micro_batch_size: 1, global_batch: %d}\n"
                "schedule: {kind: %s, scatter_gather: %s, recompute: true}\n"
                "training: {dtype: fp16}\n"
                "sim: {p2p: blocking}\n",
                interleaved ? 2 : 1, batch, to_string(interleaved ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB),
                scatter_gather ? "true" : "false");
  return parse_scenario(yaml, "<repro megatron: GPT-3 175B, B = " + std::to_string(batch) + ">");
}

std::exception_ptr repro_megatron(const ReproMegatronOptions& o, std::FILE* out) {
  if (!o.json.empty()) check_repro_json(o.json);
  print_table1_header(o, out);
  Table1 t;
  for (std::size_t i = 0; i < megatron_table1().size(); i++)
    if (row_selected(o, i)) run_table1_row(megatron_table1()[i], o.dir, t, out);
  if (t.n_ape > 0) std::fprintf(out, "MAPE over %d rows: %.1f%% (target <= 5%%)\n", t.n_ape, 100 * t.ape_sum / t.n_ape);
  if (o.ablation) run_ablation(t, out);
  if (!o.json.empty()) write_table1_json(o, t);
  return t.failed;
}

}  // namespace pipescope::sim
