#include "core/util/graph.h"

#include <algorithm>

namespace pipescope {

CsrGraph csr_graph(std::size_t n, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges) {
  CsrGraph g;
  g.succ_begin.assign(n + 1, 0);
  g.succ.resize(edges.size());
  g.preds.assign(n, 0);
  for (const auto& e : edges) g.succ_begin[e.first + 1]++, g.preds[e.second]++;
  for (std::size_t i = 0; i < n; i++) g.succ_begin[i + 1] += g.succ_begin[i];
  std::vector<std::uint32_t> fill(g.succ_begin.begin(), g.succ_begin.end() - 1);
  for (const auto& e : edges) g.succ[fill[e.first]++] = e.second;
  return g;
}

std::vector<std::uint32_t> kahn_leftover(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                                         const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t> pending) {
  kahn_walk(
      n, succ_begin, succ, pending, [](std::uint32_t) {}, [](std::uint32_t, std::uint32_t) {});
  return pending;
}

std::size_t kahn_completed(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                           const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t> pending) {
  return kahn_walk(
      n, succ_begin, succ, pending, [](std::uint32_t) {}, [](std::uint32_t, std::uint32_t) {});
}

// Every node a Kahn pass left unfinished has an unfinished predecessor, so walking predecessors must revisit a node.
std::vector<std::uint32_t> find_cycle(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                                      const std::vector<std::uint32_t>& succ,
                                      const std::vector<std::uint32_t>& pending) {
  constexpr std::uint32_t kNone = 0xffffffffu;
  std::vector<std::uint32_t> pred_of(n, kNone);
  std::uint32_t start = kNone;
  for (std::uint32_t u = 0; u < n; u++) {
    if (pending[u] == 0) continue;
    if (start == kNone) start = u;
    for (std::uint32_t e = succ_begin[u]; e < succ_begin[u + 1]; e++)
      if (pending[succ[e]] != 0 && pred_of[succ[e]] == kNone) pred_of[succ[e]] = u;
  }
  if (start == kNone) return {};
  std::vector<std::uint32_t> walk, pos(n, kNone);
  std::uint32_t x = start;
  while (pos[x] == kNone) {
    pos[x] = static_cast<std::uint32_t>(walk.size());
    walk.push_back(x);
    x = pred_of[x];
    if (x == kNone) return {};  // cannot happen for a Kahn leftover; be safe rather than loop
  }
  std::vector<std::uint32_t> cycle(walk.begin() + pos[x], walk.end());
  std::reverse(cycle.begin(), cycle.end());  // the walk followed edges backwards
  return cycle;
}

}  // namespace pipescope
