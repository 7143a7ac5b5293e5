#include "core/lower/lowered_schedule.h"

#include <cstdio>

namespace pipescope {

namespace {

std::string fmt_bytes(double b) {
  char buf[48];
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1fGB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fMB", b / 1e6);
  else if (b >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fkB", b / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0fB", b);
  return buf;
}

const char* tag_text(CollTag t) {
  switch (t) {
    case CollTag::DataParallel:
      return "dp";
    case CollTag::TensorParallel:
      return "tp";
    case CollTag::Embedding:
      return "emb";
    case CollTag::ScatterGather:
      return "sg";
    case CollTag::ParamGather:
      return "params";
    case CollTag::ContextParallel:
      return "cp";
    case CollTag::ExpertParallel:
      return "ep";
    case CollTag::ExpertData:
      return "edp";
    case CollTag::None:
      break;
  }
  return "none";
}

}  // namespace

std::string lowered_text(const LoweredOp& op) {
  switch (op.kind) {
    case LOpKind::Compute:
      return op_text(op.op);
    case LOpKind::Send:
      return "send(" + op_text(op.op) + "->" + std::to_string(op.peer) + ")";
    case LOpKind::Recv:
      return "recv(" + op_text(op.op) + "<-" + std::to_string(op.peer) + ")";
    case LOpKind::AllReduce:
    case LOpKind::AllGather:
    case LOpKind::ReduceScatter:
    case LOpKind::AllToAll: {
      std::string t = op.kind == LOpKind::AllReduce       ? "allreduce["
                      : op.kind == LOpKind::AllGather     ? "allgather["
                      : op.kind == LOpKind::ReduceScatter ? "reducescatter["
                                                          : "alltoall[";
      t += tag_text(op.tag);
      t += " g" + std::to_string(op.group) + " ";
      if (op.count != 1) t += std::to_string(op.count) + "x";
      t += fmt_bytes(op.bytes);
      // Per-op collectives (TP, scatter/gather) name the compute op they belong to.
      if (op.tag == CollTag::TensorParallel || op.tag == CollTag::ScatterGather || op.tag == CollTag::ExpertParallel)
        t += " " + op_text(op.op);
      // Overlapped buckets name the op whose weight gradients (or forward's parameters) they carry.
      if (op.async) t += " async " + op_text(op.op);
      if (op.overlap) t += " overlapped";  // beside its pair's compute (core/lower/overlap.h)
      return t + "]";
    }
    case LOpKind::Optimizer:
      return "opt";
  }
  return "?";
}

std::string lowered_op_name(const LoweredSchedule& ls, int worker, std::size_t index) {
  const LoweredOp& op = ls.per_worker.at(static_cast<std::size_t>(worker)).at(index);
  std::string t = lowered_text(op);
  const bool collective = is_collective(op.kind);
  if (op.kind == LOpKind::Optimizer || (ls.dp > 1 && !collective)) t += "@w" + std::to_string(worker);
  return t;
}

bool replica_programs_equal(const LoweredSchedule& ls, int d) {
  const int p = ls.p;
  if (d < 0 || d >= ls.dp || ls.per_worker.size() != static_cast<std::size_t>(ls.dp) * p) return false;
  for (int r = 0; r < p; r++) {
    const auto& a = ls.per_worker[r];
    const auto& b = ls.per_worker[LoweredSchedule::worker(d, r, p)];
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); i++) {
      const LoweredOp& x = a[i];
      const LoweredOp& y = b[i];
      const std::int32_t peer = x.peer < 0 ? x.peer : x.peer + d * p;
      if (x.kind != y.kind || x.tag != y.tag || x.overlap != y.overlap || !(x.op == y.op) || y.peer != peer ||
          x.count != y.count || x.seconds != y.seconds || x.bytes != y.bytes)
        return false;
    }
  }
  return true;
}

void ProgramSink::begin(const LoweredSchedule& ls) {
  programs_.clear();
  programs_.resize(static_cast<std::size_t>(ls.workers()));
}

}  // namespace pipescope
