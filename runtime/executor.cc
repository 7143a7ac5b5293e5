#include "runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

namespace pipescope::runtime {

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::shared_ptr<kernels::Tensor> share(std::unique_ptr<kernels::Tensor> t) {
  return std::shared_ptr<kernels::Tensor>(std::move(t));
}

// Runs f and adds its duration to acc.
template <class F>
void timed(double& acc, F&& f) {
  const auto a = Clock::now();
  f();
  acc += seconds(Clock::now() - a);
}

}  // namespace

struct Executor::State {
  explicit State(const Schedule& s)
      : index(s),
        outputs(index.size()),
        inbox(index.size()),
        ungathered(index.size(), 0),
        records(index.size()),
        input_done(index.size(), 0),
        emb_grads(index.size()) {}
  OpKeyIndex index;
  std::vector<std::shared_ptr<kernels::Tensor>> outputs;  // by producer slot: computed here, not yet sent / consumed
  std::vector<std::shared_ptr<kernels::Tensor>> inbox;    // by producer slot: received, not yet consumed
  std::vector<char> ungathered;  // by producer slot: only this TP rank's chunk arrived (scatter/gather)
  // By forward slot: the records of the stage's layers (then the head's) until the matching B, or W (split).
  std::vector<std::vector<std::unique_ptr<kernels::Record>>> records;
  std::vector<char> input_done;  // by forward slot: its I ran, its W has not (the records hold what W needs)
  // By forward slot, stage 0 only: the gradient w.r.t. the embedding's output that an I computed, for its W (the
  // embedding's backward is all weight gradient).
  std::vector<std::shared_ptr<kernels::Tensor>> emb_grads;
  std::map<std::pair<int, int>, std::unique_ptr<kernels::KVCache>> kv;  // (micro-batch, layer)
  std::vector<std::unique_ptr<kernels::Record>> free_records;           // reused: a forward overwrites a record
  struct PendingSend {
    std::unique_ptr<Request> req;
    std::shared_ptr<kernels::Tensor> buf;
    std::size_t index;
  };
  std::vector<PendingSend> sends;
  std::size_t live_outputs = 0, live_inbox = 0, live_records = 0;

  std::unique_ptr<kernels::Record> record(kernels::Backend& be) {
    if (free_records.empty()) return be.record();
    auto r = std::move(free_records.back());
    free_records.pop_back();
    return r;
  }
  std::int64_t slot(const OpKey& k, const char* what) const {
    const std::int64_t s = index.slot(k);
    if (s < 0) throw RuntimeError(std::string(what) + ": op outside the schedule's grid");
    return s;
  }
};

Executor::Executor(const CheckedSchedule& cs, int worker, const ModelConfig& model, const SyntheticData& data,
                   kernels::Backend& backend, Transport& transport, Watchdog* watchdog, ExecutorOptions opt)
    : Executor(UncheckedForTesting{}, cs.schedule(), worker, model, data, backend, transport, watchdog,
               std::move(opt)) {}

Executor::Executor(UncheckedForTesting, const LoweredSchedule& ls, int worker, const ModelConfig& model,
                   const SyntheticData& data, kernels::Backend& backend, Transport& transport, Watchdog* watchdog,
                   ExecutorOptions opt)
    : ls_(ls),
      prog_(ls.per_worker.at(static_cast<std::size_t>(worker))),
      worker_(worker),
      replica_(worker / ls.p),
      rank_(worker % ls.p),
      tp_rank_(transport.tp_rank()),
      model_(model),
      data_(data),
      be_(backend),
      tr_(transport),
      wd_(watchdog),
      opt_(std::move(opt)) {
  model_.validate();
  const Schedule& s = ls.schedule;
  for (const MicroBatch& mb : s.microbatches) replica_seqs_ = std::max(replica_seqs_, mb.seq_begin + mb.seq_count);
  if (data.sequences() != ls.dp * replica_seqs_ || data.seq_len() != s.seq_len)
    throw RuntimeError("data: the schedule needs " + std::to_string(ls.dp) + " x " + std::to_string(replica_seqs_) +
                       " sequences of " + std::to_string(s.seq_len) + " tokens, the data has " +
                       std::to_string(data.sequences()) + " of " + std::to_string(data.seq_len()));
  if (model.shape.max_seq < s.seq_len)
    throw RuntimeError("model: max_seq " + std::to_string(model.shape.max_seq) + " < the schedule's seq_len " +
                       std::to_string(s.seq_len));
  if (transport.worker() != worker || transport.workers() != ls.workers() || transport.tp_size() != ls.tp)
    throw RuntimeError("transport is worker " + std::to_string(transport.worker()) + " of " +
                       std::to_string(transport.workers()) + " with tp " + std::to_string(transport.tp_size()) +
                       ", the executor worker " + std::to_string(worker) + " of " + std::to_string(ls.workers()) +
                       " with tp " + std::to_string(ls.tp));
  shard_ = model_.shape;
  shard_.layer.tp = ls.tp;
  for (const auto& prog : ls.per_worker)
    for (const LoweredOp& l : prog)
      scatter_gather_ = scatter_gather_ || (l.kind == LOpKind::AllGather && l.tag == CollTag::ScatterGather);
  try {
    shard_.validate();
  } catch (const kernels::KernelError& e) {
    throw RuntimeError("model: tensor parallelism: " + std::string(e.what()));
  }
  find_ep_group();
  validate_program();
  st_ = std::make_unique<State>(s);

  const int stages = s.stages();
  auto add = [&](const ModuleId& id) {
    const kernels::ModelShape shape = layer_shard(id.layer);
    auto p = be_.params(id.kind, shape);
    if (id.kind == kernels::ModuleKind::kExperts)
      p->set(kernels::expert_shard(shape, ep_rank_, initial_params(model_, id)));
    else
      p->set(kernels::shard_params(id.kind, shape, tp_rank_, initial_params(model_, id)));
    modules_.emplace(id, std::move(p));
  };
  if (auto t = be_.op_timer(); t->on_device()) device_timer_ = std::move(t);
  if (ls.tp > 1)
    be_.set_tp_all_reduce([this](void* data, std::size_t n, kernels::DType t) { tp_all_reduce(data, n, t); });
  for (int c = 0; c < s.v; c++) {
    const int g = s.stage_of(rank_, c);
    const StageLayers L = stage_layers(model_, stages, g);
    if (g == 0) add({kernels::ModuleKind::kEmbedding, 0});
    for (int l = L.first; l < L.first + L.count; l++) {
      add({kernels::ModuleKind::kLayer, l});
      if (model_.moe_layer(l)) add({kernels::ModuleKind::kExperts, l});
    }
    if (g == stages - 1) add({kernels::ModuleKind::kHead, 0});
  }
  if (ep_group_ >= 0)
    be_.set_ep_all_to_all([this](kernels::EpExchange what, const void* send, const std::vector<std::size_t>& sb,
                                 void* recv,
                                 const std::vector<std::size_t>& rb) { ep_all_to_all(what, send, sb, recv, rb); });
}

