// Trace files read back by `validate` (runtime/trace.h merge_traces). Input: simulated JSON, a line
// "----", measured JSON. Malformed input must raise RuntimeError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/model.h"
#include "runtime/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto cut = text.find("\n----\n");
  const std::string sim = cut == std::string::npos ? text : text.substr(0, cut);
  const std::string meas = cut == std::string::npos ? text : text.substr(cut + 6);
  try {
    pipescope::runtime::merge_traces(sim, meas);
  } catch (const pipescope::runtime::RuntimeError&) {
  }
  return 0;
}
