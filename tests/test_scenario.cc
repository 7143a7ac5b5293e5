// Scenario loading: presets, overrides, and every kind of loader error with its exact file:line:col and key.
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/presets.h"
#include "core/model/scenario.h"
#include "core/plan/pipeline.h"
#include "core/util/units.h"

namespace pipescope {
namespace {

// The loader's message for `text` ("" when it loads).
std::string error_of(const std::string& text, const std::string& source = "t.yaml") {
  try {
    parse_scenario(text, source);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

// 2 DGX A100 nodes, dp 2 x pp 4 x tp 2; tests append or replace sections.
const std::string kModel = "model: {preset: gpt3-1b}\n";                              // line 1
const std::string kCluster = "cluster: {preset: dgx-a100, nodes: 2}\n";               // line 2
const std::string kParallel = "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32}\n";  // line 3
const std::string kBase = kModel + kCluster + kParallel;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------- presets and overrides

TEST(Scenario, BaseLoadsWithPresetValues) {
  Scenario s = parse_scenario(kBase, "dir/my-run.yaml");
  EXPECT_EQ(s.name, "my-run");  // file stem when no name is given
  EXPECT_EQ(s.source, "dir/my-run.yaml");
  EXPECT_EQ(s.model.name, "gpt3-1b");
  EXPECT_EQ(s.model.layers, 24);
  EXPECT_EQ(s.model.hidden, 2048);
  EXPECT_EQ(s.model.heads, 16);
  EXPECT_EQ(s.model.ffn_hidden, 8192);
  EXPECT_EQ(s.model.vocab, 51200);
  EXPECT_EQ(s.model.seq_len, 2048);
  EXPECT_EQ(s.cluster.preset, "dgx-a100");
  EXPECT_EQ(s.cluster.nodes, 2);
  EXPECT_EQ(s.cluster.gpus_per_node, 8);
  EXPECT_EQ(s.cluster.device.name, "A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(s.cluster.device.peak_flops_fp16, 312e12);
  EXPECT_DOUBLE_EQ(s.cluster.nic_bw_Bps, 25e9);  // 200 Gb/s
  EXPECT_EQ(s.cluster.nics_per_node, 8);
  EXPECT_EQ(s.cluster.topology, InterNodeTopology::FatTree);
  EXPECT_EQ(s.parallel.micro_batches(), 16);
  EXPECT_EQ(s.schedule.kind, ScheduleKind::OneFOneB);
  EXPECT_EQ(s.sim.placement, "megatron");
}

TEST(Scenario, PresetsAreOverriddenFieldByField) {
  const std::string text =
      "name: override\n"
      "model: {preset: gpt3-1b, layers: 16, vocab: 32000, tied_embeddings: false}\n"
      "cluster:\n"
      "  preset: dgx-a100\n"
      "  nodes: 2\n"
      "  device: {memory_GB: 40, hbm_bw_GBps: 1555, gemm_efficiency: 0.7}\n"
      "  intra_node: {nvlink_bw_GBps: 150, nvlink_latency_us: 2.5}\n"
      "  network: {nics_per_node: 4, nic_bw_Gbps: 100, topology: star}\n" +
      kParallel +
      "schedule: {recompute: true, scatter_gather: false}\n"
      "training: {dtype: bf16, optimizer_bytes_per_param: 12, grad_fp32: true}\n"
      "sim: {collectives: ring, placement: replica-major}\n";
  Scenario s = parse_scenario(text, "t.yaml");
  EXPECT_EQ(s.name, "override");
  EXPECT_EQ(s.model.layers, 16);
  EXPECT_EQ(s.model.hidden, 2048);  // kept from the preset
  EXPECT_EQ(s.model.ffn_hidden, 8192);
  EXPECT_EQ(s.model.vocab, 32000);
  EXPECT_FALSE(s.model.tied_embeddings);
  EXPECT_DOUBLE_EQ(s.cluster.device.memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(s.cluster.device.hbm_bw_Bps, 1555e9);
  EXPECT_DOUBLE_EQ(s.cluster.device.gemm_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(s.cluster.device.peak_flops_fp16, 312e12);  // kept
  EXPECT_DOUBLE_EQ(s.cluster.nvlink_bw_Bps, 150e9);
  EXPECT_DOUBLE_EQ(s.cluster.nvlink_latency_s, 2.5e-6);
  EXPECT_EQ(s.cluster.fabric, IntraNodeFabric::NVSwitch);  // kept
  EXPECT_EQ(s.cluster.nics_per_node, 4);
  EXPECT_DOUBLE_EQ(s.cluster.nic_bw_Bps, 12.5e9);   // 100 Gbps = 12.5 GB/s
  EXPECT_DOUBLE_EQ(s.cluster.nic_latency_s, 5e-6);  // kept
  EXPECT_EQ(s.cluster.topology, InterNodeTopology::Star);
  EXPECT_EQ(s.schedule.recompute, Recompute::Full);
  EXPECT_FALSE(s.schedule.scatter_gather);
  EXPECT_EQ(s.training.dtype, "bf16");
  EXPECT_EQ(s.training.act_bytes_per_elem(), 2);
  EXPECT_DOUBLE_EQ(s.training.optimizer_bytes_per_param, 12);
  EXPECT_TRUE(s.training.grad_fp32);
  EXPECT_EQ(s.sim.collectives, "ring");
  EXPECT_EQ(s.sim.placement, "replica-major");
}

// sim.p2p reaches the lowered schedule that simulate and sweep replay (Megatron-LM's blocking p2p calls).
TEST(Scenario, P2pModeReachesTheLoweredSchedule) {
  EXPECT_FALSE(prepare(parse_scenario(kBase, "t.yaml"))->lowered.blocking_sends);
  EXPECT_TRUE(prepare(parse_scenario(kBase + "sim: {p2p: blocking}\n", "t.yaml"))->lowered.blocking_sends);
}

// The layer's dropout and softmax precision (TeraPipe's code: none, fp32): Megatron's by default.
TEST(Scenario, DropoutAndSoftmaxPrecisionKeys) {
  const Scenario d = parse_scenario(kBase, "t.yaml");
  EXPECT_TRUE(d.training.dropout);
  EXPECT_FALSE(d.training.softmax_fp32);
  const Scenario t = parse_scenario(kBase + "training: {dropout: false, softmax_fp32: true}\n", "t.yaml");
  EXPECT_FALSE(t.training.dropout);
  EXPECT_TRUE(t.training.softmax_fp32);
}

TEST(Scenario, FfnFollowsAnOverriddenHiddenSize) {
  Scenario s = parse_scenario("model: {preset: gpt3-1b, hidden: 1024}\n" + kCluster + kParallel, "t.yaml");
  EXPECT_EQ(s.model.ffn_hidden, 4096);
  s = parse_scenario("model: {preset: gpt3-1b, hidden: 1024, ffn_hidden: 2816}\n" + kCluster + kParallel, "t.yaml");
  EXPECT_EQ(s.model.ffn_hidden, 2816);
}

TEST(Scenario, DevicePresetInsideClusterPreset) {
  Scenario s = parse_scenario(
      kModel + "cluster: {preset: dgx-a100, nodes: 2, device: {preset: H100-SXM}}\n" + kParallel, "t.yaml");
  EXPECT_EQ(s.cluster.device.name, "H100-SXM");
  EXPECT_DOUBLE_EQ(s.cluster.device.peak_flops_fp16, 989.4e12);
  EXPECT_DOUBLE_EQ(s.cluster.nvlink_bw_Bps, 300e9);  // the node is still a DGX A100
}

TEST(Scenario, ClusterWithoutPresets) {
  const std::string text = kModel +
                           "cluster:\n"
                           "  nodes: 2\n"
                           "  gpus_per_node: 8\n"
                           "  device: {peak_tflops_fp16: 100, peak_tflops_fp32: 10, memory_GB: 24, hbm_bw_GBps: 1000}\n"
                           "  intra_node: {fabric: pcie, pcie_bw_GBps: 16, pcie_latency_us: 3}\n"
                           "  network: {nic_bw_Gbps: 50, nic_latency_us: 8}\n" +
                           kParallel;
  Scenario s = parse_scenario(text, "t.yaml");
  EXPECT_EQ(s.cluster.preset, "");
  EXPECT_EQ(s.cluster.device.name, "custom");
  EXPECT_DOUBLE_EQ(s.cluster.device.peak_flops_fp16, 100e12);
  EXPECT_DOUBLE_EQ(s.cluster.device.peak_flops_bf16, 0);
  EXPECT_DOUBLE_EQ(s.cluster.device.memory_bytes, 24e9);
  EXPECT_DOUBLE_EQ(s.cluster.device.gemm_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(s.cluster.device.kernel_launch_s, 4e-6);
  EXPECT_EQ(s.cluster.fabric, IntraNodeFabric::PCIe);
  EXPECT_DOUBLE_EQ(s.cluster.pcie_bw_Bps, 16e9);
  EXPECT_DOUBLE_EQ(s.cluster.pcie_latency_s, 3e-6);
  EXPECT_DOUBLE_EQ(s.cluster.nvlink_bw_Bps, 0);  // unused by a PCIe-only node
  EXPECT_EQ(s.cluster.nics_per_node, 1);
  EXPECT_DOUBLE_EQ(s.cluster.nic_bw_Bps, 6.25e9);
  EXPECT_EQ(s.cluster.topology, InterNodeTopology::Star);
}

TEST(Scenario, ModelWithoutPreset) {
  Scenario s = parse_scenario(
      "model: {layers: 8, hidden: 1024, heads: 16, vocab: 50000, seq_len: 1024}\n" + kCluster + kParallel, "t.yaml");
  EXPECT_EQ(s.model.name, "custom");
  EXPECT_EQ(s.model.ffn_hidden, 4096);
  EXPECT_TRUE(s.model.tied_embeddings);
}

TEST(Scenario, ExplicitSliceTokensImplySlicingAndCount) {
  Scenario s = parse_scenario(kBase + "schedule: {kind: terapipe, slice_tokens: [776, 640, 632]}\n", "t.yaml");
  EXPECT_EQ(s.schedule.kind, ScheduleKind::TeraPipe);
  EXPECT_EQ(s.schedule.slicing, "explicit");
  EXPECT_EQ(s.schedule.seq_slices, 3);
  EXPECT_EQ(s.schedule.slice_tokens, (std::vector<int>{776, 640, 632}));
}

TEST(Scenario, EveryModelPresetLoads) {
  ASSERT_EQ(model_preset_names().size(), 28u);
  for (const auto& name : model_preset_names()) {
    SCOPED_TRACE(name);
    Scenario s = parse_scenario("model: {preset: " + name +
                                    "}\ncluster: {preset: dgx-a100, gpus_per_node: 1}\n"
                                    "parallel: {global_batch: 4}\n"
                                    "training: {flash_attention: true}\n",  // multi-head latent attention needs it
                                "t.yaml");
    EXPECT_EQ(s.model.name, name);
    const bool gpt = name.rfind("llama", 0) != 0 && name.rfind("nemotron", 0) != 0 && !s.model.moe();
    if (gpt) {
      EXPECT_EQ(s.model.ffn_hidden, 4 * s.model.hidden);
    }
    if (s.model.head_dim == 0) {
      EXPECT_EQ(s.model.hidden % s.model.heads, 0);
    }
    EXPECT_EQ(s.model.heads % s.model.kv_heads(), 0);
  }
  // Spot checks against the papers' model tables (docs/papers.md).
  const ModelSpec g175 = *model_preset("gpt3-175b");  // docs/papers.md#terapipe
  EXPECT_EQ(g175.layers, 96);
  EXPECT_EQ(g175.hidden, 12288);
  EXPECT_EQ(g175.heads, 96);
  const ModelSpec m1t = *model_preset("megatron-1t");  // docs/papers.md#megatron
  EXPECT_EQ(m1t.layers, 128);
  EXPECT_EQ(m1t.hidden, 25600);
  EXPECT_EQ(m1t.heads, 160);
  EXPECT_EQ(m1t.vocab, 51200);
  const ModelSpec m530 = *model_preset("megatron-529.6b");
  EXPECT_EQ(m530.layers, 105);
  EXPECT_EQ(m530.hidden, 20480);
  const ModelSpec s30 = *model_preset("seq1f1b-30b");  // docs/papers.md#seq1f1b: head dim 96
  EXPECT_EQ(s30.hidden / s30.heads, 96);
  EXPECT_EQ(s30.vocab, 51200);  // GPT-2's 50257 BPE tokens padded to a multiple of 128 * tp (tp 8)
  EXPECT_EQ(model_preset("seq1f1b-2.7b")->vocab, 50304);  // tp 1
  EXPECT_FALSE(s30.tied_embeddings);
  EXPECT_EQ(model_preset("seq1f1b-2.7b")->hidden / model_preset("seq1f1b-2.7b")->heads, 80);
  EXPECT_FALSE(model_preset("gpt3-2b").has_value());
}

TEST(Scenario, EveryClusterAndDevicePresetLoads) {
  ASSERT_EQ(cluster_preset_names().size(), 10u);
  for (const auto& name : cluster_preset_names()) {
    SCOPED_TRACE(name);
    const int per_node = cluster_preset(name)->gpus_per_node, dp = 3 * per_node / 24;  // 8, or 72 (NVL72)
    const std::string text =
        kModel + "cluster: {preset: " + name + ", nodes: 3}\nparallel: {dp: " + std::to_string(dp) +
        ", pp: 24, tp: 1, global_batch: " + std::to_string(8 * dp) + "}\ntraining: {dtype: fp16}\n";
    Scenario s = parse_scenario(text, "t.yaml");
    EXPECT_EQ(s.cluster.nodes, 3);
    EXPECT_EQ(s.cluster.total_gpus(), 3 * per_node);
    EXPECT_GT(s.cluster.nic_bw_Bps, 0);
    // Nodes default to 1 in the preset itself.
    EXPECT_EQ(cluster_preset(name)->nodes, 1);
  }
  for (const auto& name : device_preset_names()) {
    SCOPED_TRACE(name);
    Scenario s = parse_scenario(
        kModel + "cluster: {preset: dgx-a100, nodes: 2, device: {preset: " + name + "}}\n" + kParallel, "t.yaml");
    EXPECT_EQ(s.cluster.device.name, name);
    EXPECT_DOUBLE_EQ(s.cluster.device.kernel_launch_s, device_preset(name)->kernel_launch_s);
  }
  // docs/cost-model.md (device and cluster tables): V100 has no bf16; p3.16xlarge is a cube mesh with one 25 Gbps NIC.
  const ClusterSpec p3 = *cluster_preset("aws-p3.16xlarge");
  EXPECT_EQ(p3.device.name, "V100-SXM2-16GB");
  EXPECT_EQ(p3.device.peak_flops_bf16, 0);
  EXPECT_DOUBLE_EQ(p3.device.peak_flops_fp16, 125e12);
  // Efficiency parameters are tuned by the cost model; they must be usable, not fixed numbers.
  EXPECT_GT(p3.device.gemm_efficiency, 0);
  EXPECT_LE(p3.device.gemm_efficiency, 1);
  EXPECT_GT(p3.device.gemm_half_sat_flops, 0);
  EXPECT_DOUBLE_EQ(p3.device.memory_bytes, 16 * units::kGiB);
  EXPECT_EQ(p3.fabric, IntraNodeFabric::CubeMesh);
  EXPECT_DOUBLE_EQ(p3.nvlink_bw_Bps, 25e9);
  EXPECT_DOUBLE_EQ(p3.nic_bw_Bps, 3.125e9);
  EXPECT_EQ(p3.nics_per_node, 1);
  EXPECT_DOUBLE_EQ(cluster_preset("aws-p3dn.24xlarge")->nic_bw_Bps, 12.5e9);
  EXPECT_EQ(cluster_preset("aws-p3dn.24xlarge")->device.name, "V100-SXM2-32GB");
  // DGX H100 SuperPOD as built: 8 GPUs on NVSwitch (450 GB/s per direction), 8 x 400 Gb/s NICs, rail fabric.
  const ClusterSpec pod = *cluster_preset("dgx-h100-superpod");
  EXPECT_EQ(pod.gpus_per_node, 8);
  EXPECT_EQ(pod.fabric, IntraNodeFabric::NVSwitch);
  EXPECT_DOUBLE_EQ(pod.nvlink_bw_Bps, 450e9);
  EXPECT_EQ(pod.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(pod.nic_bw_Bps, 50e9);
  EXPECT_EQ(pod.topology, InterNodeTopology::Rail);
  EXPECT_DOUBLE_EQ(pod.oversubscription, 1.0);
  const ClusterSpec h100 = *cluster_preset("dgx-h100");
  EXPECT_DOUBLE_EQ(h100.nvlink_bw_Bps, 450e9);
  EXPECT_DOUBLE_EQ(h100.nic_bw_Bps, 50e9);
  EXPECT_DOUBLE_EQ(h100.device.hbm_bw_Bps, 3350e9);
  // Blackwell: DGX B200 (8 GPUs, NVLink 5 at 900 GB/s per direction) and the NVL72 racks, one node of 72 GPUs on
  // one NVLink domain with a NIC per GPU (400 Gb/s with GB200, 800 Gb/s with GB300).
  const ClusterSpec b200 = *cluster_preset("dgx-b200");
  EXPECT_EQ(b200.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(b200.nvlink_bw_Bps, 900e9);
  EXPECT_DOUBLE_EQ(b200.device.peak_flops_bf16, 2250e12);
  EXPECT_DOUBLE_EQ(b200.device.peak_flops_fp8, 4500e12);
  for (const char* name : {"gb200-nvl72", "gb300-nvl72"}) {
    SCOPED_TRACE(name);
    const ClusterSpec r = *cluster_preset(name);
    EXPECT_EQ(r.gpus_per_node, 72);
    EXPECT_EQ(r.nics_per_node, 72);
    EXPECT_EQ(r.fabric, IntraNodeFabric::NVSwitch);
    EXPECT_DOUBLE_EQ(r.nvlink_bw_Bps, 900e9);
    EXPECT_EQ(r.topology, InterNodeTopology::Rail);
    EXPECT_DOUBLE_EQ(r.device.peak_flops_fp8, 5000e12);
    EXPECT_DOUBLE_EQ(r.device.hbm_bw_Bps, 8000e9);
    EXPECT_DOUBLE_EQ(r.gpu_speed_sigma, 0.01);
  }
  EXPECT_DOUBLE_EQ(cluster_preset("gb200-nvl72")->nic_bw_Bps, 50e9);
  EXPECT_DOUBLE_EQ(cluster_preset("gb300-nvl72")->nic_bw_Bps, 100e9);
  EXPECT_DOUBLE_EQ(cluster_preset("gb300-nvl72")->device.memory_bytes, 279 * units::kGiB);
  EXPECT_FALSE(cluster_preset("dgx-b300").has_value());
}

// ---------------------------------------------------------------- default scenario

TEST(Scenario, DefaultYamlFileMatchesBuiltin) {
  const std::string file = read_file(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml");
  EXPECT_EQ(file, default_scenario_yaml());
  Scenario s = default_scenario();
  EXPECT_EQ(s.name, "default");
  EXPECT_EQ(s.source, "<builtin>");
  EXPECT_EQ(s.cluster.total_gpus(), 16);
  EXPECT_EQ(s.parallel.dp * s.parallel.pp * s.parallel.tp, 16);
  EXPECT_EQ(s.parallel.micro_batches(), 16);
  Scenario f = load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/default.yaml");
  EXPECT_EQ(f.name, s.name);
  EXPECT_EQ(f.model.hidden, s.model.hidden);
  EXPECT_EQ(f.parallel.global_batch, s.parallel.global_batch);
}

TEST(Scenario, EveryExampleScenarioLoads) {
  const std::string dir = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios";
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.substr(name.size() - 5) != ".yaml") continue;
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(load_scenario(dir + "/" + name));
    n++;
  }
  closedir(d);
  EXPECT_GE(n, 4);
}

TEST(Scenario, LoadErrorsNameTheFile) {
  try {
    load_scenario("/nonexistent/x.yaml");
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/x.yaml: cannot open scenario file", 0), 0u) << e.what();
  }
}

// ---------------------------------------------------------------- loader errors

TEST(ScenarioErrors, YamlSyntax) {
  EXPECT_EQ(error_of("model: {preset: gpt3-1b\ncluster: {preset: dgx-a100}\n"),
            "t.yaml:2:8: (syntax): end of map flow not found");
  EXPECT_EQ(error_of("model: a: b\n"), "t.yaml:1:9: (syntax): illegal map value");
  // A mis-indented key makes yaml-cpp start a second document.
  EXPECT_EQ(error_of(kBase + "---\nname: two\n"),
            "t.yaml:4:1: (syntax): a second YAML document starts here (a scenario is one document; check the "
            "indentation)");
}

TEST(ScenarioErrors, UnknownKeys) {
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, hiden: 5}\n" + kCluster + kParallel),
            "t.yaml:1:26: model.hiden: unknown key \"hiden\" (did you mean \"hidden\"?)");
  EXPECT_EQ(error_of(kBase + "schedule:\n  kind: 1f1b\n  recomp: true\n"),
            "t.yaml:6:3: schedule.recomp: unknown key \"recomp\" (did you mean \"recompute\"?)");
  EXPECT_EQ(error_of(kBase + "parallel2: {}\n"),
            "t.yaml:4:1: parallel2: unknown key \"parallel2\" (did you mean \"parallel\"?)");
  EXPECT_EQ(error_of(kBase + "sim: {xyzzy: 1}\n"),
            "t.yaml:4:7: sim.xyzzy: unknown key \"xyzzy\"; valid keys: collectives, placement, profile, p2p");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, device: {peak_tflops: 10}}\n" + kParallel),
            "t.yaml:2:48: cluster.device.peak_tflops: unknown key \"peak_tflops\" (did you mean "
            "\"peak_tflops_fp8\"?)");
  EXPECT_EQ(error_of(kBase + "parallel: {dp: 2}\n"), "t.yaml:4:1: parallel: duplicate key");
}

TEST(ScenarioErrors, WrongTypes) {
  const std::string head = kModel + kCluster + "parallel:\n  dp: 2\n  tp: 2\n  global_batch: 32\n";  // lines 3-6
  EXPECT_EQ(error_of(head + "  pp: abc\n"), "t.yaml:7:7: parallel.pp: expected a positive integer, got \"abc\"");
  EXPECT_EQ(error_of(head + "  pp: -2\n"), "t.yaml:7:7: parallel.pp: expected a positive integer, got \"-2\"");
  EXPECT_EQ(error_of(head + "  pp: 0\n"), "t.yaml:7:7: parallel.pp: expected a positive integer, got \"0\"");
  EXPECT_EQ(error_of(head + "  pp: 2.5\n"), "t.yaml:7:7: parallel.pp: expected a positive integer, got \"2.5\"");
  EXPECT_EQ(error_of(head + "  pp: [4]\n"), "t.yaml:7:7: parallel.pp: expected a positive integer, got a sequence");
  EXPECT_EQ(error_of(head + "  pp:\n"), "t.yaml:7:3: parallel.pp: expected a positive integer, got nothing");
  EXPECT_EQ(error_of(kBase + "schedule: {recompute: maybe}\n"),
            "t.yaml:4:23: schedule.recompute: unknown value \"maybe\"; valid: none, selective, full");
  EXPECT_EQ(error_of(kBase + "parallel2: 3\n").find("t.yaml:4:1: parallel2: unknown key"), 0u);
  EXPECT_EQ(error_of("model: gpt3-1b\n" + kCluster + kParallel),
            "t.yaml:1:8: model: expected a mapping, got \"gpt3-1b\" (write model: {preset: gpt3-1b})");
  EXPECT_EQ(error_of("- a\n- b\n"), "t.yaml:1:1: (document): expected a mapping, got a sequence");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, slice_tokens: 2048}\n"),
            "t.yaml:4:42: schedule.slice_tokens: expected a list of positive integers, got \"2048\"");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, slice_tokens: [1024, 0, 1024]}\n"),
            "t.yaml:4:49: schedule.slice_tokens[1]: expected a positive integer, got \"0\"");
}

TEST(ScenarioErrors, NonPositiveSizesAndNegativeLatencies) {
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, intra_node: {nvlink_bw_GBps: 0}}\n" + kParallel),
            "t.yaml:2:68: cluster.intra_node.nvlink_bw_GBps: expected a positive number, got \"0\"");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, network: {nic_latency_us: -1}}\n" + kParallel),
            "t.yaml:2:65: cluster.network.nic_latency_us: expected a number >= 0, got \"-1\"");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, device: {memory_GB: .nan}}\n" + kParallel),
            "t.yaml:2:59: cluster.device.memory_GB: expected a positive number, got \".nan\"");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, device: {gemm_efficiency: 1.5}}\n" + kParallel),
            "t.yaml:2:65: cluster.device.gemm_efficiency: expected a number in (0, 1], got \"1.5\"");
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, hidden: -2048}\n" + kCluster + kParallel),
            "t.yaml:1:34: model.hidden: expected a positive integer, got \"-2048\"");
}

