// Chrome / Perfetto trace-event JSON (write_trace in sim/report.h). pid = cluster node, tid = GPU track:
// local_gpu * 100 is the GPU's compute stream, local_gpu * 100 + k (k >= 1) its k-th communication lane
// (overlapping comms of one GPU get separate lanes, assigned greedily in start order). Every GPU of a worker's
// tensor-parallel group gets its compute ops (the TP ranks run them in lock step) and its own p2p flows (one per
// TP lane, as the engine runs them). A transfer shows on both ends: the send on the sender's comm lane, the
// receive on the receiver's, joined by a flow event. Integer nanosecond clock (core/lower/trace_json.h); no wall
// clock: identical runs give identical bytes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/lower/dag.h"
#include "core/lower/trace_json.h"
#include "core/util/json_text.h"
#include "sim/report.h"

namespace pipescope::sim {

namespace {

enum class Role : std::uint8_t { Send, Recv, Collective };

struct CommEvent {
  std::int32_t gpu;
  double start, end;
  std::uint32_t node;
  Role role;
  std::int32_t tp_rank;  // TP lane of a transfer (flow id); 0 for collectives
  bool operator<(const CommEvent& o) const {
    return std::tie(gpu, start, node, role, tp_rank) < std::tie(o.gpu, o.start, o.node, o.role, o.tp_rank);
  }
};

// The Recv (worker, index) a transfer node feeds: its successor that is a Recv of the peer worker.
std::pair<int, int> recv_of(const Dag& dag, const LoweredSchedule& ls, std::uint32_t transfer) {
  const LoweredOp& send = ls.per_worker[dag.nodes[transfer].worker][dag.nodes[transfer].index];
  for (std::uint32_t k = dag.succ_begin[transfer]; k < dag.succ_begin[transfer + 1]; k++) {
    const DagNode& s = dag.nodes[dag.succ[k]];
    if (s.worker == send.peer && s.index >= 0 && ls.per_worker[s.worker][s.index].kind == LOpKind::Recv)
      return {s.worker, s.index};
  }
  return {-1, -1};
}

// Greedy lanes per GPU, in start order: an event takes the first lane free at its start.
std::vector<int> assign_lanes(const std::vector<CommEvent>& comms) {
  std::vector<int> lane(comms.size(), 1);
  std::vector<double> lane_end;
  std::int32_t cur = -1;
  for (std::size_t k = 0; k < comms.size(); k++) {
    if (comms[k].gpu != cur) {
      cur = comms[k].gpu;
      lane_end.clear();
    }
    std::size_t l = 0;
    while (l < lane_end.size() && lane_end[l] > comms[k].start) l++;
    if (l == lane_end.size()) lane_end.push_back(0);
    lane_end[l] = comms[k].end;
    lane[k] = static_cast<int>(l) + 1;
  }
  return lane;
}

// "what a:b": the inclusive range a..b (b -1: to `count` - 1), checked against 0..count-1.
std::pair<int, int> subset_range(const char* what, int first, int last, int count) {
  const int hi = last < 0 ? count - 1 : last;
  if (first < 0 || first > hi || hi >= count)
    throw std::invalid_argument(std::string("trace: ") + what + " " + std::to_string(first) + ":" + std::to_string(hi) +
                                " are not within the run's 0:" + std::to_string(count - 1));
  return {first, hi};
}

std::string range_text(std::pair<int, int> r) { return std::to_string(r.first) + ":" + std::to_string(r.second); }

// Per GPU id: whether the trace keeps it (the GPUs of every kept worker, all their TP / CP lanes).
std::vector<char> kept_gpus(const LoweredSchedule& ls, const Placement& pl, std::pair<int, int> ranks,
                            std::pair<int, int> replicas) {
  const int p = std::max(1, ls.p), workers = ls.workers(), width = std::max(1, pl.width());
  const auto [r0, r1] = ranks;
  const auto [d0, d1] = replicas;
  std::vector<char> keep;
  for (int w = 0; w < workers; w++) {
    const int d = w / p, rank = w % p;
    for (int k = 0; k < width; k++) {
      const auto g = static_cast<std::size_t>(pl.gpu_of(w, k));
      if (g >= keep.size()) keep.resize(g + 1, 0);
      keep[g] = keep[g] || (rank >= r0 && rank <= r1 && d >= d0 && d <= d1);
    }
  }
  return keep;
}

}  // namespace

void write_trace(std::ostream& os, const CheckedSchedule& cs, const SimResult& r, const ProfileStamp& profile,
                 const TraceSubset& subset, const TraceLayout& layout) {
  const Dag& dag = cs.dag();
  const LoweredSchedule& ls = cs.schedule();
  const Placement& pl = cs.placement();
  const int gpn = std::max(1, pl.gpus_per_node);
  const int tp = std::max(1, pl.width());  // transfer lanes: every TP (and context-parallel) rank
  const int p = std::max(1, ls.p), replicas = std::max(1, ls.workers() / p);
  const auto ranks = subset_range("ranks", subset.first_rank, subset.last_rank, p);
  const auto reps = subset_range("replicas", subset.first_replica, subset.last_replica, replicas);
  const bool partial = ranks != std::make_pair(0, p - 1) || reps != std::make_pair(0, replicas - 1);
  const std::vector<char> keep = kept_gpus(ls, pl, ranks, reps);
  auto kept = [&keep](int gpu) { return gpu >= 0 && static_cast<std::size_t>(gpu) < keep.size() && keep[gpu]; };

  // Comm events: transfers on both ends (every TP lane), collectives on every GPU of the group's rings.
  std::vector<CommEvent> comms;
  std::vector<std::pair<int, int>> recv(dag.size(), {-1, -1});
  for (std::uint32_t i = 0; i < dag.size() && i < r.timing.size(); i++) {
    const DagNode& n = dag.nodes[i];
    const NodeTiming& t = r.timing[i];
    if (t.end <= t.start) continue;  // zero-time joins and free transfers carry no information
    if (n.kind == DagKind::Transfer) {
      recv[i] = recv_of(dag, ls, i);
      const int peer = ls.per_worker[n.worker][n.index].peer;
      for (int k = 0; k < tp; k++) {
        const int from = pl.gpu_of(n.worker, k), to = recv[i].first >= 0 ? pl.gpu_of(peer, k) : -1;
        if (kept(from)) comms.push_back({from, t.start, t.end, i, Role::Send, k});
        if (kept(to)) comms.push_back({to, t.start, t.end, i, Role::Recv, k});
      }
    } else if (n.kind == DagKind::Collective && n.group >= 0) {
      for (const auto& ring : dag.rings[n.group])
        for (std::int32_t g : ring)
          if (kept(g)) comms.push_back({g, t.start, t.end, i, Role::Collective, 0});
    }
  }
  std::sort(comms.begin(), comms.end());
  const std::vector<int> lane = assign_lanes(comms);

  // Tracks in use: (gpu, lane) -> name; std::map keeps them ordered.
  std::map<std::pair<int, int>, std::string> tracks;
  for (std::uint32_t i = 0; i < dag.size() && i < r.timing.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind == DagKind::Compute && n.worker >= 0 && r.timing[i].end > r.timing[i].start)
      for (int k = 0; k < tp; k++) {
        const int g = pl.gpu_of(n.worker, k);
        if (kept(g)) tracks.emplace(std::make_pair(g, 0), "gpu" + std::to_string(g % gpn) + " compute");
      }
  }
  for (std::size_t k = 0; k < comms.size(); k++)
    tracks.emplace(std::make_pair(comms[k].gpu, lane[k]),
                   "gpu" + std::to_string(comms[k].gpu % gpn) + " comm " + std::to_string(lane[k]));

