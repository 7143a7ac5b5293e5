#pragma once
// Schedule IR: the one description of a pipeline iteration that the simulator, the static checker
// and the validation runtime all consume. A schedule is data: one ordered list of compute ops per
// pipeline rank (Megatron / PyTorch-pipelining style). Durations, bytes and placement are attached
// later by lowering passes (core/lower/lowering.h); generators know nothing about time.
//
// Notation (docs/schedule-ir.md): p pipeline ranks, m micro-batches, v chunks per rank,
// k token slices (TeraPipe) / sequence segments (Seq1F1B) per micro-batch.

#include <cstdint>
#include <string>
#include <vector>

namespace pipescope {

// F: forward. B: the whole backward (input and weight gradients together). I: backward for inputs (the
// activation gradient the previous stage needs; attention backward, every dgrad GEMM). W: backward for weights
// (the weight-gradient GEMMs alone). A backward of one (stage, micro-batch, slice) is either one B or an I and a
// W (zero-bubble schedules: W runs later, in a bubble). Every `switch` over OpKind has no default.
enum class OpKind : std::uint8_t { Forward, Backward, BackwardInput, BackwardWeight };
constexpr int kOpKinds = 4;
// The letter of a kind in op texts: F, B, I, W (PyTorch pipelining's action letters).
char kind_letter(OpKind k);
// A slot 0..kOpKinds-1 per kind (flat per-kind tables).
int kind_index(OpKind k);
// B, I or W: an op that needs the forward of its own key to have run on its rank.
bool is_backward(OpKind k);

// How virtual stages sit on ranks (PyTorch pipelining's stage "style"). Loop: stage = chunk * p + rank
// (Megatron interleaving). V: a zigzag, chunk c covers stages c*p .. c*p+p-1 in rank order when c is even and
// in reverse rank order when c is odd, so with v = 2 rank r holds stages r and 2p-1-r (ZB-V).
// Dual (DeepSeek's two-direction DualPipe): V's placement of 2p virtual stages, but the model is cut into p stages
// held twice: virtual stages 0..p-1 are one copy in rank order, p..2p-1 the other in reverse rank order (stage p + j
// is a copy of model stage j, on rank p-1-j). A micro-batch takes one direction: the first m/2 run through stages
// 0..p-1, the others through p..2p-1 (each rank holds model stages r and p-1-r: twice the parameters).
enum class StageStyle : std::uint8_t { Loop, V, Dual };
// The rank that holds virtual stage `stage` of p ranks in this style.
int stage_rank(StageStyle style, int p, int stage);
// The model stages a style cuts the layers into (p * v; p for Dual, whose virtual stages are copies) and the model
// stage virtual stage `stage` runs (itself; stage % p for Dual). The layers, the embedding (model stage 0) and the
// head (the last model stage) follow the model stage.
int model_stage_count(StageStyle style, int p, int v);
int model_stage_of(StageStyle style, int p, int stage);

// Overlapped pairs (DualPipe, DualPipeV, Megatron-Core's combined 1F1B): two adjacent ops of one rank that run
// together, a forward and a backward (B or I) of two other (stage, micro-batch)s, so that each one's communication
// (all-to-all, tensor-parallel collectives) hides behind the other's compute (core/lower/lowering.h has the execution
// semantics). The pair's first op is marked First, the op right after it Second; both start once both can start.
// PyTorch pipelining writes a pair as one action, "(a;b)OVERLAP_F_B"; the text form here is "(a;b)".
enum class Overlap : std::uint8_t { None, First, Second };

// One compute op: the forward or backward pass of one model chunk for one micro-batch (a range of
// sequences) over one token range.
struct Op {
  OpKind kind = OpKind::Forward;
  Overlap overlap = Overlap::None;  // its place in an overlapped pair (in the padding after kind: no growth)
  std::int32_t rank = 0;            // pipeline rank that runs it (0-based)
  std::int32_t chunk = 0;           // model chunk on that rank (interleaved), else 0
  std::int32_t stage = 0;           // virtual stage = chunk * p + rank; a micro-batch visits 0..p*v-1
  std::int32_t microbatch = 0;      // 0-based
  std::int32_t slice = 0;           // token slice / segment index within the micro-batch, 0-based
  std::int32_t tok_begin = 0;       // token range [tok_begin, tok_end) of the sequence
  std::int32_t tok_end = 0;

