#pragma once
// Measured training runs (iteration times of real clusters) and the fidelity figures of a model against them:
// the vTrain A100 development set (tests/data/vtrain_a100_dev.csv, docs/cost-model.md "Fidelity") read into
// rows, each row turned into a scenario with one cluster description for all rows, and the statistics of
// predicted vs measured (MAPE, worst rows, pair ranking). Simulating the rows is the caller's (one SimGrid
// engine per process: sim/repro_vtrain.cc forks a child per row).

#include <map>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

// One measured run (one CSV row). Empty cells of the source are 0 here; vtrain_scenario() fills them the way
// Megatron-DeepSpeed would.
struct MeasuredRun {
  std::string source;  // the CSV file (messages)
  int line = 0;        // line in the CSV (messages)
  std::string model;   // the model cell, e.g. "GPT 3.6B (Megatron-DeepSpeed)"
  int layers = 0, hidden = 0, heads = 0, ffn_hidden = 0, vocab = 0, seq_len = 0;
  int gpus = 0, gpus_per_node = 0;
  int tp = 1, pp = 1, dp = 1, vp = 1, mbs = 1, micro_batches = 1, global_batch = 0;
  std::string schedule;  // "1f1b"; other sets: the method as the set names it ("seq1f1b-i", "uniform x8")
  double measured_s = 0;
  // Layouts of the same model on the same GPUs and global batch compare with each other (pair ranking).
  std::string group() const;
  std::string layout() const;  // "t2 p4 d8 b1 m16"
};

// Reads a measured-runs CSV (header names the columns; quoted cells may hold commas). Throws std::invalid_argument
// naming the file, line and column on a missing column, a bad number or an inconsistent row (tp*pp*dp != gpus,
// mbs * micro_batches * dp != global_batch, a time unit other than ms or s).
std::vector<MeasuredRun> read_measured_runs(const std::string& path);
std::vector<MeasuredRun> parse_measured_runs(const std::string& csv_text, const std::string& source);

// The scenario of one row on the cluster preset `cluster` (nodes = gpus / gpus_per_node; a run on fewer GPUs
// than a node gets a node of that many GPUs). Megatron-DeepSpeed's defaults fill what the row leaves out:
// ffn 4h, GPT-2's 50257-token vocabulary padded to a multiple of 128 * tp, tied embeddings, fp16, full
// recomputation, scatter/gather on, blocking p2p, no FlashAttention, no sequence parallelism.
Scenario vtrain_scenario(const MeasuredRun& r, const std::string& cluster);

// Predicted vs measured over a set of rows.
struct Fidelity {
  int rows = 0;
  double mape = 0;         // mean |pred - meas| / meas
  double mean_err = 0;     // mean signed (pred - meas) / meas
  int pairs = 0;           // pairs of rows of one group() with different measured times
  int pairs_right = 0;     // of those, ordered the same by the prediction
  std::vector<int> worst;  // row indices by |error|, largest first
  // The pairs by what differs between the two layouts: "tp", "pp", "mbs", "vp", "schedule" or their combinations
  // joined by "+" (dp and the micro-batch count follow from them within a group), "other" when none of them does.
  struct PairCount {
    int pairs = 0, wrong = 0;  // wrong: ordered the other way by the prediction
  };
  std::map<std::string, PairCount> pairs_by_difference;
  std::vector<int> wrong_pairs_of_row;  // per row: the wrongly ordered pairs it takes part in
  std::vector<int> most_wrong;          // rows taking part in wrong pairs, most such pairs first (ties: row order)
  double ranking() const { return pairs > 0 ? static_cast<double>(pairs_right) / pairs : 1.0; }
};
// `predicted_s[i]` belongs to `runs[i]`; a non-positive prediction (a failed run) counts as missing and is
// left out of every figure. Pairs are ranked within MeasuredRun::group(). Throws std::invalid_argument when the
// sizes differ.
Fidelity fidelity(const std::vector<MeasuredRun>& runs, const std::vector<double>& predicted_s);
// The same with the pair-ranking groups given: rows i and j are ranked against each other when groups[i] ==
// groups[j] and is not empty (core/plan/dev_sets.h: each development set's own key).
Fidelity fidelity(const std::vector<MeasuredRun>& runs, const std::vector<double>& predicted_s,
                  const std::vector<std::string>& groups);

}  // namespace pipescope