Executor::~Executor() {
  if (ls_.tp > 1) be_.set_tp_all_reduce({});  // it points at this executor
  if (ep_group_ >= 0) be_.set_ep_all_to_all({});
}

void Executor::find_ep_group() {
  for (const LoweredOp& l : prog_) {
    if (l.kind != LOpKind::AllToAll) continue;
    if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls_.groups.size())
      throw RuntimeError("all-to-all on unknown group g" + std::to_string(l.group));
    if (ep_group_ >= 0 && l.group != ep_group_)
      throw RuntimeError("all-to-alls on two groups (g" + std::to_string(ep_group_) + ", g" + std::to_string(l.group) +
                         "): a worker's MoE layers have one expert-parallel group");
    ep_group_ = l.group;
  }
  if (ep_group_ < 0) return;
  const auto& ws = ls_.groups[ep_group_].workers;
  const auto it = std::find(ws.begin(), ws.end(), worker_);
  if (it == ws.end()) throw RuntimeError("all-to-all group g" + std::to_string(ep_group_) + " without this worker");
  ep_size_ = static_cast<int>(ws.size());
  ep_rank_ = static_cast<int>(it - ws.begin());
  if (!model_.moe()) throw RuntimeError("the program has expert-parallel all-to-alls but the model no experts");
  if (ls_.tp > 1)
    throw RuntimeError("MoE layers with tensor parallelism (tp = " + std::to_string(ls_.tp) +
                       ") are not implemented by the runtime");
  if (ep_size_ != ls_.ep || model_.experts % ep_size_ != 0)
    throw RuntimeError("expert-parallel group g" + std::to_string(ep_group_) + " has " + std::to_string(ep_size_) +
                       " workers for ep = " + std::to_string(ls_.ep) + " and " + std::to_string(model_.experts) +
                       " experts");
}

kernels::ModelShape Executor::layer_shard(int layer) const {
  kernels::ModelShape m = model_.layer_shape(layer);
  m.layer.tp = ls_.tp;
  if (m.layer.moe()) m.layer.ep = ep_size_;
  return m;
}

int Executor::stage_moe_layers(int stage) const {
  const StageLayers L = stage_layers(model_, ls_.schedule.stages(), stage);
  int n = 0;
  for (int l = L.first; l < L.first + L.count; l++) n += model_.moe_layer(l) ? 1 : 0;
  return n;
}

int Executor::layer_ep_calls(const Op& op) const {
  switch (op.kind) {
    case OpKind::Forward:   // dispatch and combine
    case OpKind::Backward:  // their reverse
      return 2 * stage_moe_layers(op.stage);
    case OpKind::BackwardInput:  // refused with MoE layers (validate_program)
    case OpKind::BackwardWeight:
      return 0;
  }
  return 0;
}

void Executor::ep_all_to_all(kernels::EpExchange what, const void* send, const std::vector<std::size_t>& send_bytes,
                             void* recv, const std::vector<std::size_t>& recv_bytes) {
  const auto a = Clock::now();
  auto req = tr_.ialltoallv(send, send_bytes, recv, recv_bytes, ep_group_);
  wait(*req, "expert-parallel all-to-all");
  switch (what) {
    case kernels::EpExchange::kTokens:
      ep_calls_++;
      break;
    case kernels::EpExchange::kCounts:  // part of the dispatch it precedes
      break;
  }
  ep_s_ += seconds(Clock::now() - a);
}

// The routed experts' gradients, summed over the ExpertData group: members at the same place of their expert-parallel
// groups hold the same experts. Each member contributes a buffer of all E experts with only its own filled (x + 0 is
// exact), so a sum over the whole group is the expert-data-parallel sum of every expert; the bytes are ep times
// Megatron's.
void Executor::expert_allreduce(const LoweredOp& l, IterationStats& st) {
  timed(st.comm_s, [&] {
    std::vector<std::vector<unsigned char>> bufs;
    std::vector<std::pair<kernels::Params*, std::unique_ptr<Request>>> reqs;
    for (auto& [id, p] : modules_) {
      if (id.kind != kernels::ModuleKind::kExperts) continue;
      const ElemType t = elem_type(p->grad_dtype());
      const std::size_t n = p->size(), eb = elem_bytes(t);
      bufs.emplace_back(n * static_cast<std::size_t>(ep_size_) * eb, 0);
      std::memcpy(bufs.back().data() + n * static_cast<std::size_t>(ep_rank_) * eb, p->grad_data(), n * eb);
      reqs.emplace_back(p.get(), tr_.iallreduce_sum(bufs.back().data(), n * ep_size_, t, l.group));
    }
    for (std::size_t k = 0; k < reqs.size(); k++) {
      wait(*reqs[k].second, "expert-data-parallel all-reduce");
      kernels::Params& p = *reqs[k].first;
      const std::size_t n = p.size(), eb = elem_bytes(elem_type(p.grad_dtype()));
      std::memcpy(p.grad_data(), bufs[k].data() + n * static_cast<std::size_t>(ep_rank_) * eb, n * eb);
    }
  });
}