TEST(ScenarioErrors, MissingRequiredFields) {
  // Missing sections point at the document.
  EXPECT_EQ(error_of(""), "t.yaml:1:1: model: missing required section (e.g. model: {preset: gpt3-1b})");
  EXPECT_EQ(error_of("name: x\n" + kModel),
            "t.yaml:1:1: cluster: missing required section (e.g. cluster: {preset: dgx-a100, nodes: 2})");
  // Missing fields point at their parent mapping.
  EXPECT_EQ(error_of("name: x\nmodel:\n  layers: 24\n  hidden: 1024\n" + kCluster + kParallel),
            "t.yaml:3:3: model.heads: missing (required when model.preset is not given)");
  EXPECT_EQ(error_of(kModel + "cluster: {nodes: 2}\n" + kParallel),
            "t.yaml:2:10: cluster.gpus_per_node: missing (required when cluster.preset is not given)");
  EXPECT_EQ(error_of(kModel + "cluster: {nodes: 2, gpus_per_node: 8}\n" + kParallel),
            "t.yaml:2:10: cluster.device: missing (required when cluster.preset is not given)");
  EXPECT_EQ(error_of(kModel +
                     "cluster:\n"
                     "  gpus_per_node: 8\n"
                     "  nodes: 2\n"
                     "  device: {peak_tflops_fp16: 100, memory_GB: 24, hbm_bw_GBps: 1000}\n" +
                     kParallel),
            "t.yaml:5:11: cluster.device.peak_tflops_fp32: missing (required when neither cluster.preset nor "
            "cluster.device.preset is given)");
  const std::string dev = "  device: {preset: A100-SXM4-80GB}\n";
  EXPECT_EQ(error_of(kModel + "cluster:\n  gpus_per_node: 8\n  nodes: 2\n" + dev + kParallel),
            "t.yaml:3:3: cluster.intra_node: missing (required when cluster.preset is not given)");
  EXPECT_EQ(error_of(kModel + "cluster:\n  gpus_per_node: 8\n  nodes: 2\n" + dev +
                     "  intra_node: {nvlink_bw_GBps: 1}\n" + kParallel),
            "t.yaml:6:15: cluster.intra_node.fabric: missing (required when cluster.preset is not given; one of "
            "nvswitch, cube-mesh, pcie)");
  EXPECT_EQ(error_of(kModel + "cluster:\n  gpus_per_node: 8\n  nodes: 2\n" + dev +
                     "  intra_node: {fabric: cube-mesh, nvlink_bw_GBps: 25, nvlink_latency_us: 1}\n" + kParallel),
            "t.yaml:6:15: cluster.intra_node.pcie_bw_GBps: missing (required for fabric cube-mesh)");
  EXPECT_EQ(error_of(kModel + "cluster:\n  gpus_per_node: 8\n  nodes: 2\n" + dev +
                     "  intra_node: {fabric: nvswitch, nvlink_bw_GBps: 300, nvlink_latency_us: 1}\n" + kParallel),
            "t.yaml:3:3: cluster.network: missing (required with more than one node)");
  EXPECT_EQ(error_of(kModel + "cluster:\n  gpus_per_node: 8\n  nodes: 2\n" + dev +
                     "  intra_node: {fabric: nvswitch, nvlink_bw_GBps: 300, nvlink_latency_us: 1}\n"
                     "  network: {nic_bw_Gbps: 100}\n" +
                     kParallel),
            "t.yaml:7:12: cluster.network.nic_latency_us: missing (required with more than one node)");
}

