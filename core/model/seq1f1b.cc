// Seq1F1B and Seq1F1B-I generators and the computation-wise partitioning (docs/papers.md#seq1f1b).
#include "core/model/seq1f1b.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <stdexcept>
#include <string>

namespace pipescope {

namespace {

// The common checks, and the same k for every micro-batch (the partial queue pairs segment j of every one);
// returns k.
int validate(const char* where, int p, int v, const std::vector<MicroBatch>& mbs, int seq_len) {
  check_generator_args(where, p, v, mbs, seq_len);
  const int k = static_cast<int>(mbs[0].slice_begin.size());
  for (std::size_t i = 0; i < mbs.size(); i++)
    if (static_cast<int>(mbs[i].slice_begin.size()) != k)
      invalid_generator_args(where, "micro-batch " + std::to_string(i) + " has " +
                                        std::to_string(mbs[i].slice_begin.size()) + " segments, micro-batch 0 has " +
                                        std::to_string(k) + " (Seq1F1B needs the same k for all)");
  return k;
}

// The partially ordered queue (docs/papers.md#seq1f1b): a deque of per-micro-batch stacks. A pop returns the
// last-pushed segment of the earliest micro-batch still queued.
struct Unit {
  int mb, seg;
};
class PartialQueue {
 public:
  void push(Unit u) {
    if (q_.empty() || q_.back().back().mb != u.mb) q_.emplace_back();
    q_.back().push_back(u);
  }
  bool empty() const { return q_.empty(); }
  Unit pop() {
    Unit u = q_.front().back();
    q_.front().pop_back();
    if (q_.front().empty()) q_.pop_front();
    return u;
  }

