#pragma once
// The Chrome / Perfetto trace-event layout shared by the simulated (sim/trace.cc) and the measured
// (runtime/trace.cc) timelines, so that the two line up in one file: pid = cluster node, tid = local GPU * 100
// + lane (lane 0 the compute stream, k >= 1 the k-th communication lane), complete ("X") events in
// microseconds with nanosecond resolution. Times are an integer nanosecond clock: start and end are rounded
// once each and dur = end - start, so events that do not overlap in seconds never overlap in the file
// (Perfetto needs strict nesting on a track). Flow events ("s" -> "f") join a send to its receive. Every op
// event carries the same args keys in simulated and measured traces (op_args). Written by hand, streaming:
// traces of large runs have millions of events. Fixed formatting, no wall clock: identical inputs give
// identical bytes.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <utility>

#include "core/lower/lowering.h"
#include "core/util/json_text.h"

namespace pipescope {

// Where one run's processes and flows sit in a file that holds several runs (simulate --compare --trace): cluster
// node n is process pid_base + n, named prefix + "node<n>"; flow ids are offset by flow_base.
struct TraceLayout {
  long long pid_base = 0;
  std::uint64_t flow_base = 0;
  std::string prefix;
};

class TraceJsonWriter {
 public:
  // `other_data`: the members of the top-level "otherData" object, already JSON ("\"schedule\":\"x\",...").
  TraceJsonWriter(std::ostream& os, int gpus_per_node, const std::string& other_data, TraceLayout layout = {})
      : os_(os), gpn_(gpus_per_node), layout_(std::move(layout)) {
    os_ << "{\"displayTimeUnit\":\"ms\",\"otherData\":{" << other_data << "},\"traceEvents\":[\n";
  }
  // Names of the tracks in use, (gpu, lane) -> name, in order; each node's process is named `prefix` + "node<N>".
  void tracks(const std::map<std::pair<int, int>, std::string>& names, const std::string& prefix = "") {
    int last_node = -1;
    for (const auto& [key, name] : names) {
      const int node = key.first / gpn_;
      const long long pid = layout_.pid_base + node;
      const int tid = tid_of(key.first, key.second);
      if (node != last_node) {
        sep() << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":0,\"args\":{\"name\":\""
              << json_escape(layout_.prefix + prefix) << "node" << node << "\"}}";
        sep() << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << pid
              << ",\"tid\":0,\"args\":{\"sort_index\":" << pid << "}}";
        last_node = node;
      }
      sep() << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << tid
            << ",\"args\":{\"name\":\"" << name << "\"}}";
      sep() << "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << tid
            << ",\"args\":{\"sort_index\":" << tid << "}}";
    }
  }
  // Opens a complete event and its "args" object; the caller writes the args' members to the returned stream,
  // then calls close_event().
  std::ostream& event(const std::string& name, const char* cat, int gpu, int lane, double start_s, double end_s) {
    const std::int64_t t0 = ns(start_s), t1 = std::max(t0, ns(end_s));
    sep() << "{\"name\":\"" << json_escape(name) << "\",\"cat\":\"" << cat << "\",\"ph\":\"X\",\"pid\":" << pid_of(gpu)
          << ",\"tid\":" << tid_of(gpu, lane) << ",\"ts\":" << us_text(t0) << ",\"dur\":" << us_text(t1 - t0)
          << ",\"args\":{";
    return os_;
  }
  // One end of flow `id`: the start ("s") inside the send's event, the finish ("f", bound to the enclosing
  // event) inside the receive's; `at_s` is that event's start.
  void flow(bool start, std::uint64_t id, int gpu, int lane, double at_s) {
    sep() << "{\"name\":\"p2p\",\"cat\":\"flow\",\"ph\":\"" << (start ? "s" : "f\",\"bp\":\"e")
          << "\",\"id\":" << id + layout_.flow_base << ",\"pid\":" << pid_of(gpu) << ",\"tid\":" << tid_of(gpu, lane)
          << ",\"ts\":" << us_text(ns(at_s)) << "}";
  }
  void close_event() { os_ << "}}"; }
  void finish() { os_ << "\n]}\n"; }

  // The args every op event carries, in simulated and measured traces alike: op (canonical text), kind,
  // worker (the schedule's worker: dp_replica * pp + pp_rank), pp_rank, dp_replica, micro_batch, chunk, slice (-1
  // where the op has none: optimizer, DP, expert-data and embedding collectives). No leading or trailing comma.
  static std::string op_args(const LoweredSchedule& ls, int worker, std::size_t index) {
    const LoweredOp& l = ls.per_worker.at(static_cast<std::size_t>(worker)).at(index);
    const bool has_op = l.kind == LOpKind::Compute || l.kind == LOpKind::Send || l.kind == LOpKind::Recv ||
                        l.tag == CollTag::TensorParallel || l.tag == CollTag::ScatterGather ||
                        l.tag == CollTag::ExpertParallel;
    std::string kind;
    switch (l.kind) {
      case LOpKind::Compute:
        kind = std::string(1, kind_letter(l.op.kind));
        break;
      case LOpKind::Send:
        kind = "send";
        break;
      case LOpKind::Recv:
        kind = "recv";
        break;
      case LOpKind::AllReduce:
        kind = "allreduce";
        break;
      case LOpKind::AllGather:
        kind = "allgather";
        break;
      case LOpKind::ReduceScatter:
        kind = "reducescatter";
        break;
      case LOpKind::AllToAll:
        kind = "alltoall";
        break;
      case LOpKind::Optimizer:
        kind = "optimizer";
        break;
    }
    const int p = std::max(1, ls.p);
    return "\"op\":\"" + json_escape(lowered_text(l)) + "\",\"kind\":\"" + kind +
           "\",\"worker\":" + std::to_string(worker) + ",\"pp_rank\":" + std::to_string(worker % p) +
           ",\"dp_replica\":" + std::to_string(worker / p) +
           ",\"micro_batch\":" + std::to_string(has_op ? l.op.microbatch : -1) +
           ",\"chunk\":" + std::to_string(has_op ? l.op.chunk : -1) +
           ",\"slice\":" + std::to_string(has_op ? l.op.slice : -1);
  }

  // A number as the traces print seconds ("%.9f").
  static std::string seconds_text(double s) {
    char b[40];
    std::snprintf(b, sizeof b, "%.9f", s);
    return b;
  }

 private:
  int tid_of(int gpu, int lane) const { return (gpu % gpn_) * 100 + lane; }
  long long pid_of(int gpu) const { return layout_.pid_base + gpu / gpn_; }
  static std::int64_t ns(double s) { return static_cast<std::int64_t>(std::llround(s * 1e9)); }
  // Nanoseconds as microseconds with three decimals, exactly ("1234.567").
  static std::string us_text(std::int64_t t) {
    char b[40];
    const char* sign = t < 0 ? "-" : "";
    const std::int64_t a = t < 0 ? -t : t;
    std::snprintf(b, sizeof b, "%s%lld.%03lld", sign, static_cast<long long>(a / 1000),
                  static_cast<long long>(a % 1000));
    return b;
  }
  std::ostream& sep() {
    if (!first_) os_ << ",\n";
    first_ = false;
    return os_;
  }
  std::ostream& os_;
  int gpn_;
  TraceLayout layout_;
  bool first_ = true;
};

}  // namespace pipescope
