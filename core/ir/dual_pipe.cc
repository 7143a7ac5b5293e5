// DualPipeV (DeepSeek's DualPipe folded into a V, as PyTorch pipelining's ScheduleDualPipeV runs it): two chunks per
// rank in the V placement (rank r holds stages r and 2p-1-r), and in the steady state every step is an overlapped pair,
// the forward of one chunk with the backward of the other, so that each one's communication hides behind the other's
// compute. The warm-up and the cool-down use the zero-bubble split (I now, W later) where it fills a bubble. Pure
// function returning data, like core/ir/generators.cc; the closed forms are in tests/test_conformance.cc.
#include <algorithm>
#include <deque>
#include <string>

#include "core/ir/schedule.h"

namespace pipescope {

namespace {

// One rank's op list as the generator appends to it: per chunk the next forward and backward micro-batch, and the
// W ops owed by earlier I ops, run oldest first.
struct DualRank {
  const Schedule& s;
  int rank;
  std::vector<Op> ops;
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};
  std::deque<Op> owed_w;
  int first_mb[2] = {0, 0};  // each chunk's first micro-batch (DualPipe: the second direction's start at m/2)

  void forward(int chunk) {
    ops.push_back(make_op(s, OpKind::Forward, rank, chunk, first_mb[chunk] + next_f[chunk]++, 0));
  }
  // The backward of the chunk's oldest micro-batch, whole (B) or as its input gradient (I, its W owed).
  void backward(int chunk, bool split) {
    ops.push_back(make_op(s, split ? OpKind::BackwardInput : OpKind::Backward, rank, chunk,
                          first_mb[chunk] + next_b[chunk]++, 0));
    if (split) {
      Op w = ops.back();
      w.kind = OpKind::BackwardWeight;
      owed_w.push_back(w);
    }
  }
  void weight() {
    if (owed_w.empty()) return;
    ops.push_back(owed_w.front());
    owed_w.pop_front();
  }
  // The forward of chunk f overlapped with the whole backward of chunk b (the other one unless given).
  void overlapped(int f, int b = -1) {
    forward(f);
    backward(b < 0 ? 1 - f : b, false);
    pair_ops(ops, ops.size() - 2);
  }
};

}  // namespace

Schedule make_dualpipev(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  const char* where = "make_dualpipev";
  check_generator_args(where, p, 2, mbs, seq_len);
  require_unsliced(where, mbs);
  const int m = static_cast<int>(mbs.size());
  if (m < 2 * p)
    invalid_generator_args(where, "DualPipeV needs at least as many micro-batches as stages (m >= 2 pp = " +
                                      std::to_string(2 * p) + "), got m = " + std::to_string(m));
  Schedule s = schedule_skeleton("dualpipev", p, 2, mbs, seq_len);
  s.style = StageStyle::V;
  for (int r = 0; r < p; r++) {
    DualRank d{s, r, {}, {0, 0}, {0, 0}, {}, {0, 0}};
    const int tail = p - r - 1;  // the rank's distance from the V's tip
    for (int i = 0; i < 2 * tail; i++) d.forward(0);
    for (int i = 0; i <= r; i++) d.forward(0), d.forward(1);
    for (int i = 0; i < tail; i++) d.backward(1, true), d.weight(), d.forward(1);
    for (int i = 0; i < m - 2 * p + r + 1; i++) {
      if (i == 0 && r == p - 1) {
        d.forward(0), d.backward(1, false);  // the tip: not overlapped, which shortens the bubble
      } else {
        d.overlapped(0);
      }
      d.overlapped(1);
    }
    for (int i = 0; i < tail; i++) d.backward(1, false), d.overlapped(1);
    // The cool-down: whole backwards until half-way, then split ones whose W ops fill the last bubbles.
    bool split = false;
    for (int i = 0; i <= r; i++) {
      if (i == (r + 1) / 2 && r % 2 == 1) split = true;
      d.backward(1, split);
      if (i == (r + 1) / 2 && r % 2 == 0) split = true;
      d.backward(0, split);
    }
    for (int i = 0; i < tail; i++) d.weight(), d.backward(0, split);
    while (!d.owed_w.empty()) d.weight();
    s.per_rank[r] = std::move(d.ops);
  }
  return s;
}

// DualPipe as DeepSeek's dualpipe.py steps it: rank r works as its mirror min(r, p-1-r) (`half`) with its two
// phases, phase 0 being the direction whose stages it reaches first (chunk 0 on the first half of the ranks, chunk 1
// on the second). The step counts are the reference's; the ops are its compute calls, in its order.
Schedule make_dualpipe(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  const char* where = "make_dualpipe";
  check_generator_args(where, p, 2, mbs, seq_len);
  require_unsliced(where, mbs);
  const int m = static_cast<int>(mbs.size());
  if (p % 2 != 0) invalid_generator_args(where, "DualPipe needs an even pp, got pp = " + std::to_string(p));
  if (m % 2 != 0 || m < 2 * p)
    invalid_generator_args(where,
                           "DualPipe needs an even micro-batch count of at least 2 pp = " + std::to_string(2 * p) +
                               " (half of them in each direction), got m = " + std::to_string(m));
  Schedule s = schedule_skeleton("dualpipe", p, 2, mbs, seq_len);
  s.style = StageStyle::Dual;
  const int half_p = p / 2, half_m = m / 2;
  for (int r = 0; r < p; r++) {
    DualRank d{s, r, {}, {0, 0}, {0, 0}, {}, {0, half_m}};
    const int second = r >= half_p ? 1 : 0, half = std::min(r, p - 1 - r);
    const bool middle = r == half_p - 1 || r == half_p;
    const int c0 = second, c1 = 1 - second;  // the chunks of phases 0 and 1
    const int ramp = half_p - half - 1;
    for (int i = 0; i < 2 * ramp; i++) d.forward(c0);                                // nF0
    for (int i = 0; i <= half; i++) d.forward(c0), d.forward(c1);                    // nF0F1
    for (int i = 0; i < ramp; i++) d.backward(c1, true), d.weight(), d.forward(c1);  // nB1W1F1
    for (int i = 0; i < half_m - p + half + 1; i++) {                                // nF0B1F1B0
      if (i == 0 && middle) {
        d.forward(c0), d.backward(c1, false);  // the middle ranks: not overlapped, which shortens the bubble
      } else {
        d.overlapped(c0, c1);
      }
      d.overlapped(c1, c0);
    }
    for (int i = 0; i < ramp; i++) d.backward(c1, false), d.overlapped(c1, c0);  // nB1F1B0
    bool split = false;                                                          // nB1B0, the second half split
    for (int i = 0; i <= half; i++) {
      if (i == (half + 1) / 2 && half % 2 == 1) split = true;
      d.backward(c1, split);
      if (i == (half + 1) / 2 && half % 2 == 0) split = true;
      d.backward(c0, split);
    }
    for (int i = 0; i < ramp; i++) d.weight(), d.backward(c0, true);  // nWB0
    while (!d.owed_w.empty()) d.weight();                             // nW
    s.per_rank[r] = std::move(d.ops);
  }
  return s;
}

}  // namespace pipescope
