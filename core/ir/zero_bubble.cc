// Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24): the backward is split into I
// (input gradient, on the critical path) and W (weight gradient, free to move into bubbles). Pure functions
// returning data, like core/ir/generators.cc. The orders follow PyTorch's torch.distributed.pipelining
// (ZB1P / ScheduleZBVZeroBubble) where it has them; ZB-H2 is written from the paper's construction.
// Closed forms (free communication, per-stage costs tF, tI, tW, m >= p): see core/README.md and
// tests/test_conformance.cc.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/ir/schedule.h"

namespace pipescope {

namespace {

// Appends the next W of a rank: W ops run in the order of their I ops.
struct WeightQueue {
  std::vector<Op> pending;
  std::size_t next = 0;
  void add_input(const Op& i) {
    Op w = i;
    w.kind = OpKind::BackwardWeight;
    pending.push_back(w);
  }
  bool any() const { return next < pending.size(); }
  void emit(std::vector<Op>& ops) { ops.push_back(pending[next++]); }
  void flush(std::vector<Op>& ops) {
    while (any()) emit(ops);
  }
};

// The three generators' shared start: checked arguments (zero-bubble splits whole micro-batches only) and an
// empty schedule.
Schedule zb_skeleton(const char* where, const char* name, int p, int v, const std::vector<MicroBatch>& mbs,
                     int seq_len) {
  check_generator_args(where, p, v, mbs, seq_len);
  require_unsliced(where, mbs);
  return schedule_skeleton(name, p, v, mbs, seq_len);
}

}  // namespace

Schedule make_zb_h1(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  Schedule s = zb_skeleton("make_zb_h1", "zb-h1", p, 1, mbs, seq_len);
  const int m = s.m;
  for (int r = 0; r < p; r++) {
    auto& ops = s.per_rank[r];
    WeightQueue wq;
    // 1F1B's warm-up; then F, I per step. Rank r holds back its first r W ops (the later ranks fill their
    // cool-down bubble with them), so every rank has at most p micro-batches in flight, as 1F1B's rank 0.
    const int w = warmup_1f1b(p, m, r);
    for (int i = 0; i < w; i++) ops.push_back(make_op(s, OpKind::Forward, r, 0, i, 0));
    for (int j = 0; j < m; j++) {
      if (j < m - w) ops.push_back(make_op(s, OpKind::Forward, r, 0, w + j, 0));
      ops.push_back(make_op(s, OpKind::BackwardInput, r, 0, j, 0));
      wq.add_input(ops.back());
      if (j >= r) wq.emit(ops);
    }
    wq.flush(ops);
  }
  return s;
}

Schedule make_zb_h2(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  Schedule s = zb_skeleton("make_zb_h2", "zb-h2", p, 1, mbs, seq_len);
  const int m = s.m;
  for (int r = 0; r < p; r++) {
    auto& ops = s.per_rank[r];
    WeightQueue wq;
    // Warm-up: every forward that fits before the first input gradient comes back (2(p-r)-1 at equal costs);
    // steady: I, W, F. The last ranks hold back 2r-p+1 W ops for the tail, where the earlier ranks' I ops
    // arrive further apart.
    const int w = std::min(2 * (p - r) - 1, m);
    const int defer = std::max(0, 2 * r - p + 1);
    for (int i = 0; i < w; i++) ops.push_back(make_op(s, OpKind::Forward, r, 0, i, 0));
    for (int j = 0; j < m; j++) {
      ops.push_back(make_op(s, OpKind::BackwardInput, r, 0, j, 0));
      wq.add_input(ops.back());
      if (j >= defer) wq.emit(ops);
      if (w + j < m) ops.push_back(make_op(s, OpKind::Forward, r, 0, w + j, 0));
    }
    wq.flush(ops);
  }
  return s;
}

Schedule make_zb_v(int p, const std::vector<MicroBatch>& mbs, int seq_len) {
  Schedule s = zb_skeleton("make_zb_v", "zb-v", p, 2, mbs, seq_len);
  s.style = StageStyle::V;
  const int m = s.m;
  // The order is planned for n = max(m, 2p-1) micro-batches (the fewest that fill the V) and the ops of
  // micro-batches >= m are dropped, which keeps every dependency ordered (PyTorch does the same).
  const int n = std::max(2 * p - 1, m);
  for (int r = 0; r < p; r++) {
    std::vector<Op> ops;
    int f[2] = {0, 0}, b[2] = {0, 0}, wc[2] = {0, 0};
    // Ops of micro-batches >= m are placeholders; make_op needs a real micro-batch, so build with mb 0 and fix.
    auto op = [&](OpKind k, int chunk, int mb) {
      Op o = make_op(s, k, r, chunk, 0, 0);
      o.microbatch = mb;
      ops.push_back(o);
    };
    auto fwd = [&](int c) { op(OpKind::Forward, c, f[c]++); };
    auto inp = [&](int c) { op(OpKind::BackwardInput, c, b[c]++); };
    auto wgt = [&](int c) { op(OpKind::BackwardWeight, c, wc[c]++); };
    for (int i = 0; i < 2 * (p - r) - 1; i++) fwd(0);
    for (int i = 0; i < r; i++) fwd(1), fwd(0);
    for (int i = 0; i < p - r; i++) fwd(1), inp(1), wgt(1);
    while (f[1] < f[0] || f[0] < n) {
      if (f[0] < n) fwd(0);
      inp(0), wgt(0), fwd(1), inp(1), wgt(1);
    }
    for (int i = 0; i < r; i++) inp(0), inp(1);
    for (int i = 0; i < p - r; i++) inp(0), wgt(0);
    while (wc[1] < b[1]) wgt(1);
    while (wc[0] < b[0]) wgt(0);
    for (const Op& o : ops)
      if (o.microbatch < m) s.per_rank[r].push_back(make_op(s, o.kind, r, o.chunk, o.microbatch, 0));
  }
  return s;
}

}  // namespace pipescope
