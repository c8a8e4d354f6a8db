// What the moe_gemm kernels (moe_gemm_sm80.cuh, moe_gemm_swap_ab.cuh, the wgmma ones) read about a
// row tile of the routing tile map: its routed slots, the A row of each, the router weights; and
// which weight row feeds an output column (gate / up halves of gated activations), and its bias row.
#pragma once

#include "moe/activation_kinds.cuh"
#include "moe/moe_gemm_args.cuh"

namespace moejit {
namespace moe_tile {

// The row of A that padded row `row` (routed slot `slot`, < 0: padding) reads: GEMM1 the token's X
// row, GEMM2 the padded row itself; -1 for padding.
template <int ROLE>
__device__ inline int a_row(const MoeGemmArgs& args, int slot, int row) {
  return slot < 0 ? -1 : (ROLE == kRoleGemm1 ? slot / args.top_k : row);
}

// The router weight of a slot (0 for padding or without router weights).
__device__ inline float router_weight(const MoeGemmArgs& args, int slot) {
  return slot >= 0 && args.topk_weights != nullptr ? args.topk_weights[slot] : 0.f;
}

// Stages the BLOCK_M rows of the tile starting at padded row row0: slot (token * top_k + slot, -1 =
// padding), the A row to read (GEMM1: the token's X row; GEMM2: the padded row; -1 = padding) and
// the router weight. Ends with a barrier.
template <int ROLE, int BLOCK_M, int THREADS>
__device__ inline void stage_rows(const MoeGemmArgs& args, int row0, int* s_slot, int* s_arow, float* s_weight) {
  for (int i = threadIdx.x; i < BLOCK_M; i += THREADS) {
    const int slot = args.gather_index[row0 + i];
    s_slot[i] = slot;
    s_arow[i] = a_row<ROLE>(args, slot, row0 + i);
    s_weight[i] = router_weight(args, slot);
  }
  __syncthreads();
}

// The tile's bias row (its expert's), or null: none given, or a GEMM2 split after the first
// (split 0 adds it).
template <int ROLE>
__device__ inline const float* tile_bias(const MoeGemmArgs& args, int expert) {
  return args.bias && (ROLE == kRoleGemm1 || blockIdx.z == 0) ? args.bias + expert * args.bias_expert_stride : nullptr;
}

// The weight row feeding output column `col` (half 0 = gate / the only one, 1 = up), or -1 past
// the output columns. swigluoai interleaves gate and up rows; the others stack them.
template <int ACT>
__device__ inline int weight_row(const MoeGemmArgs& args, int col, int half) {
  if (col >= args.n_out) return -1;
  if constexpr (!activation_is_gated(ACT)) return col;
  return activation_is_interleaved(ACT) ? 2 * col + half : col + half * args.up_row_offset;
}

}  // namespace moe_tile
}  // namespace moejit
