// Schedules as CSV files (core/ir/schedule_csv.h): parse cells, place the stages on ranks, build the IR, then the
// file-level checks that can name cells (counts, duplicates, missing ops, sends and receives, deadlock).
#include "core/ir/schedule_csv.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/ir/schedule_check.h"
#include "core/ir/shard_actions.h"
#include "core/util/graph.h"
#include "core/util/input_file.h"

namespace pipescope {
namespace {

enum class ActionType : std::uint8_t { F, B, I, W, SendF, RecvF, SendB, RecvB, Unshard, Reshard, ReduceGrad };

struct Action {
  ActionType type = ActionType::F;
  int stage = 0, microbatch = 0, slice = 0;
  bool has_slice = false;
  int row = 0, column = 0;          // 0-based position in the file
  std::string text;                 // as written (trimmed)
  Overlap overlap = Overlap::None;  // a sub-action of an "(a;b)OVERLAP_F_B" cell
};

bool is_compute(ActionType t) {
  switch (t) {
    case ActionType::F:
    case ActionType::B:
    case ActionType::I:
    case ActionType::W:
      return true;
    case ActionType::SendF:
    case ActionType::RecvF:
    case ActionType::SendB:
    case ActionType::RecvB:
    case ActionType::Unshard:
    case ActionType::Reshard:
    case ActionType::ReduceGrad:
      return false;
  }
  return false;
}

// FSDP's actions (core/ir/shard_actions.h): a stage, no micro-batch.
std::optional<ShardKind> shard_kind(ActionType t) {
  switch (t) {
    case ActionType::Unshard:
      return ShardKind::Unshard;
    case ActionType::Reshard:
      return ShardKind::Reshard;
    case ActionType::ReduceGrad:
      return ShardKind::ReduceGrad;
    case ActionType::F:
    case ActionType::B:
    case ActionType::I:
    case ActionType::W:
    case ActionType::SendF:
    case ActionType::RecvF:
    case ActionType::SendB:
    case ActionType::RecvB:
      break;
  }
  return std::nullopt;
}

// DualPipe's routes in a V-placed file: micro-batches [0, m/2) only on stages [0, p), the others only on [p, 2p);
// p even (rank r's copies pair with rank p-1-r's).
bool dual_routes(const std::vector<std::vector<Action>>& rows, int p, int m) {
  if (m < 2 || m % 2 != 0 || p % 2 != 0) return false;
  for (const auto& row : rows)
    for (const Action& a : row)
      if (!shard_kind(a.type) && (2 * a.microbatch < m) != (a.stage < p)) return false;
  return true;
}

// "rank 1 (row 2, column 5)"
std::string cell(int row, int column) {
  return "rank " + std::to_string(row) + " (row " + std::to_string(row + 1) + ", column " + std::to_string(column + 1) +
         ")";
}
std::string cell(const Action& a) { return cell(a.row, a.column); }

class Reader {
 public:
  Reader(const std::string& source, const CsvScheduleShape& shape) : source_(source), shape_(shape) {}

  [[noreturn]] void input_error(const std::string& msg) const { throw std::invalid_argument(source_ + ": " + msg); }
  [[noreturn]] void reject(const std::string& msg, std::vector<std::string> ops) const {
    throw CheckError(source_ + ": " + msg, std::move(ops));
  }

  std::vector<std::vector<Action>> parse(const std::string& text) const;
  Schedule build(const std::vector<std::vector<Action>>& rows) const;
  void check_comms(const std::vector<std::vector<Action>>& rows, const std::vector<int>& rank_of) const;
  void check_deadlock(const Schedule& s, const OpKeyIndex& index,
                      const std::vector<std::vector<const Action*>>& cells) const;

 private:
  std::optional<Action> parse_cell(std::string s, int row, int column) const;
  std::vector<Action> parse_cells(const std::string& s, int row, int column) const;
  const std::string& source_;
  const CsvScheduleShape& shape_;
};

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

constexpr long long kMaxNumber = 1000000000;

// Digits at s[i..]: the value, i moved past them; nullopt when there are none. A value over kMaxNumber is -1.
std::optional<int> digits(const std::string& s, std::size_t& i) {
  const std::size_t b = i;
  long long v = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); i++)
    if (v <= kMaxNumber) v = v * 10 + (s[i] - '0');
  if (i == b) return std::nullopt;
  return v > kMaxNumber ? -1 : static_cast<int>(v);
}

