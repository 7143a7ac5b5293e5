#pragma once
// The measured values the papers print, as data: Megatron-LM's Table 1 (weak scaling, TFLOP/s per GPU) and
// TeraPipe's Table 2 (latency without and with token slicing, and the scheme the authors ran). One copy, read by
// the paper tables (`pipescope repro megatron | terapipe`, sim/repro_*.h) and by the development sets of
// `pipescope fidelity` (core/plan/dev_sets.h).

#include <vector>

namespace pipescope {

struct MegatronTable1Row {
  const char* file;  // scenarios/megatron/<file>.yaml
  const char* params;
  int gpus;
  double tflops;  // Table 1, TFLOP/s per GPU (Eq. 3: F / (T n))
};
const std::vector<MegatronTable1Row>& megatron_table1();

// Latency in s, and the DP scheme the authors ran as one sequence's token slices (every reported scheme uses
// micro-batches of 1 sequence).
struct TerapipeTable2Row {
  int setting;
  const char* model;
  double without_s, with_s;
  std::vector<int> slice_tokens;
  int slices() const { return static_cast<int>(slice_tokens.size()); }
};
const std::vector<TerapipeTable2Row>& terapipe_table2();

}  // namespace pipescope
