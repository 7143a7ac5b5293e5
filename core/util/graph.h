#pragma once
// Topological order over a graph in CSR form (successors of node u: succ[succ_begin[u] .. succ_begin[u + 1])): the one
// Kahn pass and cycle finder that the schedule checks, the lowered-schedule checks, the DAG's dry run and the CSV
// reader's deadlock report share.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pipescope {

// Kahn's algorithm, the one topological walk: from `pending` (each node's number of predecessors, counted down in
// place), node(u) for every node as it becomes ready (most recently readied first), then edge(u, v) for each of its
// successors before v's count drops. `ready` is the walk's stack (resized to n; a caller that walks many graphs keeps
// its storage). Returns the number of nodes walked (n iff acyclic); a node left pending > 0 can never run.
template <class Index, class Stack, class Node, class Edge>
std::size_t kahn_walk(std::size_t n, const Index& succ_begin, const Index& succ, std::vector<std::uint32_t>& pending,
                      Stack& ready, Node&& node, Edge&& edge) {
  ready.resize(n);
  std::size_t top = 0, done = 0;
  for (std::uint32_t i = 0; i < n; i++)
    if (pending[i] == 0) ready[top++] = i;
  while (top > 0) {
    const std::uint32_t u = ready[--top];
    done++;
    node(u);
    for (std::uint32_t e = succ_begin[u]; e < succ_begin[u + 1]; e++) {
      const std::uint32_t v = succ[e];
      edge(u, v);
      if (--pending[v] == 0) ready[top++] = v;
    }
  }
  return done;
}
template <class Node, class Edge>
std::size_t kahn_walk(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                      const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t>& pending, Node&& node,
                      Edge&& edge) {
  std::vector<std::uint32_t> ready;
  return kahn_walk(n, succ_begin, succ, pending, ready, node, edge);
}

// A graph of n nodes in CSR form with each node's number of predecessors, built from its edges (from, to).
struct CsrGraph {
  std::vector<std::uint32_t> succ_begin, succ, preds;
};
CsrGraph csr_graph(std::size_t n, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges);

// Kahn's algorithm from `pending` (each node's number of predecessors); returns the counts left: all 0 iff the graph
// is acyclic, and a node left > 0 can never run.
std::vector<std::uint32_t> kahn_leftover(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                                         const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t> pending);
// The number of nodes a Kahn pass completes (n iff acyclic).
std::size_t kahn_completed(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                           const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t> pending);
// One cycle among the nodes a Kahn pass left unfinished (kahn_leftover's result), in edge direction; empty when
// there is none.
std::vector<std::uint32_t> find_cycle(std::size_t n, const std::vector<std::uint32_t>& succ_begin,
                                      const std::vector<std::uint32_t>& succ,
                                      const std::vector<std::uint32_t>& pending);

}  // namespace pipescope
