#pragma once
// A kernels::Backend whose compute does nothing: tensors get their shapes (and real storage, so p2p
// transfers still move bytes), K/V caches still enforce the slice protocol, parameters hold real gradient
// buffers for the all-reduce, but no arithmetic runs. The runtime overhead benchmark uses it to time the
// runtime's own per-op scheduling and bookkeeping (bench/bench_runtime.cc).

#include <memory>

#include "kernels/backend.h"

namespace pipescope::runtime {

std::unique_ptr<kernels::Backend> make_null_backend();

}  // namespace pipescope::runtime