TEST(ScenarioErrors, UnknownPresetsAndEnumValues) {
  EXPECT_EQ(error_of("model: {preset: gpt3-2b}\n" + kCluster + kParallel),
            "t.yaml:1:17: model.preset: unknown model preset \"gpt3-2b\" (did you mean \"gpt3-1b\"?); valid: gpt3-1b, "
            "gpt3-13b, gpt3-44b, gpt3-175b, megatron-1.7b, megatron-3.6b, megatron-7.5b, megatron-18.4b, "
            "megatron-39.1b, megatron-76.1b, megatron-145.6b, megatron-310.1b, megatron-529.6b, megatron-1t, "
            "seq1f1b-2.7b, seq1f1b-7b, seq1f1b-13b, seq1f1b-30b, llama3-8b, llama3-70b, llama3-405b, "
            "nemotron4-340b, mixtral-8x7b, mixtral-8x22b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, gpt-oss-120b");
  EXPECT_EQ(
      error_of(kModel + "cluster: {preset: dgx-z100}\n" + kParallel),
      "t.yaml:2:19: cluster.preset: unknown cluster preset \"dgx-z100\" (did you mean \"dgx-a100\"?); valid: "
      "aws-p3.16xlarge, aws-p3dn.24xlarge, dgx-a100, vtrain-a100, seq1f1b-a100, dgx-h100, dgx-h100-superpod, dgx-b200, "
      "gb200-nvl72, gb300-nvl72");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, device: {preset: TPUv4}}\n" + kParallel),
            "t.yaml:2:46: cluster.device.preset: unknown device preset \"TPUv4\"; valid: V100-SXM2-16GB, "
            "V100-SXM2-32GB, A100-SXM4-80GB, H100-SXM, H200-SXM, B200-SXM, GB200, GB300");
  EXPECT_EQ(error_of(kBase + "schedule:\n  kind: 1f1f\n"),
            "t.yaml:5:9: schedule.kind: unknown value \"1f1f\" (did you mean \"1f1b\"?); valid: gpipe, 1f1b, "
            "interleaved, terapipe, seq1f1b, seq1f1b-i, zb-h1, zb-h2, zb-v, dualpipev, dualpipe, file");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, intra_node: {fabric: nvlink}}\n" + kParallel),
            "t.yaml:2:60: cluster.intra_node.fabric: unknown value \"nvlink\"; valid: nvswitch, cube-mesh, pcie");
  EXPECT_EQ(error_of(kModel + "cluster: {preset: dgx-a100, nodes: 2, network: {topology: fattree}}\n" + kParallel),
            "t.yaml:2:59: cluster.network.topology: unknown value \"fattree\" (did you mean \"fat-tree\"?); valid: "
            "star, fat-tree, rail");
  EXPECT_EQ(error_of(kBase + "training: {dtype: fp4}\n"),
            "t.yaml:4:19: training.dtype: unknown value \"fp4\" (did you mean \"fp64\"?); valid: fp16, bf16, fp32, "
            "fp64, fp8");
  EXPECT_EQ(error_of(kBase + "sim: {placement: terapip}\n"),
            "t.yaml:4:18: sim.placement: unknown value \"terapip\" (did you mean \"terapipe\"?); valid: megatron, "
            "stage-major, replica-major, terapipe");
  EXPECT_EQ(error_of(kBase + "training: {wgrad_accumulation: pytorch}\n"),
            "t.yaml:4:32: training.wgrad_accumulation: unknown value \"pytorch\"; valid: fused, autograd");
  EXPECT_EQ(error_of(kBase + "sim: {p2p: block}\n"),
            "t.yaml:4:12: sim.p2p: unknown value \"block\" (did you mean \"blocking\"?); valid: eager, blocking");
  EXPECT_EQ(error_of(kBase + "sim: {collectives: tree}\n"),
            "t.yaml:4:20: sim.collectives: unknown value \"tree\"; valid: ring, aggregate, analytic, auto");
  EXPECT_EQ(error_of(kBase + "schedule: {slicing: even}\n"),
            "t.yaml:4:21: schedule.slicing: unknown value \"even\"; valid: uniform, dp, cwp, explicit");
}

