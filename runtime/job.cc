#include "runtime/job.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace pipescope::runtime {

namespace {

class Reader {
 public:
  explicit Reader(const std::vector<double>& v) : v_(v) {}
  double next() {
    if (at_ >= v_.size()) throw RuntimeError("truncated result record");
    return v_[at_++];
  }
  std::size_t count() {
    const double d = next();
    if (d < 0 || d > 1e12) throw RuntimeError("corrupt result record");
    return static_cast<std::size_t>(d);
  }
  std::vector<double> take(std::size_t n) {
    if (at_ + n > v_.size()) throw RuntimeError("truncated result record");
    std::vector<double> out(v_.begin() + static_cast<std::ptrdiff_t>(at_),
                            v_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
    at_ += n;
    return out;
  }
  bool done() const { return at_ == v_.size(); }

 private:
  const std::vector<double>& v_;
  std::size_t at_ = 0;
};

JobResult run(const LoweredSchedule& ls, const CheckedSchedule* cs, const ModelConfig& mc, Transport& tr,
              const JobOptions& opt, Watchdog* wd) {
  if (opt.iterations < 1 || opt.warmup < 0)
    throw RuntimeError("iterations must be >= 1 and warm-up >= 0 (got " + std::to_string(opt.iterations) + ", " +
                       std::to_string(opt.warmup) + ")");
  const int w = tr.worker();
  if (wd) wd->enter(Watchdog::kSetup);
  const SyntheticData data = make_data(ls, mc);
  auto be = make_backend(opt.backend, opt.device);
  // Tensors live where the backend computes; the transport must move that memory.
  const bool on_device = be->stream() != nullptr;
  if (on_device != tr.device_buffers())
    throw RuntimeError("backend " + be->name() + " keeps its tensors in " + (on_device ? "GPU" : "host") +
                       " memory but the " + tr.name() + " transport moves " + (on_device ? "host" : "GPU") +
                       " memory (cuda backends run under pipescope-rank with the NCCL transport)");
  tr.set_stream(be->stream());
  ExecutorOptions eo;
  eo.loss_scale = opt.loss_scale > 0 ? opt.loss_scale : be->dtype() == kernels::DType::kF16 ? 1024.0 : 1.0;
  eo.adam = opt.adam;
  eo.adam.grad_scale = opt.adam.grad_scale / eo.loss_scale;
  std::unique_ptr<Executor> ex;
  if (cs)
    ex = std::make_unique<Executor>(*cs, w, mc, data, *be, tr, wd, eo);
  else
    ex = std::make_unique<Executor>(Executor::UncheckedForTesting{}, ls, w, mc, data, *be, tr, wd, eo);

  WorkerResult mine;
  mine.worker = w;
  mine.tp_rank = tr.tp_rank();
  mine.ep_rank = ex->ep_rank();
  const int steps = opt.warmup + opt.iterations;
  const double offset_s = tr.clock_offset_s();
  for (int step = 1; step <= steps; step++) {
    if (wd) wd->enter(Watchdog::kSetup);
    tr.barrier();
    const auto t0 = Clock::now();
    IterationStats st = ex->run_iteration(step, t0);
    st.t0_s = std::chrono::duration<double>(t0.time_since_epoch()).count() - offset_s;
    mine.loss = st.loss;
    if (step > opt.warmup) mine.iterations.push_back(std::move(st));
  }
  if (opt.collect_modules)
    for (const auto& [id, p] : ex->modules()) {
      std::vector<double> g = p->grads();
      for (double& x : g) x /= eo.loss_scale;  // the gradients of the loss itself
      mine.modules.push_back({id, std::move(g), p->get()});
    }

  if (wd) wd->enter(Watchdog::kResults);
  const auto all = tr.gather(pack(mine));
  JobResult r;
  r.backend = be->name();
  r.steps = steps;
  r.tp = tr.tp_size();
  for (const auto& v : all) r.workers.push_back(unpack(v, mc.layers));
  align_clocks(r);
  if (wd) wd->enter(Watchdog::kSetup);
  return r;
}

}  // namespace

double JobResult::loss() const {
  double l = 0;
  for (const auto& w : workers)
    if (w.tp_rank == 0) l += w.loss;
  return l;
}

SyntheticData make_data(const LoweredSchedule& ls, const ModelConfig& mc) {
  int replica = 0;
  for (const MicroBatch& mb : ls.schedule.microbatches) replica = std::max(replica, mb.seq_begin + mb.seq_count);
  return SyntheticData(ls.dp * replica, ls.schedule.seq_len, mc.shape.vocab);
}

JobResult run_job(const CheckedSchedule& cs, const ModelConfig& mc, Transport& tr, const JobOptions& opt,
                  Watchdog* watchdog) {
  return run(cs.schedule(), &cs, mc, tr, opt, watchdog);
}

JobResult run_job_unchecked_for_testing(const LoweredSchedule& ls, const ModelConfig& mc, Transport& tr,
                                        const JobOptions& opt, Watchdog* watchdog) {
  return run(ls, nullptr, mc, tr, opt, watchdog);
}

// Without it a send could appear to start after its receive completed (ranks leave a barrier milliseconds apart).
void align_clocks(JobResult& r) {
  const std::size_t iters = r.workers.empty() ? 0 : r.workers.front().iterations.size();
  for (std::size_t it = 0; it < iters; it++) {
    double first = std::numeric_limits<double>::infinity();
    for (const auto& w : r.workers) first = std::min(first, w.iterations.at(it).t0_s);
    for (auto& w : r.workers) {
      IterationStats& st = w.iterations.at(it);
      const double shift = st.t0_s - first;
      for (OpTiming& o : st.ops) {
        o.start += shift;
        o.end += shift;
        o.done += shift;
      }
      st.end_s += shift;
      st.t0_s = first;
    }
  }
}

std::vector<double> pack(const WorkerResult& w) {
  std::vector<double> v;
  v.push_back(w.worker);
  v.push_back(w.tp_rank);
  v.push_back(w.ep_rank);
  v.push_back(static_cast<double>(w.iterations.size()));
  for (const auto& it : w.iterations) {
    v.push_back(static_cast<double>(it.ops.size()));
    v.insert(v.end(), {it.end_s, it.kernel_s, it.comm_s, it.overhead_s, it.loss, it.t0_s});
    for (const auto& o : it.ops) v.insert(v.end(), {o.start, o.end, o.done});
  }
  v.push_back(w.loss);
  v.push_back(static_cast<double>(w.modules.size()));
  for (const auto& m : w.modules) {
    v.push_back(m.id.kind == kernels::ModuleKind::kEmbedding ? -1.0
                : m.id.kind == kernels::ModuleKind::kHead    ? -2.0
                : m.id.kind == kernels::ModuleKind::kExperts ? -3.0 - m.id.layer
                                                             : static_cast<double>(m.id.layer));
    v.push_back(static_cast<double>(m.grads.size()));
    v.push_back(static_cast<double>(m.params.size()));
    v.insert(v.end(), m.grads.begin(), m.grads.end());
    v.insert(v.end(), m.params.begin(), m.params.end());
  }
  return v;
}

WorkerResult unpack(const std::vector<double>& v, int layers) {
  Reader r(v);
  WorkerResult w;
  w.worker = static_cast<int>(r.next());
  w.tp_rank = static_cast<int>(r.next());
  w.ep_rank = static_cast<int>(r.next());
  const std::size_t iters = r.count();
  for (std::size_t k = 0; k < iters; k++) {
    IterationStats it;
    it.ops.resize(r.count());
    it.end_s = r.next();
    it.kernel_s = r.next();
    it.comm_s = r.next();
    it.overhead_s = r.next();
    it.loss = r.next();
    it.t0_s = r.next();
    for (auto& o : it.ops) {
      o.start = r.next();
      o.end = r.next();
      o.done = r.next();
    }
    w.iterations.push_back(std::move(it));
  }
  w.loss = r.next();
  const std::size_t mods = r.count();
  for (std::size_t k = 0; k < mods; k++) {
    ModuleState m;
    const double code = r.next();
    if (code == -1.0)
      m.id = {kernels::ModuleKind::kEmbedding, 0};
    else if (code == -2.0)
      m.id = {kernels::ModuleKind::kHead, 0};
    else if (code >= 0 && code < layers)
      m.id = {kernels::ModuleKind::kLayer, static_cast<int>(code)};
    else if (code <= -3.0 && code > -3.0 - layers)
      m.id = {kernels::ModuleKind::kExperts, static_cast<int>(-3.0 - code)};
    else
      throw RuntimeError("corrupt result record: module " + std::to_string(code));
    const std::size_t ng = r.count(), np = r.count();
    m.grads = r.take(ng);
    m.params = r.take(np);
    w.modules.push_back(std::move(m));
  }
  if (!r.done()) throw RuntimeError("corrupt result record: trailing data");
  return w;
}

std::vector<double> pack(const JobResult& r) {
  std::vector<double> v;
  v.push_back(static_cast<double>(r.backend.size()));
  for (char c : r.backend) v.push_back(static_cast<unsigned char>(c));
  v.push_back(r.steps);
  v.push_back(r.tp);
  v.push_back(static_cast<double>(r.workers.size()));
  for (const auto& w : r.workers) {
    const auto p = pack(w);
    v.push_back(static_cast<double>(p.size()));
    v.insert(v.end(), p.begin(), p.end());
  }
  return v;
}

JobResult unpack_job(const std::vector<double>& v, int layers) {
  Reader r(v);
  JobResult j;
  const std::size_t n = r.count();
  for (std::size_t k = 0; k < n; k++) j.backend += static_cast<char>(r.next());
  j.steps = static_cast<int>(r.next());
  j.tp = static_cast<int>(r.next());
  if (j.tp < 1) throw RuntimeError("corrupt job record: tp " + std::to_string(j.tp));
  const std::size_t workers = r.count();
  for (std::size_t k = 0; k < workers; k++) j.workers.push_back(unpack(r.take(r.count()), layers));
  if (!r.done()) throw RuntimeError("corrupt job record: trailing data");
  return j;
}

std::string describe_position(const LoweredSchedule& ls, int worker, std::int64_t op) {
  const auto& prog = ls.per_worker.at(static_cast<std::size_t>(worker));
  if (op >= 0 && static_cast<std::size_t>(op) < prog.size())
    return lowered_op_name(ls, worker, static_cast<std::size_t>(op)) + " (op " + std::to_string(op + 1) + " of " +
           std::to_string(prog.size()) + ")";
  if (op == Watchdog::kDrain) return "the completion of its outstanding sends (end of its program)";
  if (op == Watchdog::kResults) return "the results gather (its program finished)";
  return "setup / the iteration barrier";
}

}  // namespace pipescope::runtime
