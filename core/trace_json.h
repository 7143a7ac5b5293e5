#pragma once
// The Chrome / Perfetto trace-event layout shared by the simulated (sim/trace.cc) and the measured
// (runtime/trace.cc) timelines, so that the two line up in one file: pid = cluster node, tid = local GPU * 100
// + lane (lane 0 the compute stream, k >= 1 the k-th communication lane), complete ("X") events in
// microseconds with nanosecond resolution. Written by hand, streaming: traces of large runs have millions of
// events. Fixed formatting, no wall clock: identical inputs give identical bytes.

#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <utility>

#include "core/json_text.h"

namespace pipescope {

class TraceJsonWriter {
 public:
  // `other_data`: the members of the top-level "otherData" object, already JSON ("\"schedule\":\"x\",...").
  TraceJsonWriter(std::ostream& os, int gpus_per_node, const std::string& other_data) : os_(os), gpn_(gpus_per_node) {
    os_ << "{\"displayTimeUnit\":\"ms\",\"otherData\":{" << other_data << "},\"traceEvents\":[\n";
  }
  // Names of the tracks in use, (gpu, lane) -> name, in order; each node's process is named `prefix` + "node<N>".
  void tracks(const std::map<std::pair<int, int>, std::string>& names, const std::string& prefix = "") {
    int last_node = -1;
    for (const auto& [key, name] : names) {
      const int node = key.first / gpn_;
      const int tid = tid_of(key.first, key.second);
      if (node != last_node) {
        sep() << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << node << ",\"tid\":0,\"args\":{\"name\":\""
              << json_escape(prefix) << "node" << node << "\"}}";
        sep() << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << node
              << ",\"tid\":0,\"args\":{\"sort_index\":" << node << "}}";
        last_node = node;
      }
      sep() << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << node << ",\"tid\":" << tid
            << ",\"args\":{\"name\":\"" << name << "\"}}";
      sep() << "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << node << ",\"tid\":" << tid
            << ",\"args\":{\"sort_index\":" << tid << "}}";
    }
  }
  // Opens a complete event and its "args" object; the caller writes the args' members to the returned stream,
  // then calls close_event().
  std::ostream& event(const std::string& name, const char* cat, int gpu, int lane, double start_s, double end_s) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", gpu / gpn_,
                  tid_of(gpu, lane), start_s * 1e6, (end_s > start_s ? end_s - start_s : 0.0) * 1e6);
    sep() << "{\"name\":\"" << json_escape(name) << "\",\"cat\":\"" << cat << '"' << buf << ",\"args\":{";
    return os_;
  }
  void close_event() { os_ << "}}"; }
  void finish() { os_ << "\n]}\n"; }

  // A number as the traces print seconds ("%.9f").
  static std::string seconds_text(double s) {
    char b[40];
    std::snprintf(b, sizeof b, "%.9f", s);
    return b;
  }

 private:
  int tid_of(int gpu, int lane) const { return (gpu % gpn_) * 100 + lane; }
  std::ostream& sep() {
    if (!first_) os_ << ",\n";
    first_ = false;
    return os_;
  }
  std::ostream& os_;
  int gpn_;
  bool first_ = true;
};

}  // namespace pipescope