// Topology keys: oversubscription > 0, nodes a multiple of nodes_per_leaf, both only for fat-tree / rail;
// every error names file:line:col and the key.
TEST(ScenarioErrors, BadTopology) {
  const std::string net = "cluster: {preset: dgx-a100, nodes: 2, network: ";
  EXPECT_EQ(error_of(kModel + net + "{oversubscription: 0}}\n" + kParallel),
            "t.yaml:2:67: cluster.network.oversubscription: expected a positive number, got \"0\"");
  EXPECT_EQ(error_of(kModel + net + "{oversubscription: -2}}\n" + kParallel),
            "t.yaml:2:67: cluster.network.oversubscription: expected a positive number, got \"-2\"");
  EXPECT_EQ(error_of(kModel + net + "{topology: rail, nodes_per_leaf: 3}}\n" + kParallel),
            "t.yaml:2:81: cluster.network.nodes_per_leaf: cluster.nodes = 2 is not a multiple of nodes_per_leaf = 3 "
            "(every leaf switch holds the same number of nodes)");
  EXPECT_EQ(error_of(kModel + net + "{topology: star, oversubscription: 2}}\n" + kParallel),
            "t.yaml:2:83: cluster.network.oversubscription: applies to topology fat-tree or rail only (this "
            "cluster's topology is star)");
  EXPECT_EQ(error_of(kModel + net + "{topology: ring}}\n" + kParallel),
            "t.yaml:2:59: cluster.network.topology: unknown value \"ring\"; valid: star, fat-tree, rail");
  EXPECT_EQ(error_of(kModel + net + "{topology: rail, nodes_per_leaf: 2, oversubscription: 1.5}}\n" + kParallel), "");
  const Scenario s =
      parse_scenario(kModel + net + "{topology: rail, nodes_per_leaf: 2, oversubscription: 1.5}}\n" + kParallel, "t");
  EXPECT_EQ(s.cluster.topology, InterNodeTopology::Rail);
  EXPECT_EQ(s.cluster.nodes_per_leaf, 2);
  EXPECT_DOUBLE_EQ(s.cluster.oversubscription, 1.5);
}