std::optional<Action> Reader::parse_cell(std::string s, int row, int column) const {
  s = trim(s);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = trim(s.substr(1, s.size() - 2));
  if (s.empty()) return std::nullopt;
  Action a;
  a.row = row;
  a.column = column;
  a.text = s;
  auto bad = [&](const std::string& why) -> std::optional<Action> {
    input_error(
        cell(row, column) + ": \"" + s + "\": " + why +
        " (an action is <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>[@<slice>], e.g. 2F0, or FSDP's "
        "<stage><UNSHARD|RESHARD|REDUCE_GRAD>, e.g. 2UNSHARD)");
  };
  // A number of the action, or the reason it has none.
  auto number = [&](std::size_t& i, const std::string& what) -> int {
    const auto v = digits(s, i);
    if (!v) bad("no " + what);
    if (*v < 0) bad("the " + what + " is over " + std::to_string(kMaxNumber));
    return *v;
  };
  std::size_t i = 0;
  const int stage = number(i, "stage number");
  static const std::pair<const char*, ActionType> kTypes[] = {{"SEND_F", ActionType::SendF},
                                                              {"RECV_F", ActionType::RecvF},
                                                              {"SEND_B", ActionType::SendB},
                                                              {"RECV_B", ActionType::RecvB},
                                                              {"UNSHARD", ActionType::Unshard},
                                                              {"RESHARD", ActionType::Reshard},
                                                              {"REDUCE_GRAD", ActionType::ReduceGrad},
                                                              {"F", ActionType::F},
                                                              {"B", ActionType::B},
                                                              {"I", ActionType::I},
                                                              {"W", ActionType::W}};
  bool found = false;
  for (const auto& [name, type] : kTypes) {
    const std::string n = name;
    if (s.compare(i, n.size(), n) == 0 &&
        (i + n.size() >= s.size() || !std::isalpha(static_cast<unsigned char>(s[i + n.size()])))) {
      a.type = type;
      i += n.size();
      found = true;
      break;
    }
  }
  if (!found) {
    std::string word;
    for (std::size_t j = i; j < s.size() && (std::isalpha(static_cast<unsigned char>(s[j])) || s[j] == '_'); j++)
      word += s[j];
    if (word == "OVERLAP_F_B")
      return bad(word + " actions are not supported (pipescope models compute and point-to-point actions only)");
    return bad("unknown action type");
  }
  a.stage = stage;
  if (shard_kind(a.type)) {
    if (i != s.size()) return bad(std::string("FSDP's actions name a stage only (no micro-batch), e.g. 0UNSHARD"));
    return a;
  }
  const int mb = number(i, "micro-batch number");
  if (i < s.size() && s[i] == '@') {
    i++;
    a.slice = number(i, "slice number after @");
    a.has_slice = true;
  }
  if (i != s.size()) return bad("unexpected text after the micro-batch");
  a.stage = stage;
  a.microbatch = mb;
  return a;
}

constexpr const char* kOverlapSuffix = ")OVERLAP_F_B";

// A cell: no action (empty), one action, or PyTorch's overlapped pair "(a;b)OVERLAP_F_B" as two compute actions.
std::vector<Action> Reader::parse_cells(const std::string& text, int row, int column) const {
  std::string s = trim(text);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = trim(s.substr(1, s.size() - 2));
  const std::string suffix = kOverlapSuffix;
  if (s.empty() || s.front() != '(') {
    auto a = parse_cell(s, row, column);
    return a ? std::vector<Action>{*a} : std::vector<Action>{};
  }
  const std::size_t semi = s.find(';');
  if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0 ||
      semi == std::string::npos || s.find(';', semi + 1) != std::string::npos)
    input_error(cell(row, column) + ": \"" + s +
                "\": an overlapped pair is written (<action>;<action>)OVERLAP_F_B, e.g. (0F5;3B2)OVERLAP_F_B");
  std::vector<Action> pair;
  for (const std::string& part : {s.substr(1, semi - 1), s.substr(semi + 1, s.size() - suffix.size() - semi - 1)}) {
    auto a = parse_cell(part, row, column);
    if (!a || !is_compute(a->type))
      input_error(cell(row, column) + ": \"" + s +
                  "\": each half of an overlapped pair is one compute action (F, B, I)");
    pair.push_back(*a);
  }
  pair[0].overlap = Overlap::First;
  pair[1].overlap = Overlap::Second;
  return pair;
}

