// Mutation tests of the static checker (core/lower/checks.h): every generated schedule of a small grid is lowered,
// broken in every way listed below, and each broken program must be rejected with a CheckError whose message
// names the offending ops. Mutations that keep the program valid must be accepted, and the dependency dry
// run (core/lower/dag.h) must still finish every node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/schedule.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/model/seq1f1b.h"
#include "tests/flat_placement.h"

namespace pipescope {
namespace {

constexpr int kSeqLen = 8;

Placement flat_placement(int dp, int p, int tp) { return test::flat_placement(dp, p, tp, 4); }

struct Case {
  std::string label;
  LoweredSchedule ls;
};

// The grid: every schedule kind on 2-3 ranks, 2-4 micro-batches, 1-2 slices; dp 1 and 2.
std::vector<Case> grid() {
  std::vector<Case> out;
  auto add = [&](const std::string& label, const Schedule& s, int v, int dp) {
    ConstantCosts cc;
    cc.p2p_bytes = 4096;  // non-zero: sizes must match
    cc.grad_bytes = 1e6;
    cc.v = v;
    cc.seq_len = kSeqLen;
    out.push_back({label + " dp" + std::to_string(dp), lower(s, dp, 1, ConstantCostModel(cc))});
  };
  for (int p : {2, 3})
    for (int m : {2, 4}) {
      const std::string pm = " p" + std::to_string(p) + " m" + std::to_string(m);
      const auto whole = uniform_microbatches(m, 1, kSeqLen, 1);
      const auto sliced = uniform_microbatches(m, 1, kSeqLen, 2);
      for (int dp : {1, 2}) {
        add("gpipe" + pm, make_gpipe(p, whole, kSeqLen), 1, dp);
        add("1f1b" + pm, make_1f1b(p, whole, kSeqLen), 1, dp);
        add("terapipe k2" + pm, make_gpipe(p, sliced, kSeqLen), 1, dp);
        add("seq1f1b k2" + pm, make_seq1f1b(p, sliced, kSeqLen), 1, dp);
        if (m % p == 0) {
          add("interleaved v2" + pm, make_interleaved(p, 2, whole, kSeqLen), 2, dp);
          if (p % 2 == 0) add("seq1f1b-i v2 k2" + pm, make_seq1f1b_interleaved(p, 2, sliced, kSeqLen), 2, dp);
        }
      }
    }
  return out;
}

struct Tally {
  int cases = 0, caught = 0;
};

// The mutant must be rejected by a CheckError that lists ops and names at least one of them in its message.
bool rejected_naming_ops(const LoweredSchedule& ls, const Placement& pl, std::string& why) {
  try {
    check(ls, pl);
    why = "accepted";
    return false;
  } catch (const CheckError& e) {
    const std::string what = e.what();
    for (const auto& o : e.ops())
      if (!o.empty() && what.find(o) != std::string::npos) return true;
    why = "message names none of its ops: " + what;
    return false;
  } catch (const std::exception& e) {
    why = std::string("not a CheckError: ") + e.what();
    return false;
  }
}

bool is_compute(const LoweredOp& o) { return o.kind == LOpKind::Compute; }

class Mutations : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    int cases = 0, caught = 0;
    for (const auto& [name, t] : tallies()) {
      std::printf("[ mutation ] %-32s %5d cases, %5d as required (%.1f%%)\n", name.c_str(), t.cases, t.caught,
                  t.cases ? 100.0 * t.caught / t.cases : 0.0);
      cases += t.cases;
      caught += t.caught;
    }
    std::printf(
        "[ mutation ] total: %d cases, %d as required (invalid: rejected naming ops; valid: accepted, dry run "
        "finished) (%.1f%%)\n",
        cases, caught, cases ? 100.0 * caught / cases : 0.0);
  }
  static std::map<std::string, Tally>& tallies() {
    static std::map<std::string, Tally> t;
    return t;
  }