TEST(ScenarioErrors, GpuCountMismatch) {
  EXPECT_EQ(error_of(kModel + kCluster + "parallel:\n  dp: 4\n  pp: 4\n  tp: 2\n  global_batch: 32\n"),
            "t.yaml:4:7: parallel.dp: dp * pp * tp = 4 * 4 * 2 = 32 GPUs, but the cluster has nodes * gpus_per_node "
            "= 2 * 8 = 16");
  // Without parallel keys the message points at the cluster's nodes.
  EXPECT_EQ(error_of(kModel + kCluster),
            "t.yaml:2:36: cluster.nodes: dp * pp * tp = 1 * 1 * 1 = 1 GPUs, but the cluster has nodes * gpus_per_node "
            "= 2 * 8 = 16");
}

TEST(ScenarioErrors, ModelSplit) {
  const std::string two_nodes = kCluster;
  // 24 layers over pp 16: not divisible.
  EXPECT_EQ(error_of(kModel + two_nodes + "parallel: {dp: 1, pp: 16, tp: 1, global_batch: 32}\n"),
            "t.yaml:3:23: parallel.pp: model.layers = 24 is not divisible by pp * v = 16 * 1 = 16"
            " (give parallel.stage_layers for an uneven split)");
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, layers: 30}\n" + two_nodes + kParallel),
            "t.yaml:3:23: parallel.pp: model.layers = 30 is not divisible by pp * v = 4 * 1 = 4"
            " (give parallel.stage_layers for an uneven split)");
  // More stages than layers.
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, layers: 8}\n" + two_nodes +
                     "parallel: {dp: 1, pp: 16, tp: 1, global_batch: 32}\n"),
            "t.yaml:3:23: parallel.pp: pp * v = 16 model chunks but the model has only 8 layers (every chunk needs "
            "at least one)");
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, heads: 24}\n" + two_nodes + kParallel),
            "t.yaml:1:33: model.heads: model.hidden = 2048 is not divisible by model.heads = 24 (give model.head_dim "
            "when the "
            "heads are not hidden / heads wide)");
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, heads: 2, hidden: 2048}\n" + two_nodes +
                     "parallel: {dp: 1, pp: 4, tp: 4, global_batch: 32}\n"),
            "t.yaml:3:30: parallel.tp: model.heads = 2 is not divisible by tp = 4");
}

