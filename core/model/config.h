#pragma once
// Plain, validated configuration structs. SI units inside (s, B, B/s, FLOP/s).
// core/model/scenario.h turns YAML into these; presets live in core/model/presets.h.

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/schedule.h"  // StageStyle

namespace pipescope {

// ---------------------------------------------------------------- model
enum class FfnKind : std::uint8_t {
  Gelu,    // GPT: up (h -> f), GeLU, down (f -> h)
  SwiGlu,  // Llama: gate and up (h -> f each, one fused h -> 2f GEMM), SiLU(gate) * up, down (f -> h)
};
enum class NormKind : std::uint8_t {
  LayerNorm,  // scale and shift: 2h parameters
  RmsNorm,    // scale only: h parameters
};
enum class PositionKind : std::uint8_t {
  Learned,  // GPT: a seq_len x h position-embedding table on the first stage
  Rope,     // rotary embeddings: no parameters
};

struct ModelSpec {
  std::string name;    // preset name or free text
  int layers = 0;      // transformer layers
  int hidden = 0;      // h
  int heads = 0;       // a
  int ffn_hidden = 0;  // MLP inner size (4h for GPT)
  int vocab = 0;       // V
  int seq_len = 0;     // s (tokens per sequence)
  bool tied_embeddings = true;
  int query_groups = 0;  // K/V heads (grouped-query attention); 0 = heads (multi-head attention)
  FfnKind ffn = FfnKind::Gelu;
  NormKind norm = NormKind::LayerNorm;
  PositionKind position = PositionKind::Learned;
  bool linear_bias = true;  // biases on the QKV, projection and MLP GEMMs (GPT yes, Llama no)
  // Width of one attention head; 0 = hidden / heads. Qwen3 runs 64 heads of 128 on a hidden size of 4096: its
  // attention is twice as wide as its residual stream (Megatron's --kv-channels).
  int head_dim = 0;
  // Mixture of experts (docs/moe.md); moe_experts = 0: every layer has the dense MLP of ffn_hidden.
  int moe_experts = 0;            // routed experts per MoE layer
  int moe_top_k = 0;              // experts each token is sent to
  int moe_ffn_hidden = 0;         // inner size of one routed expert's MLP (same kind as ffn)
  int moe_shared_ffn_hidden = 0;  // shared experts' inner size, all of them together (0 = none)
  int moe_dense_layers = 0;       // the first layers keep the dense MLP (DeepSeek-V3: 3)
  int moe_layer_freq = 1;         // of the other layers, every moe_layer_freq-th one (counting from the first) is MoE
  // Multi-head latent attention (DeepSeek-V2/V3; docs/moe.md), on when kv_lora_rank > 0: K and V come up from a
  // latent of kv_lora_rank (beside one rotary key of qk_rope_head_dim that every head shares), Q from a latent of
  // q_lora_rank (0 = straight from h); Q and K heads are head_dim + qk_rope_head_dim wide, V heads v_head_dim.
  int q_lora_rank = 0, kv_lora_rank = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // Sliding-window attention (GPT-OSS, Gemma, Mistral): a sliding layer's query attends to the last sliding_window
  // tokens up to itself (0 = no window); of every sliding_window_pattern layers the last attends to the whole
  // context (GPT-OSS: 2, alternating; 0 = every layer slides).
  int sliding_window = 0, sliding_window_pattern = 0;
  bool mla() const { return kv_lora_rank > 0; }
  int kv_heads() const { return query_groups > 0 ? query_groups : heads; }
  int head_width() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  bool moe() const { return moe_experts > 0; }
  // Whether global layer `layer` (0-based) attends through a sliding window.
  bool sliding_layer(int layer) const {
    return sliding_window > 0 && (sliding_window_pattern == 0 || (layer + 1) % sliding_window_pattern != 0);
  }
  // Whether global layer `layer` (0-based) has routed experts.
  bool moe_layer(int layer) const {
    return moe() && layer >= moe_dense_layers && (layer - moe_dense_layers) % moe_layer_freq == 0;
  }
};

// How a token's copies spread over the nodes of an expert group under DeepEP's dispatch, which sends a token across
// the network once per node it goes to: `picks` experts among `items` spread evenly over the nodes; with `groups` > 0
// the experts are in that many equal groups of consecutive experts and the picks come from `group_picks` of them
// (TrainingSpec::moe_router_groups). items = 0: every copy crosses (every group but a DeepEP expert group).
struct NodeDedup {
  int items = 0, picks = 0, groups = 0, group_picks = 0;
};

// ---------------------------------------------------------------- cluster
enum class IntraNodeFabric : std::uint8_t {
  NVSwitch,  // every GPU pair at full per-GPU NVLink bandwidth (star zone)
  CubeMesh,  // p3.16xlarge / DGX-1 hybrid cube mesh (explicit per-pair routes)
  PCIe,      // no NVLink: all intra-node traffic through one shared host bridge
};
enum class InterNodeTopology : std::uint8_t {
  Star,     // one non-blocking switch
  FatTree,  // leaf switches of nodes_per_leaf nodes (all their NICs) under a spine; leaf uplink = downlink / R
  Rail,     // rail-optimised: NIC k of the nodes_per_leaf nodes of a group on leaf k of that group, spine above
};

struct DeviceSpec {
  std::string name;            // e.g. "V100-SXM2-16GB"
  double peak_flops_fp16 = 0;  // dense tensor-core FLOP/s
  double peak_flops_bf16 = 0;  // 0 = not supported (V100)
  double peak_flops_fp32 = 0;  // non-tensor FLOP/s
  double peak_flops_fp64 = 0;  // 0 = unknown (fp64 runs need a calibration profile, e.g. of a CPU)
  double peak_flops_fp8 = 0;   // dense FP8 (E4M3 / E5M2) tensor-core FLOP/s; 0 = no FP8 tensor cores (pre-Hopper)
  double memory_bytes = 0;
  double hbm_bw_Bps = 0;
  // Analytic efficiency parameters (roofline with efficiency; docs/cost-model.md, "Device and cluster descriptions").
  double gemm_efficiency = 0.0;      // large-GEMM share of peak reached
  double gemm_half_sat_flops = 0.0;  // GEMM FLOPs at which efficiency reaches half of gemm_efficiency
  double kernel_launch_s = 0.0;      // per-kernel launch / fixed overhead
  double memory_efficiency = 0.0;    // share of HBM bandwidth reached by bandwidth-bound kernels
  int sm_count = 0;                  // streaming multiprocessors (GEMM wave quantisation); 0 = unknown: none
  // Of those, the ones communication kernels hold while they run beside compute (an overlapped pair's all-to-all,
  // core/lower/overlap.h): the pair's compute runs on the rest. 0 = no measured figure: no slowdown.
  int comm_sm_count = 0;
  // Hopper's persistent GEMM kernels write a tile while the next one computes; Volta's and Ampere's finish a wave's
  // writes before the next wave starts (core/cost/gemm_model.h). Used with sm_count only.
  bool gemm_epilogue_hidden = false;
  // Share of the dtype peak the fused attention kernels reach at long sequences, forward and backward (the backward
  // recomputes the scores and writes three gradients: it reaches less); 0 = gemm_efficiency.
  double flash_fwd_efficiency = 0, flash_bwd_efficiency = 0;
};
// Whether two descriptions have every figure alike (the name aside).
bool same_figures(const DeviceSpec& a, const DeviceSpec& b);
// The dense peak that a run in training dtype `dtype` computes at outside its FP8 GEMMs: the dtype's own, and
// bf16's for fp8 (the GEMMs' FP8 peak is peak_flops_fp8). 0 for an unknown dtype or a peak the device lacks. Also
// MFU's denominator, as NVIDIA's tables count it (a 16-bit peak for FP8 runs too).
double dtype_peak_flops(const DeviceSpec& d, const std::string& dtype);

struct ClusterSpec {
  std::string preset;  // preset name or empty
  int nodes = 0;
  int gpus_per_node = 0;
  DeviceSpec device;
  IntraNodeFabric fabric = IntraNodeFabric::NVSwitch;
  double nvlink_bw_Bps = 0;  // per GPU per direction (NVSwitch) or per single link (cube mesh)
  double nvlink_latency_s = 0;
  double pcie_bw_Bps = 0;  // host path for GPU pairs without NVLink (cube mesh "SYS")
  double pcie_latency_s = 0;
  int nics_per_node = 1;  // each NIC its own link; GPU i uses NIC i mod nics_per_node (DGX: 8, one per GPU)
  double nic_bw_Bps = 0;  // per NIC per direction
  double nic_latency_s = 0;
  // NCCL over TCP sockets (a NIC without RDMA, e.g. EC2 p3 instances without EFA): the socket transport moves
  // 72% of the line rate (docs/cost-model.md: fit to TeraPipe's Table 2, 18 of 25 Gb/s). Presets only.
  bool nic_sockets = false;
  double nic_data_Bps() const;  // per NIC per direction: nic_bw_Bps, times the socket transport's share
  InterNodeTopology topology = InterNodeTopology::Star;
  int nodes_per_leaf = 0;         // fat-tree / rail: nodes under one leaf switch (0 = auto: leaf_nodes())
  double oversubscription = 1.0;  // fat-tree / rail: leaf downlink / uplink bandwidth (1 = full bisection)
  // Nodes per leaf switch: nodes_per_leaf, or by default the largest divisor of `nodes` that is at most 32
  // (a 64-port leaf with 32 ports down and 32 up, as in a DGX SuperPOD scalable unit).
  int leaf_nodes() const {
    if (nodes_per_leaf > 0) return nodes_per_leaf;
    for (int k = nodes < 32 ? nodes : 32; k > 1; k--)
      if (nodes % k == 0) return k;
    return 1;
  }
  int total_gpus() const { return nodes * gpus_per_node; }
  // GPU-to-GPU speed spread: standard deviation of a GPU's speed over the median GPU's (0 = every GPU alike), and
  // the seed of the draws (core/cost/gpu_variation.h).
  double gpu_speed_sigma = 0;
  std::uint64_t variation_seed = 1;
};

// ---------------------------------------------------------------- parallelism
// How a context-parallel group exchanges what attention needs (Megatron-LM's --cp-comm-type, Transformer Engine's
// context-parallel attention; docs/cost-model.md "Context parallelism"): P2P rings the K/V chunks through the group
// behind the attention steps; AllGather gathers the whole K/V before attention (and reduce-scatters dK/dV after);
// A2A (Ulysses) trades sequence shards for head shards with all-to-alls of Q, K, V and the output, attention then
// runs whole sequences on heads / cp; A2AP2P is the hierarchical form: all-to-all over groups of cp_a2a adjacent
// context-parallel ranks, a P2P ring over the cp / cp_a2a such groups.
enum class CpCommType : std::uint8_t { P2P, AllGather, A2A, A2AP2P };

struct ParallelSpec {
  int dp = 1;  // data-parallel replicas
  int pp = 1;  // pipeline stages (ranks)
  int tp = 1;  // tensor-parallel degree
  int cp = 1;  // context-parallel degree: each rank of a cp group holds seq_len / cp tokens
  CpCommType cp_comm_type = CpCommType::P2P;
  int cp_a2a = 1;  // cp_comm_type a2a+p2p: context-parallel ranks per all-to-all group (the ring has cp / cp_a2a)
  int v = 1;       // model chunks per pipeline rank (interleaved schedules)
  int micro_batch_size = 1;        // b (sequences per micro-batch)
  int global_batch = 1;            // B (sequences per iteration, all replicas)
  bool sequence_parallel = false;  // Megatron sequence parallelism: LayerNorm/dropout activations split t ways
  // Expert parallelism (MoE models; docs/moe.md): the routed experts of a layer are spread over ep GPUs of a
  // pipeline stage, whose tp * cp * dp GPUs Megatron-Core re-folds into etp x ep x expert-data-parallel groups
  // (etp innermost); expert tensor parallelism splits each expert's MLP etp ways.
  int ep = 1;
  int etp = 1;
  // GPUs of one expert group (Megatron-Core's expert tensor-and-model-parallel group, the dispatch's group).
  int expert_group_gpus() const { return ep * etp; }
  // GPUs of a pipeline stage that hold the same expert shard: the expert-data-parallel size.
  long long expert_data_gpus() const { return 1LL * tp * cp * dp / (1LL * ep * etp); }
  // Transformer layers of each virtual stage 0..pp*v-1 (uneven layouts); empty = model.layers / (pp * v) each.
  // Read it through stage_layer_range() (core/model/placement.h), never directly.
  std::vector<int> stage_layers;
  // m = global_batch / (micro_batch_size * dp)
  int micro_batches() const { return global_batch / (micro_batch_size * dp); }
};

// ---------------------------------------------------------------- schedule
// Names, traits and generators: core/model/schedule_registry.h (the one table of schedules).
enum class ScheduleKind : std::uint8_t {
  GPipe,
  OneFOneB,
  Interleaved,
  TeraPipe,
  Seq1F1B,
  Seq1F1BInterleaved,
  ZeroBubbleH1,
  ZeroBubbleH2,
  ZeroBubbleV,
  DualPipeV,
  DualPipe,
  File,  // read from schedule.file (core/ir/schedule_csv.h)
};

// Activation recomputation (Korthikanti et al. 2022): none; selective = only the attention core (scores, softmax,
// dropout, P.V) is recomputed in backward, its large s^2 tensors not stored; full = each layer keeps only its input
// and reruns its whole forward before its backward.
enum class Recompute : std::uint8_t { None, Selective, Full };

// What selective recomputation reruns, as Megatron-Core's --recompute-modules names it (docs/memory.md): a module's
// outputs are not stored after the forward and backward runs it again from its stored inputs. core_attn is the
// default (the attention core, the Korthikanti et al. selective recomputation); moe is the whole MoE layer, its two
// all-to-alls included.
enum class RecomputeModule : std::uint8_t { CoreAttn, LayerNorm, Mlp, MoeAct, Moe, SharedExperts, MlaUpProj };
constexpr std::uint8_t module_bit(RecomputeModule m) { return static_cast<std::uint8_t>(1u << static_cast<int>(m)); }

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int seq_slices = 1;               // k: token slices / sequence segments per micro-batch (uniform unless given)
  std::vector<int> slice_tokens;    // explicit slice lengths (sum = seq_len); empty = uniform / planned
  std::string slicing = "uniform";  // uniform | dp (TeraPipe planner) | cwp (Seq1F1B equal-FLOPs) | explicit
  Recompute recompute = Recompute::None;
  std::uint8_t recompute_modules = module_bit(RecomputeModule::CoreAttn);  // with selective: module_bit()s
  // Whether backward reruns module m (selective recomputation of it; full recomputation reruns everything).
  bool recomputes(RecomputeModule m) const {
    return recompute == Recompute::Full || (recompute == Recompute::Selective && (recompute_modules & module_bit(m)));
  }
  bool scatter_gather = true;  // Megatron scatter/gather of cross-node p2p (tp > 1)
  // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): the steady state's forward-backward steps run
  // as overlapped pairs, one micro-batch's all-to-all (and tensor-parallel communication) beside the other's compute
  // (core/ir/combined_1f1b.cc, core/lower/overlap.h). Schedules whose registry traits allow it.
  bool overlap_moe_a2a = false;
  // kind file: the CSV (PyTorch pipelining's format), relative paths resolved against the scenario's directory
  // when it is loaded, and where the file puts the virtual stages (read from the file then).
  std::string file;
  StageStyle file_style = StageStyle::Loop;
};