  // Applies `mutate` to copies of every schedule of the grid; `mutate` returns the mutants of one program.
  void expect_all_rejected(const std::string& name,
                           const std::function<std::vector<LoweredSchedule>(const LoweredSchedule&)>& mutate) {
    Tally& t = tallies()[name];
    for (const Case& c : grid()) {
      const Placement pl = flat_placement(c.ls.dp, c.ls.p, c.ls.tp);
      ASSERT_NO_THROW(check(c.ls, pl)) << c.label;
      const auto mutants = mutate(c.ls);
      for (std::size_t i = 0; i < mutants.size(); i++) {
        std::string why;
        t.cases++;
        if (rejected_naming_ops(mutants[i], pl, why))
          t.caught++;
        else
          ADD_FAILURE() << name << " mutant " << i << " of " << c.label << ": " << why;
      }
    }
    EXPECT_GT(t.cases, 0) << name << ": the grid produced no mutants";
  }

  // Valid mutants: accepted, and the dry run completes every DAG node.
  void expect_all_accepted(const std::string& name,
                           const std::function<std::vector<LoweredSchedule>(const LoweredSchedule&)>& mutate) {
    Tally& t = tallies()[name];
    for (const Case& c : grid()) {
      const Placement pl = flat_placement(c.ls.dp, c.ls.p, c.ls.tp);
      for (const auto& m : mutate(c.ls)) {
        t.cases++;
        try {
          const CheckedSchedule cs = check(m, pl);
          if (dry_run(cs.dag()) == cs.dag().size())
            t.caught++;
          else
            ADD_FAILURE() << name << " in " << c.label << ": dry run did not finish";
        } catch (const std::exception& e) {
          ADD_FAILURE() << name << " in " << c.label << ": valid mutant rejected: " << e.what();
        }
      }
    }
    EXPECT_GT(t.cases, 0) << name << ": the grid produced no mutants";
  }
};

// Every position on every worker whose op satisfies `pred`.
std::vector<std::pair<int, std::size_t>> positions(const LoweredSchedule& ls,
                                                   const std::function<bool(const LoweredOp&)>& pred) {
  std::vector<std::pair<int, std::size_t>> out;
  for (int w = 0; w < ls.workers(); w++)
    for (std::size_t i = 0; i < ls.per_worker[w].size(); i++)
      if (pred(ls.per_worker[w][i])) out.emplace_back(w, i);
  return out;
}

std::vector<LoweredSchedule> erase_each(const LoweredSchedule& ls, LOpKind kind) {
  std::vector<LoweredSchedule> out;
  for (auto [w, i] : positions(ls, [&](const LoweredOp& o) { return o.kind == kind; })) {
    LoweredSchedule m = ls;
    m.per_worker[w].erase(m.per_worker[w].begin() + static_cast<std::ptrdiff_t>(i));
    out.push_back(std::move(m));
  }
  return out;
}

TEST_F(Mutations, DropSend) {
  expect_all_rejected("drop a send", [](const LoweredSchedule& ls) { return erase_each(ls, LOpKind::Send); });
}

TEST_F(Mutations, DropRecv) {
  expect_all_rejected("drop a recv", [](const LoweredSchedule& ls) { return erase_each(ls, LOpKind::Recv); });
}

TEST_F(Mutations, DropCompute) {
  expect_all_rejected("drop a compute op", [](const LoweredSchedule& ls) { return erase_each(ls, LOpKind::Compute); });
}

TEST_F(Mutations, DuplicateRecv) {
  expect_all_rejected("duplicate a recv", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    for (auto [w, i] : positions(ls, [](const LoweredOp& o) { return o.kind == LOpKind::Recv; })) {
      LoweredSchedule m = ls;
      auto& prog = m.per_worker[w];
      prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(i), prog[i]);
      out.push_back(std::move(m));
    }
    return out;
  });
}

TEST_F(Mutations, DuplicateSend) {
  expect_all_rejected("duplicate a send", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    for (auto [w, i] : positions(ls, [](const LoweredOp& o) { return o.kind == LOpKind::Send; })) {
      LoweredSchedule m = ls;
      auto& prog = m.per_worker[w];
      prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(i), prog[i]);
      out.push_back(std::move(m));
    }
    return out;
  });
}

