// `pipescope repro seq1f1b`: the Seq1F1B paper's grid in simulation, and `pipescope plan`'s Seq1F1B split points
// (sim/repro_seq1f1b.h).
#include "sim/repro_seq1f1b.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/lower/megatron_p2p.h"
#include "core/memory/memory_model.h"
#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/model/schedule_registry.h"
#include "core/model/seq1f1b.h"
#include "core/plan/pipeline.h"
#include "sim/repro.h"

namespace pipescope::sim {
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
// The four methods of the paper's tables, in their column order; file names and labels are the registry's names.
constexpr ScheduleKind kMethods[] = {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::Seq1F1B,
                                     ScheduleKind::Seq1F1BInterleaved};
const char* method_name(int i) { return schedule_entry(kMethods[i]).name; }

struct SimOut {
  double iteration_s = 0, tflops = 0, peak_GB = 0, in_flight0 = 0;
  double reserved_GB = 0;  // the caching-allocator replay's worst stage (torch.cuda.max_memory_reserved())
  bool oom = false, allocator_failed = false;
  bool all_warmup = false;  // every unit is warm-up (Megatron's interleaved schedules at M = p)
};

// docs/papers.md#seq1f1b: 3 * M * F_fwd(s) / T / world, F_fwd(s) = c_lin * s + c_att * s^2 / 2 with the authors'
// forward-FLOP model of docs/papers.md#seq1f1b (causal attention at half, (4*dh + 3) per pair, embedding + LM head
// 4*s*h*V).
double paper_tflops_per_gpu(const Scenario& s, double iteration_s) {
  const CausalCost c = seq1f1b_flop_cost(s.model);
  const double L = s.model.seq_len;
  const double f_fwd = c.c_lin * L + c.c_att * L * L / 2;
  return 3.0 * s.parallel.global_batch * f_fwd / iteration_s / s.cluster.total_gpus() / 1e12;
}

SimOut memory_of(const Scenario& s) {
  const Schedule sched = make_schedule(s);
  const MemoryReport rep = memory_report(s, sched, AllocatorReplay::On);
  SimOut o;
  o.all_warmup = every_forward_first(sched);
  for (const auto& rm : rep.ranks) {
    o.peak_GB = std::max(o.peak_GB, rm.peak_bytes / 1e9);
    o.reserved_GB = std::max(o.reserved_GB, rm.reserved_peak_bytes / 1e9);
    o.allocator_failed = o.allocator_failed || rm.allocator_failed;
  }
  o.in_flight0 = rep.ranks.at(0).max_in_flight;
  o.oom = rep.any_oom();
  return o;
}

struct Row {
  Cell cell;
  SimOut r[4];
  std::string splits;
};

// What the authors' code logs (torch.cuda.max_memory_reserved()): the caching-allocator replay of each method's
// tensors, against the live bytes above; 1F1B's tensors are all of one size, cwp's segments and the growing K/V
// copies are not (docs/cost-model.md, "Caching allocator").
void print_reserved(const std::vector<Row>& rows, std::FILE* out) {
  std::fprintf(
      out,
      "\nReserved memory per GPU, GB, worst stage (PyTorch's caching allocator replayed on each method's tensors:\n"
      "what torch.cuda.max_memory_reserved() logs; at the first failure) | the worst stage's reserved / the worst\n"
      "stage's peak above (- where the allocator runs out); * = OOM on live bytes already, ! = live bytes fit but the\n"
      "allocator runs out\n");
  std::fprintf(out, "%-5s %6s %3s | %7s %7s %7s %7s | %5s %5s %5s %5s\n", "model", "s", "M", "1f1b", "1f1b-i", "seq",
               "seq-i", "1f1b", "1-i", "seq", "seq-i");
  double sum[4] = {0, 0, 0, 0};
  int counted[4] = {0, 0, 0, 0};  // cells where the allocator did not fail (the ratio means something)
  for (const Row& w : rows) {
    char gb[4][16];
    for (int i = 0; i < 4; i++)
      std::snprintf(gb[i], sizeof gb[i], "%6.1f%s", w.r[i].reserved_GB,
                    w.r[i].oom ? "*" : (w.r[i].allocator_failed ? "!" : " "));
    std::fprintf(out, "%-5s %6d %3d | %7s %7s %7s %7s |", w.cell.model, w.cell.seq, w.cell.m, gb[0], gb[1], gb[2],
                 gb[3]);
    for (int i = 0; i < 4; i++) {
      if (w.r[i].allocator_failed) {
        std::fprintf(out, " %5s", "-");
        continue;
      }
      const double ratio = w.r[i].reserved_GB / w.r[i].peak_GB;
      sum[i] += ratio, counted[i]++;
      std::fprintf(out, " %5.2f", ratio);
    }
    std::fprintf(out, "\n");
  }
  if (rows.empty()) return;
  auto mean = [&](int i) { return counted[i] > 0 ? sum[i] / counted[i] : 0.0; };
  std::fprintf(
      out,
      "mean reserved / peak where the allocator does not run out: 1f1b %.3f (%d cells), 1f1b-i %.3f (%d), seq %.3f "
      "(%d), seq-i %.3f (%d)\n",
      mean(0), counted[0], mean(1), counted[1], mean(2), counted[2], mean(3), counted[3]);
  // The paper's claims on what its code logs, the reserved bytes, in the cells where both methods compared fit.
  int a = 0, b = 0, c = 0, na = 0, nb = 0, nc = 0;
  for (const Row& w : rows) {
    auto fit = [&](int i, int k) { return !w.r[i].allocator_failed && !w.r[k].allocator_failed; };
    if (fit(0, 2)) na++, a += w.r[2].reserved_GB < w.r[0].reserved_GB;
    if (fit(1, 3)) nb++, b += w.r[3].reserved_GB < w.r[1].reserved_GB;
    if (fit(2, 3)) nc++, c += w.r[3].reserved_GB >= w.r[2].reserved_GB;
  }
  std::fprintf(
      out,
      "claims on reserved bytes, where both methods fit the allocator: [a] holds in %d of %d cells, [b] in %d of %d, "
      "[c] seq-i >= seq in %d of %d\n",
      a, na, b, nb, c, nc);
}

// One cell of the grid: the four methods' memory and, unless memory_only, their simulated iteration and TFLOP/s.
Row run_cell(const Cell& c, const ReproSeq1f1bOptions& o) {
  Row row{c, {}, {}};
  for (int i = 0; i < 4; i++) {
    const std::string f = o.dir + "/" + c.model + "-s" + std::to_string(c.seq) + "-m" + std::to_string(c.m) + "-" +
                          method_name(i) + ".yaml";
    const Scenario s = load_scenario(f);
    if (i == 2)
      for (int x : split_points(seq1f1b_split_lengths(s)))
        row.splits += (row.splits.empty() ? "" : ",") + std::to_string(x);
    row.r[i] = memory_of(s);
    if (!o.memory_only) {
      std::fprintf(stderr, "%s ...\n", f.c_str());
      row.r[i].iteration_s = simulate_figures(s).iteration_s;
      row.r[i].tflops = paper_tflops_per_gpu(s, row.r[i].iteration_s);
    }
  }
  return row;
}

void print_tflops_table(const std::vector<Row>& rows, std::FILE* out) {
  std::fprintf(out,
               "\nTFLOP/s per GPU (docs/papers.md#seq1f1b: 3*M*F_fwd(s)/T/GPUs, causal) | speedup over 1F1B; * = the "
               "memory\n"
               "model says the run does not fit the 80 GB A100 (simulated anyway; a measured run would fail)\n");
  std::fprintf(out, "%-5s %6s %3s | %7s %7s %7s %7s | %5s %5s | cwp splits\n", "model", "s", "M", "1f1b", "1f1b-i",
               "seq", "seq-i", "seq", "seq-i");
  int both_fit = 0, seqi_ahead = 0;
  for (const Row& w : rows) {
    char tf[4][16];
    for (int i = 0; i < 4; i++) std::snprintf(tf[i], sizeof tf[i], "%6.1f%s", w.r[i].tflops, w.r[i].oom ? "*" : " ");
    std::fprintf(out, "%-5s %6d %3d | %7s %7s %7s %7s | %5.2f %5.2f | %s\n", w.cell.model, w.cell.seq, w.cell.m, tf[0],
                 tf[1], tf[2], tf[3], w.r[0].iteration_s / w.r[2].iteration_s, w.r[0].iteration_s / w.r[3].iteration_s,
                 w.splits.c_str());
    if (!w.r[2].oom && !w.r[3].oom) both_fit++, seqi_ahead += w.r[3].tflops > w.r[2].tflops;
  }
  std::fprintf(out, "Seq1F1B-I ahead of Seq1F1B in %d of the %d cells where both fit\n", seqi_ahead, both_fit);
}

// The memory table's counts of the paper's claims (docs/papers.md#seq1f1b) over the cells.
struct MemoryClaims {
  int cells = 0, a_ok = 0, b_ok = 0, c_above = 0, oom_1f1b_seq_fits = 0, oom_1f1bi_seqi_fits = 0, oom_seq = 0;
  int all_warmup_cells = 0, bc_fail = 0, bc_fail_all_warmup = 0;
};

void print_memory_row(const Row& w, MemoryClaims& k, std::FILE* out) {
  char mem[4][32];
  for (int i = 0; i < 4; i++)
    std::snprintf(mem[i], sizeof mem[i], "%6.1f%s(%.2f)%s", w.r[i].peak_GB, w.r[i].oom ? "*" : " ", w.r[i].in_flight0,
                  w.r[i].all_warmup ? "!" : "");
  const bool a = w.r[2].peak_GB < w.r[0].peak_GB, b = w.r[3].peak_GB < w.r[1].peak_GB;
  const double ratio = w.r[3].peak_GB / w.r[2].peak_GB;
  k.cells++;
  k.a_ok += a;
  k.b_ok += b;
  k.c_above += ratio >= 1.0;
  k.oom_1f1b_seq_fits += w.r[0].oom && !w.r[2].oom;
  k.oom_1f1bi_seqi_fits += w.r[1].oom && !w.r[3].oom;
  k.oom_seq += w.r[2].oom || w.r[3].oom;
  k.all_warmup_cells += w.r[3].all_warmup;
  k.bc_fail_all_warmup += (!b || ratio < 1.0) && w.r[3].all_warmup;
  k.bc_fail += !b || ratio < 1.0;
  std::fprintf(out, "%-5s %6d %3d | %-14s %-14s %-14s %-14s | %3s %3s %6.2f\n", w.cell.model, w.cell.seq, w.cell.m,
               mem[0], mem[1], mem[2], mem[3], a ? "ok" : "NO", b ? "ok" : "NO", ratio);
}

void print_memory_table(const std::vector<Row>& rows, std::FILE* out) {
  std::fprintf(out,
               "\nPeak memory per GPU, GB, worst stage (stage-0 in-flight micro-batch units), * = OOM on the 80 GB "
               "A100.\n"
               "Paper's claims (docs/papers.md#seq1f1b): [a] Seq1F1B < 1F1B; [b] Seq1F1B-I < 1F1B-I, by far;\n"
               "[c] Seq1F1B-I slightly above Seq1F1B (ratio seq-i / seq shown).\n");
  std::fprintf(out, "%-5s %6s %3s | %-14s %-14s %-14s %-14s | %3s %3s %6s\n", "model", "s", "M", "1f1b", "1f1b-i",
               "seq", "seq-i", "[a]", "[b]", "[c]");
  MemoryClaims k;
  for (const Row& w : rows) print_memory_row(w, k, out);
  if (k.cells == 0) return;
  std::fprintf(out, "claims: [a] holds in %d of %d cells, [b] in %d of %d, [c] seq-i >= seq in %d of %d\n", k.a_ok,
               k.cells, k.b_ok, k.cells, k.c_above, k.cells);
  std::fprintf(out,
               "OOM: 1F1B out of memory where Seq1F1B fits in %d cells; 1F1B-I out where Seq1F1B-I fits in %d; "
               "Seq1F1B or Seq1F1B-I out in %d\n",
               k.oom_1f1b_seq_fits, k.oom_1f1bi_seqi_fits, k.oom_seq);
  if (k.all_warmup_cells > 0)
    std::fprintf(
        out,
        "! every unit is warm-up: at M = p Megatron's interleaved schedule (and the authors' Seq1F1B-I on it) runs\n"
        "  all forwards, then all backwards, so all M micro-batches are in flight; Seq1F1B-I so in %d cells, which\n"
        "  hold %d of the %d cells where [b] or [c] fails\n",
        k.all_warmup_cells, k.bc_fail_all_warmup, k.bc_fail);
}

void write_grid_json(const ReproSeq1f1bOptions& o, const std::vector<Row>& rows) {
  nlohmann::ordered_json cells_json = nlohmann::ordered_json::array();
  for (const Row& w : rows) {
    nlohmann::ordered_json methods = nlohmann::ordered_json::object();
    for (int i = 0; i < 4; i++) {
      nlohmann::ordered_json m{{"peak_mem_GB", w.r[i].peak_GB},
                               {"in_flight_stage0", w.r[i].in_flight0},
                               {"oom", w.r[i].oom},
                               {"reserved_mem_GB", w.r[i].reserved_GB},
                               {"allocator_failed", w.r[i].allocator_failed},
                               {"all_warmup", w.r[i].all_warmup}};
      if (!o.memory_only) m["iteration_s"] = w.r[i].iteration_s, m["tflops_per_gpu"] = w.r[i].tflops;
      methods[method_name(i)] = std::move(m);
    }
    cells_json.push_back({{"model", w.cell.model},
                          {"seq_len", w.cell.seq},
                          {"micro_batches", w.cell.m},
                          {"cwp_splits", w.splits},
                          {"methods", std::move(methods)}});
  }
  nlohmann::ordered_json j;
  j["schema"] = "pipescope.repro.seq1f1b/1";
  j["scenarios"] = o.dir;
  j["memory_only"] = o.memory_only;
  j["cells"] = std::move(cells_json);
  write_repro_json(o.json, j.dump(2));
}

}  // namespace

