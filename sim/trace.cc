// Chrome / Perfetto trace-event JSON (write_trace in sim/report.h). pid = cluster node, tid = GPU track:
// local_gpu * 100 is the GPU's compute stream, local_gpu * 100 + k (k >= 1) its k-th communication lane
// (overlapping comms of one GPU get separate lanes, assigned greedily in start order). Times in
// microseconds with nanosecond resolution; fixed formatting, no wall clock: identical runs give identical
// bytes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/dag.h"
#include "core/json_text.h"
#include "core/trace_json.h"
#include "sim/report.h"

namespace pipescope::sim {

namespace {

struct CommEvent {
  std::int32_t gpu;
  double start, end;
  std::uint32_t node;
  bool operator<(const CommEvent& o) const { return std::tie(gpu, start, node) < std::tie(o.gpu, o.start, o.node); }
};

}  // namespace

void write_trace(std::ostream& os, const CheckedSchedule& cs, const SimResult& r, const ProfileStamp& profile) {
  const Dag& dag = cs.dag();
  const LoweredSchedule& ls = cs.schedule();
  const int gpn = std::max(1, cs.placement().gpus_per_node);

  // Comm events: transfers on the sender, collectives on every GPU of the group's rings.
  std::vector<CommEvent> comms;
  for (std::uint32_t i = 0; i < dag.size() && i < r.timing.size(); i++) {
    const DagNode& n = dag.nodes[i];
    const NodeTiming& t = r.timing[i];
    if (t.end <= t.start) continue;  // zero-time joins and free transfers carry no information
    if (n.kind == DagKind::Transfer) {
      comms.push_back({n.gpu, t.start, t.end, i});
    } else if (n.kind == DagKind::Collective && n.group >= 0) {
      for (const auto& ring : dag.rings[n.group])
        for (std::int32_t g : ring) comms.push_back({g, t.start, t.end, i});
    }
  }
  std::sort(comms.begin(), comms.end());
  std::vector<int> lane(comms.size(), 1);
  {
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
  }

  // Tracks in use: (gpu, lane) -> name; std::map keeps them ordered.
  std::map<std::pair<int, int>, std::string> tracks;
  for (std::uint32_t i = 0; i < dag.size() && i < r.timing.size(); i++) {
    const DagNode& n = dag.nodes[i];
    if (n.kind == DagKind::Compute && n.gpu >= 0 && r.timing[i].end > r.timing[i].start)
      tracks.emplace(std::make_pair(n.gpu, 0), "gpu" + std::to_string(n.gpu % gpn) + " compute");
  }
  for (std::size_t k = 0; k < comms.size(); k++)
    tracks.emplace(std::make_pair(comms[k].gpu, lane[k]),
                   "gpu" + std::to_string(comms[k].gpu % gpn) + " comm " + std::to_string(lane[k]));

  TraceJsonWriter w(os, gpn,
                    "\"schedule\":\"" + json_escape(ls.schedule.name) + "\",\"iteration_s\":" +
                        TraceJsonWriter::seconds_text(r.iteration_s) + ",\"profile\":" + profile_json(profile));
  w.tracks(tracks);
  auto event = [&](std::uint32_t i, const char* cat, std::int32_t gpu, int tid_lane, double start, double end) {
    std::ostream& o = w.event(dag_node_text(dag, ls, i), cat, gpu, tid_lane, start, end);
    o << "\"node\":" << i;
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
    if (n.kind == DagKind::Compute && n.gpu >= 0 && t.end > t.start) event(i, "compute", n.gpu, 0, t.start, t.end);
  }
  for (std::size_t k = 0; k < comms.size(); k++) {
    const DagNode& n = dag.nodes[comms[k].node];
    event(comms[k].node, n.kind == DagKind::Transfer ? "p2p" : "collective", comms[k].gpu, lane[k], comms[k].start,
          comms[k].end);
  }
  w.finish();
}

}  // namespace pipescope::sim
