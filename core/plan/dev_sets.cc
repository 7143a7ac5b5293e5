#include "core/plan/dev_sets.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "core/model/model_shape.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/model/scenario_vary.h"
#include "core/plan/csv_table.h"
#include "core/plan/paper_tables.h"
#include "core/util/data_path.h"

namespace pipescope {
namespace {

std::string where(const CsvRecord& r) { return r.source + ":" + std::to_string(r.line) + ": "; }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A shipped scenario file, found from any directory.
Scenario shipped_scenario(const std::string& path) { return load_scenario(data_path(path)); }

// A row that names a shipped scenario must describe it: a column that disagrees is an error in one of the two.
void check_same(const CsvRecord& r, const std::string& column, long row_value, long scenario_value, const Scenario& s) {
  if (row_value != scenario_value)
    r.fail(column, "the row says " + std::to_string(row_value) + " but " + s.source + " says " +
                       std::to_string(scenario_value));
}

// The MeasuredRun part every CSV set shares (layout and identity); measured_s is the set's own.
MeasuredRun measured_run(const CsvRecord& r, const std::string& model) {
  MeasuredRun m;
  m.source = r.source;
  m.line = r.line;
  m.model = model;
  return m;
}

// ---------------------------------------------------------------- vTrain
std::vector<DevRow> vtrain_rows(const DevSet& set) {
  std::vector<DevRow> out;
  for (MeasuredRun& r : read_measured_runs(data_path(set.file))) {
    r.source = set.file;  // messages and rows name the shipped path, not where it was found
    DevRow d{r, r.layout(), r.group(), vtrain_scenario(r, set.cluster), "", ""};
    out.push_back(std::move(d));
  }
  return out;
}

// ---------------------------------------------------------------- Seq1F1B
// The paper's method names against the shipped files' (scenarios/seq1f1b/, `pipescope repro seq1f1b`).
std::string seq1f1b_file_method(const CsvRecord& r) {
  const std::string& m = r.text("method");
  if (m == "1f1b" || m == "seq1f1b" || m == "seq1f1b-i") return m;
  if (m == "1f1b-i") return "interleaved";
  r.fail("method", "expected 1f1b, 1f1b-i, seq1f1b or seq1f1b-i, got \"" + m + "\"");
}

void check_seq1f1b_scenario(const CsvRecord& r, const Scenario& s) {
  check_same(r, "layers", r.integer("layers"), s.model.layers, s);
  check_same(r, "hidden", r.integer("hidden"), s.model.hidden, s);
  check_same(r, "heads", r.integer("heads"), s.model.heads, s);
  check_same(r, "tp", r.integer("tp"), s.parallel.tp, s);
  check_same(r, "pp", r.integer("pp"), s.parallel.pp, s);
  check_same(r, "dp", r.integer("dp"), s.parallel.dp, s);
  check_same(r, "gpus", r.integer("gpus"), s.cluster.total_gpus(), s);
  check_same(r, "micro_batch_size", r.integer("micro_batch_size"), s.parallel.micro_batch_size, s);
  check_same(r, "global_batch", r.integer("global_batch"), s.parallel.global_batch, s);
  check_same(r, "virtual_stages_per_worker", r.integer("virtual_stages_per_worker"), s.parallel.v, s);
  check_same(r, "k_splits", r.integer("k_splits"), s.schedule.seq_slices, s);
}

DevRow seq1f1b_row(const CsvRecord& r) {
  const std::string model = r.text("model");
  const int seq = r.integer("seq_len"), m = r.integer("num_microbatches");
  MeasuredRun run = measured_run(r, model);
  run.layers = r.integer("layers"), run.hidden = r.integer("hidden"), run.heads = r.integer("heads");
  run.seq_len = seq, run.gpus = r.integer("gpus"), run.gpus_per_node = r.integer("gpus_per_node");
  run.tp = r.integer("tp"), run.pp = r.integer("pp"), run.dp = r.integer("dp");
  run.vp = r.integer("virtual_stages_per_worker"), run.mbs = r.integer("micro_batch_size");
  run.micro_batches = m, run.global_batch = r.integer("global_batch"), run.schedule = r.text("method");
  DevRow d;
  d.label = model + " s" + std::to_string(seq) + " m" + std::to_string(m) + " " + run.schedule;
  d.group = model + " s" + std::to_string(seq) + " m" + std::to_string(m);
  const std::string file = "scenarios/seq1f1b/" + lower(model) + "-s" + std::to_string(seq) + "-m" + std::to_string(m) +
                           "-" + seq1f1b_file_method(r) + ".yaml";
  if (r.text("oom") == "1") {
    d.excluded = "out of memory in the measured run (no throughput printed)";
  } else {
    // tokens/s of the whole cluster (dp 1): one iteration moves global_batch sequences of seq_len tokens.
    run.measured_s = static_cast<double>(run.global_batch) * seq / r.number("tokens_per_s");
    d.scenario = shipped_scenario(file);
    check_seq1f1b_scenario(r, *d.scenario);
  }
  d.run = run;
  return d;
}

std::vector<DevRow> seq1f1b_rows(const DevSet& set) {
  std::vector<DevRow> out;
  for (const CsvRecord& r : read_csv_records(data_path(set.file))) {
    CsvRecord named = r;
    named.source = set.file;
    out.push_back(seq1f1b_row(named));
  }
  return out;
}

// ---------------------------------------------------------------- TeraPipe Table 3
void check_terapipe_scenario(const CsvRecord& r, const Scenario& s) {
  check_same(r, "pipe", r.integer("pipe"), s.parallel.pp, s);
  check_same(r, "op_tensor", r.integer("op_tensor"), s.parallel.tp, s);
  check_same(r, "data", r.integer("data"), s.parallel.dp, s);
  check_same(r, "global_batch", r.integer("global_batch"), s.parallel.global_batch, s);
  check_same(r, "layers", r.integer("layers"), s.model.layers, s);
  check_same(r, "hidden", r.integer("hidden"), s.model.hidden, s);
  check_same(r, "gpus", r.integer("gpus"), s.cluster.total_gpus(), s);
}

// The row's token slices, checked against its sequence length and micro-batch count.
std::vector<int> terapipe_slices(const CsvRecord& r) {
  const std::string& scheme = r.text("slicing_scheme");
  std::vector<int> slices;
  try {
    slices = parse_slicing_scheme(scheme);
  } catch (const std::invalid_argument& e) {
    r.fail("slicing_scheme", e.what());
  }
  const int sum = std::accumulate(slices.begin(), slices.end(), 0);
  if (sum != r.integer("seq_len"))
    r.fail("slicing_scheme", "slices sum to " + std::to_string(sum) + ", not seq_len " + r.text("seq_len"));
  if (static_cast<int>(slices.size()) != r.integer("token_slices_per_sequence"))
    r.fail("slicing_scheme", std::to_string(slices.size()) +
                                 " slices but token_slices_per_sequence = " + r.text("token_slices_per_sequence"));
  return slices;
}

DevRow terapipe_table3_row(const CsvRecord& r) {
  const int setting = r.integer("setting");
  const std::string algorithm = r.text("algorithm");
  MeasuredRun run = measured_run(r, r.text("model"));
  run.layers = r.integer("layers"), run.hidden = r.integer("hidden"), run.seq_len = r.integer("seq_len");
  run.gpus = r.integer("gpus"), run.gpus_per_node = r.integer("gpus_per_node");
  run.tp = r.integer("op_tensor"), run.pp = r.integer("pipe"), run.dp = r.integer("data");
  run.mbs = r.integer("microbatch_size"), run.micro_batches = r.integer("num_microbatches");
  run.global_batch = r.integer("global_batch");
  run.schedule = algorithm + " x" + r.text("num_slices");
  run.measured_s = r.number("latency_s_mean");
  if (run.mbs != 1) r.fail("microbatch_size", "the TeraPipe scenarios run micro-batches of one sequence");
  const std::vector<int> slices = terapipe_slices(r);
  const std::string base = "scenarios/terapipe/setting-" + std::to_string(setting);
  DevRow d;
  d.label = "setting " + std::to_string(setting) + " " + r.text("algorithm_as_printed");
  d.group = "setting " + std::to_string(setting);
  if (algorithm == "gpipe") {
    d.scenario = shipped_scenario(base + "-gpipe.yaml");
  } else if (algorithm == "uniform" || algorithm == "terapipe") {
    d.scenario = with_token_slices(shipped_scenario(base + ".yaml"), slices);
  } else {
    r.fail("algorithm", "expected gpipe, uniform or terapipe, got \"" + algorithm + "\"");
  }
  check_terapipe_scenario(r, *d.scenario);
  d.run = run;
  return d;
}

std::vector<DevRow> terapipe_table3_rows(const DevSet& set) {
  std::vector<DevRow> out;
  for (CsvRecord r : read_csv_records(data_path(set.file))) {
    r.source = set.file;
    out.push_back(terapipe_table3_row(r));
  }
  return out;
}

// ---------------------------------------------------------------- H100 dense
// What the launcher configurations of a model family set (the rows' notes), as scenario YAML. Nemotron's
// squared-ReLU MLP has GeLU's two GEMMs and one elementwise kernel: it runs as gelu.
struct Family {
  const char* prefix;
  const char* model_yaml;  // ffn, norm, position, bias, tied embeddings
  bool dropout;
};
const Family kFamilies[] = {
    {"GPT3", "ffn: gelu, norm: layernorm, position: learned, linear_bias: true, tied_embeddings: true", true},
    {"LLAMA", "ffn: swiglu, norm: rmsnorm, position: rope, linear_bias: false, tied_embeddings: false", false},
    {"Nemotron", "ffn: gelu, norm: layernorm, position: rope, linear_bias: false, tied_embeddings: false", false},
};
const Family* family_of(const std::string& model) {
  for (const Family& f : kFamilies)
    if (model.rfind(f.prefix, 0) == 0) return &f;
  return nullptr;
}

// The recompute cell, or when it is empty the launcher configuration quoted in the note.
const char* h100_recompute(const CsvRecord& r) {
  const std::string& cell = r.text("recompute");
  const std::string& text = cell.empty() ? r.text("note") : cell;
  if (text.find("selective") != std::string::npos) return "selective";
  if (text.find("full") != std::string::npos) return "full";
  return "none";
}

Scenario h100_scenario(const CsvRecord& r, const MeasuredRun& run, const Family& f, const DevSet& set) {
  const int tp = run.tp, cp = r.integer("cp", 1);
  const int pad = 128 * tp;  // Megatron pads the vocabulary to a multiple of 128 x tp
  const int vocab = (r.integer("vocab") + pad - 1) / pad * pad;
  const int kv = r.integer("kv_heads", run.heads);
  const std::string precision = r.text("precision");
  if (precision != "bf16" && precision != "fp8") r.fail("precision", "expected bf16 or fp8, got \"" + precision + "\"");
  char yaml[2000];
  std::snprintf(
      yaml, sizeof yaml,
      "name: h100-line-%d\n"
      "model: {layers: %d, hidden: %d, heads: %d, query_groups: %d, ffn_hidden: %d, vocab: %d, seq_len: %d, %s}\n"
      "cluster: {preset: %s, nodes: %d, gpus_per_node: %d}\n"
      "parallel: {dp: %d, pp: %d, tp: %d, cp: %d, v: %d, micro_batch_size: %d, global_batch: %d, "
      "sequence_parallel: %s}\n"
      "schedule: {kind: %s, recompute: %s}\n"
      "training: {dtype: %s, grad_fp32: true, flash_attention: true, distributed_optimizer: true, "
      "overlap_grad_reduce: true, overlap_param_gather: true, dropout: %s, async_tp_allreduce: true}\n"
      "sim: {placement: megatron}\n",
      run.line, run.layers, run.hidden, run.heads, kv, run.ffn_hidden, vocab, run.seq_len, f.model_yaml, set.cluster,
      run.gpus / run.gpus_per_node, run.gpus_per_node, run.dp, run.pp, tp, cp, run.vp, run.mbs, run.global_batch,
      tp > 1 ? "true" : "false", run.vp > 1 ? "interleaved" : "1f1b", h100_recompute(r), precision.c_str(),
      f.dropout ? "true" : "false");
  return parse_scenario(yaml, where(r) + "scenario");
}

MeasuredRun h100_run(const CsvRecord& r) {
  MeasuredRun run = measured_run(r, r.text("model"));
  run.layers = r.integer("layers"), run.hidden = r.integer("hidden"), run.heads = r.integer("heads");
  run.ffn_hidden = r.integer("ffn_hidden"), run.vocab = r.integer("vocab"), run.seq_len = r.integer("seq_len");
  run.gpus = r.integer("gpus"), run.gpus_per_node = r.integer("gpus_per_node");
  run.tp = r.integer("tp"), run.pp = r.integer("pp"), run.dp = r.integer("dp"), run.vp = r.integer("vp", 1);
  run.mbs = r.integer("mbs"), run.micro_batches = r.integer("num_microbatches");
  run.global_batch = r.integer("global_batch"), run.schedule = r.text("precision");
  const int cp = r.integer("cp", 1);
  if (run.tp * run.pp * run.dp * cp != run.gpus) r.fail("gpus", "tp * pp * cp * dp is not the GPU count");
  if (run.mbs * run.micro_batches * run.dp != run.global_batch)
    r.fail("global_batch", "mbs * num_microbatches * dp is not the global batch");
  return run;
}

// The measured figure as an iteration time: a step time as printed, or tokens/s per GPU over the whole batch.
double h100_measured_s(const CsvRecord& r, const MeasuredRun& run) {
  const std::string& metric = r.text("metric");
  if (metric == "step_time") {
    if (r.text("unit") != "s") r.fail("unit", "expected s for a step time, got \"" + r.text("unit") + "\"");
    return r.number("value");
  }
  return static_cast<double>(run.global_batch) * run.seq_len / (r.number("value") * run.gpus);
}

std::string h100_run_key(const CsvRecord& r) {
  return r.text("source_table") + "|" + r.text("model") + "|" + r.text("gpus") + "|" + r.text("precision") + "|" +
         r.text("global_batch");
}

DevRow h100_row(const CsvRecord& r, const DevSet& set, std::map<std::string, int>& measured_line) {
  DevRow d;
  d.run = h100_run(r);
  const MeasuredRun& run = d.run;
  const std::string metric = r.text("metric");
  const std::string layout = "t" + std::to_string(run.tp) + " p" + std::to_string(run.pp) + " c" + r.text("cp") + " v" +
                             std::to_string(run.vp) + " d" + std::to_string(run.dp) + " b" + std::to_string(run.mbs) +
                             " m" + std::to_string(run.micro_batches);
  d.label = run.model + " " + std::to_string(run.gpus) + " GPUs " + run.schedule + " " + layout;
  // The weak-scaling series (step times) of one precision rank against each other; the performance table's rows
  // (tokens/s per GPU) are other models and batches.
  d.group = metric == "step_time" ? run.model + " weak scaling " + run.schedule : "";
  if (metric != "step_time" && metric != "tokens_per_s_per_gpu") {
    const auto it = measured_line.find(h100_run_key(r));
    if (it != measured_line.end()) d.label += " (" + metric + " of line " + std::to_string(it->second) + ")";
    d.skipped = "a figure computed from the measured row of the same run: one measurement, counted once";
    return d;
  }
  measured_line[h100_run_key(r)] = r.line;
  d.run.measured_s = h100_measured_s(r, run);
  if (!r.text("fsdp").empty()) {
    d.skipped =
        "Megatron FSDP (fsdp): not modelled (training.fsdp is PyTorch FSDP2 as it runs under pipelining, "
        "parameters gathered once per iteration)";
    return d;
  }
  const Family* f = family_of(run.model);
  if (f == nullptr) {
    d.skipped = "model family of '" + run.model + "' not in the H100 mapping (GPT3, LLAMA, Nemotron)";
    return d;
  }
  d.scenario = h100_scenario(r, run, *f, set);
  return d;
}

std::vector<DevRow> h100_rows(const DevSet& set) {
  std::vector<DevRow> out;
  std::map<std::string, int> measured_line;
  for (CsvRecord r : read_csv_records(data_path(set.file))) {
    r.source = set.file;
    out.push_back(h100_row(r, set, measured_line));
  }
  return out;
}

// ---------------------------------------------------------------- MoE H100
// Megatron-Core's recompute cell: "selective: <modules>" (norms, activations, the MoE layer: Megatron's cheap
// modules; with flash attention the attention core is recomputed anyway), "full" or "none".
// "none", "full" or "selective: <modules>" (the model zoo's short names: norm = layernorm, act = moe_act) as the
// scenario's schedule.recompute and recompute_modules.
std::string moe_recompute(const CsvRecord& r) {
  const std::string& cell = r.text("recompute");
  if (cell == "full") return "full";
  if (cell == "none" || cell.empty()) return "none";
  if (cell.rfind("selective", 0) != 0)
    r.fail("recompute", "expected none, full or selective: <modules>, got \"" + cell + "\"");
  const std::size_t colon = cell.find(':');
  if (colon == std::string::npos) return "selective";
  std::string modules, word;
  std::istringstream in(cell.substr(colon + 1));
  while (std::getline(in, word, ',')) {
    word.erase(0, word.find_first_not_of(' '));
    word.erase(word.find_last_not_of(' ') + 1);
    const std::string name = word == "norm" ? "layernorm" : word == "act" ? "moe_act" : word;
    modules += (modules.empty() ? "" : ", ") + name;
  }
  return "selective, recompute_modules: [" + modules + "]";
}

// "forced balance" (Megatron's --moe-router-force-load-balancing) or "dropless" (a trained router, no capacity).
std::string moe_routing(const CsvRecord& r) {
  const std::string& cell = r.text("routing");
  if (cell == "forced balance") return "balanced";
  if (cell.rfind("dropless", 0) == 0) return "trained";
  r.fail("routing", "expected forced balance or dropless, got \"" + cell + "\"");
}

// "DeepEP" or "A2A (all-to-all dispatcher)".
std::string moe_dispatcher(const CsvRecord& r) {
  const std::string& cell = r.text("dispatcher");
  if (cell == "DeepEP") return "deepep";
  if (cell.rfind("A2A", 0) == 0) return "alltoall";
  r.fail("dispatcher", "expected DeepEP or A2A, got \"" + cell + "\"");
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

DevRow moe_row(const CsvRecord& r, const DevSet& set) {
  DevRow d;
  MeasuredRun& run = d.run;
  run = measured_run(r, r.text("model"));
  run.seq_len = r.integer("seq_len");
  run.gpus = r.integer("gpus"), run.gpus_per_node = r.integer("gpus_per_node");
  run.tp = r.integer("tp"), run.pp = r.integer("pp"), run.vp = r.integer("vpp", 1);
  // etp not printed: 1 (the model zoo's Qwen3 rows print it as 1 where they print it; the edp check holds them to it).
  const int cp = r.integer("cp", 1), ep = r.integer("ep"), etp = r.integer("etp", 1);
  run.mbs = r.integer("mbs"), run.global_batch = r.integer("global_batch");
  if (run.gpus % (run.tp * cp * run.pp) != 0) r.fail("gpus", "tp * cp * pp does not divide the GPU count");
  run.dp = run.gpus / (run.tp * cp * run.pp);
  if (r.has("dp") && !r.text("dp").empty() && r.integer("dp") != run.dp)
    r.fail("dp", "is not gpus / (tp * cp * pp) = " + std::to_string(run.dp));
  const long long edp = 1LL * run.tp * cp * run.dp / (1LL * ep * etp);
  if (r.has("edp") && !r.text("edp").empty() && r.integer("edp") != edp)
    r.fail("edp", "is not tp * cp * dp / (ep * etp) = " + std::to_string(edp));
  run.micro_batches = run.global_batch / (run.mbs * run.dp);
  const std::string layout = "t" + std::to_string(run.tp) + " c" + std::to_string(cp) + " e" + std::to_string(ep) +
                             " p" + std::to_string(run.pp) + " v" + std::to_string(run.vp) + " d" +
                             std::to_string(run.dp) + " " + r.text("dispatcher");
  d.label = run.model + " s" + std::to_string(run.seq_len) + " " + layout;
  const std::string metric = r.text("metric");
  std::string preset = run.model;
  for (char& c : preset) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::optional<ModelSpec> m = model_preset(preset);
  if (!m) r.fail("model", "no model preset " + preset);
  if (metric == "step_time") {
    run.measured_s = r.number("value");
    d.group = run.model + " " + std::to_string(run.gpus) + " GPUs s" + std::to_string(run.seq_len) + " layouts";
  } else if (metric == "tflops_per_gpu") {
    // Megatron-Core prints its own FLOP count (core/model/model_shape.h megatron_core_flops_per_iteration).
    ModelSpec mm = *m;
    mm.seq_len = run.seq_len;
    run.measured_s = megatron_core_flops_per_iteration(mm, run.global_batch) / (r.number("value") * 1e12 * run.gpus);
  } else {
    r.fail("metric", "expected step_time or tflops_per_gpu, got \"" + metric + "\"");
  }
  if (!r.text("fsdp").empty()) {
    d.skipped =
        "Megatron FSDP (fsdp): not modelled (training.fsdp is PyTorch FSDP2 as it runs under pipelining, "
        "parameters gathered once per iteration)";
    return d;
  }
  // "yes (combined 1F1B)": Megatron-Core's --overlap-moe-expert-parallel-comm (schedule.overlap_moe_a2a).
  const bool a2a_overlap = r.text("a2a_overlap").rfind("yes", 0) == 0;
  const int stages = run.pp * run.vp;
  if (stages > m->layers + 2) {
    d.skipped = std::to_string(stages) + " virtual stages for " + std::to_string(m->layers) +
                " layers: stages without transformer layers other than the first and the last are not in the schema";
    return d;
  }
  const int pad = 128 * run.tp;  // Megatron pads the vocabulary to a multiple of 128 x tp
  const int vocab = (m->vocab + pad - 1) / pad * pad;
  // Megatron's first / last-stage layer counts (core/model/placement.h), or with more stages than layers its
  // --account-for-embedding / loss-in-pipeline-split: the first and last stage then hold the embedding or the loss.
  const std::vector<int> split = ends_lighter_split(m->layers, stages);
  const std::string yaml =
      "name: moe-line-" + std::to_string(r.line) + "\n" + "model: {preset: " + preset +
      ", vocab: " + std::to_string(vocab) + ", seq_len: " + std::to_string(run.seq_len) +
      "}\ncluster: {preset: " + set.cluster + ", nodes: " + std::to_string(run.gpus / run.gpus_per_node) +
      ", gpus_per_node: " + std::to_string(run.gpus_per_node) + "}\nparallel: {dp: " + std::to_string(run.dp) +
      ", pp: " + std::to_string(run.pp) + ", tp: " + std::to_string(run.tp) + ", cp: " + std::to_string(cp) +
      ", ep: " + std::to_string(ep) + ", etp: " + std::to_string(etp) + ", v: " + std::to_string(run.vp) +
      ", micro_batch_size: " + std::to_string(run.mbs) + ", global_batch: " + std::to_string(run.global_batch) +
      ", sequence_parallel: " + (run.tp > 1 ? "true" : "false") +
      (split.empty() ? std::string() : ", stage_layers: [" + join_ints(split) + "]") + "}\n" +
      "schedule: {kind: " + (run.vp > 1 ? "interleaved" : "1f1b") + ", recompute: " + moe_recompute(r) +
      (a2a_overlap ? ", overlap_moe_a2a: true" : "") + "}\n" + "training: {dtype: " + r.text("precision") +
      ", grad_fp32: true, flash_attention: true, distributed_optimizer: "
      "true, overlap_grad_reduce: true, overlap_param_gather: true, dropout: false, moe_dispatcher: " +
      moe_dispatcher(r) + ", moe_routing: " + moe_routing(r) +
      "}\n"
      "sim: {placement: megatron}\n";
  d.scenario = parse_scenario(yaml, where(r) + "scenario");
  return d;
}

std::vector<DevRow> moe_rows(const DevSet& set) {
  std::vector<DevRow> out;
  for (CsvRecord r : read_csv_records(data_path(set.file))) {
    r.source = set.file;
    out.push_back(moe_row(r, set));
  }
  return out;
}

// ---------------------------------------------------------------- paper tables
std::vector<DevRow> megatron_table1_rows(const DevSet& set) {
  std::vector<DevRow> out;
  int n = 0;
  for (const MegatronTable1Row& t : megatron_table1()) {
    Scenario s = shipped_scenario(std::string("scenarios/megatron/") + t.file + ".yaml");
    const ParallelSpec& p = s.parallel;
    if (p.dp * p.pp * p.tp != t.gpus)
      throw std::invalid_argument(s.source + ": parallel: dp * pp * tp = " + std::to_string(p.dp * p.pp * p.tp) +
                                  ", but the paper's row " + t.params + " uses " + std::to_string(t.gpus) + " GPUs");
    DevRow d;
    d.run.source = set.file, d.run.line = ++n, d.run.model = t.params, d.run.gpus = t.gpus;
    d.run.tp = p.tp, d.run.pp = p.pp, d.run.dp = p.dp, d.run.vp = p.v, d.run.mbs = p.micro_batch_size;
    d.run.global_batch = p.global_batch, d.run.micro_batches = p.micro_batches();
    // Eq. 3: T = F / (X n) with the paper's TFLOP/s per GPU X and the FLOPs F the simulator's figure uses.
    d.run.measured_s =
        megatron_flops_per_iteration(s.model, p.global_batch, s.schedule.recompute) / (t.tflops * 1e12 * t.gpus);
    d.label = std::string(t.params) + " " + std::to_string(t.gpus) + " GPUs";
    d.scenario = std::move(s);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<DevRow> terapipe_table2_rows(const DevSet& set) {
  std::vector<DevRow> out;
  int n = 0;
  for (const TerapipeTable2Row& t : terapipe_table2()) {
    const std::string base = "scenarios/terapipe/setting-" + std::to_string(t.setting);
    for (bool with : {false, true}) {
      DevRow d;
      d.run.source = set.file, d.run.line = ++n, d.run.model = t.model;
      d.run.schedule = with ? "terapipe" : "gpipe";
      d.run.measured_s = with ? t.with_s : t.without_s;
      d.label = "setting " + std::to_string(t.setting) + (with ? " with TeraPipe" : " without");
      d.group = "setting " + std::to_string(t.setting);
      d.scenario = shipped_scenario(base + (with ? ".yaml" : "-gpipe.yaml"));
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::vector<DevRow> not_modelled_rows(const DevSet& set) {
  std::vector<DevRow> out;
  for (const CsvRecord& r : read_csv_records(data_path(set.file))) {
    DevRow d;
    d.run.source = set.file, d.run.line = r.line;
    d.run.model = r.has("model") ? r.text("model") : "";
    d.label = d.run.model + (r.has("seq_len") ? " s" + r.text("seq_len") : "");
    d.skipped = set.not_modelled;
    out.push_back(std::move(d));
  }
  return out;
}

// One bracketed list of the scheme: "[a, b, c]" optionally "* n".
void append_term(const std::string& term, std::vector<int>& out) {
  const std::size_t open = term.find('['), close = term.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw std::invalid_argument("expected [slice, ...] in \"" + term + "\"");
  std::vector<int> items;
  std::size_t pos = open + 1;
  while (pos < close) {
    std::size_t end = term.find(',', pos);
    if (end == std::string::npos || end > close) end = close;
    items.push_back(std::stoi(term.substr(pos, end - pos)));
    pos = end + 1;
  }
  int times = 1;
  const std::size_t star = term.find('*', close);
  if (star != std::string::npos) times = std::stoi(term.substr(star + 1));
  if (times < 1) throw std::invalid_argument("a repeat count below 1 in \"" + term + "\"");
  for (int k = 0; k < times; k++) out.insert(out.end(), items.begin(), items.end());
}

}  // namespace

std::vector<int> parse_slicing_scheme(const std::string& text) {
  // [(mbs, <terms>)] * count: the terms sit between the first ", " after "[(" and the last ")".
  const std::size_t open = text.find("[("), comma = text.find(',', open == std::string::npos ? 0 : open),
                    close = text.rfind(')');
  if (open == std::string::npos || comma == std::string::npos || close == std::string::npos || close < comma)
    throw std::invalid_argument("expected [(micro-batch size, [slices] ...)] * count, got \"" + text + "\"");
  const std::string terms = text.substr(comma + 1, close - comma - 1);
  std::vector<int> out;
  try {
    std::size_t pos = 0;
    while (pos <= terms.size()) {
      std::size_t plus = terms.find('+', pos);
      if (plus == std::string::npos) plus = terms.size();
      append_term(terms.substr(pos, plus - pos), out);
      pos = plus + 1;
    }
  } catch (const std::logic_error& e) {  // std::stoi's invalid_argument and out_of_range included
    throw std::invalid_argument("slicing scheme \"" + text + "\": " + e.what());
  }
  for (int x : out)
    if (x < 1) throw std::invalid_argument("slicing scheme \"" + text + "\": a slice of " + std::to_string(x));
  return out;
}

const std::vector<DevSet>& dev_sets() {
  static const std::vector<DevSet> kSets = {
      {"vtrain-a100", "tests/data/vtrain_a100_dev.csv", "A100", "vtrain-a100", DevSetKind::Vtrain,
       "iteration time (ms) as measured", "layouts of one model, GPU count and global batch (MeasuredRun::group)", "",
       "line"},
      {"seq1f1b-a100", "scenarios/fidelity/seq1f1b_dev.csv", "A100", "seq1f1b-a100", DevSetKind::Seq1F1B,
       "tokens/s of the cluster: iteration = global_batch x seq_len / tokens_per_s",
       "the four methods at one model, sequence length and micro-batch count", "", "line"},
      {"terapipe-table3", "scenarios/fidelity/terapipe_table3_dev.csv", "V100", "aws-p3.16xlarge",
       DevSetKind::TerapipeTable3, "latency (s) as printed (mean over runs)", "the slicings of one setting", "",
       "line"},
      {"h100-dense", "scenarios/fidelity/h100_dense_dev.csv", "H100", "dgx-h100", DevSetKind::H100Dense,
       "step time (s), or tokens/s per GPU: iteration = global_batch x seq_len / (tokens_per_s_per_gpu x gpus)",
       "the weak-scaling points of one precision", "", "line"},
      {"megatron-table1", "scenarios/megatron", "A100", "dgx-a100", DevSetKind::MegatronTable1,
       "Table 1 TFLOP/s per GPU (core/plan/paper_tables.cc): iteration = F / (TFLOP/s x GPUs), F of Eq. 3",
       "none (one model per row)", "", "row"},
      {"terapipe-table2", "scenarios/terapipe", "V100", "aws-p3.16xlarge", DevSetKind::TerapipeTable2,
       "Table 2 latency (s) as printed (core/plan/paper_tables.cc)", "without and with TeraPipe at one setting", "",
       "row"},
      {"moe-h100", "scenarios/fidelity/moe_h100_dev.csv", "H100", "dgx-h100", DevSetKind::MoeH100,
       "step time (s), or Megatron-Core's TFLOP/s per GPU: iteration = its FLOP count / (TFLOP/s x GPUs)",
       "the layouts of one model, GPU count and sequence length", "", "line"},
  };
  return kSets;
}

const DevSet& dev_set(const std::string& name) {
  std::string names;
  for (const DevSet& s : dev_sets()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + std::string(s.name);
  }
  throw std::invalid_argument("--set " + name + ": no such development set (" + names + ")");
}

std::vector<DevRow> dev_set_rows(const DevSet& set) {
  switch (set.kind) {
    case DevSetKind::Vtrain:
      return vtrain_rows(set);
    case DevSetKind::Seq1F1B:
      return seq1f1b_rows(set);
    case DevSetKind::TerapipeTable3:
      return terapipe_table3_rows(set);
    case DevSetKind::H100Dense:
      return h100_rows(set);
    case DevSetKind::MegatronTable1:
      return megatron_table1_rows(set);
    case DevSetKind::TerapipeTable2:
      return terapipe_table2_rows(set);
    case DevSetKind::MoeH100:
      return moe_rows(set);
    case DevSetKind::NotModelled:
      return not_modelled_rows(set);
  }
  throw std::logic_error("dev_set_rows: unknown kind");
}

}  // namespace pipescope
