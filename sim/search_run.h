#pragma once
// `pipescope search`: the three stages put together (core/plan/search.h prunes and estimates, sim/run_scenario.h
// simulates the best K) and the outputs: a ranked table, JSON, CSV, an SVG of throughput against peak memory
// with the Pareto front, and the best configuration as a scenario YAML. Every output is identical for every
// number of jobs: stage 2's estimates are exact functions of the candidate, stage 3's rows come back in order,
// and the ranking breaks ties by label.

#include <cstddef>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/plan/search.h"
#include "sim/mpi_group.h"
#include "sim/run_scenario.h"

namespace pipescope::sim {

struct SearchOptions {
  SearchSpace space;
  int keep = 20;           // K: the best K estimates are simulated
  int jobs = 1;            // worker processes for stages 2 and 3
  bool progress = false;   // counts and time left on stderr
  bool as_written = true;  // also simulate the scenario as given (a row of its own unless it is in the top K)
  // Rows whose throughput is within this share of the best are equal within the model's error and ordered by peak
  // memory (docs/search.md "Ties"); negative: the device's default (search_tie_band), 0: no band.
  double tie_band = -1;
  // Under `mpirun -n N`: stages 2 and 3 split over the ranks (each then uses `jobs` local workers); every rank
  // gets the whole result. nullptr: this process alone.
  MpiGroup* group = nullptr;
};

struct SearchRow {
  std::string label;
  Scenario scenario;
  double estimate_s = 0;    // stage 2
  RunResult result;         // stage 3
  std::string error;        // the simulation failed (checker, deadlock)
  bool as_written = false;  // the scenario as given
  bool pareto = false;      // on the throughput / peak-memory Pareto front
  bool tied = false;        // within the tie band of the best throughput (the rows first, least memory first)
};

struct SearchResult {
  std::string scenario, source;
  int gpus = 0;
  double memory_limit_bytes = 0;
  std::size_t enumerated = 0, fits = 0;
  std::size_t ranked = 0;     // stage 2's ranking: the candidates whose DAG builds (estimated or bounded out)
  std::size_t estimated = 0;  // of them, estimated (the rest bounded out: core/plan/search_bound.h)
  std::map<std::string, std::size_t> rejected;  // stage 1 and 2 reasons -> count
  std::vector<SearchRow> rows;                  // simulated: best throughput first, then failures
  std::string as_written_note;                  // why the scenario as written is not a row (empty: it is)
  bool interrupted = false;                     // Ctrl-C: the rows are the best found until then
  double tie_band = 0;                          // the band applied (a share of the best throughput)
  std::string tie_band_basis;                   // where it comes from
};

// The default tie band for a device: the smallest error (MAPE) of the development sets that check its shipped
// description (sim/device_fidelity.h): two rows closer than that cannot be told apart by the model. 5% for a device
// no set checks. `basis` says which.
double search_tie_band(const DeviceSpec& d, std::string& basis);

// "TP 11.2%, bubble 3.1%": what an iteration spends beside forward and backward compute, largest first (parts of at
// least 1%, at most three; "compute" when none is).
std::string why_text(const RunResult& r);

// Ctrl-C during the search (outside MPI) stops it: nothing new starts, and the result holds what was simulated
// by then (`interrupted`). Throws std::invalid_argument when nothing passes stage 1 (an impossible cluster, a memory
// limit nothing fits), with the rejection reasons in the message.
SearchResult run_search(const Scenario& base, const SearchOptions& o);

void print_search_table(std::ostream& os, const SearchResult& r);
void write_search_json(std::ostream& os, const SearchResult& r);
void write_search_csv(std::ostream& os, const SearchResult& r);
// --svg: the charts `pipescope plot` draws of the JSON (throughput against memory, the best rows' breakdown);
// std::invalid_argument when no row ran.
void write_search_svg(std::ostream& os, const SearchResult& r);
// The scenario file `base_text` with the layout, schedule and slicing of `best` written in: `pipescope simulate`
// of it runs exactly that configuration.
std::string emit_scenario_yaml(const std::string& base_text, const Scenario& best);

}  // namespace pipescope::sim
