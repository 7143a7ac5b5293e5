// Numerical and range guards of the scenario loader, and regressions for the inputs the fuzzers found
// (fuzz/README.md). Every rejection is a ScenarioError whose message starts with file:line:col and names
// the key.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "core/model/scenario.h"

namespace pipescope {
namespace {

// A valid small scenario; tests replace one line by key.
const char* const kBase =
    "model: {layers: 8, hidden: 64, heads: 4, vocab: 128, seq_len: 64}\n"            // line 1
    "cluster:\n"                                                                     // 2
    "  nodes: 2\n"                                                                   // 3
    "  gpus_per_node: 2\n"                                                           // 4
    "  device: {preset: A100-SXM4-80GB}\n"                                           // 5
    "  intra_node: {fabric: nvswitch, nvlink_bw_GBps: 300, nvlink_latency_us: 1}\n"  // 6
    "  network: {nic_bw_Gbps: 200, nic_latency_us: 5}\n"                             // 7
    "parallel: {dp: 1, pp: 4, tp: 1, micro_batch_size: 1, global_batch: 8}\n"        // 8
    "schedule: {kind: 1f1b}\n";                                                      // 9

std::string with(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}
std::string with(const std::string& from, const std::string& to) { return with(kBase, from, to); }

// Parses `yaml`; expects a ScenarioError "t.yaml:<line>:<col>: <key>: ..." containing `fragment`.
void expect_error(const std::string& yaml, int line, const std::string& key, const std::string& fragment) {
  try {
    parse_scenario(yaml, "t.yaml");
    ADD_FAILURE() << "accepted; expected an error on " << key;
  } catch (const ScenarioError& e) {
    const std::string msg = e.what();
    std::printf("[ input error ] %s\n", msg.c_str());
    const std::regex located("^t\\.yaml:" + std::to_string(line) + ":[0-9]+: ");
    EXPECT_TRUE(std::regex_search(msg, located)) << "not at line " << line << ": " << msg;
    EXPECT_NE(msg.find(": " + key + ": "), std::string::npos) << "key " << key << " not named: " << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << msg;
  }
}

TEST(InputErrors, BaseIsValid) { EXPECT_NO_THROW(parse_scenario(kBase, "t.yaml")); }

TEST(InputErrors, ZeroAndNegativeBandwidths) {
  expect_error(with("nvlink_bw_GBps: 300", "nvlink_bw_GBps: 0"), 6, "cluster.intra_node.nvlink_bw_GBps",
               "expected a positive number, got \"0\"");
  expect_error(with("nic_bw_Gbps: 200", "nic_bw_Gbps: -200"), 7, "cluster.network.nic_bw_Gbps",
               "expected a positive number");
  expect_error(with("device: {preset: A100-SXM4-80GB}", "device: {preset: A100-SXM4-80GB, hbm_bw_GBps: 0}"), 5,
               "cluster.device.hbm_bw_GBps", "positive");
}

TEST(InputErrors, NegativeLatencies) {
  expect_error(with("nic_latency_us: 5", "nic_latency_us: -5"), 7, "cluster.network.nic_latency_us",
               "expected a number >= 0");
  expect_error(with("nvlink_latency_us: 1", "nvlink_latency_us: -0.5"), 6, "cluster.intra_node.nvlink_latency_us",
               ">= 0");
  // Non-finite spellings are not numbers.
  expect_error(with("nvlink_latency_us: 1", "nvlink_latency_us: .inf"), 6, "cluster.intra_node.nvlink_latency_us",
               ">= 0");
}

TEST(InputErrors, ZeroAndNegativeSizes) {
  expect_error(with("hidden: 64", "hidden: 0"), 1, "model.hidden", "expected a positive integer, got \"0\"");
  expect_error(with("seq_len: 64", "seq_len: -64"), 1, "model.seq_len", "positive integer");
  expect_error(with("device: {preset: A100-SXM4-80GB}", "device: {preset: A100-SXM4-80GB, memory_GB: -1}"), 5,
               "cluster.device.memory_GB", "positive number");
  expect_error(with("micro_batch_size: 1", "micro_batch_size: 0"), 8, "parallel.micro_batch_size", "positive");
  expect_error(with("gpus_per_node: 2", "gpus_per_node: 99999999999"), 4, "cluster.gpus_per_node", "positive integer");
}

TEST(InputErrors, SequenceNotDivisibleBySlicingGrain) {
  expect_error(with("schedule: {kind: 1f1b}", "schedule: {kind: terapipe, seq_slices: 5}"), 9, "schedule.seq_slices",
               "uniform slicing needs seq_len = 64 divisible by seq_slices = 5");
  // Explicit uneven slices are fine when they tile the sequence ...
  EXPECT_NO_THROW(
      parse_scenario(with("schedule: {kind: 1f1b}", "schedule: {kind: terapipe, slice_tokens: [30, 34]}"), "t.yaml"));
  // ... and rejected when they do not.
  expect_error(with("schedule: {kind: 1f1b}", "schedule: {kind: terapipe, slice_tokens: [30, 30]}"), 9,
               "schedule.slice_tokens", "slices sum to 60 tokens, but seq_len = 64");
  expect_error(with("schedule: {kind: 1f1b}", "schedule: {kind: terapipe, slice_tokens: [64, 0]}"), 9,
               "schedule.slice_tokens[1]", "expected a positive integer, got \"0\"");
}

TEST(InputErrors, MoreSlicesThanTokens) {
  expect_error(
      with(with("seq_len: 64", "seq_len: 4"), "schedule: {kind: 1f1b}", "schedule: {kind: seq1f1b, seq_slices: 8}"), 9,
      "schedule.seq_slices", "seq_slices = 8 exceeds seq_len = 4");
}

TEST(InputErrors, MoreStagesThanLayers) {
  expect_error(with("layers: 8", "layers: 2"), 8, "parallel.pp", "pp * v = 4 model chunks but the model has only 2");
}

TEST(InputErrors, BatchThatDoesNotFillThePipeline) {
  expect_error(with("dp: 1, pp: 4, tp: 1, micro_batch_size: 1, global_batch: 8",
                    "dp: 1, pp: 4, tp: 1, micro_batch_size: 16, global_batch: 8"),
               8, "parallel.global_batch", "does not fill one micro-batch per replica");
  expect_error(with(with("micro_batch_size: 1", "micro_batch_size: 2"), "global_batch: 8", "global_batch: 9"), 8,
               "parallel.global_batch", "is not divisible by");
  // Interleaved needs m to be a multiple of pp.
  expect_error(with(with("schedule: {kind: 1f1b}", "schedule: {kind: interleaved}"), "global_batch: 8}",
                    "global_batch: 6, v: 2}"),
               8, "parallel.global_batch", "to be a multiple of pp = 4");
}

// Products of fuzzed sizes overflowed int (UB; a zero divisor in global_batch % (micro_batch_size * dp)).
TEST(InputErrors, HugeSizesDoNotOverflow) {
  expect_error(with("dp: 1, pp: 4, tp: 1, micro_batch_size: 1, global_batch: 8",
                    "dp: 65536, pp: 4, tp: 1, micro_batch_size: 65536, global_batch: 8"),
               8, "parallel.dp", "dp * pp * tp = 65536 * 4 * 1 = 262144 GPUs");
  expect_error(with(with("nodes: 2", "nodes: 1000000"), "gpus_per_node: 2", "gpus_per_node: 1024"), 8, "parallel.dp",
               "= 1024000000");
  // Beyond the documented ranges (core/util/ranges.h) before any arithmetic.
  expect_error(with("nodes: 2", "nodes: 2147483647"), 3, "cluster.nodes",
               "2147483647 is outside the plausible range [1, 1000000]");
  expect_error(with("hidden: 64", "hidden: 1073741824"), 1, "model.hidden", "outside the plausible range");
}

// Magnitudes that would give iterations of 1e296 s or abort SimGrid are refused naming the key.
TEST(InputErrors, PhysicalRanges) {
  expect_error(with("nvlink_latency_us: 1", "nvlink_latency_us: 1e14"), 6, "cluster.intra_node.nvlink_latency_us",
               "outside the plausible range [0, 1000000]");
  expect_error(with("nvlink_bw_GBps: 300", "nvlink_bw_GBps: 1e-300"), 6, "cluster.intra_node.nvlink_bw_GBps",
               "1e-300 is outside");
  expect_error(with("nvlink_bw_GBps: 300", "nvlink_bw_GBps: 1e305"), 6, "cluster.intra_node.nvlink_bw_GBps",
               "1e+305 is outside");
  expect_error(with("device: {preset: A100-SXM4-80GB}", "device: {preset: A100-SXM4-80GB, kernel_launch_us: 1e300}"), 5,
               "cluster.device.kernel_launch_us", "outside the plausible range");
  expect_error(with("device: {preset: A100-SXM4-80GB}", "device: {preset: A100-SXM4-80GB, gemm_efficiency: 1e-300}"), 5,
               "cluster.device.gemm_efficiency", "outside the plausible range");
  expect_error(with("device: {preset: A100-SXM4-80GB}", "device: {preset: A100-SXM4-80GB, gemm_epilogue_hidden: 2}"), 5,
               "cluster.device.gemm_epilogue_hidden", "expected true or false");
  expect_error(std::string(kBase) + "training: {optimizer_bytes_per_param: 1e300}\n", 10,
               "training.optimizer_bytes_per_param", "outside the plausible range [0, 64]");
  // 0 = "no bf16 support" stays accepted next to the range.
  EXPECT_NO_THROW(parse_scenario(
      with("device: {preset: A100-SXM4-80GB}", "device: {preset: A100-SXM4-80GB, peak_tflops_bf16: 0}"), "t.yaml"));
}

TEST(InputErrors, StrictScalarTypes) {
  expect_error(with("pp: 4,", "pp: \"4\","), 8, "parallel.pp", "expected an integer, got the quoted string \"4\"");
  expect_error(with("pp: 4,", "pp: !foo 4,"), 8, "parallel.pp", "tagged !foo");
  expect_error(with("nvlink_bw_GBps: 300", "nvlink_bw_GBps: '300'"), 6, "cluster.intra_node.nvlink_bw_GBps",
               "quoted string");
  expect_error(with("global_batch: 8}", "global_batch: 8, stage_layers: [2, \"2\", 2, 2]}"), 8,
               "parallel.stage_layers[1]", "quoted or tagged value is not an integer");
  expect_error(with("kind: 1f1b", "kind: 1f1b, recompute: \"true\""), 9, "schedule.recompute", "quoted string");
  // The YAML core tags are types, not application tags.
  EXPECT_NO_THROW(parse_scenario(with("pp: 4,", "pp: !!int 4,"), "t.yaml"));
}

TEST(InputErrors, UnterminatedQuoteIsASyntaxError) {
  expect_error("name: \"abc\nmodel: {preset: gpt3-1b}\n", 1, "(syntax)", "unterminated quoted string");
  expect_error(std::string(kBase) + "name: 'it''s\n", 10, "(syntax)", "unterminated quoted string");
  EXPECT_NO_THROW(parse_scenario(std::string(kBase) + "name: \"a \\\" b\"\n", "t.yaml"));
}

TEST(InputErrors, TextMustBeUtf8) {
  try {
    parse_scenario(std::string(kBase) + "name: \"ab\xff\"\n", "t.yaml");
    ADD_FAILURE() << "accepted invalid UTF-8";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("t.yaml:10:10: (encoding): invalid UTF-8 (byte 0xFF)"), std::string::npos)
        << e.what();
  }
}

// Fuzzer regressions (fuzz_scenario): each once crashed or hung the loader.
TEST(InputErrors, FuzzRegressionStrayFlowEntryDoesNotHang) {
  // yaml-cpp's LoadAll loops forever on these; the loader reads at most two documents.
  expect_error(",a: b}\n", 1, "(syntax)", "unexpected ','");
  expect_error("- 1\n,\n", 2, "(syntax)", "unexpected ','");
  // After a block mapping the same token is an ordinary syntax error.
  expect_error(std::string(kBase) + ",secing: dp}\n", 10, "(syntax)", "end of map not found");
}

TEST(InputErrors, FuzzRegressionMappingKeysOutliveTheIterator) {
  // Every mapping once read a dangling reference to yaml-cpp's iterator proxy (ASan stack-use-after-scope);
  // keys that are not plain names exercise the error path that used it.
  expect_error("? [a, b]\n: 1\n", 1, "(document)", "keys must be plain names, got a sequence");
  expect_error(with("layers: 8", "layres: 8"), 1, "model.layres", "did you mean \"layers\"?");
}

TEST(InputErrors, SecondDocument) {
  expect_error(std::string(kBase) + "---\nname: x\n", 10, "(syntax)", "a second YAML document starts here");
}

}  // namespace
}  // namespace pipescope
