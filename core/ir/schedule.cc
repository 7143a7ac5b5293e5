// Schedule IR: canonical op text, parser, semantic dependencies.
#include "core/ir/schedule.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <tuple>

#include "core/ir/shard_actions.h"

namespace pipescope {

std::size_t Schedule::op_count() const {
  std::size_t n = 0;
  for (const auto& ops : per_rank) n += ops.size();
  return n;
}

char kind_letter(OpKind k) {
  switch (k) {
    case OpKind::Forward:
      return 'F';
    case OpKind::Backward:
      return 'B';
    case OpKind::BackwardInput:
      return 'I';
    case OpKind::BackwardWeight:
      return 'W';
  }
  return '?';
}

int kind_index(OpKind k) {
  switch (k) {
    case OpKind::Forward:
      return 0;
    case OpKind::Backward:
      return 1;
    case OpKind::BackwardInput:
      return 2;
    case OpKind::BackwardWeight:
      return 3;
  }
  return 0;
}

bool is_backward(OpKind k) {
  switch (k) {
    case OpKind::Forward:
      return false;
    case OpKind::Backward:
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
      return true;
  }
  return false;
}

namespace {

constexpr OpKind kAllKinds[kOpKinds] = {OpKind::Forward, OpKind::Backward, OpKind::BackwardInput,
                                        OpKind::BackwardWeight};

bool kind_of_letter(char c, OpKind* out) {
  for (OpKind k : kAllKinds)
    if (kind_letter(k) == c) return *out = k, true;
  return false;
}

}  // namespace

int Schedule::stage_of(int rank, int chunk) const {
  switch (style) {
    case StageStyle::Loop:
      return chunk * p + rank;
    case StageStyle::V:
    case StageStyle::Dual:
      return chunk * p + (chunk % 2 == 0 ? rank : p - 1 - rank);
  }
  return -1;
}

int stage_rank(StageStyle style, int p, int stage) {
  if (p < 1) return 0;
  switch (style) {
    case StageStyle::Loop:
      return stage % p;
    case StageStyle::V:
    case StageStyle::Dual:
      return (stage / p) % 2 == 0 ? stage % p : p - 1 - stage % p;
  }
  return 0;
}

int model_stage_count(StageStyle style, int p, int v) {
  switch (style) {
    case StageStyle::Loop:
    case StageStyle::V:
      return p * v;
    case StageStyle::Dual:
      return p;
  }
  return p * v;
}

int model_stage_of(StageStyle style, int p, int stage) {
  switch (style) {
    case StageStyle::Loop:
    case StageStyle::V:
      return stage;
    case StageStyle::Dual:
      return p < 1 ? stage : stage % p;
  }
  return stage;
}

int Schedule::route_begin(int mb) const {
  switch (style) {
    case StageStyle::Loop:
    case StageStyle::V:
      return 0;
    case StageStyle::Dual:
      return 2 * mb < m ? 0 : p;
  }
  return 0;
}

int Schedule::route_end(int mb) const {
  switch (style) {
    case StageStyle::Loop:
    case StageStyle::V:
      return stages();
    case StageStyle::Dual:
      return 2 * mb < m ? p : 2 * p;
  }
  return stages();
}

int Schedule::rank_of_stage(int stage) const { return stage_rank(style, p, stage); }

int Schedule::chunk_of_stage(int stage) const { return p < 1 ? 0 : stage / p; }

bool OpKey::operator<(const OpKey& o) const {
  return std::tie(kind, stage, microbatch, slice) < std::tie(o.kind, o.stage, o.microbatch, o.slice);
}

std::string op_text(const Op& op) {
  std::string t = std::to_string(op.rank);
  t += kind_letter(op.kind);
  t += std::to_string(op.microbatch);
  if (op.chunk != 0) t += "c" + std::to_string(op.chunk);
  if (op.slice != 0) t += "s" + std::to_string(op.slice);
  return t;
}

namespace {

[[noreturn]] void bad_op(const std::string& text, const char* why) {
  throw std::invalid_argument("malformed op '" + text + "': " + why +
                              " (expected <rank><F|B|I|W><microbatch>[c<chunk>][s<slice>], e.g. 1B3c1s0)");
}

// Reads a non-negative decimal number at text[pos]; advances pos.
std::int32_t read_number(const std::string& text, std::size_t& pos, const char* what) {
  if (pos >= text.size() || !std::isdigit(static_cast<unsigned char>(text[pos]))) bad_op(text, what);
  if (text[pos] == '0' && pos + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[pos + 1])))
    bad_op(text, "leading zero");
  long long v = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    v = v * 10 + (text[pos++] - '0');
    if (v > 0x7fffffffLL) bad_op(text, "number out of range");
  }
  return static_cast<std::int32_t>(v);
}

}  // namespace