std::string Executor::op_name(std::size_t i) const { return lowered_op_name(ls_, worker_, i); }

std::string Executor::who() const {
  if (ls_.tp == 1) return "rank " + std::to_string(worker_);
  return "rank " + std::to_string(worker_ * ls_.tp + tp_rank_) + " (worker " + std::to_string(worker_) + ", TP rank " +
         std::to_string(tp_rank_) + ")";
}

void Executor::validate_program() const {
  const Schedule& s = ls_.schedule;
  for (std::size_t i = 0; i < prog_.size(); i++) {
    const LoweredOp& l = prog_[i];
    auto bad = [&](const std::string& why) { throw RuntimeError("op " + op_name(i) + ": " + why); };
    switch (l.kind) {
      case LOpKind::Compute:
      case LOpKind::Send:
      case LOpKind::Recv:
        if (l.op.microbatch < 0 || l.op.microbatch >= static_cast<int>(s.microbatches.size()))
          bad("micro-batch out of range");
        if (l.op.stage < 0 || l.op.stage >= s.stages()) bad("stage out of range");
        if (l.op.tok_begin < 0 || l.op.tok_end <= l.op.tok_begin || l.op.tok_end > s.seq_len)
          bad("token range out of range");
        if (l.kind == LOpKind::Compute && s.rank_of_stage(l.op.stage) != rank_)
          bad("stage does not live on this pipeline rank");
        if (l.kind == LOpKind::Compute && stage_moe_layers(l.op.stage) > 0) {
          if (l.op.kind == OpKind::BackwardInput || l.op.kind == OpKind::BackwardWeight)
            bad("a split backward (I / W) of MoE layers is not implemented by the runtime");
          if (ep_group_ < 0 || i + 1 == prog_.size() || prog_[i + 1].kind != LOpKind::AllToAll)
            bad("its stage has MoE layers but no expert-parallel all-to-all follows it (the lowering counted none)");
        }
        if (l.kind == LOpKind::Compute && ls_.tp > 1 && layer_tp_calls(l.op) > 0 &&
            (i + 1 == prog_.size() || prog_[i + 1].kind != LOpKind::AllReduce ||
             prog_[i + 1].tag != CollTag::TensorParallel))
          bad("tp = " + std::to_string(ls_.tp) +
              " but no tensor-parallel all-reduce follows it (the lowering's cost model counted no TP calls)");
        if (l.kind != LOpKind::Compute && (l.peer < 0 || l.peer >= ls_.workers())) bad("peer out of range");
        if (l.kind == LOpKind::Recv && scatter_gather_ &&
            (i + 1 == prog_.size() || prog_[i + 1].kind != LOpKind::AllGather ||
             !(key_of(prog_[i + 1].op) == key_of(l.op))))
          bad("scatter/gather: every receive must be followed by the all-gather of its message");
        break;
      case LOpKind::AllReduce:
        if (l.tag == CollTag::Embedding)
          bad("embedding all-reduce (tied embeddings): the runtime's model has an untied LM head, so first and last "
              "stage share no parameter; set model.tied_embeddings: false");
        if (l.tag != CollTag::DataParallel && l.tag != CollTag::TensorParallel && l.tag != CollTag::ExpertData)
          bad("only data-, expert-data- and tensor-parallel all-reduces are implemented");
        if (l.async) bad("overlapped (async) gradient reduction is not implemented by the runtime");
        if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls_.groups.size()) bad("unknown group");
        if (ls_.groups[l.group].tag != l.tag) bad("the group's tag differs from the op's");
        if (l.tag == CollTag::TensorParallel) {
          if (ls_.tp == 1) bad("tensor-parallel all-reduce in a program without tensor parallelism (tp = 1)");
          if (ls_.groups[l.group].workers != std::vector<std::int32_t>{worker_}) bad("not this worker's TP group");
          if (i == 0 || prog_[i - 1].kind != LOpKind::Compute || !(key_of(prog_[i - 1].op) == key_of(l.op)))
            bad("a tensor-parallel all-reduce must directly follow its compute op (the layer kernels make the calls)");
          // A larger count is the cost model's calls for parts the runtime replicates instead of sharding
          // (vocab-parallel embedding / LM head) or recomputation.
          const int calls = layer_tp_calls(l.op);
          if (l.count < calls)
            bad("count " + std::to_string(l.count) + " is less than the " + std::to_string(calls) +
                " all-reduces the layer kernels make (2 per layer)");
        }
        break;
      case LOpKind::AllGather:
        if (model_.moe()) bad("the distributed optimizer with MoE layers is not implemented by the runtime");
        if (l.tag == CollTag::ParamGather) {  // the distributed optimizer's parameter all-gather
          if (l.async) bad("an overlapped parameter all-gather is not implemented by the runtime");
          if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls_.groups.size() ||
              ls_.groups[l.group].tag != CollTag::ParamGather)
            bad("not a parameter-gather group");
          break;
        }
        if (l.tag != CollTag::ScatterGather) bad("only scatter/gather and parameter all-gathers are implemented");
        if (ls_.tp == 1) bad("scatter/gather all-gather in a program without tensor parallelism (tp = 1)");
        if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls_.groups.size() ||
            ls_.groups[l.group].tag != CollTag::ScatterGather ||
            ls_.groups[l.group].workers != std::vector<std::int32_t>{worker_})
          bad("not this worker's scatter/gather group");
        if (i == 0 || prog_[i - 1].kind != LOpKind::Recv || !(key_of(prog_[i - 1].op) == key_of(l.op)))
          bad("an all-gather must directly follow the receive of its message");
        break;
      case LOpKind::ReduceScatter:  // the distributed optimizer's gradient reduction
        if (model_.moe()) bad("the distributed optimizer with MoE layers is not implemented by the runtime");
        if (l.tag != CollTag::DataParallel || l.async) bad("only a data-parallel reduce-scatter after the flush runs");
        if (l.group < 0 || static_cast<std::size_t>(l.group) >= ls_.groups.size() ||
            ls_.groups[l.group].tag != CollTag::DataParallel)
          bad("not a data-parallel group");
        break;
      case LOpKind::AllToAll: {
        // A marker like the TP all-reduce: the MoE layer kernels of its compute op make the exchanges.
        if (l.tag != CollTag::ExpertParallel || ls_.groups[l.group].tag != CollTag::ExpertParallel)
          bad("only expert-parallel all-to-alls are implemented");
        if (l.async) bad("an overlapped all-to-all is not implemented by the runtime");
        if (i == 0 || prog_[i - 1].kind != LOpKind::Compute || !(key_of(prog_[i - 1].op) == key_of(l.op)))
          bad("an all-to-all must directly follow its compute op (the MoE layer kernels make the exchanges)");
        const int calls = layer_ep_calls(l.op);
        if (l.count < calls)
          bad("count " + std::to_string(l.count) + " is less than the " + std::to_string(calls) +
              " all-to-alls the MoE layer kernels make (2 per MoE layer)");
        break;
      }
      case LOpKind::Optimizer:
        break;
    }
  }
}

