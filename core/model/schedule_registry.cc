// The schedule registry (core/model/schedule_registry.h): one row per schedule.
#include "core/model/schedule_registry.h"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>

#include "core/model/seq1f1b.h"

namespace pipescope {

// The YAML values and the CLI's names (declared beside ScheduleKind in core/model/config.h).
const char* to_string(ScheduleKind k) { return schedule_entry(k).name; }

const char* to_string(Framework f) {
  switch (f) {
    case Framework::Megatron:
      return "megatron";
    case Framework::TorchTitan:
      return "torchtitan";
    case Framework::DeepSpeed:
      return "deepspeed";
  }
  return "?";
}

const std::vector<Framework>& all_frameworks() {
  static const std::vector<Framework> fs = {Framework::Megatron, Framework::TorchTitan, Framework::DeepSpeed};
  return fs;
}

bool find_framework(const std::string& name, Framework& out) {
  for (Framework f : all_frameworks())
    if (name == to_string(f)) return out = f, true;
  return false;
}

namespace {

Schedule gen_gpipe(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) { return make_gpipe(p, mbs, seq_len); }
Schedule gen_1f1b(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) { return make_1f1b(p, mbs, seq_len); }
Schedule gen_interleaved(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len) {
  return make_interleaved(p, v, mbs, seq_len);
}
Schedule gen_seq1f1b(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) {
  return make_seq1f1b(p, mbs, seq_len);
}
// Eq. 6 / the authors' code grouping; make_seq1f1b_interleaved also offers the paper figure's.
Schedule gen_seq1f1b_i(int p, int v, const std::vector<MicroBatch>& mbs, int seq_len) {
  return make_seq1f1b_interleaved(p, v, mbs, seq_len, Seq1F1BGrouping::Code);
}
Schedule gen_zb_h1(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) { return make_zb_h1(p, mbs, seq_len); }
Schedule gen_zb_h2(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) { return make_zb_h2(p, mbs, seq_len); }
Schedule gen_zb_v(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) { return make_zb_v(p, mbs, seq_len); }
Schedule gen_dualpipev(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) {
  return make_dualpipev(p, mbs, seq_len);
}
Schedule gen_dualpipe(int p, int, const std::vector<MicroBatch>& mbs, int seq_len) {
  return make_dualpipe(p, mbs, seq_len);
}
Schedule gen_file(int, int, const std::vector<MicroBatch>&, int) {
  throw std::invalid_argument("schedule kind file is read from schedule.file (make_schedule), not generated");
}

ScheduleTraits traits(bool interleaved, SlicePlan slicing, bool split = false, bool m_multiple_of_p = false,
                      int fixed_v = 0, StageStyle style = StageStyle::Loop) {
  ScheduleTraits t;
  t.interleaved = interleaved;
  t.slicing = slicing;
  t.split_backward = split;
  t.m_multiple_of_p = m_multiple_of_p;
  t.fixed_v = fixed_v;
  t.style = style;
  return t;
}

ScheduleTraits in(ScheduleTraits t, std::initializer_list<Framework> fs) {
  for (Framework f : fs) t.frameworks |= framework_bit(f);
  return t;
}

ScheduleTraits combined(ScheduleTraits t) {
  t.combined_1f1b = true;
  return t;
}

ScheduleTraits dual_v() {
  ScheduleTraits t = traits(true, SlicePlan::Whole, true, false, 2, StageStyle::V);
  t.overlapped = true;
  t.min_m_per_rank = 2;
  return t;
}

ScheduleTraits dual_directions() {
  ScheduleTraits t = dual_v();
  t.style = StageStyle::Dual;
  return t;
}

ScheduleTraits file_traits() {
  ScheduleTraits t = traits(false, SlicePlan::TeraPipe);  // uniform or explicit slices, written as @slice
  t.from_file = true;
  return t;
}

}  // namespace

const std::vector<ScheduleEntry>& schedule_registry() {
  static const std::vector<ScheduleEntry> rows = {
      // Frameworks: Megatron-Core's forward_backward_pipelining_without_interleaving / _with_interleaving; PyTorch
      // pipelining's ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble, ScheduleDualPipeV
      // and its CSV schedules (TorchTitan's pipeline_parallel_schedule / _csv); DeepSpeed's TrainSchedule (1F1B).
      // TeraPipe, Seq1F1B and the zero-bubble H1 / H2 run in their papers' own code (forks of Megatron-LM).
      {ScheduleKind::GPipe, "gpipe", in(traits(false, SlicePlan::Whole), {Framework::TorchTitan}), gen_gpipe,
       "GPipe: all forwards, then all backwards"},
      {ScheduleKind::OneFOneB, "1f1b",
       in(combined(traits(false, SlicePlan::Whole)),
          {Framework::Megatron, Framework::TorchTitan, Framework::DeepSpeed}),
       gen_1f1b, "1F1B / PipeDream-Flush: warm-up of p-r-1 forwards, then one forward, one backward"},
      {ScheduleKind::Interleaved, "interleaved",
       in(combined(traits(true, SlicePlan::Whole, false, true)), {Framework::Megatron, Framework::TorchTitan}),
       gen_interleaved, "Megatron interleaved 1F1B: v model chunks per rank (m % pp == 0)"},
      {ScheduleKind::TeraPipe, "terapipe", traits(false, SlicePlan::TeraPipe), gen_gpipe,
       "TeraPipe: GPipe over token slices (uniform, explicit or planned: slicing dp)"},
      {ScheduleKind::Seq1F1B, "seq1f1b", traits(false, SlicePlan::Seq1F1B), gen_seq1f1b,
       "Seq1F1B: 1F1B over sequence segments (cwp, uniform or explicit)"},
      {ScheduleKind::Seq1F1BInterleaved, "seq1f1b-i", traits(true, SlicePlan::Seq1F1B, false, true), gen_seq1f1b_i,
       "Seq1F1B-I: interleaved Seq1F1B, v chunks per rank (m % pp == 0)"},
      {ScheduleKind::ZeroBubbleH1, "zb-h1", traits(false, SlicePlan::Whole, true), gen_zb_h1,
       "ZB-H1 (zero bubble): 1F1B with the backward split into I and W, W filling the cool-down; 1F1B's memory"},
      {ScheduleKind::ZeroBubbleH2, "zb-h2", traits(false, SlicePlan::Whole, true), gen_zb_h2,
       "ZB-H2 (zero bubble): longer warm-up (up to 2p-1 micro-batches in flight), W filling every bubble"},
      {ScheduleKind::ZeroBubbleV, "zb-v",
       in(traits(true, SlicePlan::Whole, true, false, 2, StageStyle::V), {Framework::TorchTitan}), gen_zb_v,
       "ZB-V (zero bubble): 2 chunks per rank in a V (rank r holds stages r and 2p-1-r), I and W split"},
      {ScheduleKind::DualPipeV, "dualpipev", in(dual_v(), {Framework::TorchTitan}), gen_dualpipev,
       "DualPipeV: ZB-V's V placement, the steady state as overlapped forward-backward pairs of two chunks (m >= 2pp)"},
      {ScheduleKind::DualPipe, "dualpipe", dual_directions(), gen_dualpipe,
       "DualPipe (DeepSeek-V3): two directions, each rank holds model stages r and pp-1-r (2x parameters), "
       "overlapped forward-backward pairs (pp even, m even, m >= 2pp)"},
      {ScheduleKind::File, "file", in(file_traits(), {Framework::TorchTitan}), gen_file,
       "a schedule file (schedule.file) in PyTorch pipelining's CSV format: one row per rank, e.g. 0F0,0F1,,0B0"},
  };
  return rows;
}

namespace {

// The row of each kind. A switch without default: a new ScheduleKind does not compile until it has a row.
std::size_t row_of(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::GPipe:
      return 0;
    case ScheduleKind::OneFOneB:
      return 1;
    case ScheduleKind::Interleaved:
      return 2;
    case ScheduleKind::TeraPipe:
      return 3;
    case ScheduleKind::Seq1F1B:
      return 4;
    case ScheduleKind::Seq1F1BInterleaved:
      return 5;
    case ScheduleKind::ZeroBubbleH1:
      return 6;
    case ScheduleKind::ZeroBubbleH2:
      return 7;
    case ScheduleKind::ZeroBubbleV:
      return 8;
    case ScheduleKind::DualPipeV:
      return 9;
    case ScheduleKind::DualPipe:
      return 10;
    case ScheduleKind::File:
      return 11;
  }
  return schedule_registry().size();
}

}  // namespace