// ---------------------------------------------------------------- training numerics
struct TrainingSpec {
  // fp16 | bf16 | fp32 | fp64 (compute and p2p element type) | fp8: bf16 training whose linear-layer GEMMs run
  // in FP8 (Transformer Engine's hybrid recipe, core/cost/fp8.h); activations, weights and optimizer as bf16.
  std::string dtype = "fp16";
  bool fp8() const { return dtype == "fp8"; }
  int act_bytes_per_elem() const { return dtype == "fp64" ? 8 : dtype == "fp32" ? 4 : 2; }
  // Bytes per parameter held by a GPU: < 0 (the default) = from the dtypes (param_bytes()); >= 0 = this total
  // (weights + gradients + optimizer state), the optimizer state being the rest after weights and gradients.
  double optimizer_bytes_per_param = -1;
  bool grad_fp32 = false;  // gradient buffer and DP reduction in fp32 (4 B, Megatron's main_grad) instead of dtype
  // ZeRO-1 / Megatron --use-distributed-optimizer: gradients reduce-scattered and parameters all-gathered over
  // the DP group instead of one all-reduce; optimizer state (fp32 master + Adam moments) sharded over DP and the
  // optimizer step run on the 1/dp shard.
  bool distributed_optimizer = false;
  // Megatron --overlap-grad-reduce: the DP reduction of a bucket of grad_bucket_MB starts as soon as the weight
  // gradients it holds are final (during the last micro-batch's backward), beside the ongoing compute.
  bool overlap_grad_reduce = false;
  double grad_bucket_bytes = 40e6;  // grad_bucket_MB: bytes of gradients per DP bucket (one reduction call each)
  // Megatron --overlap-param-gather (distributed optimizer): the parameter all-gather of the next iteration's
  // first forward runs bucket by bucket beside it; what cannot hide stays exposed at the iteration's start.
  bool overlap_param_gather = false;
  // Fully sharded data parallelism beside pipelining (TorchTitan's FSDP2, Megatron's --use-torch-fsdp2) as it runs
  // under pipelining: each transformer block's parameters, gradients and optimizer state sharded over the data-
  // parallel group; a stage's parameters all-gathered at their first use in the iteration and kept gathered through
  // its micro-batches (TorchTitan's reshard_after_forward "default" under pipelining: one all-gather per iteration,
  // not one per micro-batch), its gradients accumulated unsharded in fp32 (reduce_dtype) and reduce-scattered
  // after its last backward, the optimizer step on the shard. Time: as the distributed optimizer with both overlaps;
  // memory: the working copy and the fp32 accumulator whole, master weights, moments and fp32 gradients sharded.
  bool fsdp = false;
  // FSDP2's reshard_after_forward (TorchTitan's fsdp_reshard_after_forward "always", its default without pipelining):
  // every forward and backward all-gathers its stage's parameters again, block by block with the next block
  // prefetched, and reshards them after; the working copy is then sharded except for about two blocks.
  bool fsdp_reshard_after_forward = false;
  // The optimizer state and step sharded over the data-parallel group: ZeRO-1 or FSDP.
  bool sharded_optimizer() const { return distributed_optimizer || fsdp; }
  struct ParamBytes {
    double weight = 0, grad = 0, state = 0;  // state: fp32 master copy + Adam moments (unsharded)
    double total() const { return weight + grad + state; }
  };
  // Weights at the compute dtype; gradients at 4 B with grad_fp32 else the dtype; state = fp32 master (16-bit
  // dtypes only) + two Adam moments of max(4, dtype) B: 2 + 2 + 4 + 8 = 16 (fp16), 2 + 4 + 4 + 8 = 18 (bf16 with
  // grad_fp32, Megatron's mixed precision), 4 + 4 + 8 = 16 (fp32). optimizer_bytes_per_param >= 0 overrides the sum.
  ParamBytes param_bytes() const {
    ParamBytes b;
    const int e = act_bytes_per_elem();
    b.weight = e;
    b.grad = grad_fp32 ? 4 : e;
    if (optimizer_bytes_per_param >= 0) {
      b.state = optimizer_bytes_per_param - b.weight - b.grad;
      if (b.state < 0) b.state = 0;
    } else {
      b.state = (e < 4 ? 4 : 0) + 2.0 * (e > 4 ? e : 4);
    }
    return b;
  }
  bool flash_attention = false;  // FlashAttention: no materialised score matrix (memory and HBM traffic O(l))
  // How an MoE layer moves its tokens (docs/moe.md): "alltoall" (Megatron's NCCL all-to-all: every copy of a token
  // crosses the network to its expert's GPU) or "deepep" (DeepEP's dispatch: a token goes once to each node that
  // holds one of its experts, then over NVLink to the experts' GPUs; the combine sums a node's outputs first).
  std::string moe_dispatcher = "alltoall";
  // Which tokens each expert receives (docs/moe.md, "Load imbalance"): "balanced" (every expert the mean:
  // Megatron's --moe-router-force-load-balancing) or "trained" (a trained router's preference: per MoE layer, the
  // experts' shares of the tokens drawn lognormal with coefficient of variation moe_expert_load_cv, seeded by
  // moe_routing_seed and the layer).
  std::string moe_routing = "balanced";
  // 0.22: lognormal shares whose expected largest share among 64 experts is 1.62x the mean, the middle of the
  // maximal violations of global balance (0.52 and 0.72) that Wang et al. 2024 (auxiliary-loss-free balancing,
  // arXiv 2408.15664, Table 2) measure for routers balanced by an auxiliary loss.
  static constexpr double kTrainedRouterLoadCv = 0.22;
  double moe_expert_load_cv = kTrainedRouterLoadCv;
  int moe_routing_seed = 1;
  // Megatron's --moe-expert-capacity-factor: an expert takes at most this many times the mean tokens, the rest
  // are dropped (0: dropless); with moe_pad_to_capacity (--moe-pad-expert-input-to-capacity) every expert's input
  // is padded to its capacity, so the time is the capacity's whatever the routing.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // DeepSeek-V3's FP8 dispatch (its paper, section 3.3): the forward dispatch moves the tokens in FP8 with one fp32
  // scale per 128 elements; the combine and the backward's all-to-alls stay 16-bit.
  bool moe_dispatch_fp8 = false;
  // Group-limited routing (Megatron-Core's --moe-router-num-groups / --moe-router-group-topk; DeepSeek-V3's
  // node-limited routing, its paper section 2.1.2): the experts in moe_router_groups equal groups of consecutive
  // experts, each token's experts taken from the moe_router_group_topk best groups (0: no groups). With one group
  // per node of the expert group, a token reaches at most group_topk nodes: what DeepEP's dispatch moves across them.
  int moe_router_groups = 0, moe_router_group_topk = 0;
  // How a weight-gradient GEMM adds into the gradient accumulated over micro-batches and slices: "fused" (cuBLAS
  // beta = 1, Megatron-LM's gradient accumulation fusion: reads and writes the gradient) or "autograd" (PyTorch's
  // AccumulateGrad, as TeraPipe's code: the GEMM writes a new tensor, then grad += new).
  std::string wgrad_accumulation = "fused";
  // Dropout after attention's softmax and on the two residual branches (Megatron-LM's layer). TeraPipe's layer has
  // none: no attention dropout kernel or mask bytes, and the residual add without a mask.
  bool dropout = true;
  // The attention softmax as unfused PyTorch: F.softmax(scores, dtype=float32) then cast back to the 16-bit dtype
  // (TeraPipe's code), its backward in fp32 too; false = Megatron's fused scale-mask-softmax (16-bit in and out).
  bool softmax_fp32 = false;
  // Megatron-LM's async tensor-parallel all-reduce: a column-parallel linear's input-gradient all-reduce runs beside
  // its wgrad GEMM (core/cost/tp_overlap.h).
  bool async_tp_allreduce = false;
  // Transformer Engine's userbuffers overlap (Megatron --tp-comm-overlap; TorchTitan's async tensor parallelism is the
  // same decomposition): with sequence parallelism, each linear's all-gather of its input or reduce-scatter of its
  // output runs chunk by chunk beside its GEMM, in forward (and recomputation) and in the fused backward's dgrads
  // (core/cost/tp_overlap.h).
  bool tp_comm_overlap = false;
};