IterationStats Executor::run_iteration(int step, Clock::time_point t0) {
  if (step < 1) throw RuntimeError("run_iteration: step must be >= 1");
  IterationStats stats;
  stats.ops.assign(prog_.size(), OpTiming{});
  for (auto& [id, p] : modules_) p->zero_grads();
  be_.take_loss();  // drops what an iteration that failed half-way left
  // Device timing: per compute / optimizer op its two marks (-1: none), and the host time of the first event.
  std::vector<std::pair<int, int>> marks;
  std::vector<double> tp_of(prog_.size(), 0.0);  // per compute op: its kernels' TP all-reduce time (host)
  double device_t0 = 0;
  if (device_timer_) {
    be_.synchronize();  // an idle stream: the first event fires when it is recorded
    marks.assign(prog_.size(), {-1, -1});
    device_t0 = seconds(Clock::now() - t0);
    device_timer_->begin();
  }
  const auto first = Clock::now();
  for (std::size_t i = 0; i < prog_.size(); i++) {
    if (wd_) wd_->enter(static_cast<std::int64_t>(i));
    OpTiming& t = stats.ops[i];
    t.start = seconds(Clock::now() - t0);
    const bool device_timed =
        device_timer_ && (prog_[i].kind == LOpKind::Compute || prog_[i].kind == LOpKind::Optimizer);
    if (device_timed) marks[i].first = device_timer_->mark();
    try {
      const LoweredOp& l = prog_[i];
      switch (l.kind) {
        case LOpKind::Compute:
          tp_calls_ = 0;
          tp_s_ = 0;
          ep_calls_ = 0;
          ep_s_ = 0;
          switch (l.op.kind) {
            case OpKind::Forward:
              forward(l.op, stats);
              break;
            case OpKind::Backward:
              backward(l.op, stats);
              break;
            case OpKind::BackwardInput:
              backward_input(l.op, stats);
              break;
            case OpKind::BackwardWeight:
              backward_weight(l.op, stats);
              if (tp_calls_ != 0) throw RuntimeError("a backward for weights made tensor-parallel all-reduces");
              break;
          }
          // The kernels' TP all-reduces ran inside timed backend calls: they are communication.
          stats.kernel_s -= tp_s_ + ep_s_;
          stats.comm_s += tp_s_ + ep_s_;
          tp_of[i] = tp_s_;
          break;
        case LOpKind::Send:
          timed(stats.comm_s, [&] { send(l, i); });
          break;
        case LOpKind::Recv:
          recv(l, t, t0, stats);
          break;
        case LOpKind::AllReduce:
          if (l.tag == CollTag::TensorParallel) {
            // A marker: the calls happened inside the compute op just before it (validate_program).
            const int calls = layer_tp_calls(l.op);
            if (tp_calls_ != calls)
              throw RuntimeError("the layer kernels of " + op_text(l.op) + " made " + std::to_string(tp_calls_) +
                                 " tensor-parallel all-reduces, expected " + std::to_string(calls) + " (2 per layer)");
            OpTiming& c = stats.ops[i - 1];
            c.end = c.done = c.end - tp_s_;
          } else if (l.tag == CollTag::ExpertData) {
            expert_allreduce(l, stats);
          } else {
            allreduce(l, stats);
          }
          break;
        case LOpKind::AllGather:
          if (l.tag == CollTag::ParamGather)
            param_gather(l, stats);
          else
            allgather(l, stats);
          break;
        case LOpKind::ReduceScatter:
          reduce_scatter(l, stats);
          break;
        case LOpKind::AllToAll: {
          // A marker: the MoE layer kernels of the compute op just before it made the exchanges (validate_program).
          const int calls = layer_ep_calls(l.op);
          if (ep_calls_ != calls)
            throw RuntimeError("the MoE layer kernels of " + op_text(l.op) + " made " + std::to_string(ep_calls_) +
                               " expert-parallel all-to-alls, expected " + std::to_string(calls) +
                               " (2 per MoE layer)");
          OpTiming& c = stats.ops[i - 1];
          c.end = c.done = c.end - ep_s_;
          break;
        }
        case LOpKind::Optimizer:
          timed(stats.kernel_s, [&] {
            for (auto& [id, p] : modules_) {
              if (shard_of_ < 0) {
                be_.adam_step(*p, opt_.adam, step);
                continue;
              }
              const auto [begin, end] = shard_range(p->size(), shard_of_, shards_);
              be_.adam_step_shard(*p, opt_.adam, step, begin, end);
            }
          });
          shard_of_ = -1;
          break;
      }
    } catch (const std::exception& e) {
      throw RuntimeError(who() + ": op " + op_name(i) + " (position " + std::to_string(i) + "): " + e.what());
    }
    if (device_timed) marks[i].second = device_timer_->mark();
    t.end = seconds(Clock::now() - t0);
    if (prog_[i].kind == LOpKind::AllReduce && prog_[i].tag == CollTag::TensorParallel) {
      // Shown as its calls' total time right after the compute op's own (kernel) time.
      t.start = stats.ops[i - 1].end;
      t.end = t.start + tp_s_;
    }
    if (prog_[i].kind == LOpKind::AllToAll) {  // the same for the MoE layers' exchanges
      t.start = stats.ops[i - 1].end;
      t.end = t.start + ep_s_;
    }
    if (prog_[i].kind != LOpKind::Send) t.done = t.end;
    if (wd_) wd_->progress();
    if (!st_->sends.empty()) timed(stats.comm_s, [&] { poll_sends(t0, stats.ops); });
  }
  if (wd_) wd_->enter(Watchdog::kDrain);
  try {
    timed(stats.comm_s, [&] {
      for (auto& s : st_->sends) {
        wait(*s.req, "send");
        stats.ops[s.index].done = seconds(Clock::now() - t0);
      }
    });
  } catch (const std::exception& e) {
    throw RuntimeError(who() + ": waiting for outstanding sends: " + e.what());
  }
  st_->sends.clear();
  std::vector<double> device_s;
  if (device_timer_) {
    try {
      timed(stats.kernel_s, [&] { device_s = device_timer_->resolve(); });  // waits for the last kernel
    } catch (const std::exception& e) {
      throw RuntimeError(who() + ": reading the device timers at the end of the iteration: " + e.what());
    }
  }
  timed(stats.kernel_s, [&] { stats.loss = be_.take_loss(); });  // the last stage's slices (0 elsewhere)
  const auto last = Clock::now();
  stats.end_s = seconds(last - t0);
  // Host time outside backend and transport calls; on a device, kernel_s below becomes the kernels' device time.
  stats.overhead_s = seconds(last - first) - stats.kernel_s - stats.comm_s;
  if (device_timer_) {
    stats.kernel_s = 0;
    for (std::size_t i = 0; i < prog_.size(); i++) {
      const auto [a, b] = marks[i];
      if (a < 0 || b < 0) continue;
      if (static_cast<std::size_t>(std::max(a, b)) >= device_s.size())
        throw RuntimeError(who() + ": the device timer returned " + std::to_string(device_s.size()) + " marks");
      OpTiming& t = stats.ops[i];
      // The events' interval also holds the time the stream sat idle while the host waited for the kernels' TP
      // all-reduces (already counted as communication): take it out, and put the TP marker op right after.
      const double kernels = std::max(0.0, device_s[b] - device_s[a] - tp_of[i]);
      t.start = device_t0 + device_s[a];
      t.end = t.done = t.start + kernels;
      stats.kernel_s += kernels;
      if (tp_of[i] > 0 && i + 1 < prog_.size() && prog_[i + 1].kind == LOpKind::AllReduce &&
          prog_[i + 1].tag == CollTag::TensorParallel) {
        OpTiming& m = stats.ops[i + 1];
        m.start = t.end;
        m.end = m.done = t.end + tp_of[i];
      }
    }
  }

  // A checked program consumes everything it produces; leftovers mean a broken (unchecked) program.
  auto leftovers = [&](const char* what, std::size_t n, auto&& has) {
    if (n == 0) return;
    std::string names;
    int shown = 0;
    for (std::size_t s = 0; s < st_->index.size() && shown < 5; s++)
      if (has(s)) names += (shown++ ? ", " : "") + op_text(op_of(ls_.schedule, st_->index.key(s)));
    throw RuntimeError(who() + ": after the program, " + std::to_string(n) + " " + what + ": " + names);
  };
  leftovers("outputs were never sent or consumed", st_->live_outputs, [&](std::size_t s) { return !!st_->outputs[s]; });
  leftovers("received messages were never consumed", st_->live_inbox, [&](std::size_t s) { return !!st_->inbox[s]; });
  leftovers("forwards never had their backward", st_->live_records,
            [&](std::size_t s) { return !st_->records[s].empty(); });
  if (!st_->kv.empty())
    throw RuntimeError(who() + ": after the program, the K/V cache of micro-batch " +
                       std::to_string(st_->kv.begin()->first.first) + " was never released by its backward");
  return stats;
}

