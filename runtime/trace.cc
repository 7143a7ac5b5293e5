#include "runtime/trace.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/lower/trace_json.h"
#include "core/util/json_text.h"

namespace pipescope::runtime {

namespace {

constexpr int kMeasuredPidOffset = 1000;

struct Event {
  int gpu, lane;
  double start, end;
  int worker, tp_rank;
  std::size_t op;
  const char* cat;
};

// Flow key of a transfer: (sender, receiver, producer op text, TP rank); the n-th send of a key matches the
// n-th receive of it.
using FlowKey = std::tuple<int, int, std::string, int>;

}  // namespace

void write_measured_trace(std::ostream& os, const LoweredSchedule& ls, const Placement& pl, const JobResult& r,
                          int iteration, const std::string& label) {
  const int gpn = std::max(1, pl.gpus_per_node);
  std::vector<Event> events;
  double iteration_s = 0;
  for (const WorkerResult& w : r.workers) {
    if (w.iterations.empty()) continue;
    const int k = iteration < 0 ? static_cast<int>(w.iterations.size()) - 1 : iteration;
    if (k < 0 || k >= static_cast<int>(w.iterations.size()))
      throw RuntimeError("trace: iteration " + std::to_string(iteration) + " was not timed");
    const IterationStats& it = w.iterations[k];
    iteration_s = std::max(iteration_s, it.end_s);
    const auto& prog = ls.per_worker.at(static_cast<std::size_t>(w.worker));
    if (it.ops.size() != prog.size()) throw RuntimeError("trace: timings do not match the schedule");
    const int gpu = pl.gpu_of(w.worker, w.tp_rank);
    std::vector<double> send_lane_end;
    for (std::size_t i = 0; i < prog.size(); i++) {
      const OpTiming& t = it.ops[i];
      switch (prog[i].kind) {
        case LOpKind::Compute:
        case LOpKind::Optimizer:
          events.push_back({gpu, 0, t.start, t.end, w.worker, w.tp_rank, i, "compute"});
          break;
        case LOpKind::Recv:
          events.push_back({gpu, 1, t.start, t.end, w.worker, w.tp_rank, i, "p2p"});
          break;
        case LOpKind::AllReduce:
        case LOpKind::AllGather:
        case LOpKind::ReduceScatter:
        case LOpKind::AllToAll:
          events.push_back({gpu, 1, t.start, t.end, w.worker, w.tp_rank, i, "collective"});
          break;
        case LOpKind::Send: {
          std::size_t l = 0;
          while (l < send_lane_end.size() && send_lane_end[l] > t.start) l++;
          if (l == send_lane_end.size()) send_lane_end.push_back(0);
          send_lane_end[l] = t.done;
          events.push_back({gpu, 2 + static_cast<int>(l), t.start, t.done, w.worker, w.tp_rank, i, "p2p"});
          break;
        }
      }
    }
  }
  std::map<std::pair<int, int>, std::string> tracks;
  for (const Event& e : events)
    tracks.emplace(std::make_pair(e.gpu, e.lane), "gpu" + std::to_string(e.gpu % gpn) +
                                                      (e.lane == 0 ? " compute" : " comm " + std::to_string(e.lane)));
  TraceJsonWriter tw(os, gpn,
                     "\"schedule\":\"" + json_escape(ls.schedule.name) + "\",\"source\":\"measured\",\"backend\":\"" +
                         json_escape(r.backend) + "\",\"iteration_s\":" + TraceJsonWriter::seconds_text(iteration_s));
  tw.tracks(tracks, label);
  // Flow ids: sends numbered per key in program order, each receive takes the matching send's id.
  std::map<FlowKey, std::vector<std::uint64_t>> send_ids;
  std::map<FlowKey, std::size_t> recv_seen;
  std::vector<std::uint64_t> flow(events.size(), 0);
  std::vector<double> send_start{0.0};  // by flow id
  for (std::size_t k = 0; k < events.size(); k++) {
    const Event& e = events[k];
    const LoweredOp& l = ls.per_worker[static_cast<std::size_t>(e.worker)][e.op];
    if (l.kind != LOpKind::Send) continue;
    flow[k] = send_start.size();
    send_start.push_back(e.start);
    send_ids[{e.worker, l.peer, op_text(l.op), e.tp_rank}].push_back(flow[k]);
  }
  for (std::size_t k = 0; k < events.size(); k++) {
    const Event& e = events[k];
    const LoweredOp& l = ls.per_worker[static_cast<std::size_t>(e.worker)][e.op];
    if (l.kind != LOpKind::Recv) continue;
    const FlowKey key{l.peer, e.worker, op_text(l.op), e.tp_rank};
    const auto it = send_ids.find(key);
    const std::size_t n = recv_seen[key]++;
    if (it != send_ids.end() && n < it->second.size()) flow[k] = it->second[n];
  }
  for (std::size_t k = 0; k < events.size(); k++) {
    const Event& e = events[k];
    tw.event(lowered_op_name(ls, e.worker, e.op), e.cat, e.gpu, e.lane, e.start, e.end)
        << TraceJsonWriter::op_args(ls, e.worker, e.op) << ",\"tp_rank\":" << e.tp_rank << ",\"index\":" << e.op;
    tw.close_event();
    // The flow ends inside the receive, no earlier than the send began (a receive is posted before its data).
    if (flow[k] != 0) {
      const bool send = ls.per_worker[static_cast<std::size_t>(e.worker)][e.op].kind == LOpKind::Send;
      tw.flow(send, flow[k], e.gpu, e.lane, send ? e.start : std::min(e.end, std::max(e.start, send_start[flow[k]])));
    }
  }
  tw.finish();
}

std::string merge_traces(const std::string& simulated_json, const std::string& measured_json) {
  using Json = nlohmann::ordered_json;
  Json sim, meas;
  try {
    sim = Json::parse(simulated_json);
    meas = Json::parse(measured_json);
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("merge_traces: ") + e.what());
  }
  if (!sim.is_object() || !meas.is_object() || !sim.contains("traceEvents") || !meas.contains("traceEvents"))
    throw RuntimeError("merge_traces: input without traceEvents");
  // Validate before touching: a hand-edited or truncated trace must give an error, not a type_error or an
  // out-of-range int conversion (found by fuzz/fuzz_trace).
  for (const Json* in : {&sim, &meas}) {
    const Json& ev = (*in)["traceEvents"];
    if (!ev.is_array()) throw RuntimeError("merge_traces: traceEvents is not an array");
    for (std::size_t i = 0; i < ev.size(); i++) {
      const Json& e = ev[i];
      const std::string where = "merge_traces: traceEvents[" + std::to_string(i) + "]";
      if (!e.is_object()) throw RuntimeError(where + " is not an object");
      if (e.contains("pid") && !(e["pid"].is_number_integer() && e["pid"].get<std::int64_t>() >= 0 &&
                                 e["pid"].get<std::int64_t>() < kMeasuredPidOffset))
        throw RuntimeError(where + ".pid is not a node number in [0, " + std::to_string(kMeasuredPidOffset) + ")");
      if (e.contains("name") && !e["name"].is_string()) throw RuntimeError(where + ".name is not a string");
      const std::string name = e.value("name", "");
      if ((name == "process_name" || name == "process_sort_index") && !(e.contains("args") && e["args"].is_object()))
        throw RuntimeError(where + ".args is not an object");
      if (name == "process_name" && e["args"].contains("name") && !e["args"]["name"].is_string())
        throw RuntimeError(where + ".args.name is not a string");
    }
  }
  if (sim.contains("otherData") && !sim["otherData"].is_object())
    throw RuntimeError("merge_traces: otherData is not an object");
  if (meas.contains("otherData") && !meas["otherData"].is_object())
    throw RuntimeError("merge_traces: otherData is not an object");
  Json out;
  out["displayTimeUnit"] = "ms";
  out["otherData"]["simulated"] = sim.value("otherData", Json::object());
  out["otherData"]["measured"] = meas.value("otherData", Json::object());
  Json events = Json::array();
  auto add = [&](Json& in, bool measured) {
    for (Json& e : in["traceEvents"]) {
      const int node = e.value("pid", 0);
      if (measured) e["pid"] = node + kMeasuredPidOffset;
      // Flow ids of the two runs must not join a simulated send to a measured receive.
      if (measured && e.contains("id") && e["id"].is_number_unsigned())
        e["id"] = e["id"].get<std::uint64_t>() + (std::uint64_t{1} << 40);
      const std::string name = e.value("name", "");
      if (name == "process_name") {
        std::string n = e["args"].value("name", "");
        if (!measured) n = "simulated " + n;
        e["args"]["name"] = n;
      } else if (name == "process_sort_index") {
        e["args"]["sort_index"] = 2 * node + (measured ? 1 : 0);
      }
      events.push_back(std::move(e));
    }
  };
  add(sim, false);
  add(meas, true);
  out["traceEvents"] = std::move(events);
  return out.dump() + "\n";
}

}  // namespace pipescope::runtime
