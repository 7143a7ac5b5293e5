#include "core/plan/paper_tables.h"

#include <initializer_list>
#include <utility>

namespace pipescope {
namespace {

// Python's list arithmetic of the paper's notation: [a] * n + [b] * m + ...
std::vector<int> repeated(std::initializer_list<std::pair<int, int>> runs) {
  std::vector<int> out;
  for (auto [tokens, n] : runs) out.insert(out.end(), static_cast<std::size_t>(n), tokens);
  return out;
}

}  // namespace

const std::vector<MegatronTable1Row>& megatron_table1() {
  static const std::vector<MegatronTable1Row> kTable1 = {
      {"1.7b", "1.7B", 32, 137},       {"3.6b", "3.6B", 64, 138},       {"7.5b", "7.5B", 128, 142},
      {"18.4b", "18.4B", 256, 135},    {"39.1b", "39.1B", 512, 138},    {"76.1b", "76.1B", 1024, 140},
      {"145.6b", "145.6B", 1536, 148}, {"310.1b", "310.1B", 1920, 155}, {"529.6b", "529.6B", 2520, 163},
      {"1t", "1008B", 3072, 163},
  };
  return kTable1;
}

const std::vector<TerapipeTable2Row>& terapipe_table2() {
  static const std::vector<TerapipeTable2Row> kTable2 = {
      {1, "GPT3-1B", 1.517, 1.254, {776, 640, 632}},
      {2, "GPT3-1B", 1.018, 1.018, {2048}},
      {3, "GPT3-1B", 0.913, 0.913, {2048}},
      {4, "GPT3-13B", 2.637, 1.891, {1024, 1024}},
      {5, "GPT3-13B", 1.863, 1.328, {704, 688, 656}},
      {6, "GPT3-44B", 13.319, 7.103, repeated({{64, 26}, {56, 6}, {48, 1}})},
      {7, "GPT3-44B", 4.311, 2.771, {368, 384, 384, 368, 256, 288}},
      {8, "GPT3-44B", 2.662, 1.111, {384, 384, 368, 320, 296, 296}},
      {9, "GPT3-175B", 9.990, 1.481, repeated({{120, 4}, {112, 6}, {104, 8}, {64, 1}})},
      {10, "GPT3-175B", 5.822, 1.160, repeated({{128, 16}})},
  };
  return kTable2;
}

}  // namespace pipescope
