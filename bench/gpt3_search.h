#pragma once
// The scenario of the 175B search benchmark: GPT-3 175B on 128 DGX A100 nodes (1,024 GPUs), global batch
// 1,536, sequence 2,048. bench_search times it; tests/test_search.cc and tests/test_search_bound.cc check stage 2 on
// every candidate of its search. bench/README.md gives it as gpt3.yaml for the command-line runs.

namespace pipescope {

inline constexpr const char* kGpt3SearchYaml =
    "name: gpt3-175b-search\n"
    "model: {preset: gpt3-175b}\n"
    "cluster: {preset: dgx-a100, nodes: 128}\n"
    "parallel: {dp: 8, pp: 16, tp: 8, v: 1, micro_batch_size: 1, global_batch: 1536}\n"
    "schedule: {kind: 1f1b, recompute: true}\n";

}  // namespace pipescope
