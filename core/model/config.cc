#include "core/model/config.h"

#include <tuple>

namespace pipescope {

bool same_figures(const DeviceSpec& a, const DeviceSpec& b) {
  auto figures = [](const DeviceSpec& d) {
    return std::tie(d.peak_flops_fp16, d.peak_flops_bf16, d.peak_flops_fp32, d.peak_flops_fp64, d.peak_flops_fp8,
                    d.memory_bytes, d.hbm_bw_Bps, d.gemm_efficiency, d.gemm_half_sat_flops, d.kernel_launch_s,
                    d.memory_efficiency, d.sm_count, d.comm_sm_count, d.gemm_epilogue_hidden, d.flash_fwd_efficiency,
                    d.flash_bwd_efficiency);
  };
  static_assert(sizeof(DeviceSpec) == sizeof(std::string) + 13 * sizeof(double) + 4 * sizeof(int),
                "a DeviceSpec field is missing from same_figures");
  return figures(a) == figures(b);
}

double dtype_peak_flops(const DeviceSpec& d, const std::string& dtype) {
  if (dtype == "fp16") return d.peak_flops_fp16;
  if (dtype == "bf16" || dtype == "fp8") return d.peak_flops_bf16;
  if (dtype == "fp32") return d.peak_flops_fp32;
  if (dtype == "fp64") return d.peak_flops_fp64;
  return 0;
}

const char* to_string(IntraNodeFabric f) {
  switch (f) {
    case IntraNodeFabric::NVSwitch:
      return "nvswitch";
    case IntraNodeFabric::CubeMesh:
      return "cube-mesh";
    case IntraNodeFabric::PCIe:
      return "pcie";
  }
  return "?";
}

const char* to_string(InterNodeTopology t) {
  switch (t) {
    case InterNodeTopology::Star:
      return "star";
    case InterNodeTopology::FatTree:
      return "fat-tree";
    case InterNodeTopology::Rail:
      return "rail";
  }
  return "?";
}

const char* to_string(CpCommType t) {
  switch (t) {
    case CpCommType::P2P:
      return "p2p";
    case CpCommType::AllGather:
      return "allgather";
    case CpCommType::A2A:
      return "a2a";
    case CpCommType::A2AP2P:
      return "a2a+p2p";
  }
  return "?";
}

const char* to_string(FfnKind f) {
  switch (f) {
    case FfnKind::Gelu:
      return "gelu";
    case FfnKind::SwiGlu:
      return "swiglu";
  }
  return "?";
}

const char* to_string(NormKind n) {
  switch (n) {
    case NormKind::LayerNorm:
      return "layernorm";
    case NormKind::RmsNorm:
      return "rmsnorm";
  }
  return "?";
}

const char* to_string(PositionKind p) {
  switch (p) {
    case PositionKind::Learned:
      return "learned";
    case PositionKind::Rope:
      return "rope";
  }
  return "?";
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

const char* to_string(RecomputeModule m) {
  switch (m) {
    case RecomputeModule::CoreAttn:
      return "core_attn";
    case RecomputeModule::LayerNorm:
      return "layernorm";
    case RecomputeModule::Mlp:
      return "mlp";
    case RecomputeModule::MoeAct:
      return "moe_act";
    case RecomputeModule::Moe:
      return "moe";
    case RecomputeModule::SharedExperts:
      return "shared_experts";
    case RecomputeModule::MlaUpProj:
      return "mla_up_proj";
  }
  return "?";
}

}  // namespace pipescope

namespace pipescope {
double ClusterSpec::nic_data_Bps() const { return nic_bw_Bps * (nic_sockets ? 0.72 : 1.0); }
}  // namespace pipescope