std::vector<std::vector<Action>> Reader::parse(const std::string& text) const {
  std::vector<std::vector<Action>> rows;
  // A byte-order mark (spreadsheets write one) is not part of the first cell.
  const bool bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0;
  std::istringstream in(bom ? text.substr(3) : text);
  std::string line;
  int row = 0;
  std::vector<int> blank;  // rows without any action
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<Action> actions;
    int column = 0;
    std::size_t b = 0;
    while (true) {
      const std::size_t e = line.find(',', b);
      for (Action& a : parse_cells(line.substr(b, e == std::string::npos ? std::string::npos : e - b), row, column))
        actions.push_back(std::move(a));
      column++;
      if (e == std::string::npos) break;
      b = e + 1;
    }
    rows.push_back(std::move(actions));
    row++;
  }
  while (!rows.empty() && rows.back().empty()) rows.pop_back();  // trailing blank lines
  if (static_cast<int>(rows.size()) != shape_.p)
    input_error("has " + std::to_string(rows.size()) + " rows (ranks), but the scenario has parallel.pp = " +
                std::to_string(shape_.p) + " (one row per pipeline rank)");
  return rows;
}

// The IR kind of a compute action; nullopt for sends and receives.
std::optional<OpKind> kind_of(ActionType t) {
  switch (t) {
    case ActionType::F:
      return OpKind::Forward;
    case ActionType::B:
      return OpKind::Backward;
    case ActionType::I:
      return OpKind::BackwardInput;
    case ActionType::W:
      return OpKind::BackwardWeight;
    case ActionType::SendF:
    case ActionType::RecvF:
    case ActionType::SendB:
    case ActionType::RecvB:
    case ActionType::Unshard:
    case ActionType::Reshard:
    case ActionType::ReduceGrad:
      break;
  }
  return std::nullopt;
}

std::string action_text(int stage, const std::string& type, int mb, int slice, bool sliced) {
  return std::to_string(stage) + type + std::to_string(mb) + (sliced ? "@" + std::to_string(slice) : "");
}

std::string action_text(const Schedule& s, const OpKey& k) {
  return action_text(k.stage, std::string(1, kind_letter(k.kind)), k.microbatch, k.slice, s.slices(k.microbatch) > 1);
}