const ScheduleEntry& schedule_entry(ScheduleKind k) {
  const auto& rows = schedule_registry();
  const std::size_t i = row_of(k);
  if (i >= rows.size() || rows[i].kind != k)
    throw std::logic_error("schedule kind " + std::to_string(static_cast<int>(k)) + " has no registry row");
  return rows[i];
}

const ScheduleEntry* find_schedule(const std::string& name) {
  for (const ScheduleEntry& e : schedule_registry())
    if (name == e.name) return &e;
  return nullptr;
}

std::vector<std::string> schedule_name_list() {
  std::vector<std::string> out;
  for (const ScheduleEntry& e : schedule_registry()) out.emplace_back(e.name);
  return out;
}

std::string schedule_names() {
  std::string out;
  for (const ScheduleEntry& e : schedule_registry()) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

std::string schedule_names_if(bool (*pred)(const ScheduleTraits&)) {
  std::vector<std::string> v;
  for (const ScheduleEntry& e : schedule_registry())
    if (pred(e.traits)) v.emplace_back(e.name);
  std::string out;
  for (std::size_t i = 0; i < v.size(); i++) out += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return out;
}

StageStyle scenario_stage_style(const Scenario& s) {
  const ScheduleTraits& t = schedule_entry(s.schedule.kind).traits;
  return t.from_file ? s.schedule.file_style : t.style;
}

namespace {

std::string traits_text(const ScheduleTraits& t) {
  std::string traits = t.fixed_v > 0 ? "v=" + std::to_string(t.fixed_v) : t.interleaved ? "v>1" : "v=1";
  if (t.sliced()) traits += ",sliced";
  if (t.split_backward) traits += ",split-backward";
  if (t.m_multiple_of_p) traits += ",m%pp==0";
  if (t.min_m_per_rank > 0) traits += ",m>=" + std::to_string(t.min_m_per_rank) + "pp";
  if (t.overlapped) traits += ",overlapped";
  if (t.combined_1f1b) traits += ",combined-1f1b";
  switch (t.style) {
    case StageStyle::Loop:
      break;
    case StageStyle::V:
      traits += ",v-shape";
      break;
    case StageStyle::Dual:
      traits += ",two-directions";
      break;
  }
  return traits;
}

}  // namespace

std::string frameworks_text(const ScheduleTraits& t) {
  std::string out;
  for (Framework f : all_frameworks())
    if (t.runs_in(f)) out += (out.empty() ? "" : ",") + std::string(to_string(f));
  return out.empty() ? "-" : out;
}

std::string schedule_list_text() {
  // Columns as wide as their longest entry.
  std::size_t name_w = 0, traits_w = 0, fw_w = 0;
  for (const ScheduleEntry& e : schedule_registry()) {
    name_w = std::max(name_w, std::string(e.name).size());
    traits_w = std::max(traits_w, traits_text(e.traits).size());
    fw_w = std::max(fw_w, frameworks_text(e.traits).size());
  }
  auto padded = [](std::string s, std::size_t width) { return s.append(width - s.size(), ' '); };
  std::string out;
  for (const ScheduleEntry& e : schedule_registry())
    out += padded(e.name, name_w + 1) + " " + padded(traits_text(e.traits), traits_w + 1) + " " +
           padded(frameworks_text(e.traits), fw_w + 1) + " " + e.help + "\n";
  return out;
}

}  // namespace pipescope