Op parse_op(const std::string& text) {
  Op op;
  std::size_t pos = 0;
  op.rank = read_number(text, pos, "expected a rank number first");
  if (pos >= text.size() || !kind_of_letter(text[pos], &op.kind)) bad_op(text, "expected F, B, I or W after the rank");
  pos++;
  op.microbatch = read_number(text, pos, "expected a micro-batch number after F/B/I/W");
  bool chunk_seen = false, slice_seen = false;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (c == 'c' && !chunk_seen && !slice_seen) {
      op.chunk = read_number(text, pos, "expected a chunk number after 'c'");
      chunk_seen = true;
    } else if (c == 's' && !slice_seen) {
      op.slice = read_number(text, pos, "expected a slice number after 's'");
      slice_seen = true;
    } else {
      bad_op(text, "unexpected character");
    }
  }
  // The stage needs p and the stage style when chunk > 0: left unknown (-1) here, filled by parse_op(text, s).
  op.stage = op.chunk == 0 ? op.rank : -1;
  return op;
}

Op parse_op(const std::string& text, const Schedule& s) {
  Op op = parse_op(text);
  auto out_of_range = [&](const std::string& what) {
    throw std::invalid_argument("op '" + text + "': " + what + " out of range for schedule '" + s.name +
                                "' (p=" + std::to_string(s.p) + ", v=" + std::to_string(s.v) +
                                ", m=" + std::to_string(s.m) + ")");
  };
  if (op.rank >= s.p) out_of_range("rank " + std::to_string(op.rank));
  if (op.chunk >= s.v) out_of_range("chunk " + std::to_string(op.chunk));
  if (op.microbatch >= s.m || op.microbatch >= static_cast<int>(s.microbatches.size()))
    out_of_range("micro-batch " + std::to_string(op.microbatch));
  if (op.slice >= s.slices(op.microbatch)) out_of_range("slice " + std::to_string(op.slice));
  op.stage = s.stage_of(op.rank, op.chunk);
  const auto& b = s.microbatches[op.microbatch].slice_begin;
  op.tok_begin = b[op.slice];
  op.tok_end = op.slice + 1 < static_cast<int>(b.size()) ? b[op.slice + 1] : s.seq_len;
  return op;
}

std::vector<std::string> rank_words(const Schedule& s, std::size_t r) {
  std::vector<std::string> out;
  walk_rank(
      s, r, [&](const ShardAction& a) { out.push_back(shard_action_text(a)); },
      [&](const Op& op) { out.push_back(paired_op_text(op)); });
  return out;
}

std::string schedule_text(const Schedule& s) {
  std::string out;
  for (std::size_t r = 0; r < s.per_rank.size(); r++) {
    out += "r" + std::to_string(r) + ":";
    for (const std::string& w : rank_words(s, r)) out += (w.back() == ')' && w.front() != '(' ? ";" : " ") + w;
    out += "\n";
  }
  return out;
}

std::string paired_op_text(const Op& op) {
  switch (op.overlap) {
    case Overlap::None:
      break;
    case Overlap::First:
      return "(" + op_text(op);
    case Overlap::Second:
      return op_text(op) + ")";
  }
  return op_text(op);
}