TEST(ScenarioErrors, BatchDivisibility) {
  EXPECT_EQ(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, micro_batch_size: 2, global_batch: 30}\n"),
            "t.yaml:3:68: parallel.global_batch: global_batch = 30 is not divisible by micro_batch_size * dp = 2 * 2 "
            "= 4");
}

TEST(ScenarioErrors, ScheduleConstraints) {
  EXPECT_EQ(error_of(kBase + "schedule: {kind: interleaved}\n"),
            "t.yaml:4:18: schedule.kind: schedule interleaved needs v > 1 model chunks per rank, got v = 1");
  EXPECT_EQ(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 32}\n"),
            "t.yaml:3:36: parallel.v: v = 2 model chunks per rank needs schedule.kind interleaved, seq1f1b-i, zb-v, "
            "dualpipev or dualpipe, got 1f1b");
  // DualPipeV needs m >= 2 pp; the combined 1F1B belongs to 1f1b and interleaved.
  EXPECT_EQ(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 14}\n" +
                     "schedule: {kind: dualpipev}\n"),
            "t.yaml:3:53: parallel.global_batch: schedule dualpipev needs at least 2 micro-batches per pipeline rank: "
            "m = global_batch / (micro_batch_size * dp) = 7 < 2 * pp = 8");
  EXPECT_EQ(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 32}\n" +
                     "schedule: {kind: zb-v, overlap_moe_a2a: true}\n"),
            "t.yaml:4:41: schedule.overlap_moe_a2a: overlap_moe_a2a runs the steady state of 1f1b or interleaved as "
            "overlapped forward-backward pairs (Megatron's combined 1F1B); schedule zb-v has no such steady state");
  EXPECT_NE(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 32}\n" +
                     "schedule: {kind: dualpipev, overlap_moe_a2a: true}\n")
                .find("schedule dualpipev pairs its own ops already"),
            std::string::npos);
  EXPECT_EQ(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 12}\n" +
                     "schedule: {kind: interleaved}\n"),
            "t.yaml:3:53: parallel.global_batch: schedule interleaved needs the micro-batch count m = global_batch / "
            "(micro_batch_size * dp) = 6 to be a multiple of pp = 4");
  EXPECT_EQ(error_of(kModel + kCluster + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 32}\n" +
                     "schedule: {kind: seq1f1b-i, seq_slices: 4}\n"),
            "");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: seq1f1b, seq_slices: 4096}\n"),
            "t.yaml:4:39: schedule.seq_slices: seq_slices = 4096 exceeds seq_len = 2048");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: 1f1b, seq_slices: 2}\n"),
            "t.yaml:4:36: schedule.seq_slices: schedule 1f1b runs whole sequences: seq_slices must be 1 (token "
            "slicing needs terapipe, seq1f1b, seq1f1b-i or file), got 2");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: gpipe, slicing: cwp}\n"),
            "t.yaml:4:34: schedule.slicing: schedule gpipe runs whole sequences: slicing must be uniform, got cwp");
}

