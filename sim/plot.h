#pragma once
// `pipescope plot`: charts (sim/chart_svg.h) from the files pipescope writes, told apart by their schema:
// - sweep (JSON or CSV): a metric against the swept key, one line per combination of the other keys; peak memory
//   the same way; where each run's time goes, as stacked bars;
// - search (JSON): throughput against peak memory (Pareto front, tie band, the scenario as written) and the
//   time breakdown of the best rows;
// - simulate --compare (JSON): each schedule's time breakdown and peak memory per pipeline rank;
// - simulate (JSON): each worker's time breakdown (replica 0) and each rank's memory by kind;
// - fidelity (JSON): simulated against measured seconds for every development set, y = x dashed.

#include <string>
#include <vector>

#include "sim/chart_svg.h"

namespace pipescope::sim {

struct PlotRequest {
  std::string x;                   // sweep: the swept key on the x axis ("" = the first one)
  std::string y = "tokens_per_s";  // sweep: the result column on the y axis
  int top = 12;                    // search: the best rows drawn as bars
};

struct Plot {
  std::string kind;  // "sweep", "search", "compare", "simulate", "fidelity"
  std::vector<Chart> charts;
};

// `text`: the file's contents; `path` names it in errors. Throws std::invalid_argument for a file that is not one of
// the above, a key or column it does not have, or one with no row to draw.
Plot plot_output(const std::string& text, const std::string& path, const PlotRequest& q);

}  // namespace pipescope::sim
