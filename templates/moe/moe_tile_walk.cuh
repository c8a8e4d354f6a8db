// The order in which the wgmma kernels (moe_gemm_wgmma.cuh) walk the work items of a grouped GEMM
// (row tile of the routing tile map x output column tile), and the host's choice of that order.
// Plain C++ only: the host includes this header too (the launch picks the order; the CPU tests
// check that every walk visits every item once).
#pragma once

#include "common/host_device.cuh"

namespace moejit {

// Row tiles per column sweep of the grouped walk: the CTAs resident at once share a few A row
// tiles and the weight tiles of their experts in L2.
constexpr int kMoeWalkGroupRows = 8;

struct MoeWalkItem {
  int tile;      // row tile of the tile map
  int col_tile;  // output column tile (first column = col_tile * BLOCK_N)
};

// Work item -> (row tile, column tile), item in [0, col_tiles * row_tiles).
//  band_col_tiles <= 0: grouped walk, kMoeWalkGroupRows row tiles per sweep over all the columns.
//  band_col_tiles > 0: banded walk, column bands of band_col_tiles column tiles one after the
//  other; within a band, every row tile in turn, its column tiles next to each other. GEMM2's
//  top-k sum adds every routed row into its token's output row: the grouped walk visits a token's
//  top_k rows at far-apart times (their experts' tiles), so where the fp32 output outgrows L2 each
//  add is a read-modify-write of DRAM; a band's columns of every token stay in L2 until all their
//  adds are done, for the price of reading the A rows (the intermediate) once per band.
MOEJIT_HOST_DEVICE constexpr MoeWalkItem moe_walk_item(int item, int col_tiles, int row_tiles, int band_col_tiles) {
  if (band_col_tiles <= 0) {
    const int group_size = kMoeWalkGroupRows * col_tiles;
    const int first_tile = item / group_size * kMoeWalkGroupRows;
    const int left = row_tiles - first_tile;
    const int rows_in_group = left < kMoeWalkGroupRows ? left : kMoeWalkGroupRows;
    return {first_tile + item % group_size % rows_in_group, item % group_size / rows_in_group};
  }
  const int band_size = band_col_tiles * row_tiles;
  const int first_col = item / band_size * band_col_tiles;
  const int left = col_tiles - first_col;
  const int cols_in_band = left < band_col_tiles ? left : band_col_tiles;
  const int r = item % band_size;
  return {r / cols_in_band, first_col + r % cols_in_band};
}

// Column tiles per band for GEMM2's top-k sum into fp32 [tokens, n_out] (0: the grouped walk).
// sum_rows routed rows add into it; a_bytes is GEMM2's A (the intermediate: read once per band);
// l2_bytes the device's L2. A traffic model, DRAM bytes beyond one pass over each operand:
//  grouped: every add whose output line has left L2 reads and writes it back, 2 * 4 bytes per add,
//  for the share of the output beyond half of L2;
//  banded: a band's output takes at most a quarter of L2; the A rows are read again for every band
//  after the first unless they stay in L2 next to the band (within 60% of it).
// Banded wins where it saves a fifth of that traffic or more.
MOEJIT_HOST_DEVICE constexpr int moe_sum_band_col_tiles(long long tokens, long long sum_rows, int n_out, int block_n,
                                                        long long a_bytes, long long l2_bytes) {
  if (tokens <= 0 || n_out <= 0 || block_n <= 0 || l2_bytes <= 0) return 0;
  const long long out_bytes = tokens * n_out * 4;
  if (2 * out_bytes <= l2_bytes) return 0;
  const double grouped = 8.0 * sum_rows * n_out * (1.0 - 0.5 * l2_bytes / out_bytes);
  const int col_tiles = (n_out + block_n - 1) / block_n;
  long long band_tiles = l2_bytes / 4 / (tokens * 4) / block_n;
  if (band_tiles < 1) band_tiles = 1;
  if (band_tiles >= col_tiles) return 0;  // one band: the grouped walk's own footprint
  const long long bands = (col_tiles + band_tiles - 1) / band_tiles;
  const bool a_stays = 10 * (a_bytes + tokens * band_tiles * block_n * 4) <= 6 * l2_bytes;
  const double banded = a_stays ? 0.0 : 1.0 * (bands - 1) * a_bytes;
  return banded <= 0.8 * grouped ? static_cast<int>(band_tiles) : 0;
}

}  // namespace moejit
