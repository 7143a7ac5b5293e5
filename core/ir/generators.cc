// Schedule generators: GPipe / TeraPipe, 1F1B (PipeDream-Flush), Megatron interleaved 1F1B.
// Pure functions returning data (docs/papers.md).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/ir/schedule.h"

namespace pipescope {

namespace {}  // namespace

void invalid_generator_args(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

int check_generator_args(const char* where, int p, int v, const std::vector<MicroBatch>& mbs, int seq_len) {
  if (p < 1) invalid_generator_args(where, "pipeline ranks p must be >= 1, got " + std::to_string(p));
  if (v < 1) invalid_generator_args(where, "chunks per rank v must be >= 1, got " + std::to_string(v));
  if (mbs.empty()) invalid_generator_args(where, "at least one micro-batch is needed");
  if (seq_len < 1) invalid_generator_args(where, "seq_len must be >= 1, got " + std::to_string(seq_len));
  int kmax = 0;
  for (std::size_t i = 0; i < mbs.size(); i++) {
    const MicroBatch& mb = mbs[i];
    const std::string which = "micro-batch " + std::to_string(i);
    if (mb.seq_count < 1) invalid_generator_args(where, which + " has " + std::to_string(mb.seq_count) + " sequences");
    if (mb.slice_begin.empty() || mb.slice_begin[0] != 0)
      invalid_generator_args(where, which + ": its first slice must start at token 0");
    for (std::size_t j = 1; j < mb.slice_begin.size(); j++)
      if (mb.slice_begin[j] <= mb.slice_begin[j - 1])
        invalid_generator_args(where, which + ": slice " + std::to_string(j) + " is empty or out of order");
    if (mb.slice_begin.back() >= seq_len)
      invalid_generator_args(where, which + ": slice " + std::to_string(mb.slice_begin.size() - 1) +
                                        " starts at token " + std::to_string(mb.slice_begin.back()) +
                                        ", beyond seq_len " + std::to_string(seq_len));
    kmax = std::max(kmax, static_cast<int>(mb.slice_begin.size()));
  }
  return kmax;
}

void require_unsliced(const char* where, const std::vector<MicroBatch>& mbs) {
  for (std::size_t i = 0; i < mbs.size(); i++)
    if (mbs[i].slice_begin.size() != 1)
      invalid_generator_args(where,
                             "micro-batch " + std::to_string(i) + " has " + std::to_string(mbs[i].slice_begin.size()) +
                                 " token slices; this generator needs unsliced micro-batches (sliced 1F1B is Seq1F1B)");
}

std::vector<MicroBatch> uniform_microbatches(int m, int mbs, int seq_len, int k) {
  const char* where = "uniform_microbatches";
  if (m < 1) invalid_generator_args(where, "micro-batches m must be >= 1, got " + std::to_string(m));
  if (mbs < 1) invalid_generator_args(where, "micro-batch size must be >= 1, got " + std::to_string(mbs));
  if (seq_len < 1) invalid_generator_args(where, "seq_len must be >= 1, got " + std::to_string(seq_len));
  if (k < 1 || k > seq_len)
    invalid_generator_args(
        where, "token slices k must be in [1, seq_len = " + std::to_string(seq_len) + "], got " + std::to_string(k));
  const int len = seq_len / k;  // the last slice takes the remainder
  std::vector<MicroBatch> out(static_cast<std::size_t>(m));
  for (int i = 0; i < m; i++) {
    out[i].seq_begin = i * mbs;
    out[i].seq_count = mbs;
    for (int j = 0; j < k; j++) out[i].slice_begin.push_back(j * len);
  }
  return out;
}

std::vector<MicroBatch> sliced_microbatches(int m, int mbs, const std::vector<int>& slice_tokens) {
  const char* where = "sliced_microbatches";
  if (m < 1) invalid_generator_args(where, "micro-batches m must be >= 1, got " + std::to_string(m));
  if (mbs < 1) invalid_generator_args(where, "micro-batch size must be >= 1, got " + std::to_string(mbs));
  if (slice_tokens.empty()) invalid_generator_args(where, "at least one slice length is needed");
  std::vector<std::int32_t> begin;
  std::int64_t at = 0;
  for (std::size_t j = 0; j < slice_tokens.size(); j++) {
    if (slice_tokens[j] < 1)
      invalid_generator_args(where,
                             "slice " + std::to_string(j) + " has " + std::to_string(slice_tokens[j]) + " tokens");
    begin.push_back(static_cast<std::int32_t>(at));
    at += slice_tokens[j];
    if (at > 0x7fffffff) invalid_generator_args(where, "slice lengths overflow");
  }
  std::vector<MicroBatch> out(static_cast<std::size_t>(m));
  for (int i = 0; i < m; i++) {
    out[i].seq_begin = i * mbs;
    out[i].seq_count = mbs;
    out[i].slice_begin = begin;
  }
  return out;
}

Schedule make_gpipe(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  const int kmax = check_generator_args("make_gpipe", p, 1, mbs, seq_len);
  // With token slices this is exactly TeraPipe's schedule (docs/papers.md#terapipe).
  Schedule s = schedule_skeleton(kmax > 1 ? "terapipe" : "gpipe", p, 1, mbs, seq_len);
  for (int r = 0; r < p; r++) {
    auto& ops = s.per_rank[r];
    for (int mb = 0; mb < s.m; mb++)
      for (int i = 0; i < s.slices(mb); i++) ops.push_back(make_op(s, OpKind::Forward, r, 0, mb, i));
    for (int mb = s.m - 1; mb >= 0; mb--)
      for (int i = s.slices(mb) - 1; i >= 0; i--) ops.push_back(make_op(s, OpKind::Backward, r, 0, mb, i));
  }
  return s;
}

int warmup_1f1b(int p, int m, int r) { return std::min(p - r - 1, m); }

Schedule make_1f1b(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  check_generator_args("make_1f1b", p, 1, mbs, seq_len);
  require_unsliced("make_1f1b", mbs);
  Schedule s = schedule_skeleton("1f1b", p, 1, mbs, seq_len);
  const int m = s.m;
  for (int r = 0; r < p; r++) {
    auto& ops = s.per_rank[r];
    const int w = warmup_1f1b(p, m, r);
    for (int i = 0; i < w; i++) ops.push_back(make_op(s, OpKind::Forward, r, 0, i, 0));
    for (int i = 0; i < m - w; i++) {  // steady: forward of the next, backward of the oldest (FIFO)
      ops.push_back(make_op(s, OpKind::Forward, r, 0, w + i, 0));
      ops.push_back(make_op(s, OpKind::Backward, r, 0, i, 0));
    }
    for (int i = m - w; i < m; i++) ops.push_back(make_op(s, OpKind::Backward, r, 0, i, 0));
  }
  return s;
}

int warmup_interleaved(int p, int m, int v, int r) {
  if (m == p) return m * v;  // Megatron: all forwards first when m == p
  return std::min(2 * (p - r - 1) + (v - 1) * p, m * v);
}

Schedule make_interleaved(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len) {
  const char* where = "make_interleaved";
  check_generator_args(where, p, v, mbs, seq_len);
  require_unsliced(where, mbs);
  const int m = static_cast<int>(mbs.size());
  if (m % p != 0)
    invalid_generator_args(
        where,
        "the interleaved schedule needs the micro-batch count to be a multiple of the pipeline ranks "
        "(m % p == 0), got m = " +
            std::to_string(m) + ", p = " + std::to_string(p));
  Schedule s = schedule_skeleton("interleaved", p, v, mbs, seq_len);
  const int total = m * v;  // chunk-micro-batches per rank
  // Megatron's table (docs/papers.md#megatron): index k -> (micro-batch, chunk), in groups of p micro-batches.
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto chunk_f = [&](int k) { return (k % (p * v)) / p; };
  auto chunk_b = [&](int k) { return v - 1 - chunk_f(k); };
  for (int r = 0; r < p; r++) {
    auto& ops = s.per_rank[r];
    const int w = warmup_interleaved(p, m, v, r);
    auto fwd = [&](int k) { ops.push_back(make_op(s, OpKind::Forward, r, chunk_f(k), mb_of(k), 0)); };
    auto bwd = [&](int k) { ops.push_back(make_op(s, OpKind::Backward, r, chunk_b(k), mb_of(k), 0)); };
    for (int k = 0; k < w; k++) fwd(k);
    for (int k = 0; k < total - w; k++) {
      fwd(k + w);
      bwd(k);
    }
    for (int k = total - w; k < total; k++) bwd(k);
  }
  return s;
}

}  // namespace pipescope
