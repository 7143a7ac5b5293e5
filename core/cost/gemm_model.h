#pragma once
// GEMM time from hardware facts (docs/cost-model.md "GEMM"): the output is cut into tiles, one thread block
// each; the blocks run in waves over the SMs, and a partial last wave costs a whole wave (wave quantisation).
// A block computes its tile at the SM's share of the achievable dense peak, derated for small tiles (a tile of
// tm x tn re-reads (tm + tn) operand elements per k step for tm * tn multiply-adds: below 128 x 128 the operand
// traffic, not the tensor cores, limits it). After its main loop a block writes its tile (the epilogue); in a
// kernel of one tile per block (Volta's and Ampere's cuBLAS / CUTLASS 2.x kernels) the blocks of a wave finish
// their main loops together and their writes share the HBM bandwidth before the next wave starts, so each
// wave adds its output bytes over that bandwidth. Hopper's persistent, warp-specialised kernels write a tile
// while the next tile's main loop runs (epilogue_hidden). The library picks the tile with the least time, as
// cuBLAS's heuristics do. A GEMM that moves more bytes than the tensor cores can consume (small m or n) takes
// bytes / achieved HBM bandwidth instead.
//
//   tiles(tile) = ceil(M / tm) * ceil(N / tn) * batch
//   waves(tile) = ceil(tiles / (SMs * blocks_per_SM(tile)))
//   epilogue    = tiles * tm tn * out_elem_bytes / (hbm_bw * memory_efficiency), 0 if epilogue_hidden
//   compute     = waves * blocks_per_SM * 2 tm tn K / (peak * efficiency / SMs * tile_share(tile)) + epilogue + fixed
//   time        = max(min over tiles of compute, bytes / (hbm_bw * memory_efficiency))
// With sm_count 0 (a device described only by its rates, e.g. a calibration profile) there is no
// quantisation: compute = 2 M N K / (peak * efficiency) + fixed.

namespace pipescope {

struct GemmDevice {
  double peak_flops = 0;  // dense peak of the GEMM's dtype (tensor cores)
  double efficiency = 1;  // share of peak a large, evenly tiled GEMM reaches
  int sm_count = 0;       // 0 = no wave quantisation
  double fixed_s = 0;     // per-GEMM fixed cost on the GPU (prologue / epilogue), beyond the launch
  double hbm_bw_Bps = 0;
  double memory_efficiency = 1;
  double out_elem_bytes = 2;     // bytes per output element the epilogue writes
  bool epilogue_hidden = false;  // the tile writes overlap the next tiles' main loops (persistent kernels)
};

struct GemmTiming {
  double seconds = 0;
  int tile_m = 0, tile_n = 0;  // chosen tile (0 without quantisation)
  double waves = 0;            // full + partial waves of the chosen tile
  double epilogue_s = 0;       // the chosen tile's output writes (0 when hidden)
  bool memory_bound = false;
};

// One (batched) GEMM C[M x N] = A[M x K] B[K x N], `batch` independent ones in one kernel, moving `bytes`
// bytes. Throws std::invalid_argument on non-positive sizes or a device without rates.
GemmTiming gemm_timing(const GemmDevice& d, double M, double N, double K, double bytes, double batch = 1);

// Share of the large-tile rate a tm x tn tile reaches (1 at 128 x 128 and above).
double gemm_tile_share(int tile_m, int tile_n);

}  // namespace pipescope