Schedule Reader::build(const std::vector<std::vector<Action>>& rows) const {
  const int p = shape_.p, stages = shape_.p * shape_.v, m = static_cast<int>(shape_.microbatches.size());
  // Stage -> rank: every stage on exactly one rank, in the IR's layout.
  std::vector<int> rank_of(static_cast<std::size_t>(stages), -1);
  std::vector<const Action*> first_seen(static_cast<std::size_t>(stages), nullptr);
  for (int r = 0; r < p; r++)
    for (const Action& a : rows[r]) {
      if (a.stage >= stages)
        input_error(cell(a) + ": \"" + a.text + "\": stage " + std::to_string(a.stage) + " outside 0.." +
                    std::to_string(stages - 1) + " (pp * v = " + std::to_string(p) + " * " + std::to_string(shape_.v) +
                    " virtual stages)");
      if (!shard_kind(a.type) && a.microbatch >= m)
        input_error(cell(a) + ": \"" + a.text + "\": micro-batch " + std::to_string(a.microbatch) + " outside 0.." +
                    std::to_string(m - 1) + " (the scenario has " + std::to_string(m) + " micro-batches per replica)");
      const int k = shard_kind(a.type) ? 1 : static_cast<int>(shape_.microbatches[a.microbatch].slice_begin.size());
      if (a.slice >= k)
        input_error(cell(a) + ": \"" + a.text + "\": slice " + std::to_string(a.slice) + " outside 0.." +
                    std::to_string(k - 1) + " of micro-batch " + std::to_string(a.microbatch));
      if (k > 1 && !a.has_slice)
        input_error(cell(a) + ": \"" + a.text + "\": micro-batch " + std::to_string(a.microbatch) + " has " +
                    std::to_string(k) + " token slices; write the slice as @<slice>, e.g. \"" + a.text + "@0\"");
      // A receive names the receiving stage: it lives on the receiver's rank like the compute ops.
      auto& owner = rank_of[a.stage];
      if (owner < 0) {
        owner = r;
        first_seen[a.stage] = &a;
      } else if (owner != r) {
        reject("stage " + std::to_string(a.stage) + " is on two ranks: \"" + first_seen[a.stage]->text + "\" at " +
                   cell(*first_seen[a.stage]) + " and \"" + a.text + "\" at " + cell(a),
               {first_seen[a.stage]->text, a.text});
      }
    }
  for (int g = 0; g < stages; g++)
    if (rank_of[g] < 0) reject("stage " + std::to_string(g) + " has no action on any rank", {});
  // The IR's stage placements: loop (stage = chunk * pp + rank) or V (ZB-V's zigzag).
  std::optional<StageStyle> style;
  for (StageStyle st : {StageStyle::Loop, StageStyle::V}) {
    bool fits = true;
    for (int g = 0; g < stages && fits; g++) fits = rank_of[g] == stage_rank(st, p, g);
    if (fits) {
      style = st;
      break;
    }
  }
  if (!style) {
    int g = 0;
    while (rank_of[g] == stage_rank(StageStyle::Loop, p, g)) g++;
    reject("stage " + std::to_string(g) + " is on rank " + std::to_string(rank_of[g]) + " (first at " +
               cell(*first_seen[g]) + "): the stages follow neither the loop placement (stage g on rank g % pp) " +
               "nor the V placement (rank r holds stages r and 2 pp - 1 - r)",
           {first_seen[g]->text});
  }

  if (*style == StageStyle::V && dual_routes(rows, p, m)) style = StageStyle::Dual;
  Schedule s = schedule_skeleton("file", p, shape_.v, shape_.microbatches, shape_.seq_len);
  s.style = *style;
  std::map<OpKey, const Action*> at;  // op -> the cell that holds it
  std::map<std::pair<int, ActionType>, int> count;
  std::vector<std::vector<const Action*>> cells(static_cast<std::size_t>(p));  // per rank, aligned with per_rank
  for (int r = 0; r < p; r++)
    for (const Action& a : rows[r]) {
      if (const auto sk = shard_kind(a.type)) {
        s.shard_actions.resize(static_cast<std::size_t>(p));
        s.shard_actions[r].push_back(ShardAction{*sk, a.stage, static_cast<std::int32_t>(s.per_rank[r].size())});
        continue;
      }
      const auto kind = kind_of(a.type);
      if (!kind) continue;
      count[{a.stage, a.type}]++;
      Op op = make_op(s, *kind, r, s.chunk_of_stage(a.stage), a.microbatch, a.slice);
      op.overlap = a.overlap;
      const auto [it, fresh] = at.emplace(key_of(op), &a);
      if (!fresh) reject("\"" + a.text + "\" appears twice: " + cell(*it->second) + " and " + cell(a), {op_text(op)});
      s.per_rank[r].push_back(op);
      cells[r].push_back(&a);
    }
  // PyTorch's counts per stage first (their rules), then op by op.
  int all_units = 0;
  for (const MicroBatch& mb : shape_.microbatches) all_units += static_cast<int>(mb.slice_begin.size());
  const std::string what = all_units == m ? " micro-batches" : " (micro-batch, slice) units";
  for (int g = 0; g < stages; g++) {
    int units = 0;  // those whose route passes the stage (all of them but in DualPipe)
    for (int mb = 0; mb < m; mb++)
      if (g >= s.route_begin(mb) && g < s.route_end(mb)) units += s.slices(mb);
    const int f = count[{g, ActionType::F}], b = count[{g, ActionType::B}];
    const int i = count[{g, ActionType::I}], w = count[{g, ActionType::W}];
    if (f != units)
      reject("stage " + std::to_string(g) + " (rank " + std::to_string(rank_of[g]) + ") has " + std::to_string(f) +
                 " forwards, but the scenario has " + std::to_string(units) + what,
             {});
    if (i != w)
      reject("stage " + std::to_string(g) + " has " + std::to_string(i) + " I (backward for inputs) but " +
                 std::to_string(w) + " W (backward for weights) actions; each I needs its W",
             {});
    if (2 * b + i + w != 2 * units)
      reject("stage " + std::to_string(g) + " has B + (I + W) / 2 = " + std::to_string(b) + " + (" + std::to_string(i) +
                 " + " + std::to_string(w) + ") / 2 backwards, but the scenario has " + std::to_string(units) + what,
             {});
  }
  // Every op the grid needs, once (F everywhere; B, or I and W, for each backward): with the counts right, a
  // missing op pairs with one written under another key.
  const OpKeyIndex index(s);
  for (std::size_t slot = 0; slot < index.size(); slot++) {
    const OpKey k = index.key(slot);
    if (index.expected(k) == (at.count(k) > 0)) continue;
    const Op op = op_of(s, k);
    if (at.count(k))
      reject("\"" + at.at(k)->text + "\" at " + cell(*at.at(k)) + ": the backward of stage " + std::to_string(k.stage) +
                 ", micro-batch " + std::to_string(k.microbatch) + " is written both as B and as I + W",
             {op_text(op)});
    reject("no action " + action_text(s, k) + " on rank " + std::to_string(op.rank), {op_text(op)});
  }
  check_comms(rows, rank_of);
  check_deadlock(s, index, cells);
  // The validator's own rules, those of overlapped pairs among them (a pair of one kind, a pair that deadlocks only
  // as a pair): a file the reader accepts is a schedule the checker accepts.
  try {
    check_schedule(s);
  } catch (const CheckError& e) {
    reject(e.what(), e.ops());
  }
  return s;
}

