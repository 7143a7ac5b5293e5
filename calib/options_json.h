#pragma once
// CalibrateOptions as JSON: how `pipescope calibrate` hands a CUDA calibration to the program
// pipescope-calibrate-cuda (calib/cuda_main.cc), which links cuBLAS so that `pipescope` does not have to.

#include <string>

#include "calib/calibrate.h"

namespace pipescope::calib {

std::string options_to_json(const CalibrateOptions& o);
// Throws std::invalid_argument naming the key when a field is missing or of the wrong type.
CalibrateOptions options_from_json(const std::string& text);

}  // namespace pipescope::calib