TEST(ScenarioErrors, SliceTokens) {
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, slice_tokens: [1024, 1000]}\n"),
            "t.yaml:4:42: schedule.slice_tokens: slices sum to 2024 tokens, but seq_len = 2048");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, seq_slices: 3, slice_tokens: [1024, 1024]}\n"),
            "t.yaml:4:40: schedule.seq_slices: seq_slices = 3 but slice_tokens lists 2 slices");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, slicing: dp, slice_tokens: [1024, 1024]}\n"),
            "t.yaml:4:37: schedule.slicing: slicing dp conflicts with the explicit schedule.slice_tokens (use "
            "slicing: explicit)");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, slicing: explicit}\n"),
            "t.yaml:4:37: schedule.slicing: slicing explicit needs a non-empty schedule.slice_tokens");
  // A planned slicing of another slice plan would have run as uniform slices without a word.
  EXPECT_EQ(error_of(kBase + "schedule: {kind: terapipe, seq_slices: 4, slicing: cwp}\n"),
            "t.yaml:4:52: schedule.slicing: slicing cwp is Seq1F1B's equal-FLOPs split (schedules seq1f1b or "
            "seq1f1b-i); schedule terapipe takes uniform or explicit slices");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: seq1f1b, seq_slices: 4, slicing: dp}\n"),
            "t.yaml:4:51: schedule.slicing: slicing dp is TeraPipe's planner (schedule terapipe); schedule seq1f1b "
            "takes uniform or explicit slices");
}