void pair_ops(std::vector<Op>& ops, std::size_t i) {
  ops.at(i).overlap = Overlap::First;
  ops.at(i + 1).overlap = Overlap::Second;
}

std::size_t pair_count(const Schedule& s) {
  std::size_t n = 0;
  for (const auto& ops : s.per_rank)
    for (const Op& op : ops) n += op.overlap == Overlap::First;
  return n;
}

OpKey key_of(const Op& op) { return OpKey{op.kind, op.stage, op.microbatch, op.slice}; }

int op_dependencies(const OpKeyIndex& index, const OpKey& op, OpKey (&out)[3]) {
  int n = 0;
  auto gradient_inputs = [&] {  // B and I: the forward, the gradient from stage g+1 and from slice i+1
    out[n++] = OpKey{OpKind::Forward, op.stage, op.microbatch, op.slice};
    if (op.stage + 1 < index.route_end(op.microbatch))
      out[n++] = index.grad_producer(op.stage + 1, op.microbatch, op.slice);
    if (op.slice + 1 < index.slices(op.microbatch))
      out[n++] = index.grad_producer(op.stage, op.microbatch, op.slice + 1);
  };
  switch (op.kind) {
    case OpKind::Forward:
      if (op.stage > index.route_begin(op.microbatch))
        out[n++] = OpKey{OpKind::Forward, op.stage - 1, op.microbatch, op.slice};
      if (op.slice > 0) out[n++] = OpKey{OpKind::Forward, op.stage, op.microbatch, op.slice - 1};
      break;
    case OpKind::Backward:
    case OpKind::BackwardInput:
      gradient_inputs();
      break;
    case OpKind::BackwardWeight:
      out[n++] = OpKey{OpKind::BackwardInput, op.stage, op.microbatch, op.slice};
      break;
  }
  return n;
}

std::vector<OpKey> op_dependencies(const OpKeyIndex& index, const OpKey& op) {
  OpKey deps[3];
  return std::vector<OpKey>(deps, deps + op_dependencies(index, op, deps));
}

std::vector<OpKey> op_dependencies(const Schedule& s, const OpKey& op) { return op_dependencies(OpKeyIndex(s), op); }

OpKeyIndex::OpKeyIndex(const Schedule& s) : stages_(std::max(0, s.stages())) {
  unit_begin_.reserve(s.microbatches.size() + 1);
  route_.reserve(2 * s.microbatches.size());
  for (std::size_t mb = 0; mb < s.microbatches.size(); mb++) {
    route_.push_back(s.route_begin(static_cast<int>(mb)));
    route_.push_back(s.route_end(static_cast<int>(mb)));
    unit_begin_.push_back(units_);
    units_ += s.microbatches[mb].slice_begin.size();
    unit_mb_.insert(unit_mb_.end(), s.microbatches[mb].slice_begin.size(), static_cast<std::int32_t>(mb));
  }
  unit_begin_.push_back(units_);
  split_.assign(static_cast<std::size_t>(stages_) * units_, 0);
  for (const auto& ops : s.per_rank)
    for (const Op& op : ops) {
      bool split_kind = false;
      switch (op.kind) {
        case OpKind::Forward:
        case OpKind::Backward:
          break;
        case OpKind::BackwardInput:
        case OpKind::BackwardWeight:
          split_kind = true;
          break;
      }
      const std::int64_t u = unit_of(op.stage, op.microbatch, op.slice);
      if (split_kind && u >= 0) split_[static_cast<std::size_t>(u)] = 1;
    }
}

std::int64_t OpKeyIndex::unit_of(std::int32_t stage, std::int32_t microbatch, std::int32_t slice) const {
  if (stage < 0 || stage >= stages_ || microbatch < 0 || slice < 0) return -1;
  const auto mb = static_cast<std::size_t>(microbatch);
  if (mb + 1 >= unit_begin_.size()) return -1;
  if (stage < route_[2 * mb] || stage >= route_[2 * mb + 1]) return -1;  // off the micro-batch's route
  const std::size_t unit = unit_begin_[mb] + static_cast<std::size_t>(slice);
  if (unit >= unit_begin_[mb + 1]) return -1;
  return static_cast<std::int64_t>(static_cast<std::size_t>(stage) * units_ + unit);
}

