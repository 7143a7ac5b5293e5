#pragma once
// `--emit megatron` (search, simulate): a scenario as the Megatron-LM pretrain_gpt.py arguments that run it, the
// inverse of core/model/megatron_import.h. Importing the emitted arguments with the scenario's cluster gives the
// same model, layout, schedule and training keys back (tests/test_megatron_import.cc, the round trip). Only what
// Megatron-LM runs is emitted: its 1F1B and interleaved schedules (the registry's frameworks column), even stages or
// the uneven first / last stage that --decoder-first/last-pipeline-num-layers give.

#include <string>
#include <vector>

#include "core/model/config.h"

namespace pipescope {

// The arguments, one flag and its value per element pair ("--num-layers", "80", ...; a switch alone). Throws
// std::invalid_argument naming what Megatron-LM cannot run (another schedule, an uneven split it has no flag for,
// a key with no Megatron-LM argument such as a sliding window).
std::vector<std::string> megatron_arguments(const Scenario& s);

// The same as a shell command line: "torchrun ... pretrain_gpt.py \" then one flag per line.
std::string megatron_command(const Scenario& s);

}  // namespace pipescope