 private:
  std::deque<std::vector<Unit>> q_;
};

// One rank's program: forward i is fwd[i] (chunk, unit); backward i runs on chunk bwd_chunk[i] and pops that
// chunk's queue. `pushed_all` guards the LIFO pop: the popped micro-batch must have all k segments forwarded
// on that chunk, else the order would break B(m,j+1) -> B(m,j) (a deadlock).
void emit_rank(Schedule& s, int r, int k, int w, const std::vector<std::pair<int, Unit>>& fwd,
               const std::vector<int>& bwd_chunk, const char* where) {
  auto& ops = s.per_rank[r];
  std::vector<PartialQueue> queues(static_cast<std::size_t>(s.v));
  std::vector<std::vector<int>> fwd_count(static_cast<std::size_t>(s.v), std::vector<int>(s.m, 0));
  auto F = [&](std::size_t i) {
    const auto& [c, u] = fwd[i];
    ops.push_back(make_op(s, OpKind::Forward, r, c, u.mb, u.seg));
    queues[c].push(u);
    fwd_count[c][u.mb]++;
  };
  auto B = [&](std::size_t i) {
    const int c = bwd_chunk[i];
    if (queues[c].empty())
      invalid_generator_args(where, "rank " + std::to_string(r) + ": backward queue of chunk " + std::to_string(c) +
                                        " is empty (internal error)");
    const Unit u = queues[c].pop();
    if (fwd_count[c][u.mb] != k)
      invalid_generator_args(where, "rank " + std::to_string(r) + ": the backward of micro-batch " +
                                        std::to_string(u.mb) + " on chunk " + std::to_string(c) +
                                        " would start before all its " + std::to_string(k) +
                                        " segments were forwarded (chunk grouping incompatible with p and k)");
    ops.push_back(make_op(s, OpKind::Backward, r, c, u.mb, u.seg));
  };
  const std::size_t total = fwd.size();
  std::size_t nf = 0, nb = 0;
  for (int i = 0; i < w; i++) F(nf++);
  while (nf < total) {
    F(nf++);
    B(nb++);
  }
  while (nb < total) B(nb++);
}

}  // namespace

int warmup_seq1f1b(int p, int m, int k, int r) { return std::max(0, std::min(p - r - 2 + k, m * k)); }

int warmup_seq1f1b_interleaved(int p, int m, int k, int v, int r, Seq1F1BGrouping g) {
  const int total = m * v * k;
  if (m == p) return total;  // Megatron: all forwards first when m == p (docs/papers.md#seq1f1b)
  const int group = g == Seq1F1BGrouping::Code ? p : p * k;
  return std::min(2 * (p - r - 1) + (v - 1) * group + k - 1, total);
}

Schedule make_seq1f1b(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  const int k = validate("make_seq1f1b", p, 1, mbs, seq_len);
  Schedule s = schedule_skeleton("seq1f1b", p, 1, mbs, seq_len);
  std::vector<std::pair<int, Unit>> fwd;
  for (int mb = 0; mb < s.m; mb++)
    for (int j = 0; j < k; j++) fwd.push_back({0, Unit{mb, j}});
  const std::vector<int> bwd(fwd.size(), 0);
  for (int r = 0; r < p; r++) emit_rank(s, r, k, warmup_seq1f1b(p, s.m, k, r), fwd, bwd, "make_seq1f1b");
  return s;
}

Schedule make_seq1f1b_interleaved(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len, Seq1F1BGrouping g) {
  const char* where = "make_seq1f1b_interleaved";
  const int k = validate(where, p, v, mbs, seq_len);
  const int m = static_cast<int>(mbs.size());
  if (m % p != 0)
    invalid_generator_args(
        where, "Seq1F1B-I needs the micro-batch count to be a multiple of the pipeline ranks (m % p == 0), got m = " +
                   std::to_string(m) + ", p = " + std::to_string(p));
  if (g == Seq1F1BGrouping::Code && p % k != 0)
    invalid_generator_args(
        where, "the code grouping (Eq. 6, chunk groups of p segments) needs p % k == 0, got p = " + std::to_string(p) +
                   ", k = " + std::to_string(k) + " (docs/papers.md: choose k dividing p, or the figure grouping)");
  Schedule s = schedule_skeleton("seq1f1b-i", p, v, mbs, seq_len);
  // Megatron's unit -> chunk table applied to segments: groups of `group` consecutive segment units per chunk.
  const int group = g == Seq1F1BGrouping::Code ? p : p * k;
  const int total = m * v * k;
  std::vector<std::pair<int, Unit>> fwd(total);
  std::vector<int> bwd(total);
  for (int u = 0; u < total; u++) {
    const int c = (u % (group * v)) / group;
    const int q = (u / (group * v)) * group + u % group;  // flat segment unit mb * k + j
    fwd[u] = {c, Unit{q / k, q % k}};
    bwd[u] = v - 1 - c;
  }
  for (int r = 0; r < p; r++) emit_rank(s, r, k, warmup_seq1f1b_interleaved(p, m, k, v, r, g), fwd, bwd, where);
  return s;
}

// ---------------------------------------------------------------- partitioning

CausalCost seq1f1b_flop_cost(const ModelSpec& m) {
  const double h = m.hidden, L = m.layers, nh = m.heads;
  const double dh = h / nh;
  const double ffn = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * h;
  CausalCost c;
  c.c_lin = 4 * h * m.vocab + L * (8 * h * h + 4 * h * ffn);
  c.c_att = L * (4 * dh + 3) * nh;
  return c;
}

std::vector<int> cwp_split_lengths(int seq_len, int k, const CausalCost& c, int multiple) {
  const char* where = "cwp_split_lengths";
  if (k < 1 || k > seq_len)
    invalid_generator_args(where, "segments k must be in [1, seq_len], got " + std::to_string(k));
  if (multiple < 1) invalid_generator_args(where, "rounding multiple must be >= 1, got " + std::to_string(multiple));
  if (c.c_lin < 0 || c.c_att < 0 || c.c_lin + c.c_att <= 0)
    invalid_generator_args(where, "costs must be >= 0, not both 0");
  auto G = [&](double x) { return c.c_lin * x + 0.5 * c.c_att * x * x; };
  // Inverse of G: the smallest x >= 0 with G(x) = g.
  auto Ginv = [&](double g) {
    if (c.c_att == 0) return g / c.c_lin;
    return (-c.c_lin + std::sqrt(c.c_lin * c.c_lin + 2 * c.c_att * g)) / c.c_att;
  };
  const double target = G(seq_len) / k;
  std::vector<int> out(static_cast<std::size_t>(k));
  int e = seq_len;
  for (int i = k - 1; i >= 1; i--) {
    const double a = Ginv(std::max(0.0, G(e) - target));
    int x = static_cast<int>(std::floor(e - a + 1e-9));
    x -= x % multiple;
    if (x < 1)
      invalid_generator_args(where, "segment " + std::to_string(i) + " of a " + std::to_string(seq_len) +
                                        "-token sequence is empty " + "after rounding to a multiple of " +
                                        std::to_string(multiple));
    out[i] = x;
    e -= x;
  }
  if (e < 1) invalid_generator_args(where, "the first segment is empty");
  out[0] = e;
  return out;
}

std::vector<int> uniform_split_lengths(int seq_len, int k) {
  if (k < 1 || k > seq_len)
    invalid_generator_args("uniform_split_lengths", "segments k must be in [1, seq_len], got " + std::to_string(k));
  std::vector<int> out(static_cast<std::size_t>(k), seq_len / k);
  out.back() = seq_len - (k - 1) * (seq_len / k);
  return out;
}

std::vector<int> seq1f1b_split_lengths(const Scenario& s) {
  const ScheduleSpec& sch = s.schedule;
  const int k = sch.seq_slices;
  if (sch.slicing == "explicit" || !sch.slice_tokens.empty()) return sch.slice_tokens;
  if (sch.slicing == "cwp") {
    try {
      return cwp_split_lengths(s.model.seq_len, k, seq1f1b_flop_cost(s.model), std::max(1, s.parallel.tp));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(s.source + ": schedule.slicing: cwp: " + e.what());
    }
  }
  if (sch.slicing == "uniform") return uniform_split_lengths(s.model.seq_len, k);
  throw std::invalid_argument(s.source + ": schedule.slicing: '" + sch.slicing +
                              "' is not a Seq1F1B slicing (cwp | uniform | explicit)");
}

std::vector<int> split_points(const std::vector<int>& lengths) {
  std::vector<int> out;
  int at = 0;
  for (std::size_t i = 0; i + 1 < lengths.size(); i++) out.push_back(at += lengths[i]);
  return out;
}

std::vector<double> segment_cost_ratios(const std::vector<int>& lengths, const CausalCost& c) {
  auto G = [&](double x) { return c.c_lin * x + 0.5 * c.c_att * x * x; };
  std::vector<double> out;
  double at = 0, first = 0;
  for (int len : lengths) {
    const double cost = G(at + len) - G(at);
    if (out.empty()) first = cost;
    out.push_back(first > 0 ? cost / first : 0);
    at += len;
  }
  return out;
}

}  // namespace pipescope