TEST(ScenarioErrors, StageLayers) {
  const std::string head = kModel + kCluster;
  const Scenario s = parse_scenario(
      head + "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [5, 7, 7, 5]}\n", "t.yaml");
  EXPECT_EQ(s.parallel.stage_layers, (std::vector<int>{5, 7, 7, 5}));
  // No entry: the even split, as before.
  EXPECT_TRUE(parse_scenario(kBase, "t.yaml").parallel.stage_layers.empty());
  // Uneven layouts lift the divisibility rule: 25 layers over 4 stages.
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, layers: 25}\n" + kCluster +
                     "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [5, 7, 7, 6]}\n"),
            "");
  // The sum.
  EXPECT_EQ(error_of(head + "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [5, 7, 7, 4]}\n"),
            "t.yaml:3:65: parallel.stage_layers: the stages hold 23 layers in all, but model.layers = 24");
  // The count, per pipeline stage and per virtual stage.
  EXPECT_EQ(error_of(head + "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [12, 12]}\n"),
            "t.yaml:3:65: parallel.stage_layers: lists 2 stages, but needs one entry per pipeline stage: pp = 4");
  EXPECT_EQ(error_of(head + "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 32, stage_layers: [6, 6, 6, 6]}\n" +
                     "schedule: {kind: interleaved}\n"),
            "t.yaml:3:71: parallel.stage_layers: lists 4 stages, but needs one entry per virtual stage: pp * v = 4 "
            "* 2 = 8");
  EXPECT_EQ(
      error_of(head +
               "parallel: {dp: 2, pp: 4, tp: 2, v: 2, global_batch: 32, stage_layers: [2, 3, 3, 3, 3, 3, 3, 4]}\n" +
               "schedule: {kind: interleaved}\n"),
      "");
  // The first and last stage may hold the embedding or the loss alone (Megatron's account-for-embedding / loss split);
  // a stage between them without layers is refused, and entries that are not integers >= 0 at the entry itself.
  EXPECT_EQ(error_of(head + "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [0, 12, 12, 0]}\n"), "");
  EXPECT_EQ(error_of(head + "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [8, 0, 8, 8]}\n"),
            "t.yaml:3:65: parallel.stage_layers: entry 1 is 0; a stage between the first and the last needs at least "
            "one layer");
  EXPECT_EQ(error_of(head + "parallel: {dp: 2, pp: 4, tp: 2, global_batch: 32, stage_layers: [-1, 9, 8, 8]}\n"),
            "t.yaml:3:66: parallel.stage_layers[0]: expected an integer >= 0, got \"-1\"");
  EXPECT_EQ(error_of(head + "parallel:\n  dp: 2\n  pp: 4\n  tp: 2\n  global_batch: 32\n  stage_layers: 6\n"),
            "t.yaml:8:17: parallel.stage_layers: expected a list of integers >= 0, got \"6\"");
  EXPECT_EQ(error_of(head + "parallel:\n  dp: 2\n  pp: 4\n  tp: 2\n  global_batch: 32\n  stage_layers:\n"
                            "    - 6\n    - 6\n    - six\n    - 6\n"),
            "t.yaml:11:7: parallel.stage_layers[2]: expected an integer >= 0, got \"six\"");
  // Scenarios built in code get the same checks, without a position.
  Scenario c = s;
  c.parallel.stage_layers = {5, 7, 7, 6};
  try {
    validate_scenario(c);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "t.yaml: parallel.stage_layers: the stages hold 25 layers in all, but model.layers = 24");
  }
}

TEST(ScenarioErrors, ScheduleFile) {
  EXPECT_EQ(
      error_of(kBase + "schedule: {kind: file}\n"),
      "t.yaml:4:18: schedule.kind: schedule kind file needs schedule.file (a CSV in PyTorch pipelining's format)");
  EXPECT_EQ(error_of(kBase + "schedule: {kind: 1f1b, file: a.csv}\n", "dir/t.yaml"),
            "dir/t.yaml:4:30: schedule.file: dir/a.csv: cannot open schedule file: No such file or directory");
  const std::string csv = ::testing::TempDir() + "/scenario_file_kind.csv";
  std::ofstream(csv) << "0F0\n";
  EXPECT_EQ(error_of(kBase + "schedule: {kind: 1f1b, file: " + csv + "}\n"),
            "t.yaml:4:30: schedule.file: schedule.file is read only with kind: file, got kind 1f1b");
}

TEST(ScenarioErrors, Bf16OnV100) {
  EXPECT_EQ(error_of(kModel + "cluster: {preset: aws-p3.16xlarge}\nparallel: {pp: 8}\ntraining:\n  dtype: bf16\n"),
            "t.yaml:5:10: training.dtype: bf16 needs a device with bf16 support; V100-SXM2-16GB has none "
            "(peak_tflops_bf16 = 0): use fp16");
}

TEST(ScenarioErrors, TerapipePlacementNeedsTpInsideNode) {
  EXPECT_EQ(error_of("model: {preset: gpt3-1b, hidden: 3072, heads: 48}\ncluster: {preset: aws-p3.16xlarge, nodes: 3}\n"
                     "parallel: {pp: 2, tp: 12, global_batch: 4}\nsim: {placement: terapipe}\n"),
            "t.yaml:4:18: sim.placement: placement terapipe keeps tensor-parallel groups inside a node, but tp = 12 "
            "does not divide gpus_per_node = 8");
}

TEST(ScenarioErrors, ValidateScenarioBuiltInCode) {
  Scenario s = default_scenario();
  EXPECT_NO_THROW(validate_scenario(s));
  s.source = "variant";
  s.parallel.pp = 8;
  try {
    validate_scenario(s);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "variant: parallel.dp: dp * pp * tp = 2 * 8 * 2 = 32 GPUs, but the cluster has nodes * gpus_per_node "
                 "= 2 * 8 = 16");
  }
  s = default_scenario();
  s.schedule.slice_tokens = {1024, -1, 1025};
  s.schedule.slicing = "explicit";
  s.schedule.kind = ScheduleKind::TeraPipe;
  s.schedule.seq_slices = 3;
  EXPECT_THROW(validate_scenario(s), ScenarioError);
  s = default_scenario();
  s.training.dtype = "fp12";
  EXPECT_THROW(validate_scenario(s), ScenarioError);
}

}  // namespace
}  // namespace pipescope
