#pragma once
// `pipescope repro megatron`: Megatron-LM PTD-P (docs/papers.md#megatron) in simulation. Table 1 (weak scaling):
// every scenarios/megatron/<row>.yaml simulated in its own process, paper vs simulated TFLOP/s per GPU (Eq. 3
// F/(T n)) and the MAPE. Ablations on the paper's Figure 12/18 set-up (GPT-3 175B, 96 GPUs, t = 8, p = 12, b = 1,
// several batch sizes): interleaved (v = 2) vs the default 1F1B schedule, and scatter/gather on vs off, next to the
// paper's quoted gains (up to 10% and up to 11%, 8.4).
// Every run models Megatron-LM's point-to-point calls as blocking (`sim.p2p: blocking` in the scenario files and the
// ablation set-up; LoweredSchedule::blocking_sends): a stage's next op waits for its sends (docs/papers.md: the
// sends and receives of a step are one call; Seq1F1B: blocking calls, overlap_p2p_comm off). With sends
// overlapped with compute instead, the 8x redundant cross-node traffic of a run without scatter/gather stayed hidden
// and its gain read about 0%.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope::sim {

struct ReproMegatronOptions {
  std::string dir = "scenarios/megatron";  // the ten Table 1 scenarios
  std::vector<int> rows;                   // 1 = 1.7B .. 10 = 1T; empty: all
  bool ablation = true;                    // the GPT-3 175B interleaving / scatter-gather comparison
  std::string json;                        // --json FILE: Table 1's rows, the MAPE and the ablation
};

// The tables on `out`; returns the first row that failed to simulate (null when every one ran). A missing scenario,
// or one whose GPU count is not the paper's (std::invalid_argument), throws.
std::exception_ptr repro_megatron(const ReproMegatronOptions& o, std::FILE* out);
// The Figure 12 / 18 set-up: GPT-3 175B on 12 DGX A100 nodes, t = 8, p = 12, d = 1, b = 1, recomputation, blocking p2p.
Scenario megatron_gpt3_175b(int batch, bool interleaved, bool scatter_gather);

}  // namespace pipescope::sim