// The compute_comms form (any SEND / RECV in the file): every hop between stages on different ranks has one
// SEND on the producer's rank after the producer and one RECV on the consumer's rank before the consumer
// (PyTorch's runtime posts both without blocking and waits for the RECV at the consumer); none between two
// stages of one rank.
void Reader::check_comms(const std::vector<std::vector<Action>>& rows, const std::vector<int>& rank_of) const {
  using Key = std::tuple<ActionType, int, int, int>;  // type, stage, micro-batch, slice
  std::map<Key, const Action*> where;
  bool any = false;
  for (const auto& row : rows)
    for (const Action& a : row) {
      if (shard_kind(a.type)) continue;  // FSDP's: no hop (check_shard_actions has their rules)
      const Key k{a.type, a.stage, a.microbatch, a.slice};
      if (!is_compute(a.type)) {
        any = true;
        if (where.count(k))
          reject("\"" + a.text + "\" appears twice: " + cell(*where.at(k)) + " and " + cell(a), {a.text});
      }
      // A split backward's input-gradient op (I) produces and consumes like B; keep the first compute cell.
      where.emplace(k, &a);
    }
  if (!any) return;
  const int stages = static_cast<int>(rank_of.size());
  auto find = [&](ActionType t, int stage, int mb, int slice) -> const Action* {
    auto it = where.find(Key{t, stage, mb, slice});
    return it == where.end() ? nullptr : it->second;
  };
  auto grad_op = [&](int stage, int mb, int slice) {  // the op that produces / consumes an input gradient
    const Action* b = find(ActionType::B, stage, mb, slice);
    return b ? b : find(ActionType::I, stage, mb, slice);
  };
  auto sliced = [&](int mb) { return shape_.microbatches[mb].slice_begin.size() > 1; };
  for (const auto& [k, a] : where) {
    const auto [type, stage, mb, slice] = k;
    bool send = false, fwd = false;
    switch (type) {
      case ActionType::F:
      case ActionType::B:
      case ActionType::I:
      case ActionType::W:
        continue;
      case ActionType::SendF:
        send = fwd = true;
        break;
      case ActionType::RecvF:
        fwd = true;
        break;
      case ActionType::SendB:
        send = true;
        break;
      case ActionType::RecvB:
        break;
      case ActionType::Unshard:
      case ActionType::Reshard:
      case ActionType::ReduceGrad:
        continue;
    }
    // The stage at the other end of the hop, and the compute op on this side.
    const int peer = send ? (fwd ? stage + 1 : stage - 1) : (fwd ? stage - 1 : stage + 1);
    const std::string peer_text =
        action_text(peer, send ? (fwd ? "RECV_F" : "RECV_B") : (fwd ? "SEND_F" : "SEND_B"), mb, slice, sliced(mb));
    if (peer < 0 || peer >= stages)
      reject("\"" + a->text + "\" at " + cell(*a) + ": there is no stage " + std::to_string(peer) + " to " +
                 (send ? "send to" : "receive from"),
             {a->text});
    if (rank_of[peer] == rank_of[stage])
      reject("\"" + a->text + "\" at " + cell(*a) + ": stages " + std::to_string(stage) + " and " +
                 std::to_string(peer) + " are both on rank " + std::to_string(rank_of[stage]) +
                 " (no send or receive between them)",
             {a->text});
    const ActionType peer_type =
        send ? (fwd ? ActionType::RecvF : ActionType::RecvB) : (fwd ? ActionType::SendF : ActionType::SendB);
    if (!find(peer_type, peer, mb, slice))
      reject(std::string(send ? "send" : "receive") + " \"" + a->text + "\" at " + cell(*a) + " has no matching " +
                 peer_text + " on rank " + std::to_string(rank_of[peer]),
             {a->text, peer_text});
    const Action* local = fwd ? find(ActionType::F, stage, mb, slice) : grad_op(stage, mb, slice);
    if (local && local->row == a->row && (send ? local->column > a->column : local->column < a->column))
      reject("\"" + a->text + "\" at " + cell(*a) +
                 (send ? " comes before its producer \"" : " comes after its consumer \"") + local->text + "\" at " +
                 cell(*local),
             {a->text, local->text});
  }
  // Every hop between ranks has its pair (checked from the sends; a receive without a send failed above).
  for (int g = 0; g + 1 < stages; g++) {
    if (rank_of[g] == rank_of[g + 1]) continue;
    for (const auto& [k, a] : where) {
      const auto [type, stage, mb, slice] = k;
      const bool f_hop = type == ActionType::F && stage == g;
      const bool b_hop = (type == ActionType::B || type == ActionType::I) && stage == g + 1;
      if (!f_hop && !b_hop) continue;
      const std::string need =
          f_hop ? action_text(g, "SEND_F", mb, slice, sliced(mb)) : action_text(g + 1, "SEND_B", mb, slice, sliced(mb));
      if (!find(f_hop ? ActionType::SendF : ActionType::SendB, f_hop ? g : g + 1, mb, slice))
        reject("the file has send and receive actions, but \"" + a->text + "\" at " + cell(*a) + " has no " + need,
               {a->text, need});
    }
  }
}

