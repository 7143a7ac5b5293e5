#pragma once
// `pipescope fidelity`: the cost model against every development set at once (core/plan/dev_sets.h,
// docs/fidelity.md). Every row that runs is simulated in its own forked child (sim/run_scenario.h run_scenarios,
// up to `jobs` at once, results in row order), and each set reduced to the figures of core/plan/measured_runs.h
// (MAPE, signed mean error, worst row, pair ranking) in one table. The gate compares those figures with a baseline
// written by an earlier --json: a set whose MAPE is worse by more than the tolerance, whose pair ranking drops,
// which runs fewer rows or is missing is a regression.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace pipescope::sim {

struct FidelityOptions {
  std::vector<std::string> sets;  // --set: names of core/plan/dev_sets.h; empty: every set
  std::string json;               // --json FILE (docs/schemas/fidelity.schema.json)
  std::string baseline;           // --baseline FILE: a --json written earlier, the gate's reference
  bool rows = false;              // --rows: every row's measured and simulated time
  int jobs = 0;                   // simulations at once; 0: the machine's cores
  double mape_tolerance = 0.005;  // the gate: MAPE may grow by at most this (0.5 percentage points)
};

// One set's figures as the gate compares them.
struct SetFigures {
  std::string name;
  int rows_run = 0;  // rows simulated and compared
  double mape = 0;
  int pairs = 0, pairs_right = 0;
  double ranking() const { return pairs > 0 ? static_cast<double>(pairs_right) / pairs : 1.0; }
};

// The gate: one line per regression of `now` against `baseline` ("seq1f1b-a100: MAPE 14.2% -> 15.0% (+0.8 points,
// tolerance 0.5)"), empty when there is none. Only sets of `baseline` named in `selected` (empty: all) are compared;
// such a set absent from `now` is a regression, as is one that runs fewer rows. A set of `now` that the baseline
// lacks is new, not a regression.
std::vector<std::string> gate_regressions(const std::vector<SetFigures>& now, const std::vector<SetFigures>& baseline,
                                          const std::vector<std::string>& selected, double mape_tolerance);
// A --json file's figures. Throws std::invalid_argument naming the file and the key that is missing or wrong.
std::vector<SetFigures> parse_fidelity_baseline(const std::string& json_text, const std::string& source);
std::vector<SetFigures> read_fidelity_baseline(const std::string& path);

struct FidelityOutcome {
  std::exception_ptr failed;             // the first row that failed to simulate (null when every one ran)
  std::vector<std::string> regressions;  // the gate's findings (empty without --baseline)
};
// The table (and with o.rows every row) on `out`; bad options or data throw std::invalid_argument before anything
// runs.
FidelityOutcome run_fidelity(const FidelityOptions& o, std::FILE* out);

}  // namespace pipescope::sim