  std::string other = "\"schedule\":\"" + json_escape(ls.schedule.name) +
                      "\",\"source\":\"simulated\",\"iteration_s\":" + TraceJsonWriter::seconds_text(r.iteration_s) +
                      ",\"profile\":" + profile_json(profile);
  if (partial)  // a partial trace says which part it holds
    other += ",\"subset\":{\"pp_ranks\":\"" + range_text(ranks) + "\",\"dp_replicas\":\"" + range_text(reps) + "\"}";
  TraceJsonWriter w(os, gpn, other, layout);
  w.tracks(tracks);
  auto event = [&](const std::string& name, std::uint32_t i, int worker, int index, const char* cat, int gpu,
                   int tid_lane, double start, double end, int tp_rank) {
    std::ostream& o = w.event(name, cat, gpu, tid_lane, start, end);
    o << TraceJsonWriter::op_args(ls, worker, static_cast<std::size_t>(index)) << ",\"tp_rank\":" << tp_rank
      << ",\"dag_node\":" << i;
    const DagNode& n = dag.nodes[i];
    if (n.kind != DagKind::Compute) {  // bytes per flow (transfers) or per call (collectives)
      char buf[40];
      std::snprintf(buf, sizeof buf, ",\"bytes\":%.0f", n.amount);
      o << buf;
      if (n.kind == DagKind::Collective) o << ",\"calls\":" << n.count;
    }
    w.close_event();
  };
  for (std::uint32_t i = 0; i < dag.size() && i < r.timing.size(); i++) {
    const DagNode& n = dag.nodes[i];
    const NodeTiming& t = r.timing[i];
    if (n.kind != DagKind::Compute || n.worker < 0 || t.end <= t.start) continue;
    const std::string name = dag_node_text(dag, ls, i);
    for (int k = 0; k < tp; k++)
      if (const int g = pl.gpu_of(n.worker, k); kept(g))
        event(name, i, n.worker, n.index, "compute", g, 0, t.start, t.end, k);
  }
  // Flow ids: one per (transfer, TP lane), both ends written right after their events; an arrow only where the
  // subset keeps both ends.
  auto both_ends_kept = [&](const CommEvent& c) {
    const DagNode& n = dag.nodes[c.node];
    return recv[c.node].first >= 0 && kept(pl.gpu_of(n.worker, c.tp_rank)) &&
           kept(pl.gpu_of(ls.per_worker[n.worker][n.index].peer, c.tp_rank));
  };
  for (std::size_t k = 0; k < comms.size(); k++) {
    const CommEvent& c = comms[k];
    const DagNode& n = dag.nodes[c.node];
    const std::uint64_t flow_id = static_cast<std::uint64_t>(c.node) * static_cast<std::uint64_t>(tp) + c.tp_rank + 1;
    switch (c.role) {
      case Role::Send:
        event(dag_node_text(dag, ls, c.node), c.node, n.worker, n.index, "p2p", c.gpu, lane[k], c.start, c.end,
              c.tp_rank);
        if (both_ends_kept(c)) w.flow(true, flow_id, c.gpu, lane[k], c.start);
        break;
      case Role::Recv: {
        const auto [rw, ri] = recv[c.node];
        event(lowered_op_name(ls, rw, static_cast<std::size_t>(ri)), c.node, rw, ri, "p2p", c.gpu, lane[k], c.start,
              c.end, c.tp_rank);
        if (both_ends_kept(c)) w.flow(false, flow_id, c.gpu, lane[k], c.start);
        break;
      }
      case Role::Collective:
        event(dag_node_text(dag, ls, c.node), c.node, n.worker, n.index, "collective", c.gpu, lane[k], c.start, c.end,
              0);
        break;
    }
  }
  w.finish();
}

}  // namespace pipescope::sim