// Runs the ranks' orders with the ops' data dependencies: an op runs once everything it needs ran. If the
// ranks stop with ops left, follow "waits for" from a stuck rank until a rank repeats: that is the cycle.
void Reader::check_deadlock(const Schedule& s, const OpKeyIndex& index,
                            const std::vector<std::vector<const Action*>>& cells) const {
  // The ops as one graph (slot order): each after its predecessor on its rank and after the ops it needs. What the
  // topological walk cannot reach never runs; each rank stops at its first such op.
  const std::size_t n = index.size();
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  auto slot_of = [&](const OpKey& k) { return static_cast<std::uint32_t>(index.slot(k)); };
  for (int r = 0; r < s.p; r++)
    for (std::size_t i = 0; i < s.per_rank[r].size(); i++) {
      const std::uint32_t u = slot_of(key_of(s.per_rank[r][i]));
      if (i > 0) edges.emplace_back(slot_of(key_of(s.per_rank[r][i - 1])), u);
      for (const OpKey& d : op_dependencies(index, key_of(s.per_rank[r][i]))) edges.emplace_back(slot_of(d), u);
    }
  const CsrGraph g = csr_graph(n, edges);
  const std::vector<std::uint32_t> left = kahn_leftover(n, g.succ_begin, g.succ, g.preds);
  std::vector<char> done(n, 0);
  for (std::size_t u = 0; u < n; u++) done[u] = left[u] == 0;
  std::vector<std::size_t> next(static_cast<std::size_t>(s.p), 0);
  for (int r = 0; r < s.p; r++)
    while (next[r] < s.per_rank[r].size() && done[slot_of(key_of(s.per_rank[r][next[r]]))]) next[r]++;
  auto blocker = [&](int r) -> std::optional<OpKey> {  // what rank r's next op waits for, if anything
    for (const OpKey& d : op_dependencies(index, key_of(s.per_rank[r][next[r]])))
      if (!done[static_cast<std::size_t>(index.slot(d))]) return d;
    return std::nullopt;
  };
  int r = -1;
  for (int q = 0; q < s.p && r < 0; q++)
    if (next[q] < s.per_rank[q].size()) r = q;
  if (r < 0) return;
  std::vector<int> seen_at(static_cast<std::size_t>(s.p), -1);
  std::vector<int> chain;
  while (seen_at[r] < 0) {
    seen_at[r] = static_cast<int>(chain.size());
    chain.push_back(r);
    r = op_of(s, *blocker(r)).rank;
  }
  std::string msg = "deadlock: the ranks' orders form a cycle:";
  std::vector<std::string> ops;
  for (std::size_t i = static_cast<std::size_t>(seen_at[r]); i < chain.size(); i++) {
    const int q = chain[i];
    const Action* a = cells[q][next[q]];
    const Op waits = op_of(s, *blocker(q));
    std::size_t pos = 0;
    while (!(s.per_rank[waits.rank][pos] == waits)) pos++;
    const Action* b = cells[waits.rank][pos];
    msg += " \"" + a->text + "\" at " + cell(*a) + " waits for \"" + b->text + "\" at " + cell(*b) + ";";
    ops.push_back(a->text);
  }
  msg.pop_back();
  reject(msg, ops);
}

}  // namespace

