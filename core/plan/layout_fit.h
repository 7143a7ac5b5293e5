#pragma once
// How far a model of the layout alone can rank a set of measured runs: the reference the fidelity report puts
// beside the simulation's ranking (docs/cost-model.md "Fidelity"). Per group of comparable rows (same model,
// GPUs and batch: MeasuredRun::group()) and per TP degree t, the 1F1B iteration is taken as
//
//   iteration = (m + p - 1) * (layers / p) * (x_t * b + y_t)
//
// (the pipeline's slots times a per-layer cost linear in the micro-batch size b), and x_t, y_t are fitted by
// least squares on the relative error to the rows' own measured times. Such a fit has more freedom than any device
// description (two values per group and TP degree, chosen knowing the answers), so the pairs it orders wrong are
// pairs no model smooth in the layout orders right: what is left is the rows' own scatter.

#include <string>
#include <vector>

#include "core/plan/measured_runs.h"

namespace pipescope {

struct LayoutFitCell {
  std::string group;  // MeasuredRun::group()
  int tp = 1;
  int rows = 0;
  double per_sequence_s = 0;     // x_t: per layer and sequence of the micro-batch
  double per_micro_batch_s = 0;  // y_t: per layer and micro-batch
};

struct LayoutFit {
  std::vector<double> predicted_s;   // one per row, in the rows' order
  std::vector<LayoutFitCell> cells;  // by group, then TP degree
};

// Fits every (group, TP degree) cell; a cell with one row, or with every row at one micro-batch size, takes the
// minimum-norm solution (it reproduces its rows as far as the form can). Throws std::invalid_argument on a row
// with a non-positive measured time, layers not divisible by pp, or a non-positive size.
LayoutFit fit_layout_only(const std::vector<MeasuredRun>& runs);

}  // namespace pipescope