void Executor::wait(Request& r, const char* what) {
  while (!r.test()) {
    if (tr_.cancelled())
      throw RuntimeError(std::string("cancelled while waiting for a ") + what +
                         " (another worker failed or the watchdog fired)");
    // Ranks are often oversubscribed (CI: 4 ranks on 2 cores): give the core to whoever we are waiting for.
    std::this_thread::yield();
  }
}

int Executor::layer_tp_calls(const Op& op) const {
  const int per_layer = [&] {
    switch (op.kind) {
      case OpKind::Forward:
      case OpKind::Backward:
      case OpKind::BackwardInput:  // the two input-gradient sums
        return 2;
      case OpKind::BackwardWeight:  // weight gradients stay on their shard
        return 0;
    }
    return 0;
  }();
  return per_layer * stage_layers(model_, ls_.schedule.stages(), op.stage).count;
}

void Executor::tp_all_reduce(void* data, std::size_t count, kernels::DType dtype) {
  // On a device the backend hands over the partial sums with their GEMM (and the kernels before it) still queued,
  // and the all-reduce waits for them: let them finish first, or the time below would count them as TP time. The
  // host waits for the all-reduce anyway, so this costs one extra round trip per call.
  if (device_timer_) be_.synchronize();
  const auto a = Clock::now();
  auto req = tr_.tp_iallreduce_sum(data, count, elem_type(dtype));
  wait(*req, "tensor-parallel all-reduce");
  tp_calls_++;
  tp_s_ += seconds(Clock::now() - a);
}