int OpKeyIndex::slices(std::int32_t microbatch) const {
  if (microbatch < 0 || static_cast<std::size_t>(microbatch) + 1 >= unit_begin_.size()) return 0;
  return static_cast<int>(unit_begin_[microbatch + 1] - unit_begin_[microbatch]);
}

std::int64_t OpKeyIndex::slot(const OpKey& k) const {
  const std::int64_t u = unit_of(k.stage, k.microbatch, k.slice);
  if (u < 0) return -1;
  return static_cast<std::int64_t>(kind_index(k.kind)) * stages_ * static_cast<std::int64_t>(units_) + u;
}

OpKey OpKeyIndex::key(std::size_t slot) const {
  const std::size_t per_kind = static_cast<std::size_t>(stages_) * units_;
  const std::size_t rest = slot % per_kind;
  const std::size_t unit = rest % units_;
  const std::int32_t mb = unit_mb_[unit];
  return OpKey{kAllKinds[slot / per_kind], static_cast<std::int32_t>(rest / units_), mb,
               static_cast<std::int32_t>(unit - unit_begin_[static_cast<std::size_t>(mb)])};
}

bool OpKeyIndex::split(std::int32_t stage, std::int32_t microbatch, std::int32_t slice) const {
  const std::int64_t u = unit_of(stage, microbatch, slice);
  return u >= 0 && split_[static_cast<std::size_t>(u)] != 0;
}

bool OpKeyIndex::expected(const OpKey& k) const {
  const std::int64_t u = unit_of(k.stage, k.microbatch, k.slice);
  if (u < 0) return false;
  const bool sp = split_[static_cast<std::size_t>(u)] != 0;
  switch (k.kind) {
    case OpKind::Forward:
      return true;
    case OpKind::Backward:
      return !sp;
    case OpKind::BackwardInput:
    case OpKind::BackwardWeight:
      return sp;
  }
  return false;
}

OpKey OpKeyIndex::grad_producer(std::int32_t stage, std::int32_t microbatch, std::int32_t slice) const {
  return OpKey{split(stage, microbatch, slice) ? OpKind::BackwardInput : OpKind::Backward, stage, microbatch, slice};
}

Op op_of(const Schedule& s, const OpKey& k) {
  Op op;
  op.kind = k.kind;
  op.stage = k.stage;
  op.rank = s.rank_of_stage(k.stage);
  op.chunk = s.chunk_of_stage(k.stage);
  op.microbatch = k.microbatch;
  op.slice = k.slice;
  const auto& b = s.microbatches.at(static_cast<std::size_t>(k.microbatch)).slice_begin;
  op.tok_begin = b.at(static_cast<std::size_t>(k.slice));
  op.tok_end = k.slice + 1 < static_cast<int>(b.size()) ? b[k.slice + 1] : s.seq_len;
  return op;
}

Schedule schedule_skeleton(const char* name, int p, int v, const std::vector<MicroBatch>& mbs, int seq_len) {
  Schedule s;
  s.name = name;
  s.p = p;
  s.v = v;
  s.m = static_cast<int>(mbs.size());
  s.seq_len = seq_len;
  s.microbatches = mbs;
  s.per_rank.assign(static_cast<std::size_t>(p), {});
  return s;
}

Op make_op(const Schedule& s, OpKind kind, int rank, int chunk, int mb, int slice) {
  Op op;
  op.kind = kind;
  op.rank = rank;
  op.chunk = chunk;
  op.stage = s.stage_of(rank, chunk);
  op.microbatch = mb;
  op.slice = slice;
  const auto& b = s.microbatches[mb].slice_begin;
  op.tok_begin = b[slice];
  op.tok_end = slice + 1 < static_cast<int>(b.size()) ? b[slice + 1] : s.seq_len;
  return op;
}

}  // namespace pipescope
