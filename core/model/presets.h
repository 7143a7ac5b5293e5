#pragma once
// Built-in model and cluster presets. Numbers come from docs/calibration.md (vendor peaks)
// and the papers' model tables (docs/papers.md).

#include <optional>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

// gpt3-1b, gpt3-13b, gpt3-44b, gpt3-175b, megatron-1.7b ... megatron-1t, seq1f1b-2.7b/7b/13b/30b
std::optional<ModelSpec> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// aws-p3.16xlarge, aws-p3dn.24xlarge, dgx-a100, vtrain-a100, dgx-h100, dgx-h100-superpod, dgx-b200, gb200-nvl72,
// gb300-nvl72 (nodes default to 1; an NVL72 rack is one node of 72 GPUs)
std::optional<ClusterSpec> cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

// Device presets by name: V100-SXM2-16GB, V100-SXM2-32GB, A100-SXM4-80GB, H100-SXM, H200-SXM, B200-SXM, GB200, GB300
std::optional<DeviceSpec> device_preset(const std::string& name);
std::vector<std::string> device_preset_names();

}  // namespace pipescope
