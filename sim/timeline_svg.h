#pragma once
// Pipeline timelines as SVG, drawn the way the papers draw them: one row per pipeline stage (a worker: one
// data-parallel replica's pipeline rank, standing for its tensor-parallel group), forward and backward blocks
// coloured by micro-batch (hue; forward light, backward dark, weight gradient between), chunks >= 1 hatched,
// labels "micro-batch[.slice][c<chunk>]" where they fit (an overlapped pair framed as one block labelled "a|b"), idle
// time as the grey band showing through, an optional communication strip under each row, a legend by op kind,
// micro-batch hue and chunk pattern (wrapped to the width; a simulated run's adds where its time goes), and a time
// axis. The writer takes a neutral list of intervals so that simulated runs (sim::SimResult) and measured runs (the
// validation runtime's per-op timings) share it; several panels (e.g. simulated and measured) go into one picture, each
// with its own time axis. No SimGrid here. Output is deterministic (fixed formatting, no clocks): the same input gives
// the same bytes.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/lower/dag.h"
#include "core/lower/lowering.h"
#include "core/model/placement.h"
#include "sim/report.h"

namespace pipescope::sim {

enum class BlockKind : std::uint8_t { Forward, Backward, WeightGrad, P2P, Collective, Optimizer };

// One thing a row was busy with, [start_s, end_s).
struct TimelineInterval {
  int row = 0;  // index into TimelinePanel::rows
  double start_s = 0, end_s = 0;
  BlockKind kind = BlockKind::Forward;
  int microbatch = -1;  // colour of F/B/W blocks (-1: none)
  std::string label;    // drawn inside the block when it fits ("3", "3.1", "3c1")
  std::string name;     // tooltip, e.g. the op's canonical text
  int chunk = 0;        // model chunk (interleaved, V schedules): chunk >= 1 gets a hatch over its colour
  // An overlapped pair's two compute blocks (core/ir/schedule.h): framed together, one label "a|b" for both.
  Overlap pair = Overlap::None;
  bool input_grad = false;  // a Backward block that is the input gradient (I) of a split backward
  // An aggregate row's block (aggregate_rows): the share of the group's rows busy, drawn as the fill's opacity in
  // the op kind's neutral grey (microbatch -1).
  double share = 1;
};

struct TimelinePanel {
  std::string title;              // one line above the panel
  std::vector<std::string> rows;  // row labels, top to bottom
  std::vector<TimelineInterval> intervals;
  double end_s = 0;     // right end of the time axis; 0: the latest interval end
  double offset_s = 0;  // what the axis reads at 0 (a window's start: its intervals are shifted by it)
};

struct SvgOptions {
  double width_px = 1600;
  std::string title;          // first line of the picture
  bool comm = false;          // draw P2P / Collective intervals as a strip under each row (else they are skipped)
  bool shared_scale = false;  // all panels on one time scale (else each panel spans the full width)
  bool tooltips = true;       // a <title> per block (hover text in browsers)
  // Compact: no tooltips, block labels or block edges, for pictures of many rows; on by itself from
  // kCompactRows rows (96 stages and more) so that such files stay small and readable.
  bool compact = false;
  std::string breakdown;  // a last legend line: where the time goes (breakdown_line); "" = none
};
inline constexpr std::size_t kCompactRows = 96;

// Throws std::invalid_argument on an interval with a row outside the panel, a NaN time or end < start, or a
// width below 200 px.
void write_timeline_svg(std::ostream& os, const std::vector<TimelinePanel>& panels, const SvgOptions& opt);

// ---------------------------------------------------------------- panels from a lowered schedule
// Start and end of one op of a worker's program (LoweredSchedule::per_worker[w][i]); end <= start: not drawn.
struct OpSpan {
  double start = 0, end = -1;
};
using ProgramSpans = std::vector<std::vector<OpSpan>>;  // [worker][op index]

struct PanelOptions {
  bool all_replicas = false;  // rows for every data-parallel replica (default: replica 0, as the papers draw it)
  int first_rank = 0, last_rank = -1;            // the pipeline ranks drawn, inclusive (last -1: to the last)
  double window_start_s = 0, window_end_s = -1;  // the time drawn (end -1: to the end); the axis reads real time
  int row_group = 1;                             // > 1: one row per that many consecutive rows (aggregate_rows)
};

// Pictures of long pipelines: one row per `group` consecutive rows of `in` (the last group may be smaller), labelled
// with the first and last of them. At each moment the row shows how many of its rows are busy, as a share (the
// block's opacity), in the colour of the op kind most of them run (forward, backward, weight gradient, optimizer;
// ties to the earlier kind). Communication strips are left out. group 1 returns `in`; group < 1 throws
// std::invalid_argument.
TimelinePanel aggregate_rows(const TimelinePanel& in, int group);

// Rows = workers (pipeline rank r of replica d, labelled "stage r · gpu g" with g its first GPU, "d<d> " in
// front when every replica is shown), those of opt's ranks; blocks cut to opt's window (the axis then starts at its
// start), then grouped by opt.row_group (aggregate_rows). Throws std::invalid_argument for ranks outside the pipeline
// or an empty window. Compute ops become F/B
// blocks, the optimizer an "opt" block, sends and receives P2P and collectives Collective intervals on the row of each
// worker that takes part. Throws std::invalid_argument when `spans` does not have the schedule's shape.
TimelinePanel timeline_panel(const LoweredSchedule& ls, const Placement& pl, const ProgramSpans& spans,
                             const std::string& title, const PanelOptions& opt = {});

// Per-op spans of a simulated run: compute, optimizer and collective nodes from their DAG times, each send from
// its transfer node; receives are zero-time joins in the simulator and get no span.
ProgramSpans program_spans(const Dag& dag, const LoweredSchedule& ls, const SimResult& r);

// The panel title used for simulated runs: "<prefix>: <scenario> · <schedule> · p .. · m .. · iteration ..".
std::string timeline_title(const std::string& prefix, const std::string& scenario, const LoweredSchedule& ls,
                           double iteration_s);

}  // namespace pipescope::sim
