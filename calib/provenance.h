#pragma once
// Provenance of a calibration run (host, date, git commit, command, CPU, compiler, library versions).

#include <map>
#include <string>

namespace pipescope::calib {

std::map<std::string, std::string> base_provenance(const std::string& command);
std::string cpu_model();
double physical_memory_bytes();

}  // namespace pipescope::calib
