#pragma once
// Replica folding (sim/README.md "Replica folding"). Data-parallel replicas run identical programs on identical
// nodes and meet only in the data-parallel collectives. When the checks below hold, the max-min network problem
// of the whole cluster splits into one copy per replica plus the data-parallel ring flows, and it is invariant
// under the shift replica d -> d + 1: every replica then has exactly replica 0's times. The folded run simulates
// replica 0 and its collectives, with each data-parallel ring flow d -> d+1 replaced by its image under the
// shift, a flow from replica 0's GPU back into replica 0's own node (its "mirror": the sender's NVLink port and
// NIC up, the receiver-side NIC down and NVLink port of the same node). Each link then carries exactly the flows
// it carries in the full run (up to the shift), so SimGrid computes the same numbers. Checks:
//  1. every node of replica d > 0 has a replica-0 counterpart (same worker modulo p, same position) of the
//     same kind, cost, size and call count, with corresponding edges; the only nodes without one are the
//     collectives of data-parallel groups, whose rings are (x, sigma_1(x), ..., sigma_{dp-1}(x));
//  2. sigma_d (replica 0's GPUs -> replica d's) is a bijection that moves whole nodes and keeps each GPU's
//     place in its node, and no two replicas share a node;
//  3. routes: replica d's routes are replica 0's moved by sigma_d link for link (same node links in the same
//     order, same latency); each data-parallel ring flow's route has the mirror's links and latency; every
//     inter-node link outside the two end nodes (fat-tree links) only ever carries flows that all also cross
//     one node link of no larger bandwidth, so it can never be a strict bottleneck. A fabric link that carries
//     flows of several nodes ("temporal") still qualifies when its flows from each node (and to each node)
//     have such a link and, in the folded run, the flows active on it at any moment all leave one node or
//     all enter one node. That needs the folded run's times, so the folded run then happens in a forked
//     child and the full run follows in this process when the check fails. The check is sound: up to the
//     first moment the full run would violate it the two runs are the same, so the folded run shows it.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/collective_plan.h"
#include "sim/engine_internal.h"
#include "sim/platform.h"

namespace pipescope::sim {

struct FoldPlan {
  bool on = false;
  std::string why;  // why not (tests, debugging)
  Dag dag;          // replica 0 and the data-parallel collectives
  std::vector<std::uint8_t> allgather;
  std::vector<std::uint32_t> rep;    // per node of the full DAG: the folded node whose times it has
  std::vector<std::uint32_t> orig;   // per folded node: its node in the full DAG
  std::vector<int> qranks;           // per group: dp for a data-parallel group run as its quotient, else 0
  std::vector<MirrorRoute> mirrors;  // x -> mirror(x) for the first GPU x of every quotient ring
  // Fabric links shared by flows of several nodes ("temporal" links): exact only if, at every moment, the
  // flows active on each of them all leave one node or all enter one node (then a link of that node
  // dominates it). Checked on the folded run's times (temporally_exclusive); per link, the flows through it
  // and, per such flow, its end nodes and the full-DAG nodes (transfers, collectives) that run it.
  struct Flow {
    std::int32_t src_node, dst_node;
    std::vector<std::uint32_t> users;
  };
  std::vector<Flow> flows;
  std::vector<std::vector<std::uint32_t>> temporal;  // per temporal link: indices into `flows`
};

// The fold of `dag` when checks 1-3 hold (on = true), else why not. Needs the open platform's routes.
FoldPlan plan_replica_fold(const ClusterSpec& c, const Dag& dag, const DagAnnotations& ann, const CollectivePlan& cp,
                           const Platform& pf);

// Times of every node of the full DAG from the folded run's.
std::vector<NodeTiming> expand_folded(const FoldPlan& fold, const std::vector<NodeTiming>& folded);

// The temporal links' condition on the (expanded) folded times: at every moment the flows active on a
// link all leave one node or all enter one node. Flows run over [start, end) of the node that runs them.
bool temporally_exclusive(const FoldPlan& fold, const std::vector<NodeTiming>& timing);

}  // namespace pipescope::sim