void Executor::poll_sends(Clock::time_point t0, std::vector<OpTiming>& ops) {
  auto& sends = st_->sends;
  std::size_t keep = 0;
  for (std::size_t k = 0; k < sends.size(); k++) {
    if (sends[k].req->test()) {
      ops[sends[k].index].done = seconds(Clock::now() - t0);
    } else {
      if (keep != k) sends[keep] = std::move(sends[k]);
      keep++;
    }
  }
  sends.resize(keep);
}

std::shared_ptr<kernels::Tensor> Executor::take_input(const Op& consumer, const OpKey& producer) {
  const std::int64_t s = st_->slot(producer, "input");
  std::shared_ptr<kernels::Tensor> t;
  if (st_->ungathered[s])
    throw RuntimeError("input of " + op_text(consumer) + ": only this TP rank's chunk of " +
                       op_text(op_of(ls_.schedule, producer)) + " arrived; its all-gather has not run");
  if (st_->inbox[s]) {
    t = std::move(st_->inbox[s]);
    st_->live_inbox--;
  } else if (st_->outputs[s]) {
    t = std::move(st_->outputs[s]);
    st_->live_outputs--;
  } else {
    throw RuntimeError("input of " + op_text(consumer) + " is missing: " + op_text(op_of(ls_.schedule, producer)) +
                       " was neither received nor computed on this worker before it");
  }
  return t;
}

void Executor::forward(const Op& op, IterationStats& st) {
  const Schedule& s = ls_.schedule;
  const int stages = s.stages();
  const MicroBatch& mb = s.microbatches[op.microbatch];
  const kernels::Slice sl{mb.seq_count, op.tok_begin, op.tokens()};
  const int first_seq = replica_ * replica_seqs_ + mb.seq_begin;
  const int h = model_.shape.layer.hidden;
  const StageLayers L = stage_layers(model_, stages, op.stage);
  const std::int64_t slot = st_->slot(key_of(op), "forward");
  auto& recs = st_->records[slot];
  if (!recs.empty()) throw RuntimeError("forward already ran and its backward has not");

  std::shared_ptr<kernels::Tensor> x;
  if (op.stage == 0) {
    const auto tokens = data_.tokens(first_seq, mb.seq_count, op.tok_begin, op.tok_end);
    x = share(be_.tensor(sl.rows(), h));
    const auto& emb = *modules_.at({kernels::ModuleKind::kEmbedding, 0});
    timed(st.kernel_s, [&] { be_.embedding_forward(emb, tokens, sl, *x); });
  } else {
    x = take_input(op, OpKey{OpKind::Forward, op.stage - 1, op.microbatch, op.slice});
  }
  if (x->rows() != sl.rows() || x->cols() != h)
    throw RuntimeError("input has shape [" + std::to_string(x->rows()) + ", " + std::to_string(x->cols()) +
                       "], expected [" + std::to_string(sl.rows()) + ", " + std::to_string(h) + "]");
  auto y = share(be_.tensor(sl.rows(), h));
  for (int j = 0; j < L.count; j++) {
    const int layer = L.first + j;
    auto& kv = st_->kv[{op.microbatch, layer}];
    if (!kv) kv = be_.kv_cache(layer_shard(layer).layer, mb.seq_count, s.seq_len);
    auto rec = st_->record(be_);
    const auto& P = *modules_.at({kernels::ModuleKind::kLayer, layer});
    timed(st.kernel_s, [&] {
      if (model_.moe_layer(layer))
        be_.moe_layer_forward(P, *modules_.at({kernels::ModuleKind::kExperts, layer}), *x, sl, *kv, *rec, *y);
      else
        be_.layer_forward(P, *x, sl, *kv, *rec, *y);
    });
    recs.push_back(std::move(rec));
    std::swap(x, y);
  }
  if (op.stage == stages - 1) {
    const auto targets = data_.targets(first_seq, mb.seq_count, op.tok_begin, op.tok_end);
    auto rec = st_->record(be_);
    const auto& head = *modules_.at({kernels::ModuleKind::kHead, 0});
    timed(st.kernel_s, [&] {
      be_.head_forward(head, *x, targets, sl, data_.loss_norm(), opt_.loss_scale, *rec);
      be_.accumulate_loss(*rec);  // read once, at the end of the iteration (no stall per slice on a GPU)
    });
    recs.push_back(std::move(rec));
  } else {
    st_->outputs[slot] = std::move(x);
    st_->live_outputs++;
  }
  st_->live_records++;
}

std::vector<std::unique_ptr<kernels::Record>>& Executor::forward_records(const Op& op) {
  const Schedule& s = ls_.schedule;
  const OpKey fwd{OpKind::Forward, op.stage, op.microbatch, op.slice};
  auto& recs = st_->records[st_->slot(fwd, "backward")];
  const bool last = op.stage == s.stages() - 1;
  if (recs.size() != static_cast<std::size_t>(stage_layers(model_, s.stages(), op.stage).count + (last ? 1 : 0)))
    throw RuntimeError("backward before its forward " + op_text(op_of(s, fwd)) + " ran on this worker");
  return recs;
}

