// Memory model: static state per rank plus an activation peak walked from the rank's op list.
//
// Static state (per GPU of the rank's TP group): P_r = rank_parameter_count (the layers of its v chunks,
// stage_layer_range in core/model/placement.h, word + position embeddings on the first virtual stage, final LayerNorm
// and the tied-embedding copy or output layer on the last, / t). Bytes per parameter from TrainingSpec::param_bytes:
// weights e B (2 for fp16/bf16), gradients e B (4 with grad_fp32), optimizer state fp32 master 4 (16-bit dtypes) + Adam
// 8 (16 in all for fp16, 18 for bf16 with fp32 gradients), or what training.optimizer_bytes_per_param leaves; the state
// divided by dp with training.distributed_optimizer (ZeRO-1) or training.fsdp, whose gradients are an unsharded fp32
// accumulator (4 B) plus their fp32 shard (4 B / dp). Context parallelism (parallel.cp,
// core/cost/context_parallel.h): activations are those of seq_len / cp tokens per GPU (flash attention: no score term)
// and the distributed optimizer shards over dp * cp. FP8 (training.dtype fp8, core/cost/fp8.h): the weights also hold
// the FP8 copy and its transpose of every linear weight (2 B per linear-layer parameter of the rank's layers, / t) and
// the layers' amax histories and scales.
//
// Activations per layer (Korthikanti et al. 2022, "Reducing activation recomputation", Table 2), for b
// sequences of l tokens attending to c + l keys:
//   b*l*h*(10/r + 24/t) + 5*a*b*l*(c + l)/t    bytes at 2-byte activations (1-byte dropout masks)
// r = 1 without sequence parallelism (the 10*b*l*h part: LayerNorm inputs, residual dropout masks and outputs, is
// replicated over the TP group), r = t with it (docs/papers.md#seq1f1b: Megatron-V3 TP splits those along the
// sequence). The 24*b*l*h part (QKV, attention internals, MLP) and the score / softmax / dropout tensors (5 B
// per score) are split over heads. At l = s, c = 0, t = 1 this is s*b*h*(34 + 5*a*s/h).
// Flash attention (training.flash_attention) keeps no score matrix: the 5*a*b*l*(c+l)/t term is dropped and
// nothing else changes (it saves Q, K, V and the output, which the 34 already counts; its log-sum-exp, 4 B per
// query and head = 4*a/h of a token's bytes, is left out). fp32 activations double the figure.
// K/V caches of token-sliced schedules (a micro-batch cut into k > 1 slices / segments), per layer
// 2*b*l*(h/t)*e for l cached tokens:
//   - without flash (TeraPipe's code, docs/papers.md#terapipe): one cache of the full sequence is allocated at the
//     micro-batch's first slice and the slices' saved K/V are views of it, so a slice stores its activations
//     less its own K/V, and the cache holds the K/V of all L tokens from the first forward on;
//   - with flash (Seq1F1B's code, docs/papers.md#seq1f1b): the first segment's K/V is the cache (no copy); every
//     later segment's forward concatenates its K/V to the cache (torch.cat: a new contiguous tensor of c + l
//     keys, on top of the K/V the segment saved itself) and the old cache is dropped unless it is the first
//     segment's own K/V, so after segment j >= 1 the copy holds the c_j + l_j keys forwarded so far.
//   Either cache lives until the micro-batch's first slice has run its backward. Backward hands a dK/dV buffer
//   over the prefix before slice j (2*b*c_j*(h/t)*e per layer) from slice j to slice j - 1 (docs/papers.md#terapipe,
//   docs/papers.md#seq1f1b); it is held between the two backwards. With flash (Seq1F1B) that buffer is a view of
//   the segment's whole dK/dV, so c_j + l_j keys stay alive, and the backward of one layer holds its new dK/dV
//   (2*b*(c_j + l_j)*(h/t)*e) while the old buffer is still referenced; the prefix K/V it reads are slices of the
//   cache, views at b = 1 and contiguous copies (as much again) for b > 1.
// With full recomputation only each layer's input survives the forward: b*l*h*e per layer (replicated over
// TP unless sequence parallel), plus for token-sliced schedules the slice's K and V (2*b*l*h*e/t per layer),
// which later slices' recomputed forwards need (they are the cache); during a backward one layer's full
// activations exist transiently.
// Extras: the first virtual stage keeps the embedding dropout mask (b*l*h/r B); the last keeps the final
// LayerNorm input and output (2*b*l*h*e/r) and the fp32 softmax of the vocab-parallel cross entropy (4*b*l*V/t).
//
// Walk: for each op of the rank in order, a forward adds its stored bytes (the stage's layers x per-layer bytes
// + extras + cache growth) and l/s * 1/v in-flight units (a whole stage-micro-batch = 1: a chunk is 1/v of the
// rank's layers, a slice of l tokens l/s of the sequence); a backward is checked at live + transient, then frees
// what its forward stored, swaps the dK/dV buffer and, for the first slice, the cache. The peak is the maximum
// of those points; peak_in_flight is the unit count there. A split backward does the check and the dK/dV /
// cache swap at I and frees the forward's activations (and its in-flight units) only at W: W reads the GEMM
// inputs, and holding all of them until W is the zero-bubble schedules' memory cost (ZB-H2's 2p-1 in flight).
// With recompute, I is charged the transient recomputed layer; W is modelled as needing only the checkpoints.
// The walk adds and frees tensors (layer_tensor_bytes, one K and one V per cache or buffer and layer); with
// AllocatorReplay::On the same sequence goes through the caching-allocator model for the reserved bytes.
#include "core/memory/memory_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/cost/fp8.h"
#include "core/cost/moe_load.h"
#include "core/ir/shard_actions.h"
#include "core/memory/caching_allocator.h"
#include "core/model/model_shape.h"
#include "core/model/placement.h"

