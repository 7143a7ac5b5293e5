#pragma once
// `pipescope repro terapipe`: Table 2 of the TeraPipe paper (docs/papers.md#terapipe) in simulation. For every
// setting of Table 1 it simulates scenarios/terapipe/setting-N-gpipe.yaml (without TeraPipe) and setting-N.yaml (with
// the planner's slicing), each in its own process, and prints paper vs simulated latency, relative error, speedups,
// the MAPE, and the DP's slice count vs the paper's scheme; then the paper's schemes simulated next to the DP's, and
// Table 1's batch against the largest batch the memory model fits on a 16 GB V100 (core/memory/memory_model.h
// max_batch_gpipe).

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope::sim {

struct ReproTerapipeOptions {
  std::string dir = "scenarios/terapipe";  // setting-N.yaml and setting-N-gpipe.yaml
  std::vector<int> settings;               // empty: all ten
  bool max_batch_only = false;             // only Table 1's batch table, no simulation
  std::string json;                        // --json FILE: Table 2's rows and the MAPE
};

// The tables on `out`; returns the first setting that failed to simulate (null when every one ran). A missing or
// bad scenario file throws.
std::exception_ptr repro_terapipe(const ReproTerapipeOptions& o, std::FILE* out);
// Table 1's batch (global B, per replica B_r) against the largest batch whose GPipe baseline fits, at 16 GiB and at
// the authors' 14 GiB filter (no simulation).
void print_terapipe_max_batch(const ReproTerapipeOptions& o, std::FILE* out);
// `pipescope plan --max-batch`: the largest batch whose GPipe baseline (micro-batches of one sequence, whole
// mini-batch in flight) fits `memory_GB` per GPU (0: the device's memory), per replica and global, as TeraPipe chose
// B, against the scenario's batch.
void print_max_batch_plan(const Scenario& s, double memory_GB, std::FILE* out);

}  // namespace pipescope::sim