std::shared_ptr<kernels::Tensor> Executor::backward_through(const Op& op, Records& recs, bool split,
                                                            IterationStats& st) {
  const Schedule& s = ls_.schedule;
  const int stages = s.stages();
  const kernels::Slice sl{s.microbatches[op.microbatch].seq_count, op.tok_begin, op.tokens()};
  const int h = model_.shape.layer.hidden;
  const StageLayers L = stage_layers(model_, stages, op.stage);
  // Fused B: a record is done once its backward ran. Split I: the record keeps what W needs.
  auto done = [&](std::unique_ptr<kernels::Record>& r) {
    if (!split) st_->free_records.push_back(std::move(r));
  };
  std::shared_ptr<kernels::Tensor> dy;
  if (op.stage == stages - 1) {
    dy = share(be_.tensor(sl.rows(), h));
    auto& head = *modules_.at({kernels::ModuleKind::kHead, 0});
    timed(st.kernel_s, [&] {
      if (split)
        be_.head_backward_input(head, *recs.back(), *dy);
      else
        be_.head_backward(head, *recs.back(), *dy);
    });
    done(recs.back());
  } else {
    dy = take_input(op, st_->index.grad_producer(op.stage + 1, op.microbatch, op.slice));
  }
  if (dy->rows() != sl.rows() || dy->cols() != h)
    throw RuntimeError("output gradient has shape [" + std::to_string(dy->rows()) + ", " + std::to_string(dy->cols()) +
                       "], expected [" + std::to_string(sl.rows()) + ", " + std::to_string(h) + "]");
  auto dx = share(be_.tensor(sl.rows(), h));
  for (int j = L.count - 1; j >= 0; j--) {
    const int layer = L.first + j;
    auto it = st_->kv.find({op.microbatch, layer});
    if (it == st_->kv.end()) throw RuntimeError("no K/V cache for layer " + std::to_string(layer));
    auto& P = *modules_.at({kernels::ModuleKind::kLayer, layer});
    timed(st.kernel_s, [&] {
      if (model_.moe_layer(layer))  // never split (validate_program)
        be_.moe_layer_backward(P, *modules_.at({kernels::ModuleKind::kExperts, layer}), *recs[j], *it->second, *dy,
                               *dx);
      else if (split)
        be_.layer_backward_input(P, *recs[j], *it->second, *dy, *dx);
      else
        be_.layer_backward(P, *recs[j], *it->second, *dy, *dx);
    });
    done(recs[j]);
    std::swap(dx, dy);
  }
  if (!split) recs.clear();
  // The slice at token 0 is a micro-batch's last backward (slices run in reverse): its K/V caches are done (W does
  // not read them).
  if (op.tok_begin == 0)
    for (int j = 0; j < L.count; j++) st_->kv.erase({op.microbatch, L.first + j});
  return dy;
}

void Executor::embedding_backward(const Op& op, const kernels::Tensor& dx, IterationStats& st) {
  const MicroBatch& mb = ls_.schedule.microbatches[op.microbatch];
  const kernels::Slice sl{mb.seq_count, op.tok_begin, op.tokens()};
  const int first_seq = replica_ * replica_seqs_ + mb.seq_begin;
  const auto tokens = data_.tokens(first_seq, mb.seq_count, op.tok_begin, op.tok_end);
  auto& emb = *modules_.at({kernels::ModuleKind::kEmbedding, 0});
  timed(st.kernel_s, [&] { be_.embedding_backward(emb, tokens, sl, dx); });
}

void Executor::put_output(const Op& op, std::shared_ptr<kernels::Tensor> t) {
  st_->outputs[st_->slot(key_of(op), "output")] = std::move(t);
  st_->live_outputs++;
}

void Executor::backward(const Op& op, IterationStats& st) {
  auto& recs = forward_records(op);
  if (st_->input_done[st_->slot(OpKey{OpKind::Forward, op.stage, op.microbatch, op.slice}, "backward")])
    throw RuntimeError("a fused backward after the backward for inputs of the same forward");
  auto dx = backward_through(op, recs, false, st);
  st_->live_records--;
  if (op.stage == 0)
    embedding_backward(op, *dx, st);
  else
    put_output(op, std::move(dx));
}

void Executor::backward_input(const Op& op, IterationStats& st) {
  auto& recs = forward_records(op);
  const std::int64_t f = st_->slot(OpKey{OpKind::Forward, op.stage, op.microbatch, op.slice}, "backward");
  if (st_->input_done[f]) throw RuntimeError("the backward for inputs already ran; its W has not");
  auto dx = backward_through(op, recs, true, st);
  st_->input_done[f] = 1;
  if (op.stage == 0)
    st_->emb_grads[f] = std::move(dx);  // the embedding's backward is all weight gradient: W runs it
  else
    put_output(op, std::move(dx));  // the previous stage's gradient: sent (or consumed) after I, not W
}

void Executor::backward_weight(const Op& op, IterationStats& st) {
  const Schedule& s = ls_.schedule;
  auto& recs = forward_records(op);
  const std::int64_t f = st_->slot(OpKey{OpKind::Forward, op.stage, op.microbatch, op.slice}, "backward");
  if (!st_->input_done[f]) throw RuntimeError("backward for weights before its backward for inputs");
  const StageLayers L = stage_layers(model_, s.stages(), op.stage);
  if (op.stage == s.stages() - 1) {
    auto& head = *modules_.at({kernels::ModuleKind::kHead, 0});
    timed(st.kernel_s, [&] { be_.head_backward_weight(head, *recs.back()); });
  }
  for (int j = L.count - 1; j >= 0; j--) {
    auto& P = *modules_.at({kernels::ModuleKind::kLayer, L.first + j});
    timed(st.kernel_s, [&] { be_.layer_backward_weight(P, *recs[j]); });
  }
  if (op.stage == 0) {
    embedding_backward(op, *st_->emb_grads[f], st);
    st_->emb_grads[f].reset();
  }
  for (auto& r : recs) st_->free_records.push_back(std::move(r));  // W released their storage
  recs.clear();
  st_->input_done[f] = 0;
  st_->live_records--;
}

