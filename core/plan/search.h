#pragma once
// `pipescope search`, the part without SimGrid: the search space of a scenario (every dp x pp x tp layout with tp
// inside a node, chunks per rank v, micro-batch size, every registered schedule, the planners' token slicing,
// recomputation on/off, the distributed optimizer on/off where dp > 1), stage 1 (prune: the cross-field checks and
// the memory model; rejections counted by reason) and stage 2 (a fast estimate of the iteration time: the critical
// path of one replica's lowered DAG, its gradient synchronisation included, with the cost model; no SimGrid;
// core/plan/search_estimate.h). Stage 3, simulating the best K, is sim/run_scenario.h's job (sim/search_run.h).
// docs/search.md describes the method.

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/schedule_registry.h"

namespace pipescope {

// What a training process holds beside the tensors the memory model counts, kept free by default (docs/search.md
// "Memory headroom"): the CUDA context and kernel images (about 0.5 GiB with lazy loading), NCCL's buffers (4 MiB per
// channel and peer, up to 32 channels, for each of a rank's communicators: about 1 GiB for a tp / pp / dp rank) and
// cuBLAS / cuDNN workspaces and the allocator's fragmentation (the rest).
constexpr double kDefaultHeadroomBytes = 2.0 * (1ull << 30);

// The default context-parallel degrees keep at least this many tokens of a sequence per rank: the sequence lengths
// that use context parallelism (long context), without searching every short-sequence run over cp values too.
constexpr int kMinTokensPerCpRank = 4096;

struct SearchSpace {
  std::vector<std::string> schedules;  // registered names; empty = every generated schedule (not kind file)
  std::vector<int> tp, pp;             // empty = every valid value
  // Context-parallel degrees tried (empty = 1 and every power of two that leaves each rank at least
  // kMinTokensPerCpRank tokens of a sequence; docs/search.md).
  std::vector<int> cp;
  // Mixture-of-experts models: expert-parallel degrees tried (empty = every divisor of the experts that divides the
  // GPUs of a stage and fits Megatron-Core's folding, core/model/scenario.cc check_expert_parallel).
  std::vector<int> ep;
  // Their expert-tensor-parallel degrees tried (empty = 1 and tp, Megatron-Core's default, where they fit).
  std::vector<int> etp;
  std::vector<int> micro_batch_sizes;  // empty = 1, 2, 4, 8 (those dividing the per-replica batch)
  // Chunks per rank tried by interleaved schedules without a fixed v; empty = every v > 1 that divides the layers per
  // pipeline rank (each chunk the same number of layers; NeMo's Llama-3-70B recipe runs 80 layers as pp 4 x v 5).
  std::vector<int> v;
  std::vector<Recompute> recompute = {Recompute::None, Recompute::Selective, Recompute::Full};
  // Only the schedules this framework implements (ScheduleTraits::frameworks); unset = every generated schedule.
  bool one_framework = false;
  Framework framework = Framework::Megatron;
  // training.distributed_optimizer values tried where dp > 1 (dp = 1 has no optimizer state to shard: off only).
  std::vector<bool> distributed_optimizer = {false, true};
  // training.fsdp values tried where dp > 1 (PyTorch FSDP2 beside the pipeline, docs/cost-model.md "Fully sharded
  // data parallelism"; exclusive with the distributed optimizer); empty = the scenario's.
  std::vector<bool> fsdp;
  // parallel.cp_comm_type values tried where cp > 1 (a2a+p2p with every all-to-all level between 2 and cp / 2 that
  // divides cp); empty = the scenario's.
  std::vector<CpCommType> cp_comm_types;
  int seq1f1b_segments = 4;     // Seq1F1B kinds: this many cwp segments (the planner's split points)
  double max_memory_bytes = 0;  // per-GPU limit; 0 = the device's memory
  // Kept free of the limit for what the memory model does not count (kDefaultHeadroomBytes, docs/search.md).
  double headroom_bytes = kDefaultHeadroomBytes;
};

// The per-GPU bytes a candidate's worst rank may use: --max-memory-GB as given, else the device's memory less the
// headroom. Throws std::invalid_argument when the headroom leaves nothing.
double search_memory_limit(const Scenario& base, const SearchSpace& space);

// The data-parallel sharding of a point: FSDP's values for a layout (the space's where dp > 1, off for dp = 1; without
// --fsdp the scenario's, in every candidate), and the distributed optimizer's beside each (off with FSDP, which shards
// the state itself).
std::vector<bool> fsdp_values(const Scenario& base, const SearchSpace& space, int dp);
std::vector<bool> dist_opts(const SearchSpace& space, int dp, bool fsdp);

// One point of the space before any check: layout, micro-batch size, schedule kind, chunks, recompute, optimizer.
struct SearchPoint {
  int dp = 1, pp = 1, tp = 1, v = 1, micro_batch_size = 1, ep = 1, etp = 1, cp = 1;
  const ScheduleEntry* kind = nullptr;
  Recompute recompute = Recompute::None;
  bool distributed_optimizer = false;
  bool fsdp = false;
  CpCommType cp_comm_type = CpCommType::P2P;
  int cp_a2a = 1;
};
// Every point of the space in the search's order (tp within a node, pp dividing the rest, ep for MoE models, then
// micro-batch size, schedule, v, recompute, distributed optimizer); throws std::invalid_argument for an empty cluster,
// an unknown or file schedule, or no --tp value fitting a node. The one walk of the space: stage 1 and the work
// estimate.
void for_each_point(const Scenario& base, const SearchSpace& space, const std::function<void(const SearchPoint&)>& f);
// The point's scenario: the base with its layout, schedule and slicing rule (TeraPipe: made explicit in stage 1).
Scenario make_point(const Scenario& base, const SearchPoint& p, int segments);

// One point of the space that passed stage 1.
struct Candidate {
  Scenario scenario;
  std::string label;      // "1f1b dp2 pp4 tp2 v1 b1 rc-none"; unique in a search, the deterministic tie-break
  double peak_bytes = 0;  // memory model, worst rank
  double estimate_s = 0;  // stage 2 (0 until estimated)
};

struct Stage1 {
  std::size_t enumerated = 0;                   // points of the space
  std::vector<Candidate> survivors;             // in enumeration order
  std::map<std::string, std::size_t> rejected;  // reason -> count (the message without its numbers' context)
};

// The scenario's layouts and schedules, checked and fitted to memory. Throws std::invalid_argument when the
// space is empty before any check (no layout divides the cluster, unknown schedule name in `space`).
Stage1 enumerate_candidates(const Scenario& base, const SearchSpace& space);

// Stage 2: the estimated iteration time of a candidate scenario (seconds). Deterministic. A search estimates many
// with one Stage2Estimator (core/plan/search_estimate.h), which gives the same values faster.
double estimate_iteration_s(const Scenario& s);

// The order stage 3 takes the candidates in: estimate ascending, then label (deterministic).
void rank_by_estimate(std::vector<Candidate>& c);

// The scenario's name for a candidate's label ("1f1b dp2 pp4 tp2 v1 b1 rc-none", " do" appended with the
// distributed optimizer).
std::string candidate_label(const Scenario& s);

}  // namespace pipescope
