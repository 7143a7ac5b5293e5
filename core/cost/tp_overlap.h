#pragma once
// Tensor-parallel all-reduce overlapped with the weight-gradient GEMM (training.async_tp_allreduce; Megatron-LM's
// async tensor-model-parallel all-reduce, on by default there since 2022 and in Megatron-DeepSpeed): in the
// backward of a column-parallel linear (QKV, MLP up, the LM head over the vocabulary) the all-reduce of the input
// gradient starts right after its dgrad GEMM and runs beside the wgrad GEMM; the next kernel waits for it. Such a
// wgrad therefore lasts max(its own time, the all-reduce), and the call leaves the op's list of exposed all-reduces.
// The row-parallel all-reduces (forward and the recomputed forward) stay on the critical path.
// With sequence parallelism (Megatron's LinearWithGradAccumulationAndAsyncCommunication, whatever the async flag)
// a column-parallel linear's backward re-gathers its sequence-sharded input beside the dgrad GEMM and
// reduce-scatters the input gradient beside the wgrad GEMM; the row-parallel outputs' reduce-scatters turn into
// all-gathers of the output gradient that the dgrad needs first: those stay on the critical path.
#include "core/model/scenario.h"

namespace pipescope {

// One all-reduce of `bytes` over the scenario's tensor-parallel group as NCCL runs it (core/cost/nccl_model.h), the
// group placed as Megatron places it: tp consecutive GPUs from the start of a node (NVLink / PCIe inside a node,
// the group's share of the NICs across nodes). 0 at tp = 1.
double tp_allreduce_seconds(const Scenario& s, double bytes);
// One all-gather (or reduce-scatter: the same ring steps and bytes) of a `bytes` buffer over that group: sequence
// parallelism's collectives. 0 at tp = 1.
double tp_allgather_seconds(const Scenario& s, double bytes);

}  // namespace pipescope
