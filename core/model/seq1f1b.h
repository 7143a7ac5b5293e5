#pragma once
// Seq1F1B (docs/papers.md#seq1f1b): sequence-level 1F1B. Each micro-batch is cut into k segments; the unit of
// scheduling is a segment. Forwards run in (micro-batch, segment) order, backwards are popped from a
// partially ordered queue (FIFO across micro-batches, LIFO across the segments of one micro-batch), and the
// warm-up grows by k - 1 units over 1F1B. Also the computation-wise partitioning (cwp) of a sequence into
// segments of equal causal FLOPs (docs/papers.md#seq1f1b).

#include <vector>

#include "core/ir/schedule.h"
#include "core/model/config.h"

namespace pipescope {

// Seq1F1B-I chunk grouping (docs/papers.md#seq1f1b). Code: Eq. 6 and the authors' code, chunk groups of p
// segments (needs p % k == 0, else the LIFO pop reaches a micro-batch whose later segments have not been
// forwarded on that chunk). Figure: the paper's Figure 2, chunk groups of p*k segments (p whole micro-batches).
enum class Seq1F1BGrouping { Code, Figure };

// Warm-up forward count of rank r (in segment units): min(p - r - 2 + k, m*k) (docs/papers.md#seq1f1b).
int warmup_seq1f1b(int p, int m, int k, int r);
// Seq1F1B-I warm-up (in (segment, chunk) units), capped at m*v*k; all units when m == p (Megatron).
// Code: 2(p-r-1) + (v-1)p + k - 1; Figure: 2(p-r-1) + (v-1)pk + k - 1.
int warmup_seq1f1b_interleaved(int p, int m, int k, int v, int r, Seq1F1BGrouping g);

// Every micro-batch must have the same k >= 1 segments. Name "seq1f1b".
Schedule make_seq1f1b(int p, const std::vector<MicroBatch>& mbs, int seq_len);
// v chunks per rank; m % p == 0; Code grouping rejects p % k != 0. Name "seq1f1b-i".
Schedule make_seq1f1b_interleaved(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len,
                                  Seq1F1BGrouping g = Seq1F1BGrouping::Code);

// ---------------------------------------------------------------- partitioning
// Per-token causal cost of one sequence: token x costs c_lin + c_att * x (x earlier tokens attended), so
// the cumulative cost of tokens [0, x) is G(x) = c_lin*x + c_att*x^2/2 (docs/papers.md#seq1f1b).
struct CausalCost {
  double c_lin = 0;
  double c_att = 0;
};
// The authors' code's forward-FLOP model (docs/papers.md#seq1f1b): c_lin = 4hV + L(8h^2 + 4h*ffn),
// c_att = L(4*dh + 3)*nh. Vocabulary terms are charged to every segment, as the code does.
CausalCost seq1f1b_flop_cost(const ModelSpec& m);

// Segment lengths (sum = seq_len) with equal cost, solved from the end of the sequence as the code does:
// each later segment's length is rounded down to a multiple of `multiple`; the first segment takes the
// remainder. Throws std::invalid_argument when a segment would be empty.
std::vector<int> cwp_split_lengths(int seq_len, int k, const CausalCost& c, int multiple = 1);
// Equal lengths; the last segment takes the remainder (as uniform_microbatches does).
std::vector<int> uniform_split_lengths(int seq_len, int k);

// The segment lengths the scenario asks for (schedule.slicing: cwp | uniform | explicit), rounding cwp to
// multiples of parallel.tp. What `pipescope plan` prints for seq1f1b / seq1f1b-i.
std::vector<int> seq1f1b_split_lengths(const Scenario& s);
// Token offsets where segments 1..k-1 begin (the split points), from lengths.
std::vector<int> split_points(const std::vector<int>& lengths);
// Cost of each segment relative to the first under cost c (for reports: the imbalance of a split).
std::vector<double> segment_cost_ratios(const std::vector<int>& lengths, const CausalCost& c);

}  // namespace pipescope