namespace pipescope {

bool MemoryReport::any_oom() const {
  return std::any_of(ranks.begin(), ranks.end(), [](const RankMemory& r) { return r.oom; });
}

namespace {

// FP8 copies (+ transposes) of the rank's linear weights and their amax / scale bookkeeping (core/cost/fp8.h).
double fp8_weight_cache_bytes(const Scenario& s, int rank) {
  if (!s.training.fp8()) return 0.0;
  const double layers = rank_layer_count(s, rank);
  return layers *
         (fp8_linear_weight_params(s.model) / s.parallel.tp * kFp8WeightCopyBytes + fp8_meta_bytes_per_layer());
}

void check_layer_args(const char* what, int b, int tokens, int context) {
  if (b < 1 || tokens < 1 || context < 0)
    throw std::invalid_argument(std::string(what) +
                                ": needs b >= 1, tokens >= 1, context >= 0; got b = " + std::to_string(b) +
                                ", tokens = " + std::to_string(tokens) + ", context = " + std::to_string(context));
}

}  // namespace

double layer_score_bytes(const Scenario& s, int b, int tokens, int context) {
  check_layer_args("layer_score_bytes", b, tokens, context);
  // Flash attention never materialises the scores; selective recomputation drops them after the forward.
  if (s.training.flash_attention ||
      (s.schedule.recompute == Recompute::Selective && s.schedule.recomputes(RecomputeModule::CoreAttn)))
    return 0.0;
  const double a = s.model.heads, t = s.parallel.tp;
  const double bl = static_cast<double>(b) * tokens;
  return 5.0 * a * bl * (static_cast<double>(context) + tokens) / t * s.training.act_bytes_per_elem() / 2.0;
}

namespace {
// layer_activation_bytes tensor by tensor into `out` (cleared): the model's list (`widths`, layer_activation_tensors)
// at b x tokens rows, then the three score tensors unless flash or selective recomputation drops them; kv_in_cache
// leaves out K and V (a token-sliced schedule without flash keeps them in its cache).
void layer_tensor_bytes(const Scenario& s, const std::vector<ActivationTensor>& widths, int b, int tokens, int context,
                        bool kv_in_cache, std::vector<double>& out, double expert_load = 1) {
  const double t = s.parallel.tp;
  const double r = s.parallel.sequence_parallel ? t : 1.0;
  const double bl = static_cast<double>(b) * tokens;
  const double scale = s.training.act_bytes_per_elem() / 2.0;
  out.clear();
  for (const ActivationTensor& x : widths)
    if (!(kv_in_cache && x.kv))
      out.push_back(bl * x.width / (x.split ? t : r) * scale * (x.routed ? expert_load : 1.0) *
                    (x.gathered ? s.parallel.etp : 1.0));
  // The scores: softmax output (2 B), dropout mask (1 B) and dropout output (2 B) per score at 2-byte activations.
  const double scores = layer_score_bytes(s, b, tokens, context);
  if (scores > 0)
    for (double share : {0.4, 0.2, 0.4}) out.push_back(scores * share);
}
}  // namespace

double layer_activation_bytes(const Scenario& s, int b, int tokens, int context) {
  check_layer_args("layer_activation_bytes", b, tokens, context);
  std::vector<double> tensors;
  layer_tensor_bytes(s, stored_activation_tensors(layer_activation_tensors(s.model), s.schedule), b, tokens, context,
                     false, tensors);
  double sum = 0;
  for (double x : tensors) sum += x;
  return sum;
}

double layer_kv_bytes(const Scenario& s, int b, int tokens) {
  check_layer_args("layer_kv_bytes", b, tokens, 0);
  return 2.0 * b * tokens * (layer_dims(s.model).kv / s.parallel.tp) * s.training.act_bytes_per_elem();
}

namespace {

// The activation bytes of one rank's walk: tensors are added in groups (what one forward saves, one layer's K/V
// cache or dK/dV buffer) and freed a group at a time. The live sum's peak is taken at check points (the end of a
// forward, the moment a backward needs its transients); with a caching-allocator model the same tensors are
// replayed through it, in the same order, for the reserved bytes.
class ActivationLedger {
 public:
  struct Group {
    std::vector<int> handles;  // allocator handles (empty without the allocator)
    double bytes = 0;
  };
  explicit ActivationLedger(CachingAllocatorModel* allocator) : allocator_(allocator) {}
  void add(Group& g, double bytes) {
    g.bytes += bytes;
    live_ += bytes;
    if (allocator_) g.handles.push_back(allocator_->allocate(bytes));
  }
  // `count` layers' tensors, layer after layer. The live sum gets count x their sum either way, so that a walk
  // with the replay and one without (searches walk thousands of schedules) find the very same peak.
  void add_layers(Group& g, const std::vector<double>& tensors, int count) {
    double sum = 0;
    for (double x : tensors) sum += x;
    g.bytes += count * sum;
    live_ += count * sum;
    if (allocator_)
      for (int layer = 0; layer < count; layer++)
        for (double x : tensors) g.handles.push_back(allocator_->allocate(x));
  }
  void drop(Group& g) {
    live_ -= g.bytes;
    if (allocator_)
      for (int h : g.handles) allocator_->free(h);
    g = Group{};
  }
  double live() const { return live_; }

