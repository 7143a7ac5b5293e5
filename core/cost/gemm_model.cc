#include "core/cost/gemm_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace pipescope {
namespace {

// The tile shapes cuBLAS / CUTLASS use for half-precision tensor-core GEMMs, with how many blocks of each fit
// on one SM at once (shared memory and registers): big tiles one, 128 x 64 two, 64 x 64 four.
struct Tile {
  int m, n, blocks_per_sm;
};
constexpr Tile kTiles[] = {{256, 128, 1}, {128, 256, 1}, {128, 128, 1}, {128, 64, 2}, {64, 128, 2}, {64, 64, 4}};

}  // namespace

double gemm_tile_share(int tile_m, int tile_n) {
  // Operand reuse tm tn / (tm + tn), relative to the 128 x 128 tile's 64, capped at 1.
  const double reuse = static_cast<double>(tile_m) * tile_n / (tile_m + tile_n);
  return std::min(1.0, reuse / 64.0);
}

GemmTiming gemm_timing(const GemmDevice& d, double M, double N, double K, double bytes, double batch) {
  if (!(M > 0 && N > 0 && K > 0 && batch > 0 && bytes >= 0))
    throw std::invalid_argument("gemm model: sizes must be positive (M " + std::to_string(M) + ", N " +
                                std::to_string(N) + ", K " + std::to_string(K) + ")");
  if (!(d.peak_flops > 0 && d.efficiency > 0 && d.hbm_bw_Bps > 0 && d.memory_efficiency > 0))
    throw std::invalid_argument("gemm model: device needs a peak, an efficiency and an HBM bandwidth");
  if (!(d.out_elem_bytes > 0)) throw std::invalid_argument("gemm model: output element bytes must be positive");
  const double rate = d.peak_flops * d.efficiency;
  GemmTiming best;
  if (d.sm_count <= 0) {
    best.seconds = 2 * M * N * K * batch / rate + d.fixed_s;
  } else {
    best.seconds = std::numeric_limits<double>::infinity();
    const double sm_rate = rate / d.sm_count;
    for (const Tile& t : kTiles) {
      const double tiles = std::ceil(M / t.m) * std::ceil(N / t.n) * batch;
      const double waves = std::ceil(tiles / (static_cast<double>(d.sm_count) * t.blocks_per_sm));
      const double epilogue =
          d.epilogue_hidden ? 0.0 : tiles * t.m * t.n * d.out_elem_bytes / (d.hbm_bw_Bps * d.memory_efficiency);
      const double sec =
          waves * t.blocks_per_sm * 2.0 * t.m * t.n * K / (sm_rate * gemm_tile_share(t.m, t.n)) + epilogue + d.fixed_s;
      if (sec < best.seconds) {
        best.seconds = sec;
        best.epilogue_s = epilogue;
        best.tile_m = t.m;
        best.tile_n = t.n;
        best.waves = tiles / (static_cast<double>(d.sm_count) * t.blocks_per_sm);
      }
    }
  }
  const double mem = bytes / (d.hbm_bw_Bps * d.memory_efficiency);
  if (mem > best.seconds) {
    best.seconds = mem;
    best.memory_bound = true;
  }
  return best;
}

}  // namespace pipescope
