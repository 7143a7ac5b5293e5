#include "core/cost/gpu_variation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/model/placement.h"
#include "core/util/splitmix.h"

namespace pipescope {
namespace {

// A uniform deviate in (0, 1) from 53 random bits.
double unit(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) / 9007199254740992.0; }

}  // namespace

double gpu_speed(double sigma, std::uint64_t seed, int gpu) {
  if (sigma <= 0) return 1.0;
  const std::uint64_t a = splitmix64(seed * 0x100000001B3ull ^ static_cast<std::uint64_t>(gpu));
  const std::uint64_t b = splitmix64(a);
  const double kPi = 3.14159265358979323846;
  const double z = std::sqrt(-2.0 * std::log(unit(a))) * std::cos(2.0 * kPi * unit(b));  // Box-Muller
  return 1.0 + sigma * std::clamp(z, -4.0, 4.0);
}

std::vector<double> rank_slowdowns(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  std::vector<double> out(static_cast<std::size_t>(p.pp), 1.0);
  const double sigma = s.cluster.gpu_speed_sigma;
  if (sigma <= 0) return out;
  const Placement pl = make_placement(s.sim.placement, p.dp, p.pp, p.tp, s.cluster, p.cp);
  for (int d = 0; d < p.dp; d++)
    for (int r = 0; r < p.pp; r++)
      for (int lane = 0; lane < pl.width(); lane++) {
        const double speed = gpu_speed(sigma, s.cluster.variation_seed, pl.gpu_of(d * p.pp + r, lane));
        double& f = out[static_cast<std::size_t>(r)];
        f = std::max(f, 1.0 / speed);
      }
  return out;
}

std::string describe_variation(const Scenario& s) {
  if (s.cluster.gpu_speed_sigma <= 0) return "";
  const std::vector<double> f = rank_slowdowns(s);
  char b[160];
  std::snprintf(b, sizeof b, "sigma %.3g%% (seed %llu): compute x%.3f to x%.3f by pipeline rank (its slowest GPU)",
                s.cluster.gpu_speed_sigma * 100, static_cast<unsigned long long>(s.cluster.variation_seed),
                *std::min_element(f.begin(), f.end()), *std::max_element(f.begin(), f.end()));
  return b;
}

VariedCostModel::VariedCostModel(std::unique_ptr<CostModel> inner, std::vector<double> rank_slowdown)
    : inner_(std::move(inner)), slowdown_(std::move(rank_slowdown)) {}

double VariedCostModel::factor(int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= slowdown_.size())
    throw std::invalid_argument("GPU speed variation: pipeline rank " + std::to_string(rank) + " outside 0.." +
                                std::to_string(slowdown_.size() - 1));
  return slowdown_[static_cast<std::size_t>(rank)];
}

double VariedCostModel::compute_seconds(const Op& op, int microbatch_seqs) const {
  return inner_->compute_seconds(op, microbatch_seqs) * factor(op.rank);
}

double VariedCostModel::optimizer_seconds(int rank) const { return inner_->optimizer_seconds(rank) * factor(rank); }

double VariedCostModel::recompute_seconds(const Op& op, int microbatch_seqs) const {
  return inner_->recompute_seconds(op, microbatch_seqs) * factor(op.rank);
}

// A transfer does not run slower on a slower GPU: the wait is the inner model's.
double VariedCostModel::cp_wait_seconds(const Op& op, int microbatch_seqs) const {
  return inner_->cp_wait_seconds(op, microbatch_seqs);
}

}  // namespace pipescope
