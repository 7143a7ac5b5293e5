#include "core/util/ranges.h"

#include <cmath>
#include <cstdio>
#include <iterator>

namespace pipescope {
namespace {

// Bounds are generous (10-100x beyond today's hardware and models) but finite: the simulator works in double
// seconds and int counts, and every bound keeps products such as layers * hidden^2 * seq_len far from overflow.
// Counts that drive the amount of work (pp, dp, global_batch, seq_slices, v) are also bounded jointly by the
// work estimate (core/plan/work_estimate.h).
constexpr KeyRange kRanges[] = {
    {"model.layers", 1, 10000, false},
    {"model.hidden", 1, 1048576, false},
    {"model.heads", 1, 65536, false},
    {"model.ffn_hidden", 1, 4194304, false},
    {"model.vocab", 1, 16777216, false},
    {"model.seq_len", 1, 16777216, false},
    {"model.head_dim", 1, 65536, false},
    {"model.num_experts", 1, 65536, true},
    {"model.moe_top_k", 1, 65536, false},
    {"model.moe_ffn_hidden", 1, 4194304, false},
    {"model.moe_shared_ffn_hidden", 1, 4194304, true},
    {"model.moe_layer_freq", 1, 10000, false},
    {"model.q_lora_rank", 1, 1048576, true},
    {"model.kv_lora_rank", 1, 1048576, true},
    {"model.qk_rope_head_dim", 1, 65536, true},
    {"model.v_head_dim", 1, 65536, true},
    {"model.sliding_window", 1, 16777216, true},
    {"model.sliding_window_pattern", 2, 10000, true},
    {"training.moe_router_groups", 1, 65536, true},
    {"training.moe_router_group_topk", 1, 65536, true},
    {"cluster.nodes", 1, 1000000, false},
    {"cluster.gpus_per_node", 1, 1024, false},
    // Down to 1 MFLOP/s: a CPU profile sets every peak to its measured GEMM rate, about 1 GFLOP/s on a slow or
    // sanitized (ASan) build.
    {"cluster.device.peak_tflops_fp16", 1e-6, 1e5, false},
    {"cluster.device.peak_tflops_bf16", 1e-6, 1e5, true},
    {"cluster.device.peak_tflops_fp32", 1e-6, 1e5, false},
    {"cluster.device.peak_tflops_fp64", 1e-6, 1e5, true},
    {"cluster.device.peak_tflops_fp8", 1e-6, 1e5, true},
    {"cluster.device.memory_GB", 1e-3, 1e5, false},
    {"cluster.device.hbm_bw_GBps", 1e-2, 1e6, false},
    {"cluster.device.gemm_efficiency", 1e-3, 1, false},
    {"cluster.device.gemm_half_sat_gflop", 0, 1e6, false},
    {"cluster.device.kernel_launch_us", 0, 1e5, false},
    {"cluster.device.memory_efficiency", 1e-3, 1, false},
    {"cluster.device.sm_count", 1, 10000, false},
    {"cluster.device.comm_sm_count", 0, 10000, false},
    {"cluster.intra_node.nvlink_bw_GBps", 1e-2, 1e5, false},
    {"cluster.intra_node.nvlink_latency_us", 0, 1e6, false},
    {"cluster.intra_node.pcie_bw_GBps", 1e-2, 1e5, false},
    {"cluster.intra_node.pcie_latency_us", 0, 1e6, false},
    {"cluster.network.nics_per_node", 1, 1024, false},
    {"cluster.network.nic_bw_Gbps", 1e-2, 1e6, false},
    {"cluster.network.nic_latency_us", 0, 1e6, false},
    {"cluster.network.nodes_per_leaf", 1, 1000000, false},
    {"cluster.network.oversubscription", 1e-2, 1e3, false},
    // A spread beyond a quarter of the median speed is a broken GPU, not variation (the draws are clamped at 4
    // sigma, so every speed stays above 0).
    {"cluster.gpu_speed_sigma_pct", 0, 20, false},
    {"parallel.dp", 1, 1000000, false},
    {"parallel.pp", 1, 100000, false},
    {"parallel.tp", 1, 1024, false},
    {"parallel.cp", 1, 1024, false},
    {"parallel.cp_a2a", 1, 1024, false},
    {"parallel.ep", 1, 65536, false},
    {"parallel.etp", 1, 1024, false},
    {"parallel.v", 1, 1024, false},
    {"parallel.micro_batch_size", 1, 1000000, false},
    {"parallel.global_batch", 1, 100000000, false},
    {"parallel.stage_layers", 1, 10000, true},  // 0: the first or last virtual stage (scenario.cc)
    {"schedule.seq_slices", 1, 16777216, false},
    {"schedule.slice_tokens", 1, 16777216, false},
    {"training.optimizer_bytes_per_param", 0, 64, false},
    // Bucket counts are clamped to 1024 per virtual stage (core/lower/op_price.h): smaller buckets change nothing.
    {"training.grad_bucket_MB", 1e-2, 1e6, false},
    {"training.moe_expert_load_cv", 0, 10, false},
    {"training.moe_routing_seed", 0, 2147483647, false},
    {"training.moe_capacity_factor", 0.01, 1000, false},
};

std::string g(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.15g", x);
  return b;
}

}  // namespace

const KeyRange* key_ranges_begin() { return std::begin(kRanges); }
const KeyRange* key_ranges_end() { return std::end(kRanges); }

const KeyRange* key_range(const std::string& path) {
  for (const KeyRange& r : kRanges)
    if (path == r.key) return &r;
  return nullptr;
}

std::string range_violation(const std::string& path, double value) {
  const KeyRange* r = key_range(path);
  if (!r) return "";
  if (value == 0 && r->zero_means_none) return "";
  if (value >= r->min && value <= r->max) return "";
  return g(value) + " is outside the plausible range [" + g(r->min) + ", " + g(r->max) + "]" +
         (r->zero_means_none ? " (or 0: none)" : "") + " (docs/limits.md)";
}

}  // namespace pipescope
