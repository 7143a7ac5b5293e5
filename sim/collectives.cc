#include "sim/collectives.h"

#include <algorithm>
#include <stdexcept>

namespace pipescope::sim {

void validate_collectives_option(const std::string& option) {
  if (option != "ring" && option != "aggregate" && option != "analytic" && option != "auto")
    throw std::invalid_argument("collectives: unknown algorithm '" + option +
                                "' (valid: ring, aggregate, analytic, auto)");
}

CollAlgo collective_algorithm(const std::string& option) {
  validate_collectives_option(option);
  if (option == "ring") return CollAlgo::Ring;
  if (option == "aggregate") return CollAlgo::Aggregate;
  if (option == "analytic") return CollAlgo::Analytic;
  return CollAlgo::Analytic;  // auto (sim/collectives.h)
}

const char* to_string(CollAlgo a) {
  switch (a) {
    case CollAlgo::Ring:
      return "ring";
    case CollAlgo::Aggregate:
      return "aggregate";
    case CollAlgo::Analytic:
      return "analytic";
  }
  return "?";
}

namespace {

// Best order of `local` (GPU indices inside one node): a cycle when `cycle`, else an open path. The
// first member stays first (deterministic; rotations of a cycle are equivalent).
std::vector<int> best_local_order(std::vector<int> local, bool cycle, int (*links)(int, int)) {
  std::vector<int> best = local;
  int best_min = -1, best_sum = -1;
  std::sort(local.begin() + 1, local.end());
  do {
    int mn = 1 << 20, sum = 0;
    const std::size_t hops = cycle ? local.size() : local.size() - 1;
    for (std::size_t i = 0; i < hops; i++) {
      const int l = links(local[i], local[(i + 1) % local.size()]);
      mn = std::min(mn, l);
      sum += l;
    }
    if (mn > best_min || (mn == best_min && sum > best_sum)) best = local, best_min = mn, best_sum = sum;
  } while (std::next_permutation(local.begin() + 1, local.end()));
  return best;
}

}  // namespace

std::vector<std::int32_t> nvlink_ring_order(const std::vector<std::int32_t>& ring, int gpus_per_node,
                                            int (*links)(int, int)) {
  if (ring.size() < 3 || gpus_per_node < 3) return ring;
  // Runs of consecutive members on one node.
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [begin, end)
  for (std::size_t i = 0; i < ring.size(); i++) {
    if (i == 0 || ring[i] / gpus_per_node != ring[i - 1] / gpus_per_node) runs.emplace_back(i, i);
    runs.back().second = i + 1;
  }
  std::vector<int> nodes;
  for (const auto& r : runs) nodes.push_back(ring[r.first] / gpus_per_node);
  std::sort(nodes.begin(), nodes.end());
  if (std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end()) return ring;
  std::vector<std::int32_t> out = ring;
  const bool cycle = runs.size() == 1;
  for (const auto& [b, e] : runs) {
    if (e - b < 3) continue;
    const std::int32_t base = ring[b] / gpus_per_node * gpus_per_node;
    std::vector<int> local;
    for (std::size_t i = b; i < e; i++) local.push_back(ring[i] - base);
    const std::vector<int> order = best_local_order(local, cycle, links);
    for (std::size_t i = b; i < e; i++) out[i] = base + order[i - b];
  }
  return out;
}

void RingProgress::reset(int rings, int n, std::uint32_t steps) {
  n_ = n;
  rings_ = rings;
  steps_ = steps;
  const std::size_t total = static_cast<std::size_t>(rings) * n;
  done_.assign(total, 0);
  launched_.assign(total, 0);
  ranks_left_ = steps == 0 ? 0 : static_cast<std::uint32_t>(total);
}

bool RingProgress::try_start(std::uint32_t pos) {
  const std::uint32_t k = launched_[pos];
  if (k != done_[pos] || k >= steps_) return false;  // own previous send still in flight, or finished
  const std::uint32_t rank = pos % n_;
  const std::uint32_t prev = rank == 0 ? pos + n_ - 1 : pos - 1;
  if (done_[prev] < k) return false;  // the data of step k-1 has not arrived yet
  launched_[pos] = k + 1;
  return true;
}

void RingProgress::start(std::vector<std::uint32_t>& out) {
  if (steps_ == 0) return;
  const std::uint32_t total = static_cast<std::uint32_t>(done_.size());
  for (std::uint32_t pos = 0; pos < total; pos++)
    if (try_start(pos)) out.push_back(pos);
}

int RingProgress::finish(std::uint32_t pos, std::uint32_t next[2]) {
  if (++done_[pos] == steps_) ranks_left_--;
  int k = 0;
  if (try_start(pos)) next[k++] = pos;
  const std::uint32_t rank = pos % n_;
  const std::uint32_t succ = rank + 1 == static_cast<std::uint32_t>(n_) ? pos + 1 - n_ : pos + 1;
  if (succ != pos && try_start(succ)) next[k++] = succ;
  return k;
}

}  // namespace pipescope::sim
