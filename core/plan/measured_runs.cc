#include "core/plan/measured_runs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <stdexcept>

#include "core/model/scenario.h"
#include "core/model/schedule_registry.h"
#include "core/plan/csv_table.h"

namespace pipescope {
namespace {

MeasuredRun read_row(const CsvRecord& rd) {
  MeasuredRun r;
  r.line = rd.line;
  r.model = rd.text("model");
  r.layers = rd.integer("layers");
  r.hidden = rd.integer("hidden");
  r.heads = rd.integer("heads");
  r.ffn_hidden = rd.integer("ffn_hidden", 0);
  r.vocab = rd.integer("vocab", 0);
  r.seq_len = rd.integer("seq_len");
  r.gpus = rd.integer("gpus");
  r.gpus_per_node = rd.integer("gpus_per_node");
  r.tp = rd.integer("tp");
  r.pp = rd.integer("pp");
  r.dp = rd.integer("dp");
  r.vp = rd.integer("vp", 1);
  r.mbs = rd.integer("mbs");
  r.micro_batches = rd.integer("num_microbatches");
  r.global_batch = rd.integer("global_batch");
  r.schedule = rd.text("schedule");
  const std::string unit = rd.text("unit");
  const double scale = unit == "ms" ? 1e-3 : unit == "s" ? 1.0 : 0.0;
  if (scale == 0) rd.fail("unit", "expected ms or s, got \"" + unit + "\"");
  r.measured_s = rd.number("value") * scale;
  if (r.tp * r.pp * r.dp != r.gpus)
    rd.fail("gpus", "tp * pp * dp = " + std::to_string(r.tp * r.pp * r.dp) + " but gpus = " + std::to_string(r.gpus));
  if (r.mbs * r.micro_batches * r.dp != r.global_batch)
    rd.fail("global_batch", "mbs * num_microbatches * dp = " + std::to_string(r.mbs * r.micro_batches * r.dp) +
                                " but global_batch = " + std::to_string(r.global_batch));
  if (r.hidden % r.heads != 0 || r.heads % r.tp != 0) rd.fail("heads", "heads must divide hidden and tp divide heads");
  return r;
}

// What differs between two layouts of one group: tp, pp, micro-batch size, interleaving, schedule, joined by "+".
std::string layout_difference(const MeasuredRun& a, const MeasuredRun& b) {
  std::string key;
  auto add = [&](bool differs, const char* name) {
    if (differs) key += (key.empty() ? "" : "+") + std::string(name);
  };
  add(a.tp != b.tp, "tp");
  add(a.pp != b.pp, "pp");
  add(a.mbs != b.mbs, "mbs");
  add(a.vp != b.vp, "vp");
  add(a.schedule != b.schedule, "schedule");
  return key.empty() ? "other" : key;
}

}  // namespace

std::string MeasuredRun::group() const {
  return model + " l" + std::to_string(layers) + " h" + std::to_string(hidden) + " s" + std::to_string(seq_len) +
         " gpus" + std::to_string(gpus) + " B" + std::to_string(global_batch);
}

std::string MeasuredRun::layout() const {
  return "t" + std::to_string(tp) + " p" + std::to_string(pp) + " d" + std::to_string(dp) + " b" + std::to_string(mbs) +
         " m" + std::to_string(micro_batches);
}

std::vector<MeasuredRun> parse_measured_runs(const std::string& csv_text, const std::string& source) {
  std::vector<MeasuredRun> out;
  for (const CsvRecord& rec : parse_csv_records(csv_text, source)) {
    out.push_back(read_row(rec));
    out.back().source = source;
  }
  return out;
}

std::vector<MeasuredRun> read_measured_runs(const std::string& path) {
  std::vector<MeasuredRun> out;
  for (const CsvRecord& rec : read_csv_records(path)) {
    out.push_back(read_row(rec));
    out.back().source = path;
  }
  return out;
}

Scenario vtrain_scenario(const MeasuredRun& r, const std::string& cluster) {
  // Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by (128) times tp.
  const int pad = 128 * r.tp;
  const int vocab = r.vocab > 0 ? r.vocab : (50257 + pad - 1) / pad * pad;
  const int ffn = r.ffn_hidden > 0 ? r.ffn_hidden : 4 * r.hidden;
  const int per_node = std::min(r.gpus, r.gpus_per_node);
  const std::string where = r.source + ":" + std::to_string(r.line) + ": ";
  if (r.gpus % per_node != 0)
    throw std::invalid_argument(where + "gpus: " + std::to_string(r.gpus) + " GPUs do not fill nodes of " +
                                std::to_string(per_node));
  const ScheduleEntry* entry = find_schedule(r.schedule);
  if (entry == nullptr || entry->kind != ScheduleKind::OneFOneB || r.vp != 1)
    throw std::invalid_argument(where + "schedule: only 1f1b without interleaving (vp 1) is read, got '" + r.schedule +
                                "' vp " + std::to_string(r.vp));
  char yaml[1200];
  std::snprintf(yaml, sizeof yaml,
                "name: vtrain-line-%d\n"
                "model: {layers: %d, hidden: %d, heads: %d, ffn_hidden: %d, vocab: %d, seq_len: %d, "
                "tied_embeddings: true}\n"
                "cluster: {preset: %s, nodes: %d, gpus_per_node: %d}\n"
                "parallel: {dp: %d, pp: %d, tp: %d, micro_batch_size: %d, global_batch: %d}\n"
                "schedule: {kind: 1f1b, recompute: full, scatter_gather: true}\n"
                "training: {dtype: fp16, async_tp_allreduce: true}\n"
                "sim: {placement: megatron, p2p: blocking}\n",
                r.line, r.layers, r.hidden, r.heads, ffn, vocab, r.seq_len, cluster.c_str(), r.gpus / per_node,
                per_node, r.dp, r.pp, r.tp, r.mbs, r.global_batch);
  return parse_scenario(yaml, "<vtrain line " + std::to_string(r.line) + ">");
}

Fidelity fidelity(const std::vector<MeasuredRun>& runs, const std::vector<double>& predicted_s) {
  std::vector<std::string> groups;
  for (const MeasuredRun& r : runs) groups.push_back(r.group());
  return fidelity(runs, predicted_s, groups);
}

Fidelity fidelity(const std::vector<MeasuredRun>& runs, const std::vector<double>& predicted_s,
                  const std::vector<std::string>& groups) {
  if (runs.size() != predicted_s.size() || runs.size() != groups.size())
    throw std::invalid_argument("fidelity: " + std::to_string(runs.size()) + " rows but " +
                                std::to_string(predicted_s.size()) + " predictions and " +
                                std::to_string(groups.size()) + " groups");
  Fidelity f;
  std::vector<double> err(runs.size(), 0.0);
  for (std::size_t i = 0; i < runs.size(); i++) {
    if (!(predicted_s[i] > 0)) continue;
    err[i] = (predicted_s[i] - runs[i].measured_s) / runs[i].measured_s;
    f.rows++;
    f.mape += std::fabs(err[i]);
    f.mean_err += err[i];
    f.worst.push_back(static_cast<int>(i));
  }
  if (f.rows > 0) {
    f.mape /= f.rows;
    f.mean_err /= f.rows;
  }
  std::stable_sort(f.worst.begin(), f.worst.end(), [&](int a, int b) {
    return std::fabs(err[static_cast<std::size_t>(a)]) > std::fabs(err[static_cast<std::size_t>(b)]);
  });
  f.wrong_pairs_of_row.assign(runs.size(), 0);
  for (std::size_t i = 0; i < runs.size(); i++)
    for (std::size_t j = i + 1; j < runs.size(); j++) {
      if (!(predicted_s[i] > 0) || !(predicted_s[j] > 0) || groups[i].empty() || groups[i] != groups[j]) continue;
      const double dm = runs[i].measured_s - runs[j].measured_s;
      if (dm == 0) continue;
      f.pairs++;
      Fidelity::PairCount& g = f.pairs_by_difference[layout_difference(runs[i], runs[j])];
      g.pairs++;
      if ((predicted_s[i] - predicted_s[j]) * dm > 0) {
        f.pairs_right++;
      } else {
        g.wrong++;
        f.wrong_pairs_of_row[i]++;
        f.wrong_pairs_of_row[j]++;
      }
    }
  for (std::size_t i = 0; i < runs.size(); i++)
    if (f.wrong_pairs_of_row[i] > 0) f.most_wrong.push_back(static_cast<int>(i));
  std::stable_sort(f.most_wrong.begin(), f.most_wrong.end(), [&](int a, int b) {
    return f.wrong_pairs_of_row[static_cast<std::size_t>(a)] > f.wrong_pairs_of_row[static_cast<std::size_t>(b)];
  });
  return f;
}

}  // namespace pipescope
