// The order in which the wgmma kernels (moe_gemm_wgmma.cuh) walk the work items of a grouped GEMM
// (row tile of the routing tile map x output column tile). Plain C++ only: the CPU tests check that
// the walk visits every item once.
#pragma once

#include "common/host_device.cuh"

namespace moejit {

// Row tiles per column sweep (MoeGemmArgs::walk_rows, a tile config's GemmTile::walk_rows): the CTAs
// resident at once share a few A row tiles and the weight tiles of their experts in L2. The default,
// and the bound a tile config may set. A tuning knob, not a constant: ncu on an H200 (fourteenth
// session) read the prefill GEMMs' weights from DRAM 1.4-2x over (Mixtral-8x7B M = 1024 GEMM1:
// 3.77 GB for 1.88 GB of weights, DRAM-bound at 79%), so the CTAs that share an expert's column
// tile do not all find it in L2. One lead: with a group that divides the grid (132 SMs: 4, 12, 33)
// a CTA keeps its row of the group and its partners for the whole walk; with 8 they change every
// wave.
inline constexpr int kMoeWalkGroupRows = 8;
inline constexpr int kMoeMaxWalkGroupRows = 256;

struct MoeWalkItem {
  int tile;      // row tile of the tile map
  int col_tile;  // output column tile (first column = col_tile * BLOCK_N)
};

// Work item -> (row tile, column tile), item in [0, col_tiles * row_tiles): group_rows (>= 1) row
// tiles per sweep over all the columns, the rows inner.
// (Tried for GEMM2's fp32 top-k adds into an output beyond L2: column bands, so that each output
// line took all its adds while in L2. DeepSeek-V3 TP8 bf16 at M = 8192, H200: DRAM traffic fell
// from 48% to 30% of the bandwidth but GEMM2 ran only 3% faster: the adds were not DRAM-bound.
// The DTYPE rows of kRoleGemm2Rows16 replaced those adds instead.)
MOEJIT_HOST_DEVICE constexpr MoeWalkItem moe_walk_item(int item, int col_tiles, int row_tiles,
                                                      int group_rows = kMoeWalkGroupRows) {
  const int group_size = group_rows * col_tiles;
  const int first_tile = item / group_size * group_rows;
  const int left = row_tiles - first_tile;
  const int rows_in_group = left < group_rows ? left : group_rows;
  return {first_tile + item % group_size % rows_in_group, item % group_size / rows_in_group};
}

// The work queue (MoeGemmArgs::work_counter): the n-th item a CTA takes, `first` of `walkers`
// CTAs. Its first kMoeQueueStrideItems are the fixed stride's (first, first + walkers); after
// those, the counter's claims (0, 1, ... across the grid, `claim` this one) offset past every
// CTA's stride items. Every item is then taken once (tests/cpu/test_work_queue.cpp).
inline constexpr int kMoeQueueStrideItems = 2;
MOEJIT_HOST_DEVICE constexpr int moe_queue_item(int n, int first, int walkers, int claim) {
  return n < kMoeQueueStrideItems ? first + n * walkers : claim + kMoeQueueStrideItems * walkers;
}

}  // namespace moejit