// Two compute ops on one worker where the later one needs the earlier one (F before B of the same op, slice i
// before slice i+1, chunk c before chunk c+1 ...): exchanging their places breaks the dependency.
TEST_F(Mutations, SwapDependentOps) {
  expect_all_rejected("swap two dependent ops", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    const OpKeyIndex index(ls.schedule);
    for (int w = 0; w < ls.workers(); w++) {
      const auto& prog = ls.per_worker[w];
      std::map<OpKey, std::size_t> where;
      for (std::size_t i = 0; i < prog.size(); i++)
        if (is_compute(prog[i])) where[key_of(prog[i].op)] = i;
      for (std::size_t j = 0; j < prog.size(); j++) {
        if (!is_compute(prog[j])) continue;
        for (const OpKey& dep : op_dependencies(index, key_of(prog[j].op))) {
          auto it = where.find(dep);
          if (it == where.end()) continue;  // produced on another rank
          LoweredSchedule m = ls;
          std::swap(m.per_worker[w][it->second], m.per_worker[w][j]);
          out.push_back(std::move(m));
          break;  // one mutant per consumer
        }
      }
    }
    return out;
  });
}

TEST_F(Mutations, ChangeMessageSize) {
  expect_all_rejected("change a message size", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    for (auto kind : {LOpKind::Send, LOpKind::Recv})
      for (auto [w, i] : positions(ls, [&](const LoweredOp& o) { return o.kind == kind; })) {
        LoweredSchedule m = ls;
        m.per_worker[w][i].bytes *= 2;
        out.push_back(std::move(m));
      }
    return out;
  });
}

TEST_F(Mutations, RedirectSend) {
  expect_all_rejected("send to the wrong peer", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    for (auto [w, i] : positions(ls, [](const LoweredOp& o) { return o.kind == LOpKind::Send; })) {
      LoweredSchedule m = ls;
      auto& op = m.per_worker[w][i];
      op.peer = (op.peer + 1) % ls.workers() == w ? (op.peer + 2) % ls.workers() : (op.peer + 1) % ls.workers();
      if (op.peer == ls.per_worker[w][i].peer) continue;  // two workers: no other peer
      out.push_back(std::move(m));
    }
    return out;
  });
}

// Sliced schedules run the backward slices of a micro-batch last to first (B(i) needs dK/dV from B(i+1)).
// Putting them in slice order on one worker, keeping every other op in place, must be caught.
TEST_F(Mutations, ReorderBackwardSlices) {
  expect_all_rejected("reorder backward slices", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    for (int w = 0; w < ls.workers(); w++) {
      const auto& prog = ls.per_worker[w];
      std::map<std::pair<int, int>, std::vector<std::size_t>> groups;  // (stage, micro-batch) -> B positions
      for (std::size_t i = 0; i < prog.size(); i++)
        if (is_compute(prog[i]) && prog[i].op.kind == OpKind::Backward)
          groups[{prog[i].op.stage, prog[i].op.microbatch}].push_back(i);
      for (const auto& [key, pos] : groups) {
        if (pos.size() < 2) continue;
        LoweredSchedule m = ls;
        std::vector<LoweredOp> ops;
        for (std::size_t i : pos) ops.push_back(prog[i]);
        std::sort(ops.begin(), ops.end(),
                  [](const LoweredOp& a, const LoweredOp& b) { return a.op.slice < b.op.slice; });
        for (std::size_t n = 0; n < pos.size(); n++) m.per_worker[w][pos[n]] = ops[n];
        out.push_back(std::move(m));
      }
    }
    return out;
  });
}

// Valid: a Send posted one compute op later (the op after it does not wait for the peer, so no cycle).
TEST_F(Mutations, DelaySendStaysValid) {
  expect_all_accepted("delay a send (valid)", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    for (int w = 0; w < ls.workers(); w++)
      for (std::size_t i = 0; i + 1 < ls.per_worker[w].size(); i++)
        if (ls.per_worker[w][i].kind == LOpKind::Send && is_compute(ls.per_worker[w][i + 1])) {
          LoweredSchedule m = ls;
          std::swap(m.per_worker[w][i], m.per_worker[w][i + 1]);
          out.push_back(std::move(m));
        }
    return out;
  });
}

// Valid: a message resized on both ends still matches.
TEST_F(Mutations, ResizeBothEndsStaysValid) {
  expect_all_accepted("resize send and recv (valid)", [](const LoweredSchedule& ls) {
    std::vector<LoweredSchedule> out;
    LoweredSchedule m = ls;
    for (auto& prog : m.per_worker)
      for (auto& op : prog)
        if (op.kind == LOpKind::Send || op.kind == LOpKind::Recv) op.bytes *= 3;
    out.push_back(std::move(m));
    return out;
  });
}

}  // namespace
}  // namespace pipescope
