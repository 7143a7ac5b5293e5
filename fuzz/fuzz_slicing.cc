// Explicit slicing schemes and op texts. Input lines:
//   1: model.seq_len value, 2: schedule.slice_tokens value (a YAML list), 3: schedule.kind,
//   4..: op texts ("2F0", "1B3c1s2") for core/ir/schedule.h parse_op.
// The slicing lines go through the scenario loader (the one place slice lists are read); an accepted list
// must give slices that tile the sequence exactly. Op texts must parse or throw std::invalid_argument, and
// a parsed op must print back to text that parses to the same op.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/schedule.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"

using namespace pipescope;

namespace {
[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_slicing: %s\n", what.c_str());
  std::abort();
}

void check_op_text(const std::string& text, const Schedule* s) {
  Op op;
  try {
    op = s ? parse_op(text, *s) : parse_op(text);
  } catch (const std::invalid_argument&) {
    return;
  }
  Op again;
  try {
    again = s ? parse_op(op_text(op), *s) : parse_op(op_text(op));
  } catch (const std::invalid_argument& e) {
    die("op_text of a parsed op does not parse: " + text + " -> " + op_text(op) + ": " + e.what());
  }
  if (!(again == op)) die("parse_op(op_text(parse_op(t))) differs for " + text);
  if (s) {
    if (op.rank < 0 || op.rank >= s->p || op.microbatch < 0 || op.microbatch >= s->m || op.slice < 0 ||
        op.slice >= s->slices(op.microbatch) || op.stage != op.chunk * s->p + op.rank)
      die("schedule-aware parse_op accepted an op outside the schedule: " + text);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> lines;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  while (lines.size() < 3) lines.emplace_back();

  const std::string yaml = "model: {layers: 4, hidden: 64, heads: 4, vocab: 128, seq_len: " + lines[0] +
                           "}\n"
                           "cluster: {nodes: 1, gpus_per_node: 2, intra_node: {fabric: nvswitch, nvlink_bw_GBps: 100,"
                           " nvlink_latency_us: 1}, device: {preset: A100-SXM4-80GB}}\n"
                           "parallel: {dp: 1, pp: 2, tp: 1, micro_batch_size: 1, global_batch: 4}\n"
                           "schedule:\n  kind: " +
                           lines[2] + "\n  slice_tokens: " + lines[1] + "\n";
  Schedule sched;
  bool have = false;
  try {
    const Scenario s = parse_scenario(yaml, "fuzz.yaml");
    sched = make_schedule(s);
    have = true;
    // Accepted slices tile [0, seq_len) in order, each non-empty.
    for (int mb = 0; mb < sched.m; mb++) {
      const auto& b = sched.microbatches[mb].slice_begin;
      if (b.empty() || b[0] != 0) die("first slice does not start at token 0");
      for (std::size_t i = 1; i < b.size(); i++)
        if (b[i] <= b[i - 1] || b[i] >= sched.seq_len) die("slice offsets not increasing inside the sequence");
    }
    for (const auto& rank : sched.per_rank)
      for (const Op& op : rank)
        if (op.tok_begin < 0 || op.tok_end > sched.seq_len || op.tok_begin >= op.tok_end) die("bad op token range");
  } catch (const ScenarioError&) {
  } catch (const std::invalid_argument&) {
  }
  for (std::size_t i = 3; i < lines.size(); i++) {
    check_op_text(lines[i], nullptr);
    if (have) check_op_text(lines[i], &sched);
  }
  return 0;
}