std::exception_ptr repro_seq1f1b(const ReproSeq1f1bOptions& o, std::FILE* out) {
  if (!o.json.empty()) check_repro_json(o.json);
  std::fprintf(out,
               "Seq1F1B grid (docs/papers.md#seq1f1b), k = 4, n = 2, cwp, FlashAttention, sequence parallelism; "
               "scenarios from %s/\n",
               o.dir.c_str());
  std::fprintf(out, "The Seq1F1B paper gives the set-up but no measured values: simulated figures, no error column.\n");
  std::exception_ptr failed;  // the first cell that failed
  std::vector<Row> rows;
  for (const Cell& c : grid()) {
    if (!o.models.empty() && std::find(o.models.begin(), o.models.end(), c.model) == o.models.end()) continue;
    try {
      rows.push_back(run_cell(c, o));
    } catch (const std::exception& e) {
      std::fprintf(out, "%-5s %6d %3d | error: %s\n", c.model, c.seq, c.m, e.what());
      if (!failed) failed = std::current_exception();
    }
  }
  if (!o.memory_only) print_tflops_table(rows, out);
  print_memory_table(rows, out);
  print_reserved(rows, out);
  if (!o.json.empty()) write_grid_json(o, rows);
  return failed;
}

void print_seq1f1b_plan(const Scenario& s, std::FILE* out) {
  const std::vector<int> len = seq1f1b_split_lengths(s);
  const CausalCost c = seq1f1b_flop_cost(s.model);
  std::fprintf(out, "scenario %s (%s): %s, k = %zu segments, slicing %s, s = %d, tp = %d\n", s.name.c_str(),
               s.source.c_str(), to_string(s.schedule.kind), len.size(), s.schedule.slicing.c_str(), s.model.seq_len,
               s.parallel.tp);
  std::string pts, lens, ratios;
  for (int x : split_points(len)) pts += (pts.empty() ? "" : " ") + std::to_string(x);
  for (int x : len) lens += (lens.empty() ? "" : " ") + std::to_string(x);
  char buf[32];
  for (double r : segment_cost_ratios(len, c))
    std::snprintf(buf, sizeof buf, "%s%.3f", ratios.empty() ? "" : " ", r), ratios += buf;
  std::fprintf(out, "split points      %s\nsegment tokens    %s\nsegment FLOPs     %s (relative to segment 1)\n",
               pts.c_str(), lens.c_str(), ratios.c_str());
  // Peak memory of the four methods on this scenario's model and layout (core/memory/memory_model.h, no simulation).
  std::fprintf(
      out,
      "\npeak memory per GPU (GB), worst stage; activations; reserved by PyTorch's caching allocator (replayed);\n"
      "stage-0 in-flight micro-batch units; 80 GB A100\n");
  std::fprintf(out, "%-12s %10s %10s %11s %10s  %s\n", "method", "peak_GB", "act_GB", "reserved_GB", "in_flight",
               "oom");
  for (ScheduleKind k : kMethods) {
    const Scenario v = with_schedule(s, k);
    const char* kind = schedule_entry(k).name;
    try {
      const MemoryReport rep = memory_report(v, make_schedule(v), AllocatorReplay::On);
      double peak = 0, act = 0, reserved = 0;
      bool frag = false;
      for (const auto& r : rep.ranks) {
        peak = std::max(peak, r.peak_bytes), act = std::max(act, r.activation_peak_bytes);
        reserved = std::max(reserved, r.reserved_peak_bytes), frag = frag || r.allocator_failed;
      }
      std::fprintf(out, "%-12s %10.1f %10.1f %11.1f %10.2f  %s\n", kind, peak / 1e9, act / 1e9, reserved / 1e9,
                   rep.ranks.at(0).max_in_flight, rep.any_oom() ? "OOM" : (frag ? "FRAG" : "-"));
    } catch (const std::exception& e) {
      std::fprintf(out, "%-12s n/a: %s\n", kind, e.what());
    }
  }
}

}  // namespace pipescope::sim
