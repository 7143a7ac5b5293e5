#pragma once
// The one validator of a compute schedule (core/ir/schedule.h), whoever made it: a generator, a CSV file, a search
// candidate. Every check throws CheckError with the canonical texts of the ops involved; the lowered-schedule checker
// (core/lower/checks.h) runs it first and reports its own violations the same way.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/schedule.h"

namespace pipescope {

class CheckError : public std::runtime_error {
 public:
  CheckError(const std::string& what, std::vector<std::string> ops) : std::runtime_error(what), ops_(std::move(ops)) {}
  const std::vector<std::string>& ops() const { return ops_; }  // canonical texts of offending ops

 private:
  std::vector<std::string> ops_;
};

// Throws CheckError(what, ops): the checks' and the DAG builder's one way to report a violation.
[[noreturn]] void fail_check(const std::string& what, std::vector<std::string> ops);

// Throws CheckError "<prefix>: <stuck> ops can never run; cycle: a -> b -> ... -> a", the ops named by `name`.
[[noreturn]] void fail_cycle(const std::string& prefix, const std::vector<std::uint32_t>& cycle, std::size_t stuck,
                             const std::function<std::string(std::uint32_t)>& name);

// Checks of the compute-only schedule (ops once each, dependencies orderable per rank) and of its FSDP actions
// (core/ir/shard_actions.h); throws CheckError.
void check_schedule(const Schedule& s);

// Whether `op` is the op of `s`'s grid at its key (chunk, stage, micro-batch, slice and token range in place).
bool valid_op(const Schedule& s, const Op& op);
// The message for a B whose (stage, micro-batch, slice) the schedule also runs split into I and W.
std::string mixed_backward(const Schedule& s, const Op& op, int where, std::size_t i);

}  // namespace pipescope
