#pragma once
// `pipescope repro seq1f1b`: the Seq1F1B paper's grid (docs/papers.md#seq1f1b) in simulation. For every model,
// sequence length and micro-batch count it simulates the four methods (1F1B, 1F1B-I, Seq1F1B, Seq1F1B-I;
// scenarios/seq1f1b/<model>-s<s>-m<M>-<method>.yaml), each in its own process, and prints TFLOP/s per GPU with the
// paper's formula, the Seq1F1B speedups over 1F1B, and then the peak memory per GPU (worst stage) with the stage-0
// in-flight activation units, flagging OOM on the 80 GB A100. The paper gives the set-up but no measured values, so
// there is no error column: the memory table checks the paper's qualitative claims instead (Seq1F1B below 1F1B;
// Seq1F1B-I a little above Seq1F1B and well below 1F1B-I) and counts the cells where 1F1B / 1F1B-I run out of memory
// and Seq1F1B fits. A last table gives the memory PyTorch's caching allocator reserves (the replay of
// core/memory/caching_allocator.h: what the authors' code logs) against the live peak. Memory is a property of the
// schedule alone (core/memory/memory_model.h): memory_only skips the simulations.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope::sim {

struct ReproSeq1f1bOptions {
  std::string dir = "scenarios/seq1f1b";
  std::vector<std::string> models;  // 2.7b, 7b, 13b, 30b; empty: all
  bool memory_only = false;         // only the memory tables (no simulation)
  std::string json;                 // --json FILE: every cell's four methods
};

// The tables on `out`; returns the first cell that failed (null when every one ran).
std::exception_ptr repro_seq1f1b(const ReproSeq1f1bOptions& o, std::FILE* out);
// `pipescope plan` for kind seq1f1b / seq1f1b-i: split points, segment costs and the four methods' peak memory.
void print_seq1f1b_plan(const Scenario& s, std::FILE* out);

}  // namespace pipescope::sim