// ---------------------------------------------------------------- simulation knobs
struct SimSpec {
  std::string collectives = "auto";    // ring | aggregate | analytic | auto
  std::string placement = "megatron";  // megatron | terapipe | stage-major | replica-major
  std::string profile;                 // device profile file (calibration), empty = analytic model
  // Stage-to-stage sends: "eager" (posted and overlapped with the next op, as pipescope's runtime does) or
  // "blocking" (the next op waits for the send, as Megatron-LM's p2p calls: LoweredSchedule::blocking_sends).
  std::string p2p = "eager";
};

struct Scenario {
  std::string name;
  std::string source;  // file it came from ("<builtin>" for the default)
  ModelSpec model;
  ClusterSpec cluster;
  ParallelSpec parallel;
  ScheduleSpec schedule;
  TrainingSpec training;
  SimSpec sim;
};

const char* to_string(ScheduleKind k);  // the registry's name (core/model/schedule_registry.cc)
const char* to_string(FfnKind f);
const char* to_string(NormKind n);
const char* to_string(PositionKind p);
const char* to_string(Recompute r);
const char* to_string(RecomputeModule m);
const char* to_string(IntraNodeFabric f);
const char* to_string(InterNodeTopology t);
const char* to_string(CpCommType t);  // Megatron's spellings: p2p, allgather, a2a, a2a+p2p

}  // namespace pipescope