  bool operator==(const Op& o) const {
    return kind == o.kind && overlap == o.overlap && rank == o.rank && chunk == o.chunk && stage == o.stage &&
           microbatch == o.microbatch && slice == o.slice && tok_begin == o.tok_begin && tok_end == o.tok_end;
  }
  int tokens() const { return tok_end - tok_begin; }
  bool paired() const { return overlap != Overlap::None; }
};
static_assert(sizeof(Op) == 32);

// A micro-batch: a contiguous range of sequences of the replica's batch, cut into token slices.
struct MicroBatch {
  std::int32_t seq_begin = 0;             // first sequence (within the data-parallel replica's batch)
  std::int32_t seq_count = 1;             // sequences in it (b)
  std::vector<std::int32_t> slice_begin;  // token offsets of its slices; slice i = [begin[i], begin[i+1] or seq_len)
};

// FSDP's actions, PyTorch pipelining's UNSHARD, RESHARD and REDUCE_GRAD (written "<stage>UNSHARD", ...), on a schedule
// that names them (core/ir/shard_actions.h): UNSHARD all-gathers a virtual stage's sharded parameters (posted; the
// stage's next compute op waits for it), RESHARD frees the gathered copy (no communication), REDUCE_GRAD
// reduce-scatters the stage's accumulated gradients. Each sits on its rank before the compute op at index `before` of
// that rank's list (the list's size: after its last op).
enum class ShardKind : std::uint8_t { Unshard, Reshard, ReduceGrad };
struct ShardAction {
  ShardKind kind = ShardKind::Unshard;
  std::int32_t stage = 0;
  std::int32_t before = 0;
  bool operator==(const ShardAction& o) const { return kind == o.kind && stage == o.stage && before == o.before; }
};

struct Schedule {
  std::string name;                       // the generator's registry name (core/model/schedule_registry.h)
  int p = 1;                              // pipeline ranks
  int v = 1;                              // chunks per rank
  StageStyle style = StageStyle::Loop;    // where each virtual stage lives
  int m = 0;                              // micro-batches
  int seq_len = 0;                        // tokens per sequence
  std::vector<MicroBatch> microbatches;   // size m
  std::vector<std::vector<Op>> per_rank;  // size p: execution order on each rank
  // FSDP's actions per rank in order (by `before`); empty when the schedule names none (FSDP then gathers each stage
  // before its first op and reduces after its last backward: core/lower/grad_sync.h).
  std::vector<std::vector<ShardAction>> shard_actions;