void Executor::send(const LoweredOp& l, std::size_t i) {
  const std::int64_t slot = st_->slot(key_of(l.op), "send");
  auto& out = st_->outputs[slot];
  if (!out) throw RuntimeError(op_text(l.op) + " has no output on this worker to send (not run yet, or already sent)");
  // Scatter/gather: this TP rank's chunk only (bytes divide: tp | heads | hidden).
  const std::size_t bytes = out->bytes() / static_cast<std::size_t>(scatter_gather_ ? ls_.tp : 1);
  const char* data = static_cast<const char*>(out->data()) + (scatter_gather_ ? bytes * tp_rank_ : 0);
  auto req = tr_.isend(data, bytes, l.peer, static_cast<int>(slot));
  st_->sends.push_back({std::move(req), std::move(out), i});
  st_->live_outputs--;
}

void Executor::recv(const LoweredOp& l, OpTiming& t_op, Clock::time_point t0, IterationStats& st) {
  const Schedule& s = ls_.schedule;
  const std::int64_t slot = st_->slot(key_of(l.op), "recv");
  if (st_->inbox[slot]) throw RuntimeError("the output of " + op_text(l.op) + " was already received");
  const int rows = s.microbatches[l.op.microbatch].seq_count * l.op.tokens();
  auto t = share(be_.tensor(rows, model_.shape.layer.hidden));
  const std::size_t bytes = t->bytes() / static_cast<std::size_t>(scatter_gather_ ? ls_.tp : 1);
  char* data = static_cast<char*>(t->data()) + (scatter_gather_ ? bytes * tp_rank_ : 0);
  // The receive starts at its posting: finding the slot and allocating the buffer are the runtime's overhead,
  // not the transfer the simulator models.
  t_op.start = seconds(Clock::now() - t0);
  timed(st.comm_s, [&] {
    auto req = tr_.irecv(data, bytes, l.peer, static_cast<int>(slot));
    wait(*req, "receive");
  });
  st_->inbox[slot] = std::move(t);
  st_->ungathered[slot] = scatter_gather_;
  st_->live_inbox++;
}

void Executor::allgather(const LoweredOp& l, IterationStats& st) {
  const std::int64_t slot = st_->slot(key_of(l.op), "all-gather");
  if (!st_->inbox[slot] || !st_->ungathered[slot])
    throw RuntimeError("no received chunk of " + op_text(l.op) + " to all-gather");
  kernels::Tensor& t = *st_->inbox[slot];
  timed(st.comm_s, [&] {
    auto req = tr_.tp_iallgather(t.data(), t.bytes() / static_cast<std::size_t>(ls_.tp));
    wait(*req, "scatter/gather all-gather");
  });
  st_->ungathered[slot] = 0;
}

// The distributed optimizer (ZeRO-1) on the host transports, which have no reduce-scatter: the gradients are
// summed whole (the same sums a reduce-scatter gives this shard), the optimizer then steps this replica's 1/dp
// slice of each module, and the parameter all-gather is a sum of the slices with everything else zeroed (x + 0
// is exact). The results are the all-reduce path's bit for bit; the bytes moved are not Megatron's.
void Executor::reduce_scatter(const LoweredOp& l, IterationStats& st) {
  allreduce(l, st);
  const auto& ws = ls_.groups[l.group].workers;
  shard_of_ = static_cast<int>(std::find(ws.begin(), ws.end(), worker_) - ws.begin());
  shards_ = static_cast<int>(ws.size());
}

std::pair<std::size_t, std::size_t> Executor::shard_range(std::size_t n, int shard, int shards) {
  const auto k = static_cast<std::size_t>(shard), d = static_cast<std::size_t>(shards);
  return {n * k / d, n * (k + 1) / d};
}

void Executor::param_gather(const LoweredOp& l, IterationStats& st) {
  const auto& ws = ls_.groups[l.group].workers;
  const int mine = static_cast<int>(std::find(ws.begin(), ws.end(), worker_) - ws.begin());
  const int n = static_cast<int>(ws.size());
  timed(st.comm_s, [&] {
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.reserve(modules_.size());
    for (auto& [id, p] : modules_) {
      void* data = p->param_data();
      if (data == nullptr) throw RuntimeError("the backend keeps no host parameters to all-gather");
      const std::size_t size = p->size();
      const auto [begin, end] = shard_range(size, mine, n);  // the slice this replica's optimizer stepped
      const ElemType t = elem_type(p->grad_dtype());
      const std::size_t eb = elem_bytes(t);
      auto* bytes = static_cast<unsigned char*>(data);
      std::memset(bytes, 0, begin * eb);
      std::memset(bytes + end * eb, 0, (size - end) * eb);
      reqs.push_back(tr_.iallreduce_sum(data, size, t, l.group));
    }
    for (auto& r : reqs) wait(*r, "parameter all-gather");
  });
}

void Executor::allreduce(const LoweredOp& l, IterationStats& st) {
  timed(st.comm_s, [&] {
    std::vector<std::unique_ptr<Request>> reqs;
    reqs.reserve(modules_.size());
    for (auto& [id, p] : modules_)
      if (id.kind != kernels::ModuleKind::kExperts)  // reduced over their expert-data-parallel group instead
        reqs.push_back(tr_.iallreduce_sum(p->grad_data(), p->size(), elem_type(p->grad_dtype()), l.group));
    for (auto& r : reqs) wait(*r, "data-parallel all-reduce");
  });
}

}  // namespace pipescope::runtime