 private:
  CachingAllocatorModel* allocator_;
  double live_ = 0;
};

}  // namespace

MemoryReport memory_report(const Scenario& s, const Schedule& sched, AllocatorReplay replay) {
  const ModelSpec& m = s.model;
  const ParallelSpec& par = s.parallel;
  const std::string where = "memory_report(" + (s.source.empty() ? s.name : s.source) + ", " + sched.name + ")";
  auto fail = [&](const std::string& what) { throw std::invalid_argument(where + ": " + what); };
  if (sched.p != par.pp || sched.v != par.v)
    fail("schedule has p = " + std::to_string(sched.p) + ", v = " + std::to_string(sched.v) +
         " but the scenario has parallel.pp = " + std::to_string(par.pp) + ", parallel.v = " + std::to_string(par.v));
  if (sched.seq_len != m.seq_len)
    fail("schedule seq_len " + std::to_string(sched.seq_len) + " != model.seq_len " + std::to_string(m.seq_len));
  if (par.cp < 1 || m.seq_len % par.cp != 0)
    fail("parallel.cp = " + std::to_string(par.cp) + " does not split seq_len " + std::to_string(m.seq_len) +
         " evenly");
  std::vector<int> stage_layers;      // per virtual stage
  std::vector<char> embedding, head;  // per virtual stage: holds_embedding, holds_head
  try {
    for (int g = 0; g < par.pp * par.v; g++) {
      stage_layers.push_back(stage_layer_range(s, g).count);
      embedding.push_back(holds_embedding(s, g) ? 1 : 0);
      head.push_back(holds_head(s, g) ? 1 : 0);
    }
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  if (static_cast<int>(sched.per_rank.size()) != sched.p || static_cast<int>(sched.microbatches.size()) != sched.m)
    fail("malformed schedule (per-rank lists or micro-batch table of the wrong size)");

  const int e = s.training.act_bytes_per_elem();
  const TrainingSpec::ParamBytes pb = s.training.param_bytes();
  // The distributed optimizer (and FSDP) keeps 1/dp of the master weights and Adam moments on each replica.
  const double shards =  // DP group with CP (and DualPipe's copies)
      s.training.sharded_optimizer() ? 1.0 * par.dp * par.cp * stage_copies(s) : 1.0;
  const double h = m.hidden, t = par.tp, V = m.vocab;
  const double rep_tp = par.sequence_parallel ? t : 1.0;  // what TP does to the residual-stream tensors
  const int last_stage = par.pp * par.v - 1;
  const bool recompute = s.schedule.recompute == Recompute::Full;
  const bool flash = s.training.flash_attention;
  // What a layer stores, and with selective recomputation what its backward materialises again first.
  const std::vector<ActivationTensor> widths = stored_activation_tensors(layer_activation_tensors(m), s.schedule);
  const std::vector<ActivationTensor> moe_widths =
      stored_activation_tensors(moe_layer_activation_tensors(m), s.schedule);
  const std::vector<ActivationTensor> rerun = recomputed_activation_tensors(layer_activation_tensors(m), s.schedule);
  const std::vector<ActivationTensor> moe_rerun =
      recomputed_activation_tensors(moe_layer_activation_tensors(m), s.schedule);
  std::vector<int> stage_moe;  // per virtual stage: its MoE layers (stored after its dense ones: the sums are alike)
  for (int g = 0; g < par.pp * par.v; g++) stage_moe.push_back(stage_moe_layer_count(s, g));
  // Per virtual stage: the routed copies the busiest GPU holds over its MoE layers / the balanced mean.
  std::vector<double> expert_memory;
  for (int g = 0; g < par.pp * par.v; g++) expert_memory.push_back(stage_expert_load(s, g).memory);
  // The distributed optimizer shards the routed experts' state over their expert-data-parallel group.
  const double expert_shards =
      s.training.sharded_optimizer() ? static_cast<double>(par.expert_data_gpus()) * stage_copies(s) : 1.0;

  MemoryReport rep;
  rep.device_bytes = s.cluster.device.memory_bytes;
  rep.allocator_replayed = replay == AllocatorReplay::On;
  rep.ranks.resize(static_cast<std::size_t>(par.pp));
  for (int r = 0; r < par.pp; r++) {
    RankMemory& rm = rep.ranks[r];
    const double params = rank_parameter_count(s, r);
    const double experts = rank_expert_parameter_count(s, r);
    // FSDP with the actions a schedule names (core/ir/shard_actions.h): the working copy is sharded like the rest, and
    // a stage's whole copy (its share of the rank's) lives from its UNSHARD to its RESHARD.
    const bool unshards = s.training.fsdp && !sched.shard_actions.empty();
    // Resharding after forward: each forward and backward gathers its stage block by block, the next block prefetched
    // (about two blocks whole at a time).
    const bool per_op = s.training.fsdp && s.training.fsdp_reshard_after_forward && !unshards;
    rm.weights_bytes =
        (unshards || per_op ? (params - experts) / shards + experts / expert_shards : params) * pb.weight +
        fp8_weight_cache_bytes(s, r);
    const double stage_copy_bytes = params * pb.weight / par.v;
    // FSDP: the unsharded accumulator in fp32 (FSDP2's reduce_dtype) and the fp32 gradient shard.
    rm.grads_bytes =
        s.training.fsdp ? params * 4 + (params - experts) * 4 / shards + experts * 4 / expert_shards : params * pb.grad;
    rm.optimizer_bytes = (params - experts) * pb.state / shards + experts * pb.state / expert_shards;
    const double static_bytes = rm.weights_bytes + rm.grads_bytes + rm.optimizer_bytes;

    // The static state is reserved first, in tensors of their own; the activations get what is left.
    std::optional<CachingAllocatorModel> allocator;
    if (replay == AllocatorReplay::On) allocator.emplace(rep.device_bytes - static_bytes);
    ActivationLedger ledger(allocator ? &*allocator : nullptr);
    using Group = ActivationLedger::Group;
    struct Stored {
      Group tensors;
      long long tokens;  // in-flight units are counted in tokens (exact), / (seq_len * v) at the end
    };
    std::map<std::tuple<int, int, int>, Stored> live_ops;  // (stage, micro-batch, slice) -> what its forward keeps
    // (stage, micro-batch) -> per layer: the K/V cache (copies only) and the dK/dV buffer handed down the slices.
    std::map<std::pair<int, int>, std::vector<Group>> kv_cache, dkv;
    double peak = 0, gathered = 0, peak_gathered = 0;  // gathered: the unsharded stage copies (in the ledger)
    long long units = 0, peak_units = 0, max_units = 0;
    auto consider = [&](double bytes) {
      if (bytes > peak) {
        peak = bytes;
        peak_units = units;
        peak_gathered = gathered;
      }
      max_units = std::max(max_units, units);
    };
    std::vector<Group> copies(static_cast<std::size_t>(par.pp * par.v));  // per virtual stage: its gathered copy
    std::size_t next_action = 0, op_index = 0;
    auto act_until = [&](std::size_t i) {  // the rank's FSDP actions before its op i
      if (!unshards) return;
      const std::vector<ShardAction>& acts = sched.shard_actions[r];
      for (; next_action < acts.size() && acts[next_action].before <= static_cast<std::int32_t>(i); next_action++) {
        const ShardAction& a = acts[next_action];
        if (a.stage < 0 || a.stage > last_stage)
          fail("rank " + std::to_string(r) + ": FSDP action " + shard_action_text(a) +
               " names a stage outside the model");
        Group& copy = copies[static_cast<std::size_t>(a.stage)];
        switch (a.kind) {
          case ShardKind::Unshard:
            ledger.drop(copy);
            ledger.add(copy, stage_copy_bytes);
            gathered += stage_copy_bytes;
            consider(ledger.live());
            break;
          case ShardKind::Reshard:
            gathered -= copy.bytes;
            ledger.drop(copy);
            break;
          case ShardKind::ReduceGrad:
            break;
        }
      }
    };
    std::vector<double> tensors, moe_tensors;         // one layer's, per op (the buffers are reused)
    auto add_kv = [&](Group& g, int b, int tokens) {  // K and V of `tokens` tokens: two tensors
      const double half = layer_kv_bytes(s, b, tokens) / 2.0;
      ledger.add(g, half);
      ledger.add(g, half);
    };
    for (const Op& op : sched.per_rank[r]) {
      act_until(op_index++);
      Group blocks;  // resharding after forward: the op's gathered blocks
      if (per_op && op.kind != OpKind::BackwardWeight && op.stage >= 0 && op.stage <= last_stage) {
        const int n = std::max(1, stage_layers[static_cast<std::size_t>(op.stage)]);
        ledger.add(blocks, stage_copy_bytes * std::min(1.0, 2.0 / n));
        gathered += blocks.bytes;
      }
      if (op.microbatch < 0 || op.microbatch >= sched.m)
        fail("rank " + std::to_string(r) + ": op " + op_text(op) + " names a micro-batch outside 0.." +
             std::to_string(sched.m - 1));
      if (op.stage < 0 || op.stage > last_stage || op.tok_end <= op.tok_begin || op.tok_end > m.seq_len)
        fail("rank " + std::to_string(r) + ": op " + op_text(op) + " has a stage or token range outside the model");
      const int b = sched.microbatches[op.microbatch].seq_count;
      const int l = op.tokens(), c = op.tok_begin;
      // Context parallelism: a GPU stores the activations of its seq_len / cp tokens (whole sequences only).
      const double bl = static_cast<double>(b) * l / par.cp;
      const auto key = std::make_tuple(op.stage, op.microbatch, op.slice);
      const auto mb_key = std::make_pair(op.stage, op.microbatch);
      const bool sliced = sched.slices(op.microbatch) > 1;
      const int layers = stage_layers[static_cast<std::size_t>(op.stage)];
      const int moe_layers = stage_moe[static_cast<std::size_t>(op.stage)];
      check_layer_args("memory_report", b, l / par.cp, c);  // e.g. fewer tokens than context-parallel GPUs
      auto forward = [&] {
        auto [it, fresh] = live_ops.emplace(key, Stored{Group{}, l});
        if (!fresh) fail("rank " + std::to_string(r) + ": forward " + op_text(op) + " appears twice");
        Group& g = it->second.tensors;
        if (embedding[static_cast<std::size_t>(op.stage)]) ledger.add(g, bl * h / rep_tp);  // embedding dropout mask
        // Without flash (TeraPipe's code) the slice's K/V live in a full-sequence cache made at the first slice.
        const bool kv_in_cache = sliced && !flash && !recompute;
        if (recompute) {
          tensors.assign(1, bl * h * e / rep_tp);                                       // the layer's input
          if (sliced) tensors.insert(tensors.end(), 2, layer_kv_bytes(s, b, l) / 2.0);  // later slices need its K/V
          moe_tensors = tensors;
        } else {
          layer_tensor_bytes(s, widths, b, l / par.cp, c, kv_in_cache, tensors);
          if (moe_layers > 0)
            layer_tensor_bytes(s, moe_widths, b, l / par.cp, c, kv_in_cache, moe_tensors, expert_memory[op.stage]);
        }
        if (!sliced || recompute) {
          ledger.add_layers(g, tensors, layers - moe_layers);
          if (moe_layers > 0) ledger.add_layers(g, moe_tensors, moe_layers);
        } else {
          // Token-sliced schedules keep a K/V cache per layer, grown (flash) or made (without) with each layer.
          std::vector<Group>& cache = kv_cache[mb_key];
          const bool new_cache = cache.empty();
          if (new_cache) cache.resize(static_cast<std::size_t>(layers));
          for (std::size_t i = 0; i < cache.size(); i++) {
            Group& layer_cache = cache[i];
            ledger.add_layers(g, static_cast<int>(i) < layers - moe_layers ? tensors : moe_tensors, 1);
            if (flash && c > 0) {
              // torch.cat makes a new cache of c + l keys and drops the old one, except the first segment's own K/V,
              // which was the cache until now and stays saved for its backward (kv_cache holds only copies).
              Group grown;
              add_kv(grown, b, c + l);
              ledger.drop(layer_cache);
              layer_cache = std::move(grown);
            } else if (!flash && new_cache) {
              add_kv(layer_cache, b, m.seq_len);
            }
          }
        }
        if (head[static_cast<std::size_t>(op.stage)]) {
          ledger.add(g, bl * h * e / rep_tp);  // final LayerNorm input
          ledger.add(g, bl * h * e / rep_tp);  // and output
          ledger.add(g, 4.0 * bl * V / t);     // the fp32 softmax of the vocab-parallel cross entropy
        }
        units += l;
        consider(ledger.live());
      };
      // B and I: check the peak with the transient recomputed layer, then pass the dK/dV buffer along the slices.
      auto input_gradient = [&] {
        if (live_ops.find(key) == live_ops.end())
          fail("rank " + std::to_string(r) + ": backward " + op_text(op) + " comes before its forward");
        Group transient;
        if (recompute) {  // the largest layer of the stage
          layer_tensor_bytes(s, moe_layers > 0 ? moe_widths : widths, b, l / par.cp, c, false, tensors,
                             moe_layers > 0 ? expert_memory[op.stage] : 1.0);
          ledger.add_layers(transient, tensors, 1);
        } else if (!rerun.empty() || !moe_rerun.empty()) {  // selective: one layer's recomputed modules
          layer_tensor_bytes(s, moe_layers > 0 ? moe_rerun : rerun, b, l / par.cp, c, false, tensors,
                             moe_layers > 0 ? expert_memory[op.stage] : 1.0);
          ledger.add_layers(transient, tensors, 1);
        }
        // Seq1F1B's flash backward of one layer writes a new dK/dV over the prefix (c + l keys) while the later
        // segments' buffer is still held. The prefix K/V it reads are slices of the cache: views at b = 1 (the
        // paper's micro-batch), contiguous copies for b > 1 (a strided slice).
        if (sliced && flash && !recompute) {
          add_kv(transient, b, c + l);
          if (b > 1) add_kv(transient, b, c + l);
        }
        consider(ledger.live());
        ledger.drop(transient);
        if (!sliced) return;
        // This backward consumed the dK/dV buffer of the later slices and hands one over its prefix down, layer by
        // layer (the new one is written before the old one is released). With flash (Seq1F1B's code) the handed-over
        // buffer is a view of this segment's whole dK/dV (c + l keys), which keeps all of it alive; without,
        // TeraPipe's buffer covers the prefix (c keys).
        std::vector<Group>& buffers = dkv[mb_key];
        buffers.resize(static_cast<std::size_t>(layers));
        for (Group& old : buffers) {
          Group fresh;
          if (c > 0) add_kv(fresh, b, flash && !recompute ? c + l : c);
          ledger.drop(old);
          old = std::move(fresh);
        }
        if (c == 0) {
          dkv.erase(mb_key);
          auto kc = kv_cache.find(mb_key);
          if (kc != kv_cache.end()) {
            for (Group& g : kc->second) ledger.drop(g);
            kv_cache.erase(kc);
          }
        }
      };
      // B and W: the forward's stored activations are freed (W needs the GEMM inputs, so they live until it).
      auto release = [&] {
        auto it = live_ops.find(key);
        if (it == live_ops.end())
          fail("rank " + std::to_string(r) + ": backward " + op_text(op) + " comes before its forward");
        ledger.drop(it->second.tensors);
        units -= it->second.tokens;
        live_ops.erase(it);
      };
      switch (op.kind) {
        case OpKind::Forward:
          forward();
          break;
        case OpKind::Backward:
          input_gradient();
          release();
          break;
        case OpKind::BackwardInput:
          input_gradient();
          break;
        case OpKind::BackwardWeight:
          release();
          break;
      }
      gathered -= blocks.bytes;
      ledger.drop(blocks);
    }
    act_until(sched.per_rank[r].size());
    // At the peak the gathered copies are weights, the rest activations.
    rm.weights_bytes += peak_gathered;
    rm.activation_peak_bytes = peak - peak_gathered;
    const double unit = static_cast<double>(m.seq_len) * par.v;
    rm.peak_in_flight = peak_units / unit;
    rm.max_in_flight = max_units / unit;
    rm.peak_bytes = static_bytes + peak;
    rm.oom = rm.peak_bytes > rep.device_bytes;
    if (allocator) {
      rm.reserved_peak_bytes = static_bytes + allocator->peak_reserved_bytes();
      rm.allocator_failed = allocator->failed();
    }
  }
  return rep;
}

MaxBatch max_batch_gpipe(const Scenario& s, double limit_bytes) {
  const std::string where = "max_batch_gpipe(" + (s.source.empty() ? s.name : s.source) + ")";
  if (s.parallel.v != 1)
    throw std::invalid_argument(where + ": parallel.v = " + std::to_string(s.parallel.v) +
                                "; the GPipe baseline has one chunk per rank");
  MaxBatch out;
  out.limit_bytes = limit_bytes > 0 ? limit_bytes : s.cluster.device.memory_bytes;
  const int L = s.model.seq_len, p = s.parallel.pp;
  // Worst rank at B_r sequences (GPipe: every micro-batch of one sequence in flight at the end of the forwards).
  auto worst = [&](int batch, int* rank) {
    const MemoryReport rep = memory_report(s, make_gpipe(p, uniform_microbatches(batch, 1, L, 1), L));
    double w = -1;
    for (int r = 0; r < p; r++)
      if (rep.ranks[r].peak_bytes > w) w = rep.ranks[r].peak_bytes, *rank = r;
    if (batch == 1)
      for (const RankMemory& rm : rep.ranks)
        out.static_bytes = std::max(out.static_bytes, rm.weights_bytes + rm.grads_bytes + rm.optimizer_bytes);
    return w;
  };
  int rank = 0;
  const double one = worst(1, &out.worst_rank), two = worst(2, &rank);
  out.per_sequence_bytes = two - one;
  out.peak_bytes = one;
  if (one > out.limit_bytes) return out;
  // Peaks grow with the batch (every sequence's activations are added), so bracket and bisect.
  constexpr int kCap = 1 << 20;
  int lo = 1, hi = 2;
  while (hi < kCap && worst(hi, &rank) <= out.limit_bytes) lo = hi, hi *= 2;
  if (hi >= kCap)
    throw std::invalid_argument(where + ": more than " + std::to_string(kCap) + " sequences fit; check the model");
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (worst(mid, &rank) <= out.limit_bytes ? lo : hi) = mid;
  }
  out.per_replica = lo;
  out.global = lo * s.parallel.dp;
  out.peak_bytes = worst(lo, &out.worst_rank);
  return out;
}

}  // namespace pipescope
