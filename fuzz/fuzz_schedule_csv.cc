// Schedule files (core/ir/schedule_csv.h schedule_from_csv), as `schedule: {kind: file}` reads them. Input: a first
// line "p v m k" (clamped to small sizes: ranks, chunks, micro-batches, slices), then the CSV. Any input must be
// rejected with std::invalid_argument or CheckError naming the file, or be accepted; an accepted schedule must
// write back to CSV that loads to the same ops, and lower to a schedule the static checker accepts (the file's
// checks must leave nothing for the checker to find; a file with FSDP's actions over two replicas), and replay through
// the memory walk and the caching allocator.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/ir/schedule_csv.h"
#include "core/lower/checks.h"
#include "core/lower/cost_model.h"
#include "core/lower/lowering.h"
#include "core/memory/memory_model.h"
#include "core/model/placement.h"
#include "core/model/presets.h"
#include "core/model/scenario.h"

using namespace pipescope;

namespace {
[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_schedule_csv: %s\n", what.c_str());
  std::abort();
}
void located(const std::string& msg) {
  if (msg.rfind("fuzz.csv: ", 0) != 0) die("unlocated error: " + msg);
}
// The memory walk and the caching-allocator replay take any accepted schedule (with and without flash attention,
// whose K/V caches differ), and the allocator never holds less than the live bytes unless it ran out (then its figure
// is the one at the failure, within the device).
void replay_memory(const Schedule& sched, bool flash) {
  Scenario sc;
  sc.name = "fuzz";
  sc.source = "fuzz.csv";
  sc.model = *model_preset("gpt3-1b");
  sc.model.seq_len = sched.seq_len;
  sc.model.layers = 2 * sched.p * sched.v;
  sc.cluster = *cluster_preset("dgx-a100");
  sc.parallel.pp = sched.p;
  sc.parallel.v = sched.v;
  sc.training.flash_attention = flash;
  // A file with FSDP's actions runs with FSDP over two replicas (its gathered copies walked too).
  sc.training.fsdp = !sched.shard_actions.empty();
  sc.parallel.dp = sc.training.fsdp ? 2 : 1;
  const MemoryReport rep = memory_report(sc, sched, AllocatorReplay::On);
  for (const RankMemory& r : rep.ranks)
    if (r.allocator_failed ? r.reserved_peak_bytes > rep.device_bytes
                           : r.reserved_peak_bytes < r.peak_bytes * (1 - 1e-12))
      die("reserved bytes out of bounds:\n" + schedule_to_csv(sched));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto nl = text.find('\n');
  std::istringstream head(text.substr(0, nl));
  int p = 1, v = 1, m = 1, k = 1;
  head >> p >> v >> m >> k;
  auto clamp = [](int x, int hi) { return x < 1 ? 1 : x > hi ? hi : x; };
  p = clamp(p, 4), v = clamp(v, 2), m = clamp(m, 4), k = clamp(k, 3);
  const int seq_len = 6;
  const CsvScheduleShape shape{p, v, uniform_microbatches(m, 1, seq_len, k), seq_len};
  Schedule s;
  try {
    s = schedule_from_csv(nl == std::string::npos ? "" : text.substr(nl + 1), "fuzz.csv", shape);
  } catch (const CheckError& e) {
    located(e.what());
    return 0;
  } catch (const std::invalid_argument& e) {
    located(e.what());
    return 0;
  }
  const std::string csv = schedule_to_csv(s);
  const Schedule back = schedule_from_csv(csv, "fuzz.csv", shape);
  if (back.per_rank != s.per_rank || back.shard_actions != s.shard_actions || schedule_to_csv(back) != csv)
    die("round trip differs:\n" + csv);
  ConstantCostModel cost(ConstantCosts{});
  // FSDP's actions lower to their gathers and reductions over two replicas.
  const int dp = s.shard_actions.empty() ? 1 : 2;
  GradSyncOptions o;
  o.distributed_optimizer = dp > 1;
  const LoweredSchedule ls = lower(s, dp, 1, cost, false, o);
  ClusterSpec c = *cluster_preset("dgx-a100");
  c.nodes = 1;
  const Placement pl = make_placement("megatron", dp, p, 1, c);
  try {
    check(ls, pl);
  } catch (const CheckError& e) {
    die(std::string("accepted file rejected by the checker: ") + e.what() + "\n" + csv);
  }
  replay_memory(s, size % 2 == 1);
  return 0;
}
