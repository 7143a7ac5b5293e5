#pragma once
// Schedule IR: the one description of a pipeline iteration that the simulator, the static checker
// and the validation runtime all consume. A schedule is data: one ordered list of compute ops per
// pipeline rank (Megatron / PyTorch-pipelining style). Durations, bytes and placement are attached
// later by lowering passes (core/lowering.h); generators know nothing about time.
//
// Notation (spec/README.md crosswalk): p pipeline ranks, m micro-batches, v chunks per rank,
// k token slices (TeraPipe) / sequence segments (Seq1F1B) per micro-batch.

#include <cstdint>
#include <string>
#include <vector>

namespace pipescope {

enum class OpKind : std::uint8_t { Forward, Backward };

// One compute op: the forward or backward pass of one model chunk for one micro-batch (a range of
// sequences) over one token range.
struct Op {
  OpKind kind = OpKind::Forward;
  std::int32_t rank = 0;        // pipeline rank that runs it (0-based)
  std::int32_t chunk = 0;       // model chunk on that rank (interleaved), else 0
  std::int32_t stage = 0;       // virtual stage = chunk * p + rank; a micro-batch visits 0..p*v-1
  std::int32_t microbatch = 0;  // 0-based
  std::int32_t slice = 0;       // token slice / segment index within the micro-batch, 0-based
  std::int32_t tok_begin = 0;   // token range [tok_begin, tok_end) of the sequence
  std::int32_t tok_end = 0;

  bool operator==(const Op& o) const {
    return kind == o.kind && rank == o.rank && chunk == o.chunk && stage == o.stage && microbatch == o.microbatch &&
           slice == o.slice && tok_begin == o.tok_begin && tok_end == o.tok_end;
  }
  int tokens() const { return tok_end - tok_begin; }
};

// A micro-batch: a contiguous range of sequences of the replica's batch, cut into token slices.
struct MicroBatch {
  std::int32_t seq_begin = 0;             // first sequence (within the data-parallel replica's batch)
  std::int32_t seq_count = 1;             // sequences in it (b)
  std::vector<std::int32_t> slice_begin;  // token offsets of its slices; slice i = [begin[i], begin[i+1] or seq_len)
};

struct Schedule {
  std::string name;                       // "gpipe", "1f1b", "interleaved", "terapipe", "seq1f1b", "seq1f1b-i"
  int p = 1;                              // pipeline ranks
  int v = 1;                              // chunks per rank
  int m = 0;                              // micro-batches
  int seq_len = 0;                        // tokens per sequence
  std::vector<MicroBatch> microbatches;   // size m
  std::vector<std::vector<Op>> per_rank;  // size p: execution order on each rank

  int stages() const { return p * v; }  // virtual stages
  int slices(int mb) const { return static_cast<int>(microbatches[mb].slice_begin.size()); }
  std::size_t op_count() const;
};

// ---------------------------------------------------------------- canonical text form
// "<rank><F|B><mb>" with "c<chunk>" when chunk != 0 and "s<slice>" when slice != 0 (the op alone does not
// know v or k, so chunk 0 / slice 0 are implicit): "2F0", "1B3c1", "0F5s2", "3B7c1". Micro-batch, chunk and
// slice numbers are 0-based. Used in logs, traces, error messages and golden files. parse_op is the exact
// inverse of op_text; it also accepts explicit "c0" / "s0" ("3B7c1s0"). Neither the token range nor, for
// chunk > 0, the stage (chunk * p + rank) is in the text: the one-argument parse_op leaves stage = -1 when
// chunk > 0 (tokens 0); the schedule-aware overload fills both and range-checks against the schedule.
std::string op_text(const Op& op);
Op parse_op(const std::string& text);                     // throws std::invalid_argument on malformed text
Op parse_op(const std::string& text, const Schedule& s);  // ... or on an op outside the schedule
// One line per rank: "r0: 0F0 0F1 0B0 ...".
std::string schedule_text(const Schedule& s);

// ---------------------------------------------------------------- semantic dependencies
// The data dependencies of a compute op, independent of any placement (spec/terapipe.md section 3,
// spec/seq1f1b.md section 5): F(g, mb, i) needs F(g-1, mb, i) and F(g, mb, i-1) (K/V of earlier slices);
// B(g, mb, i) needs F(g, mb, i), B(g+1, mb, i) and B(g, mb, i+1) (dK/dV of later slices). Ops are
// identified by key; returns keys of the ops it needs.
struct OpKey {
  OpKind kind;
  std::int32_t stage, microbatch, slice;
  bool operator==(const OpKey& o) const {
    return kind == o.kind && stage == o.stage && microbatch == o.microbatch && slice == o.slice;
  }
  bool operator<(const OpKey& o) const;
};
OpKey key_of(const Op& op);
std::vector<OpKey> op_dependencies(const Schedule& s, const OpKey& op);

// Dense numbering of the op keys of a schedule's grid (F and B of every stage, micro-batch and slice):
// slots 0 .. size()-1, for flat per-op tables in the lowering passes and the checker (no hashing on
// million-op schedules).
class OpKeyIndex {
 public:
  explicit OpKeyIndex(const Schedule& s);
  std::size_t size() const { return 2 * static_cast<std::size_t>(stages_) * units_; }
  // Slot of a key, or -1 when it lies outside the grid.
  std::int64_t slot(const OpKey& k) const;
  OpKey key(std::size_t slot) const;

 private:
  int stages_ = 0;
  std::size_t units_ = 0;                // (micro-batch, slice) pairs
  std::vector<std::size_t> unit_begin_;  // per micro-batch: its first unit
  std::vector<std::int32_t> unit_mb_;    // per unit: its micro-batch
};

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
Op make_op(const Schedule& s, OpKind kind, int rank, int chunk, int mb, int slice);

// GPipe: all forwards (micro-batch order, slices in order), then all backwards (slices reversed).
Schedule make_gpipe(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// 1F1B / PipeDream-Flush: warm-up W_r = min(p - r - 1, m), steady 1F1B, cool-down.
Schedule make_1f1b(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// Megatron interleaved 1F1B with v chunks per rank (m % p == 0).
Schedule make_interleaved(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len);

// Warm-up forward count of rank r for each schedule family (the closed forms the tests check).
int warmup_1f1b(int p, int m, int r);
int warmup_interleaved(int p, int m, int v, int r);

}  // namespace pipescope
