#pragma once
// op_dependencies (core/schedule.h) without allocating: the lowering asks it for every op of a schedule.

#include "core/schedule.h"

namespace pipescope {

// The ops whose output `op` consumes, into `out` (an op has at most 3); returns their count.
int op_dependencies(const OpKeyIndex& index, const OpKey& op, OpKey (&out)[3]);

}  // namespace pipescope
