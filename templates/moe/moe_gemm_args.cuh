// Arguments and constants of the moe_gemm kernels (grouped GEMM over the routing tile map). Plain
// C++ only: the host includes this header too, so both sides agree on the layout by construction.
#pragma once

#include "common/host_device.cuh"

namespace moejit {

// What a moe_gemm instance computes (template parameter ROLE).
enum MoeGemmRole : int {
  // A rows gathered from X by token (gather index / TOPK); epilogue: x router weight (when on
  // input), + bias, activation -> DTYPE [padded rows, ldc] (the intermediate).
  kRoleGemm1 = 0,
  // A = the intermediate, by padded row; epilogue: + bias, x router weight (when on output) ->
  // fp32 rows [num_tokens * TOPK, ldc] at row token * TOPK + slot (the deterministic top-k sum and
  // the unfused mode read these).
  kRoleGemm2Rows = 1,
  // Same epilogue, atomically added into fp32 [num_tokens, ldc] at row token (fast mode).
  kRoleGemm2Atomic = 2,
};

struct MoeGemmArgs {
  const void* a;                  // GEMM1: X [num_tokens, lda]; GEMM2: intermediate [padded rows, lda]
  long long lda;                  // elements
  const void* b;                  // weights [E_local, rows, ldb] row-major, reduction dim contiguous
  long long b_expert_stride;      // elements between experts
  long long ldb;                  // elements between weight rows
  const float* bias;              // [E_local, bias_expert_stride] fp32 or null (indexed by weight row)
  long long bias_expert_stride;
  void* c;                        // output (see MoeGemmRole)
  long long ldc;                  // elements
  int inner;                      // reduction length: K for GEMM1, N for GEMM2; a multiple of 8
  int n_out;                      // output columns; a multiple of 8
  int up_row_offset;              // gated, not interleaved: weight row of up column j = j + up_row_offset
  int top_k;
  const int* gather_index;        // [padded rows] token * top_k + slot, -1 on padding rows
  const int* tile_expert;         // [tiles] local expert of each BLOCK_M-row tile
  const int* totals;              // routing totals: [2] = number of tiles
  const float* topk_weights;      // [num_tokens * top_k] router weights
  int weight_on_input;            // GEMM1: scale the product by the router weight before the bias
  int weight_on_output;           // GEMM2: multiply the result (bias included) by the router weight
  float alpha;                    // swigluoai
  float limit;                    // swigluoai, swiglustep
};

// Dynamic shared memory of one instance: STAGES ring slots of an A tile [BLOCK_M, BLOCK_K] and a B
// tile [B rows, BLOCK_K] of 16-bit elements, B rows = 2 * BLOCK_N for gated activations.
MOEJIT_HOST_DEVICE constexpr int moe_gemm_smem_bytes(int block_m, int block_n, int block_k, int stages, bool gated) {
  return stages * (block_m + (gated ? 2 : 1) * block_n) * block_k * 2;
}

// Static shared memory of one instance: the per-row slot, A row and router weight arrays
// (s_slot, s_arow, s_weight in moe_gemm_sm80.cuh: 3 x 4 bytes per row).
MOEJIT_HOST_DEVICE constexpr int moe_gemm_static_smem_bytes(int block_m) { return 12 * block_m; }

}  // namespace moejit