  int stages() const { return p * v; }  // virtual stages
  // The virtual stages micro-batch mb runs through, [route_begin, route_end): all of them but with Dual.
  int route_begin(int mb) const;
  int route_end(int mb) const;
  int stage_of(int rank, int chunk) const;
  int rank_of_stage(int stage) const;
  int chunk_of_stage(int stage) const;
  int slices(int mb) const { return static_cast<int>(microbatches[mb].slice_begin.size()); }
  std::size_t op_count() const;
};

// ---------------------------------------------------------------- canonical text form
// "<rank><F|B|I|W><mb>" with "c<chunk>" when chunk != 0 and "s<slice>" when slice != 0 (the op alone does not
// know v or k, so chunk 0 / slice 0 are implicit): "2F0", "1B3c1", "0F5s2", "3B7c1", "1I2", "1W2". Micro-batch,
// chunk and slice numbers are 0-based. Used in logs, traces, error messages and golden files. parse_op is the
// exact inverse of op_text; it also accepts explicit "c0" / "s0" ("3B7c1s0"). Neither the token range nor, for
// chunk > 0, the stage (Schedule::stage_of) is in the text: the one-argument parse_op leaves stage = -1 when
// chunk > 0 (tokens 0); the schedule-aware overload fills both and range-checks against the schedule.
std::string op_text(const Op& op);
Op parse_op(const std::string& text);                     // throws std::invalid_argument on malformed text
Op parse_op(const std::string& text, const Schedule& s);  // ... or on an op outside the schedule
// One line per rank: "r0: 0F0 0F1 0B0 ...", an overlapped pair as "(0F5c1;0B2)", FSDP's actions where the schedule
// names them ("0UNSHARD 0F0 ...").
std::string schedule_text(const Schedule& s);
// Rank r's ops as paired_op_text words, FSDP's actions (core/ir/shard_actions.h) among them where they sit.
std::vector<std::string> rank_words(const Schedule& s, std::size_t r);
// op_text with its pair's bracket, for listings one op per word: "(0F3" opens a pair, "0B1c1)" closes it.
std::string paired_op_text(const Op& op);
// Marks ops[i] and ops[i + 1] as one overlapped pair (the generators' one way to pair).
void pair_ops(std::vector<Op>& ops, std::size_t i);
// The overlapped pairs of a schedule.
std::size_t pair_count(const Schedule& s);

// ---------------------------------------------------------------- semantic dependencies
// The data dependencies of a compute op, independent of any placement: F(g, mb, i) needs F(g-1, mb, i) and
// F(g, mb, i-1) (K/V of earlier slices); B(g, mb, i) and I(g, mb, i) need F(g, mb, i), the input gradient
// of stage g+1 (its B or its I, whichever form that stage uses) and that of slice i+1 of their own stage
// (dK/dV of later slices); W(g, mb, i) needs I(g, mb, i). Ops are identified by key; returns keys of the ops
// it needs.
struct OpKey {
  OpKind kind;
  std::int32_t stage, microbatch, slice;
  bool operator==(const OpKey& o) const {
    return kind == o.kind && stage == o.stage && microbatch == o.microbatch && slice == o.slice;
  }
  bool operator<(const OpKey& o) const;
};
OpKey key_of(const Op& op);

// Dense numbering of the op keys of a schedule's grid (every kind of every stage, micro-batch and slice):
// slots 0 .. size()-1, for flat per-op tables in the lowering passes and the checker (no hashing on
// million-op schedules). It also records which backward form each (stage, micro-batch, slice) uses: split
// (I + W) when the schedule holds an I or a W of it, else fused (B). The ops a schedule must hold are then
// F everywhere plus B or I and W (expected()).
class OpKeyIndex {
 public:
  explicit OpKeyIndex(const Schedule& s);
  std::size_t size() const { return kOpKinds * static_cast<std::size_t>(stages_) * units_; }
  // Slot of a key, or -1 when it lies outside the grid.
  std::int64_t slot(const OpKey& k) const;
  OpKey key(std::size_t slot) const;
  // Whether the backward of (stage, micro-batch, slice) runs as I + W; false outside the grid.
  bool split(std::int32_t stage, std::int32_t microbatch, std::int32_t slice) const;
  // Whether the schedule must hold the op with this key (F; B when fused; I and W when split).
  bool expected(const OpKey& k) const;
  // The op that produces the input gradient of (stage, micro-batch, slice): its B or its I.
  OpKey grad_producer(std::int32_t stage, std::int32_t microbatch, std::int32_t slice) const;
  int stages() const { return stages_; }
  int slices(std::int32_t microbatch) const;
  // The stages micro-batch mb runs through (Schedule::route_begin / route_end; all of them for a micro-batch outside
  // the table); keys outside them are off the grid.
  std::int32_t route_begin(std::int32_t microbatch) const {
    const auto mb = static_cast<std::size_t>(microbatch);
    return microbatch < 0 || 2 * mb >= route_.size() ? 0 : route_[2 * mb];
  }
  std::int32_t route_end(std::int32_t microbatch) const {
    const auto mb = static_cast<std::size_t>(microbatch);
    return microbatch < 0 || 2 * mb >= route_.size() ? stages_ : route_[2 * mb + 1];
  }