Schedule schedule_from_csv(const std::string& text, const std::string& source, const CsvScheduleShape& shape) {
  Reader reader(source, shape);
  if (shape.p < 1 || shape.v < 1 || shape.microbatches.empty() || shape.seq_len < 1)
    reader.input_error("the scenario's pp, v, micro-batches and seq_len must all be positive");
  const auto rows = reader.parse(text);
  return reader.build(rows);
}

namespace {
// The checks of every input file (core/util/input_file.h: regular, <= 16 MiB, UTF-8), as this reader's error type.
std::string read_schedule_file(const std::string& path) {
  try {
    return read_input_file(path, "schedule file");
  } catch (const InputFileError& e) {
    throw std::invalid_argument(e.what());
  }
}
}  // namespace

Schedule load_schedule_csv(const std::string& path, const CsvScheduleShape& shape) {
  return schedule_from_csv(read_schedule_file(path), path, shape);
}

namespace {
// A V-placed file is DualPipe's when its micro-batches keep to the two directions' routes. A file the reader would
// refuse is left V here: loading it reports the error.
StageStyle v_or_dual(const std::string& text, const std::string& path, int p) {
  try {
    const auto rows = Reader(path, CsvScheduleShape{p, 2, {}, 0}).parse(text);
    int m = 0;
    for (const auto& row : rows)
      for (const Action& a : row) m = std::max(m, a.microbatch + 1);
    return dual_routes(rows, p, m) ? StageStyle::Dual : StageStyle::V;
  } catch (const std::exception&) {
    return StageStyle::V;
  }
}
}  // namespace

StageStyle csv_stage_style(const std::string& path, int p) {
  const std::string text = read_schedule_file(path);
  std::istringstream f(text);
  std::string line;
  for (int row = 0; std::getline(f, line); row++) {
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) {
      c = trim(c);
      std::size_t i = 0;
      const auto stage = digits(c, i);
      if (stage && *stage == p && i < c.size() && std::isalpha(static_cast<unsigned char>(c[i])))
        return row == p - 1 && p > 1 ? v_or_dual(text, path, p) : StageStyle::Loop;
    }
  }
  return StageStyle::Loop;
}

std::string schedule_to_csv(const Schedule& s) {
  std::string out;
  for (std::size_t r = 0; r < s.per_rank.size(); r++) {
    bool first = true;
    auto on_action = [&](const ShardAction& a) {
      out += (first ? "" : ",") + shard_action_text(a);
      first = false;
    };
    // (The validator keeps actions out of an overlapped pair.)
    walk_rank(s, r, on_action, [&](const Op& op) {
      switch (op.overlap) {
        case Overlap::None:
          out += (first ? "" : ",") + action_text(s, key_of(op));
          break;
        case Overlap::First:
          out += (first ? "(" : ",(") + action_text(s, key_of(op));
          break;
        case Overlap::Second:
          out += ";" + action_text(s, key_of(op)) + kOverlapSuffix;
          break;
      }
      first = false;
    });
    out += '\n';
  }
  return out;
}

}  // namespace pipescope
