#include "core/model/presets.h"

#include "core/util/units.h"

namespace pipescope {
namespace {

using namespace units;

// ---------------------------------------------------------------- models
// Defaults shared by the GPT-3 and Megatron tables: FFN 4h, V = 51200, s = 2048, tied embeddings.
ModelSpec gpt(const char* name, int layers, int hidden, int heads, int vocab = 51200, int seq_len = 2048,
              bool tied = true) {
  ModelSpec m;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = vocab;
  m.seq_len = seq_len;
  m.tied_embeddings = tied;
  return m;
}

// Llama-style decoder: grouped-query attention, SwiGLU, RMSNorm, rotary positions, no linear biases, untied
// embeddings (scenarios/README.md "Model presets" gives the sources).
ModelSpec llama(const char* name, int layers, int hidden, int heads, int groups, int ffn, int vocab, int seq_len) {
  ModelSpec m = gpt(name, layers, hidden, heads, vocab, seq_len, false);
  m.ffn_hidden = ffn;
  m.query_groups = groups;
  m.ffn = FfnKind::SwiGlu;
  m.norm = NormKind::RmsNorm;
  m.position = PositionKind::Rope;
  m.linear_bias = false;
  return m;
}

// Nemotron-4 340B: GQA with 8 groups, a two-matrix squared-ReLU MLP (the GeLU shape here: same GEMMs, another
// element-wise function), LayerNorm, rotary positions, no biases, untied embeddings.
ModelSpec nemotron4_340b() {
  ModelSpec m = gpt("nemotron4-340b", 96, 18432, 96, 256000, 4096, false);
  m.ffn_hidden = 73728;
  m.query_groups = 8;
  m.position = PositionKind::Rope;
  m.linear_bias = false;
  return m;
}

// A Llama-style mixture of experts: every layer (after `dense` dense ones) routes each token to k of E experts of
// inner size moe_f; head_dim 0 = hidden / heads. scenarios/README.md "Model presets" gives the sources.
ModelSpec moe(ModelSpec m, int experts, int k, int moe_f, int head_dim = 0, int shared_f = 0, int dense = 0) {
  m.moe_experts = experts;
  m.moe_top_k = k;
  m.moe_ffn_hidden = moe_f;
  m.head_dim = head_dim;
  m.moe_shared_ffn_hidden = shared_f;
  m.moe_dense_layers = dense;
  return m;
}

// DeepSeek-V3 (its repository's inference/configs/config_671B.json; the paper, section 4.2): 61 layers, the first 3
// dense (ffn 18432), then 256 routed experts of 2048, top-8, beside one shared expert of 2048; multi-head latent
// attention (Q latent 1536, K/V latent 512, heads of 128 + 64 rotary, V heads of 128); V = 129280; s = 4096, its
// pre-training length. The multi-token prediction module is left out.
ModelSpec deepseek_v3() {
  ModelSpec m = moe(llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096), 256, 8, 2048, 128, 2048, 3);
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  return m;
}

// GPT-OSS-120B (OpenAI's model card and its Hugging Face config.json): 36 layers of hidden 2880, 64 query heads of 64
// (attention 4096 wide) on 8 K/V heads, every layer 128 experts of 2880, top-4, no shared expert; biases on the
// attention and expert GEMMs; layers alternate a 128-token sliding window and full attention (the first slides);
// V = 201088 (o200k_harmony), untied; s = 4096, its initial context length. Left out: the attention sinks (a learned
// per-head logit in each softmax's denominator) and the clamped SwiGLU's extra element-wise terms.
ModelSpec gpt_oss_120b() {
  ModelSpec m = moe(llama("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 4096), 128, 4, 2880, 64);
  m.linear_bias = true;
  m.sliding_window = 128;
  m.sliding_window_pattern = 2;
  return m;
}

const std::vector<ModelSpec>& models() {
  static const std::vector<ModelSpec> kModels = {
      // docs/papers.md#terapipe (heads = H/128 from the authors' code). TeraPipe times only the transformer
      // stack; V and s are the shared defaults.
      gpt("gpt3-1b", 24, 2048, 16),
      gpt("gpt3-13b", 40, 5120, 40),
      gpt("gpt3-44b", 96, 6144, 48),
      gpt("gpt3-175b", 96, 12288, 96),
      // docs/papers.md#megatron, Table 1 (weak scaling): V = 51200, s = 2048, tied embeddings.
      gpt("megatron-1.7b", 24, 2304, 24),
      gpt("megatron-3.6b", 30, 3072, 32),
      gpt("megatron-7.5b", 36, 4096, 32),
      gpt("megatron-18.4b", 40, 6144, 48),
      gpt("megatron-39.1b", 48, 8192, 64),
      gpt("megatron-76.1b", 60, 10240, 80),
      gpt("megatron-145.6b", 80, 12288, 96),
      gpt("megatron-310.1b", 96, 16384, 128),
      gpt("megatron-529.6b", 105, 20480, 128),
      gpt("megatron-1t", 128, 25600, 160),
      // docs/papers.md#seq1f1b: untied embeddings; the authors' run script trains on codeparrot with GPT-2's BPE
      // (--vocab-file vocab.json --merge-file merges.txt), 50257 tokens, which Megatron pads to a multiple of
      // 128 * tp: 50304 for the 2.7B (tp 1), 51200 for the others (tp 8). s = 32768 is the one length that the
      // result grid uses for every model.
      gpt("seq1f1b-2.7b", 32, 2560, 32, 50304, 32768, false),
      gpt("seq1f1b-7b", 32, 4096, 32, 51200, 32768, false),
      gpt("seq1f1b-13b", 40, 5120, 40, 51200, 32768, false),
      gpt("seq1f1b-30b", 64, 6144, 64, 51200, 32768, false),
      // Llama 3 / 3.1 (Meta's model cards and params.json: layers, hidden, heads, K/V heads, FFN, V = 128256,
      // s = 8192 training context) and Nemotron-4 340B (NVIDIA's technical report).
      llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
      llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
      llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
      nemotron4_340b(),
      // Mixtures of experts (Hugging Face config.json of each; s = 4096, the length of Megatron-Core's MoE
      // recipes): Mixtral 8x7B and 8x22B (8 experts, top-2, every layer), Qwen3 30B-A3B and 235B-A22B (128
      // experts, top-8, every layer, heads 128 wide on a narrower hidden size; the dense ffn_hidden is unused).
      moe(llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096), 8, 2, 14336),
      moe(llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32000, 4096), 8, 2, 16384),
      moe(llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096), 128, 8, 768, 128),
      moe(llama("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096), 128, 8, 1536, 128),
      deepseek_v3(),
      gpt_oss_120b(),
  };
  return kModels;
}

// ---------------------------------------------------------------- devices
// One description per device; every value and its source is in docs/cost-model.md "Device descriptions".
// Vendor peaks from docs/calibration.md (dense tensor-core rates) and SM counts from NVIDIA's architecture
// whitepapers. HBM capacity is binary (an "80 GB" part has 80 GiB; nvidia-smi prints 81920 MiB); bandwidths are
// decimal GB/s. The analytic model's shares (calibration profiles replace them):
//   gemm_eff   share of peak a large, evenly tiled GEMM reaches (core/cost/gemm_model.h);
//   half_sat   per-GEMM fixed cost, as the FLOPs it would take at that rate (0: none beyond the tile model);
//   launch_us  host cost per kernel (framework dispatch and launch), hidden behind long kernels.
// Hopper's GEMMs are persistent kernels that write one tile while computing the next (gemm_epilogue_hidden).
DeviceSpec device(const char* name, double fp16_tflops, double bf16_tflops, double fp32_tflops, double mem_GiB,
                  double hbm_GBps, int sms, double gemm_eff, double half_sat_flops, double launch_us) {
  DeviceSpec d;
  d.name = name;
  d.peak_flops_fp16 = fp16_tflops * kTflops;
  d.peak_flops_bf16 = bf16_tflops * kTflops;
  d.peak_flops_fp32 = fp32_tflops * kTflops;
  d.memory_bytes = mem_GiB * kGiB;
  d.hbm_bw_Bps = hbm_GBps * kGBps;
  d.sm_count = sms;
  d.gemm_efficiency = gemm_eff;
  d.gemm_half_sat_flops = half_sat_flops;
  d.kernel_launch_s = launch_us * kUs;
  d.memory_efficiency = 0.8;
  return d;
}

// Hopper: FP8 tensor cores (E4M3 / E5M2, dense, no sparsity) at twice the bf16 rate, which Volta and Ampere lack;
// cuBLAS's Hopper GEMMs are persistent warp-specialised kernels (core/cost/gemm_model.h). Communication beside
// compute holds 20 of the 132 SMs: DeepSeek-V3's report (section 3.2.2, 20 SMs saturate InfiniBand and NVLink in
// DualPipe's overlap) and DeepEP's default for its dispatch and combine kernels (Buffer.num_sms = 20).
DeviceSpec hopper(DeviceSpec d, double fp8_tflops) {
  d.peak_flops_fp8 = fp8_tflops * kTflops;
  d.gemm_epilogue_hidden = true;
  d.comm_sm_count = 20;
  return d;
}

// The best matmul a device sustains, over its peak: a brute-force search over large bf16 GEMM shapes
// (Maximum Achievable Matmul FLOPS, stas00/ml-engineering compute/accelerator/README.md: A100 SXM 267.9 of 312 TFLOP/s,
// H100 SXM 792.1 of 989). Hopper falls further short of its datasheet peak because its clock drops under the 700 W
// limit at full tensor-core load. The A100's gemm_efficiency (0.69, fit on the vTrain set) is that ceiling times the
// share Megatron's shapes and stack reach of it; a Hopper running the same stack reaches the same share of its own.
// Rounded to the three digits profiles and tables print (a profile written from the preset times it alike).
constexpr double kA100MatmulCeiling = 267.9 / 312, kHopperMatmulCeiling = 792.1 / 989.4;
constexpr double kHopperGemmEfficiency = 0.643;
static_assert(kHopperGemmEfficiency - 0.69 / kA100MatmulCeiling * kHopperMatmulCeiling < 5e-4 &&
              0.69 / kA100MatmulCeiling * kHopperMatmulCeiling - kHopperGemmEfficiency < 5e-4);

// The fused attention kernels' share of peak, forward and backward, at the causal long-sequence shapes training runs
// (docs/cost-model.md "Fused attention" and the device table: FlashAttention-2's A100 benchmark, 50-73% of peak over
// its shapes). A device without them prices attention at its GEMM share.
// Hopper: cuDNN's fused attention (what Transformer Engine runs there) at head dimension 128 and 16k tokens on an H100
// SXM5, 539 TFLOP/s forward with the causal mask and 516 backward (Shah et al., "FlashAttention-3", 2024, figures of
// section 4.1), over the 989.4 TFLOP/s peak.
constexpr double kHopperFlashFwd = 0.545, kHopperFlashBwd = 0.52;

DeviceSpec flash(DeviceSpec d, double fwd, double bwd) {
  d.flash_fwd_efficiency = fwd;
  d.flash_bwd_efficiency = bwd;
  return d;
}

const std::vector<DeviceSpec>& devices() {
  static const std::vector<DeviceSpec> kDevices = {
      // Volta has FP16 tensor cores only: bf16 peak 0 = unsupported. Shares fit to TeraPipe's Table 2 (PyTorch
      // 1.x eager on p3.16xlarge hosts: 100 us per kernel, a 15 GFLOP fixed cost per GEMM).
      device("V100-SXM2-16GB", 125, 0, 15.7, 16, 900, 80, 0.75, 15e9, 100),
      device("V100-SXM2-32GB", 125, 0, 15.7, 32, 900, 80, 0.75, 15e9, 100),
      // Shares fit to the vTrain A100 development set (Megatron-DeepSpeed with its async TP all-reduce and the
      // GEMM wave epilogue, docs/cost-model.md "Fidelity").
      flash(device("A100-SXM4-80GB", 312, 312, 19.5, 80, 2039, 108, 0.69, 0, 70), 0.63, 0.55),
      // Hopper: the A100's share scaled by the two devices' achievable matmul ceilings (kHopperMatmulCeiling); fused
      // attention at cuDNN's measured share (kHopperFlashFwd / Bwd).
      flash(hopper(device("H100-SXM", 989.4, 989.4, 67, 80, 3350, 132, kHopperGemmEfficiency, 0, 70), 1979),
            kHopperFlashFwd, kHopperFlashBwd),
      // H200: the H100's Hopper die and clocks (same peaks and SMs) with 141 GB of HBM3e at 4.8 TB/s.
      flash(hopper(device("H200-SXM", 989.4, 989.4, 67, 141, 4800, 132, kHopperGemmEfficiency, 0, 70), 1979),
            kHopperFlashFwd, kHopperFlashBwd),
      // Blackwell (docs/cost-model.md "Device and cluster descriptions"): dense peaks of NVIDIA's Blackwell
      // datasheets (B200 in HGX / DGX B200 at 1,000 W; the GB200 and GB300 superchips' GPUs at 1,200 W and
      // 1,400 W), HBM3e 8 TB/s, 148 SMs (B200 / GB200) and 160 (Blackwell Ultra). FP8 is also the MXFP8 rate.
      // No public achievable-matmul measurement yet: Hopper's GEMM share, so the report says no measured set.
      hopper(device("B200-SXM", 2250, 2250, 80, 180, 8000, 148, kHopperGemmEfficiency, 0, 70), 4500),
      hopper(device("GB200", 2500, 2500, 90, 186, 8000, 148, kHopperGemmEfficiency, 0, 70), 5000),
      hopper(device("GB300", 2500, 2500, 80, 279, 8000, 160, kHopperGemmEfficiency, 0, 70), 5000),
  };
  return kDevices;
}

// ---------------------------------------------------------------- clusters
// docs/calibration.md: p3.16xlarge / DGX-1V hybrid cube mesh. nvlink_bw is one NVLink2 link (NV1 =
// 25 GB/s per direction; NV2 pairs get two), GPU pairs without NVLink ("SYS") go over PCIe and the CPU
// interconnect at about 10 GB/s.
ClusterSpec cube_mesh_node(const char* preset, const char* device_name, double nic_Gbps, bool sockets) {
  ClusterSpec c;
  c.preset = preset;
  c.nodes = 1;
  c.gpus_per_node = 8;
  c.device = *device_preset(device_name);
  c.fabric = IntraNodeFabric::CubeMesh;
  c.nvlink_bw_Bps = 25 * kGBps;
  c.nvlink_latency_s = 1 * kUs;
  c.pcie_bw_Bps = 10 * kGBps;
  c.pcie_latency_s = 5 * kUs;
  // One ENA interface per instance, shared by all 8 GPUs (docs/cost-model.md, "aws-p3.16xlarge's NVLink mesh");
  // TCP-level latency.
  c.nics_per_node = 1;
  c.nic_bw_Bps = nic_Gbps * kGbps;
  c.nic_latency_s = 10 * kUs;
  c.nic_sockets = sockets;
  c.topology = InterNodeTopology::Star;  // EC2 cluster placement group: modelled as one non-blocking switch
  return c;
}

// DGX nodes: NVSwitch, every GPU pair at the full per-GPU NVLink rate (per direction, docs/calibration.md);
// one InfiniBand HCA per GPU (docs/calibration.md, docs/papers.md#megatron) in a fat tree. PCIe figures describe
// the host path only (unused by NVSwitch routes).
ClusterSpec dgx_node(const char* preset, const char* device_name, double nvlink_GBps, double pcie_GBps,
                     double nic_Gbps) {
  ClusterSpec c;
  c.preset = preset;
  c.nodes = 1;
  c.gpus_per_node = 8;
  c.device = *device_preset(device_name);
  c.fabric = IntraNodeFabric::NVSwitch;
  c.nvlink_bw_Bps = nvlink_GBps * kGBps;
  c.nvlink_latency_s = 1 * kUs;
  c.pcie_bw_Bps = pcie_GBps * kGBps;
  c.pcie_latency_s = 5 * kUs;
  c.nics_per_node = 8;
  c.nic_bw_Bps = nic_Gbps * kGbps;
  c.nic_latency_s = 5 * kUs;
  c.topology = InterNodeTopology::FatTree;
  return c;
}

// A DGX H100 SuperPOD as built (public sources, scenarios/README.md "Cluster presets"):
// - 8 x H100 SXM5 80 GB per DGX H100 node, all on NVSwitch (4 third-generation NVSwitch chips): NVLink4 900 GB/s
//   per GPU bidirectional = 450 GB/s per direction (NVIDIA DGX H100 datasheet; H100 datasheet).
// - 8 ConnectX-7 NICs per node for the compute fabric, one per GPU, 400 Gb/s NDR InfiniBand each (DGX H100
//   datasheet; DGX SuperPOD reference architecture, "compute fabric").
// - Rail-optimised compute fabric: NIC k of every node of a 32-node scalable unit on leaf switch k of that unit
//   (QM9700, 64 NDR ports: 32 down, 32 up), spine above at full bisection (SuperPOD reference architecture).
// - PCIe gen5 x16 host path (~50 GB/s per direction), NIC/NVLink port latencies as the dgx-h100 preset.
// H100 and Blackwell clusters: GPU-to-GPU speed spread of 1% (one standard deviation; core/cost/gpu_variation.h). Sinha
// et al., "Not All GPUs Are Created Equal" (SC'22): 8% average spread between the fastest and slowest GPU of one SKU
// across clusters of 400 to 27,000 GPUs, i.e. about 6.5 to 8 standard deviations of a normal sample that size.
// The H100 description (and Blackwell's, which borrows its GEMM share) is one median GPU (its share comes from
// single-GPU matmul ceilings), so a job pays its slowest GPU on top; the A100 and V100 shares were fitted to multi-GPU
// runs, which already include it.
constexpr double kMedianGpuSpeedSigma = 0.01;

ClusterSpec median_gpu_cluster(ClusterSpec c) {
  c.gpu_speed_sigma = kMedianGpuSpeedSigma;
  return c;
}

// A GB200 / GB300 NVL72 rack: 72 GPUs on one NVLink 5 switch domain across its 18 compute trays, so one "node" of
// 72 GPUs here (the NVLink domain, not the tray), 900 GB/s per GPU per direction (NVLink 5: 1.8 TB/s per GPU, the
// rack's 130 TB/s); one NIC per GPU for the compute fabric between racks (ConnectX-7 400 Gb/s with GB200,
// ConnectX-8 SuperNIC 800 Gb/s with GB300; NVIDIA GB200 / GB300 NVL72 datasheets), rail-optimised. The host path
// (Grace, NVLink-C2C) carries no GPU traffic on NVSwitch routes.
ClusterSpec nvl72_rack(const char* preset, const char* device_name, double nic_Gbps) {
  ClusterSpec c = median_gpu_cluster(dgx_node(preset, device_name, 900, 450, nic_Gbps));
  c.gpus_per_node = 72;
  c.nics_per_node = 72;
  c.topology = InterNodeTopology::Rail;
  return c;
}

// A cluster whose nodes share `nics` NICs for their inter-node traffic (instead of one per GPU).
ClusterSpec rdma_per_node(ClusterSpec c, int nics) {
  c.nics_per_node = nics;
  return c;
}

ClusterSpec dgx_h100_superpod() {
  ClusterSpec c = median_gpu_cluster(dgx_node("dgx-h100-superpod", "H100-SXM", 450, 50, 400));
  c.topology = InterNodeTopology::Rail;
  c.nodes_per_leaf = 0;  // auto: 32-node scalable units (the largest divisor of nodes <= 32)
  c.oversubscription = 1.0;
  return c;
}

const std::vector<ClusterSpec>& clusters() {
  static const std::vector<ClusterSpec> kClusters = {
      // TeraPipe's cluster: 8 x V100-SXM2-16GB, 25 Gbps per instance (docs/calibration.md, docs/papers.md#terapipe).
      cube_mesh_node("aws-p3.16xlarge", "V100-SXM2-16GB", 25, true),
      // Faster-network V100 variant: 8 x V100-SXM2-32GB, 100 Gbps (docs/calibration.md; cube mesh presumed).
      cube_mesh_node("aws-p3dn.24xlarge", "V100-SXM2-32GB", 100, false),
      // Selene node: NVLink3 300 GB/s per direction per GPU, 8 x 200 Gb/s HDR IB, PCIe gen4 host path.
      dgx_node("dgx-a100", "A100-SXM4-80GB", 300, 25, 200),
      // The vTrain authors' A100 cluster (docs/cost-model.md "Fidelity"): DGX-A100-like nodes of 8 GPUs on
      // NVSwitch, 800 Gb/s of inter-node bandwidth per node (their config: inter_node_bandwidth 800), taken as
      // one 100 Gb/s NIC per GPU.
      dgx_node("vtrain-a100", "A100-SXM4-80GB", 300, 25, 100),
      // The Seq1F1B authors' A100 cluster (docs/cost-model.md "Device and cluster descriptions"): 8 x A100 80 GB on
      // NVLink per node, RoCE RDMA between nodes at a speed the paper does not state. One 100 Gb/s NIC per node is
      // what the set's 4-node rows measure (their interleaved schedules' stage-to-stage transfers); DGX A100's
      // 8 x 200 Gb/s put those rows 12-27% fast.
      rdma_per_node(dgx_node("seq1f1b-a100", "A100-SXM4-80GB", 300, 25, 100), 1),
      // NVLink4 450 GB/s per direction per GPU (docs/calibration.md), 8 x 400 Gb/s NDR IB, PCIe gen5 host path.
      median_gpu_cluster(dgx_node("dgx-h100", "H100-SXM", 450, 50, 400)),
      dgx_h100_superpod(),
      // DGX B200: 8 x B200 on NVLink 5 switches (900 GB/s per GPU per direction), 8 x ConnectX-7 400 Gb/s, PCIe gen5
      // host path (DGX B200 datasheet).
      median_gpu_cluster(dgx_node("dgx-b200", "B200-SXM", 900, 50, 400)),
      nvl72_rack("gb200-nvl72", "GB200", 400),
      nvl72_rack("gb300-nvl72", "GB300", 800),
  };
  return kClusters;
}

template <typename T, typename Get>
std::vector<std::string> names_of(const std::vector<T>& v, Get get) {
  std::vector<std::string> out;
  for (const auto& x : v) out.push_back(get(x));
  return out;
}

}  // namespace

std::optional<ModelSpec> model_preset(const std::string& name) {
  for (const auto& m : models())
    if (m.name == name) return m;
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  return names_of(models(), [](const ModelSpec& m) { return m.name; });
}

std::optional<ClusterSpec> cluster_preset(const std::string& name) {
  for (const auto& c : clusters())
    if (c.preset == name) return c;
  return std::nullopt;
}

std::vector<std::string> cluster_preset_names() {
  return names_of(clusters(), [](const ClusterSpec& c) { return c.preset; });
}

std::optional<DeviceSpec> device_preset(const std::string& name) {
  for (const auto& d : devices())
    if (d.name == name) return d;
  return std::nullopt;
}

std::vector<std::string> device_preset_names() {
  return names_of(devices(), [](const DeviceSpec& d) { return d.name; });
}

}  // namespace pipescope