 private:
  std::int64_t unit_of(std::int32_t stage, std::int32_t microbatch, std::int32_t slice) const;
  int stages_ = 0;
  std::size_t units_ = 0;                // (micro-batch, slice) pairs
  std::vector<std::size_t> unit_begin_;  // per micro-batch: its first unit
  std::vector<std::int32_t> unit_mb_;    // per unit: its micro-batch
  std::vector<char> split_;              // per (stage, unit): backward as I + W
  std::vector<std::int32_t> route_;      // per micro-batch: its first stage and the stage after its last
};

std::vector<OpKey> op_dependencies(const OpKeyIndex& index, const OpKey& op);
// The same into `out` without allocating (the lowering asks it for every op): an op has at most 3; returns the count.
int op_dependencies(const OpKeyIndex& index, const OpKey& op, OpKey (&out)[3]);
// Convenience for tests and one-off queries: builds the index (O(ops)) on every call.
std::vector<OpKey> op_dependencies(const Schedule& s, const OpKey& op);

// The op of a schedule's grid with this key (rank, chunk and token range filled in); the key must be valid.
Op op_of(const Schedule& s, const OpKey& k);

// ---------------------------------------------------------------- generators
// Uniform micro-batches of `mbs` sequences cut into `k` equal token slices (the last one takes the
// remainder), or into explicit slice lengths.
std::vector<MicroBatch> uniform_microbatches(int m, int mbs, int seq_len, int k);
std::vector<MicroBatch> sliced_microbatches(int m, int mbs, const std::vector<int>& slice_tokens);

// Building blocks shared by every generator: an empty schedule with its micro-batch table, and one op
// with its virtual stage and token range filled in from that table.
Schedule schedule_skeleton(const char* name, int p, int v, const std::vector<MicroBatch>& mbs, int seq_len);
// Argument checks of every generator (p, v >= 1; micro-batches of >= 1 sequence whose slices start at token 0,
// increase, and start before seq_len); throws std::invalid_argument naming `where`. Returns the most slices.
int check_generator_args(const char* where, int p, int v, const std::vector<MicroBatch>& mbs, int seq_len);
// Throws std::invalid_argument "where: what": how the generators reject their arguments.
[[noreturn]] void invalid_generator_args(const std::string& where, const std::string& what);
Op make_op(const Schedule& s, OpKind kind, int rank, int chunk, int mb, int slice);
// Throws std::invalid_argument naming `where` when a micro-batch has more than one token slice.
void require_unsliced(const char* where, const std::vector<MicroBatch>& mbs);

// GPipe: all forwards (micro-batch order, slices in order), then all backwards (slices reversed).
Schedule make_gpipe(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// 1F1B / PipeDream-Flush: warm-up W_r = min(p - r - 1, m), steady 1F1B, cool-down.
Schedule make_1f1b(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// Megatron interleaved 1F1B with v chunks per rank (m % p == 0).
Schedule make_interleaved(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len);

// Warm-up forward count of rank r for each schedule family (the closed forms the tests check).
int warmup_1f1b(int p, int m, int r);
int warmup_interleaved(int p, int m, int v, int r);

// Zero-bubble schedules (Qi et al., ICLR'24), core/ir/zero_bubble.cc: backward split into I and W.
// ZB-H1: 1F1B's warm-up, I in place of B, each W deferred by p-1-r steps into the cool-down bubble; peak
// in-flight activations = 1F1B's (min(p-r, m) on rank r).
Schedule make_zb_h1(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// ZB-H2: warm-up of min(2(p-r)-1, m) forwards (up to 2p-1 in flight), W ops fill what is left of the
// bubbles; zero bubble when tF = tI = tW and communication is free.
Schedule make_zb_h2(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// ZB-V: two chunks per rank in the V style (rank r holds stages r and 2p-1-r), I and W split.
Schedule make_zb_v(int p, const std::vector<MicroBatch>& mbs, int seq_len);

// DualPipeV (core/ir/dual_pipe.cc): ZB-V's placement, the steady state as overlapped pairs (the forward of one chunk
// with the backward of the other); m >= 2p.
Schedule make_dualpipev(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// DualPipe (core/ir/dual_pipe.cc, DeepSeek-V3): two directions in the Dual style, half the micro-batches each, in
// DeepSeek's eight steps (forwards of both directions, then overlapped forward-backward pairs, zero-bubble I/W in
// the ramps); p even, m even and m >= 2p.
Schedule make_dualpipe(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// Megatron-Core's combined 1F1B (core/ir/combined_1f1b.cc): every forward followed on its rank by a backward (B or I)
// of another (stage, micro-batch) becomes an overlapped pair with it: the steady state of 1F1B and interleaved 1F1B.
Schedule pair_steady_state(Schedule s);

}  // namespace pipescope
