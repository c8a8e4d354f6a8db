// Arguments and constants of the moe_gemm kernels (grouped GEMM over the routing tile map). Plain
// C++ only: the host includes this header too, so both sides agree on the layout by construction.
#pragma once

#include "common/host_device.cuh"
#include "common/dtype_kinds.cuh"
#include "moe/quant_kinds.cuh"

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
  // Same epilogue, DTYPE rows [num_tokens * TOPK, ldc] at row token * TOPK + slot (fast mode, large
  // batches): plain stores instead of fp32 adds; moe_reduce's reduce16 kernel then sums each token's
  // rows in fp32. Measured: the L2's fp32 adds, not DRAM, bounded the atomic GEMM2 of big layers.
  kRoleGemm2Rows16 = 3,
};

struct MoeGemmArgs {
  const void* a;                  // GEMM1: X [num_tokens, lda]; GEMM2: intermediate [padded rows, lda]
  long long lda;                  // bytes between A rows
  const void* b;                  // weights [E_local, rows, ldb] row-major, reduction dim contiguous
  long long b_expert_stride;      // bytes between experts
  long long ldb;                  // bytes between weight rows
  const float* bias;              // [E_local, bias_expert_stride] fp32 or null (indexed by weight row)
  long long bias_expert_stride;
  void* c;                        // output (see MoeGemmRole)
  long long ldc;                  // elements
  int inner;                      // reduction length: K for GEMM1, N for GEMM2 (whole 16-byte chunks)
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
  // Quantization (QUANT, quant_kinds.cuh); null / 0 when QUANT is kQuantNone.
  const void* b_scale;              // weight scales (fp32; DTYPE for int4; e8m0 bytes for mxfp4)
  long long b_scale_expert_stride;  // elements between experts
  long long b_scale_row_stride;     // elements between scale rows (0: one scale per expert)
  int b_scale_row_shift;            // weight row r -> scale row r >> shift (7: 128-row blocks)
  int b_scale_k_shift;              // k -> scale column k >> shift (log2 of the k group)
  const unsigned char* b_zero;      // int4 zero points, indexed as the scales; null = 8 (symmetric)
  const float* a_scale;             // fp8: activation scales [A rows, a_scale_ld]; ld 0 = one scale
  long long a_scale_ld;
  // Split-K (grid z = splits > 1; fast mode only): split z reduces k tiles [z * k_tiles_per_split,
  // +k_tiles_per_split). GEMM2 (atomic role) adds each split's part (bias from split 0). GEMM1 parks
  // raw fp32 sums in split_partial [splits][num_tokens * top_k][G * n_out] by routed slot; the last
  // split to arrive at a tile (split_counters [tiles][grid x], zero before the launch) adds them in
  // split order and runs the epilogue. k_tiles_per_split 0 = not split.
  int k_tiles_per_split;
  float* split_partial;
  int* split_counters;
  long long split_stride;  // floats between splits of split_partial
  // The wgmma kernels' grouped walk (moe_tile_walk.cuh): row tiles per column sweep; 0 = the
  // default (kMoeWalkGroupRows). The other kernels take one tile per CTA in grid order.
  int walk_rows;
  // The persistent wgmma kernel's work queue: a counter, zero at the launch (the routing zeroes it),
  // from which the CTAs claim the walk's items in order as they get through them; null = the fixed
  // stride (items blockIdx.x, + gridDim.x, ...). Not with multicast clusters, ping-pong groups or
  // k splits (the host leaves it null there).
  int* work_counter;
  // Per-tile readiness between the mma.sync swap-AB decode kernels (common/tile_flags.cuh; null =
  // none, the kernel before is waited for as a whole): GEMM1 adds 1 to tile_ready[tile] per CTA
  // once its columns of the tile's intermediate rows are stored; GEMM2 waits for tile_ready[tile] >=
  // tile_ready_target (GEMM1's grid x) before reading its activations. The host's rule:
  // swap_ab_tile_handover (runtime/moe_layer_parts.h). (Here, so that the struct stays 512 bytes.)
  int* tile_ready;
  int tile_ready_target;
  // GEMM1 of the persistent wgmma kernel: 1 = A is X already gathered into padded-row order
  // (moe_gather_rows_kernel), read as whole tiles through a_tensor_map like GEMM2's A; 0 = rows of
  // X gathered by token with per-row cp.async in the producer warpgroup.
  int a_pregathered;
  // The persistent wgmma kernel reading tiles by bulk tensor copies (moe_wgmma_b_by_tma,
  // moe_wgmma_a_by_tma): CUtensorMaps of the weights as bytes, dims (inner bytes, rows, E_local),
  // box (128 bytes, BLOCK_N rows; interleaved gate / up: 2 BLOCK_N rows, every second one), and of
  // GEMM2's A (the intermediate), dims (inner bytes, padded rows, 1), box (128 bytes, BLOCK_M
  // rows); 128-byte swizzle, filled by the host. Kernel parameters are __grid_constant__ there, so
  // the copy engine reads them in place.
  alignas(64) unsigned long long b_tensor_map[16];
  alignas(64) unsigned long long a_tensor_map[16];
};

// The persistent wgmma kernel loads its weight tiles with bulk tensor copies (one thread, no
// per-row address work in the producer): a box of BLOCK_N gate rows and one of up rows, every
// second row of the weights when gate / up rows interleave (swigluoai).
// Weight-only formats (quant_dequantizes_b) are converted by the producer warpgroup instead
// (moe_gemm_wgmma_dequant.cuh): their stored bytes come by cp.async, no tensor map.
MOEJIT_HOST_DEVICE constexpr bool moe_wgmma_b_by_tma(bool persistent, int quant) {
  return persistent && !quant_dequantizes_b(quant);
}
// GEMM2's A rows (the intermediate, by padded row) are one box per tile too; GEMM1 gathers rows of
// X by token, which a tiled copy cannot (unless they were gathered beforehand: a_pregathered).
MOEJIT_HOST_DEVICE constexpr bool moe_wgmma_a_by_tma(int role, bool persistent) {
  return role != kRoleGemm1 && persistent;
}

// Dynamic shared memory of one instance: STAGES ring slots of an A tile [BLOCK_M, BLOCK_K] and a B
// tile [B rows, BLOCK_K] as stored (B rows = 2 * BLOCK_N for gated activations), plus one DTYPE B
// tile when B is dequantized in shared memory.
MOEJIT_HOST_DEVICE constexpr int moe_gemm_smem_bytes(int block_m, int block_n, int block_k, int stages, bool gated,
                                                     int quant) {
  const int b_rows = (gated ? 2 : 1) * block_n;
  const int a_stage = block_m * block_k * quant_activation_bytes(quant);
  // Stored rows of dequantized formats carry 16 bytes of padding (bank-conflict-free reads).
  const int b_stage = b_rows * (block_k * quant_weight_bits(quant) / 8 + (quant_dequantizes_b(quant) ? 16 : 0));
  return stages * (a_stage + b_stage) + (quant_dequantizes_b(quant) ? b_rows * block_k * 2 : 0);
}

// fp32 accumulators one thread holds; fp8_block holds a second set (one scale block's sum).
MOEJIT_HOST_DEVICE constexpr int moe_gemm_accumulators(int block_m, int block_n, int warps_m, int warps_n, bool gated,
                                                       int quant) {
  return (gated ? 2 : 1) * (block_m / warps_m) * (block_n / warps_n) / 32 * (quant == kQuantFp8Block ? 2 : 1);
}
// Above this ptxas (NVRTC 13.0, sm_90a, one CTA per SM) spills; found by the CPU spill test over the
// tuner's tile space. fp8 mma.sync is emulated on sm_90 (conversions to f16 in registers), and gated
// fp8_block also keeps per-column block scales of both sets live.
MOEJIT_HOST_DEVICE constexpr int moe_gemm_max_accumulators(bool gated, int quant) {
  return quant_is_fp8(quant) && (gated || quant != kQuantFp8Block) ? 96 : 128;
}

// The swap-AB decode path (moe_gemm_swap_ab.cuh): k per block (32 per lane, four lanes per row),
// weights per 16-byte load, output columns per CTA (8 per warp when gated: gate and up rows share
// a warp; else 16), and its static shared memory (per-row arrays as below, plus the partial sums of
// warps 1.. along k). The reduction length must be whole 16-byte loads (a multiple of the load k).
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_block_k() { return 128; }
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_load_k(int quant) { return 128 / quant_weight_bits(quant); }
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_block_n(int warps_n, bool gated) { return warps_n * (gated ? 8 : 16); }
// Registers one thread's landed block, the scales in flight, activations and sums take (32-bit),
// and the most of them that compile without spills under a per-thread limit (255, or 65536 /
// threads): fitted to the CPU spill test over the tuner's space (NVRTC 13.0, sm_90a).
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_data_registers(int block_m, int stages, int quant) {
  return 2 * (quant_weight_bits(quant) / 4) * 4 + stages * 4 + (block_m / 8) * (16 + 4);
}
// The wgmma variant keeps no activations in registers but its staging loads (X_ITEMS 16-byte loads
// a lane, ~10 registers each with their pointer, k and shared-memory place) and the block's A
// fragments (32); MXFP4 into f16 converts through fp32 (2 more a token fragment). Fitted to the CPU
// spill test (NVRTC 13.0, sm_90a): 64 tokens on one warpgroup spill 4-40 bytes for MXFP4 into f16,
// and for int4 / int8 with 6 stages.
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_wgmma_data_registers(int block_m, int stages, int quant, int warps,
                                                                   int dtype) {
  return 2 * (quant_weight_bits(quant) / 4) * 4 + stages * 4 + (block_m / 8) * 4 + 32 +
         10 * ((block_m / 8 * 4 + warps - 1) / warps) + (quant_is_mxfp4(quant) && dtype == kDTypeF16 ? 2 * (block_m / 8) : 0);
}
// CTAs of 16 warps (512 threads) have 128 registers a thread: the f16 MXFP4 tiles there leave no
// room for the activation ring nor for the per-tile handover (each spilled 12-28 bytes in CI's
// no-spill sweep), so both features stop below it.
MOEJIT_HOST_DEVICE constexpr bool moe_swap_ab_register_bound(int warps) { return warps >= 16; }
// 16-byte activation loads of one lane per k block and token fragment: its 32 k of one token.
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_activation_loads(int quant) { return 32 * quant_activation_bytes(quant) / 16; }
// Whether the activations travel through the ring with the weights (cp.async) instead of being
// loaded when their block is computed (their L2 latency then stalls the block's first mma).
// fp8, measured (H100, same run): fp8_block DeepSeek-V3 TP8 M = 16 / 128 231 / 575 -> 226 / 560 us.
// Weight-only (MXFP4, int4, int8) 8-token mma.sync tiles of two or more warps along k (a decode
// tile holds ~1-4 routed tokens of 8). MXFP4's activations, loaded one block ahead in registers,
// had held the next block's first mma on L2 (ncu, GEMM1 at M = 16: 35% of the stall samples). H100, same
// run, two rounds (thirty-eighth session), gpt-oss-120b prepacked M = 4 / 8 / 16 / 32 94.4-94.6 /
// 157.5-158.2 / 266.5-267.3 / 424.9-425.5 -> 90.7-90.9 / 152.7-152.9 / 257.6-258.0 / 409.6-410.1 us,
// M = 128 +0.6%; with one warp along k 5-8% slower (M = 2 / 4 / 8 on 4 x 1 tiles). Copying every
// token's rows (the first try, before the activations loaded ahead) had been 9% slower at M = 16.
// The same tiles of int4 and int8 (thirty-ninth session, H100, same run, two rounds; the shipped DB
// or the heuristic's tiles): int4 Qwen3-30B-A3B M = 1 / 2 / 8 21.3-21.4 / 31.2-31.7 / 73.2 ->
// 21.0 / 30.8-30.9 / 71.4-71.7 us, int4 DeepSeek-V3 TP8 M = 4 / 16 60.5-61.2 / 162.8-163.6 ->
// 58.2-59.0 / 159.7-161.7, int4 Mixtral-8x7B M = 16 360.5-362.1 -> 352.1-353.2, int8 Qwen3 /
// gpt-oss-120b M = 4 64.4-64.9 / 157.9-158.0 -> 62.6-62.8 / 154.1-154.3 (gpt-oss-120b M = 1 +1%).
// Every format copies only its routed tokens' activations (padding slots keep what they held and
// meet only their own accumulator column, never stored); fp8 had copied every token's, within
// noise of it (DeepSeek-V3 TP8 M = 8 / 16 / 32 / 128: -0.5..+0.3%, same run).
// Not for CTAs at moe_swap_ab_register_bound (`warps`: all of the CTA's).
MOEJIT_HOST_DEVICE constexpr bool moe_swap_ab_activation_ring(int quant, int block_m = 0, bool wgmma = false,
                                                              int warps_k = 1, int warps = 1) {
  return quant_is_fp8(quant) ||
         (quant_dequantizes_b(quant) && block_m == 8 && !wgmma && warps_k >= 2 && !moe_swap_ab_register_bound(warps));
}
// Dynamic shared memory: each warp's ring of STAGES k blocks: its 16 weight rows (128 k each: 64,
// 128 or 256 stored bytes) and, with the activation ring, the tile's activations at the lanes' k
// (BLOCK_M / 8 fragments), 16 bytes per lane and load.
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_ring_bytes(int warps, int stages, int quant, int block_m, bool wgmma = false,
                                                        int warps_k = 1) {
  const int act_loads = moe_swap_ab_activation_ring(quant, block_m, wgmma, warps_k, warps)
                            ? block_m / 8 * moe_swap_ab_activation_loads(quant)
                            : 0;
  return warps * stages * (2 * (quant_weight_bits(quant) / 4) + act_loads) * 16 * 32;
}
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_max_data_registers(int register_limit) { return register_limit / 2 + 40; }
// All dynamic shared memory: the rings and, for the wgmma variant, two staged k blocks of the tile's
// activations (2 x 64 k of 16 bits per token) on 1024-byte swizzle atoms (1024 bytes to align them).
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_smem_bytes(int warps, int stages, int quant, int block_m, bool wgmma,
                                                        int warps_k = 1) {
  return moe_swap_ab_ring_bytes(warps, stages, quant, block_m, wgmma, warps_k) + (wgmma ? 1024 + 2 * 2 * block_m * 128 : 0);
}
// CTAs per SM the kernel is compiled for (__launch_bounds__'s minimum). Left alone, ptxas took
// ~96-128 registers and 20 warps an SM; compiled for 768 threads an SM (85 registers), 8-token tiles
// ran 3-9% faster (H200 decode: gpt-oss MXFP4, DeepSeek-V3 fp8_block, Qwen3 int4): warps in flight,
// not ring depth, hide the latency. Only where that fits: one n8 fragment, up to 4 stages, and
// not MXFP4 into f16 (through fp32). int4's 3- and 4-stage tiles spill a little under the cap
// (4-16 bytes at s3, 72 at s4; the CPU test of the tuner's 8-token tiles holds them there) and
// still run faster with it: H100, Qwen3-30B-A3B int4 M = 128 (w4x1 s3 GEMM1, the DB's pick then) 225 us against 237
// uncapped (98 registers, no spill), three same-run rounds.
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_min_ctas(int block_m, int stages, int quant, int dtype, int threads, int wgmma) {
  // The wgmma variant: two CTAs of 8 warps an SM where that compiles without spills (NVRTC 13.0,
  // sm_90a: up to 4 stages of 16 tokens, or of 32 of MXFP4 into bf16; 32 tokens of int4 / int8, 6
  // stages and MXFP4 into f16 spill 4-28 bytes): uncapped, ptxas took 127-145 registers there, one
  // CTA an SM.
  if (wgmma)
    return threads == 256 && stages <= 4 && !(quant_is_mxfp4(quant) && dtype == kDTypeF16) &&
                   (block_m <= 16 || (block_m <= 32 && quant_is_mxfp4(quant)))
               ? 2
               : 1;
  const bool fits = block_m == 8 && stages <= 4 && !(quant_is_mxfp4(quant) && dtype == kDTypeF16);
  return fits && threads < 768 ? 768 / threads : 1;
}
MOEJIT_HOST_DEVICE constexpr int moe_swap_ab_static_smem_bytes(int block_m, int warps_n, int warps_k) {
  return 8 * block_m + (warps_k > 1 ? (warps_k - 1) * warps_n * (block_m / 8) * 4 * 32 * 4 : 4);
}

// The sm_90a wgmma path (moe_gemm_wgmma.cuh): k tiles of one 128-byte row (the 128-byte swizzle:
// 64 16-bit or 128 e4m3 elements), and its dynamic shared memory: STAGES slots of the A tile
// [BLOCK_M][128 B] and the B tile [G * BLOCK_N][128 B], 1024 bytes to align the ring to the swizzle
// atoms, the persistent variant's full / empty barrier per slot, and per-weight-row scales (fp8
// per channel / tensor, up to 256 rows).
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_block_k(int quant) { return 128 / quant_activation_bytes(quant); }
// Ping-pong (PINGPONG, persistent 64-row tiles only): two consumer warpgroups take alternate tiles,
// each a whole tile, their k loops in turn, so that one's epilogue runs under the other's wgmmas
// (one consumer warpgroup otherwise leaves the tensor cores idle through every epilogue).
// Tile rows whose slot / A row / router weight the CTA holds at once: one tile per consumer group.
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_rows_held(int block_m, bool pingpong) { return pingpong ? 2 * block_m : block_m; }
// Producer warpgroups of the persistent variant: two where they dequantize weight-only formats (one
// warp per scheduler left the conversion latency-bound: 72% of issue cycles had no eligible warp),
// four beside the single consumer warpgroup of 64-row tiles, whose producers had bounded them at
// two: each k tile took ~1450 cycles against 512 for its wgmmas, the producer warps issuing every
// ~5th cycle on dependent conversions (ncu, H100, gpt-oss-120b MXFP4 M = 1024 GEMM1). Not MXFP4
// into f16 (through fp32): its producers spill 4-80 bytes at the 80 registers four leave them.
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_producer_threads(int quant, int block_m, int dtype) {
  return !quant_dequantizes_b(quant)                                           ? 128
         : block_m == 64 && !(quant_is_mxfp4(quant) && dtype == kDTypeF16) ? 512
                                                                               : 256;
}
// fp8 formats keep each k tile's e4m3 sums in a second accumulator set (quant_promotes_k_tiles):
// their wgmma tiles take at most this many weight rows. 128, or 256 on the persistent variant's
// 128-row tiles, which keep those sums 128 weight rows at a time (setmaxnreg moves the registers;
// so past 128, whole chunks of 128 only).
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_promoted_max_b_rows(int block_m, bool persistent) {
  return persistent && block_m == 128 ? 256 : 128;
}
// Threads per CTA: 128 per 64 rows (per 64-row tile of each ping-pong warpgroup), plus the producer
// warpgroup(s) of the persistent variant.
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_threads(int block_m, bool persistent, bool pingpong = false,
                                                   int quant = kQuantNone, int dtype = kDTypeBF16) {
  return moe_wgmma_rows_held(block_m, pingpong) / 64 * 128 +
         (persistent ? moe_wgmma_producer_threads(quant, block_m, dtype) : 0);
}
// Weight-only formats on the persistent variant: each producer thread's ring of the stored bytes of
// moe_wgmma_raw_stages k tiles (moe_gemm_wgmma_dequant.cuh), after everything else. A slot holds
// a k tile's stored rows as 16-byte pieces, piece i copied by producer thread i % threads; 8
// slots where one is 4 KiB (4-bit, <= 128 weight rows), else 4 (the copies' latency spans ~3 k tiles
// of conversion at 4), but 3 for 4-bit 128-row tiles of 256 weight rows, whose two pieces a thread
// convert for longer and whose 4 DTYPE stages then fit (H100: gpt-oss-120b MXFP4 M = 4096 / 8192
// 2480-2501 / 4223-4234 us with 3 DTYPE stages -> 2392-2456 / 4145-4150; on 64-row tiles 3 raw
// stages cost 3%, M = 1024 1272 -> 1310-1320).
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_raw_slot_bytes(int b_rows, int quant) {
  return b_rows * 64 * quant_weight_bits(quant) / 8;
}
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_raw_stages(int block_m, int b_rows, int quant) {
  const int slot = moe_wgmma_raw_slot_bytes(b_rows, quant);
  return slot <= 4096 ? 8 : block_m == 128 && b_rows > 128 && slot <= 8192 ? 3 : 4;
}
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_raw_bytes(int quant, int block_m, int b_rows) {
  return quant_dequantizes_b(quant) ? moe_wgmma_raw_stages(block_m, b_rows, quant) * moe_wgmma_raw_slot_bytes(b_rows, quant)
                                    : 0;
}
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_ring_bytes(int block_m, int block_n, int stages, bool gated,
                                                      int quant = kQuantNone) {
  return stages * (block_m + (gated ? 2 : 1) * block_n) * 128 + 1024 + stages * 16 + 256 * 4 +
         moe_wgmma_raw_bytes(quant, block_m, (gated ? 2 : 1) * block_n);
}
// Static shared memory of one instance: the per-row slot, A row and router weight arrays
// (s_slot, s_arow, s_weight in moe_gemm_sm80.cuh: 3 x 4 bytes per row) and split-K's flag (16).
MOEJIT_HOST_DEVICE constexpr int moe_gemm_static_smem_bytes(int block_m) { return 12 * block_m + 16; }
// The persistent wgmma kernel's work queue (MoeGemmArgs::work_counter): the claimed items' ring and
// a barrier per entry. Deeper than the k-tile ring plus two, so that an entry is rewritten only
// after every reader has it (moe_gemm_wgmma_persistent.cuh).
enum : int { kMoeWorkQueueDepth = 8, kMoeWorkQueueBytes = kMoeWorkQueueDepth * (8 + 4) };
// The wgmma kernel's: the same arrays and the work queue, rounded up to 1024 bytes as the compiler
// places them before the 1024-byte-aligned dynamic ring (a 64-row tile's 784 bytes take 1024: the
// driver refused a 231520-byte ring that the unrounded sum let through).
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_static_smem_bytes(int rows_held) {
  return (moe_gemm_static_smem_bytes(rows_held) + kMoeWorkQueueBytes + 1023) / 1024 * 1024;
}
// Shared memory one CTA may use on sm_90 / sm_100 after opting in (sm_80: 163 KiB, no wgmma).
inline constexpr int kMoeWgmmaMaxSharedBytes = 227 * 1024;
// The persistent variant's staged epilogue (STAGED) keeps a finished tile in shared memory of its
// own (the ring is busy with the next tiles' loads) and writes each row with one bulk copy, as the
// plain variant does from its idle ring: [BLOCK_M][BLOCK_N + 8] of the output type (DTYPE rows of
// GEMM1 and kRoleGemm2Rows16, else fp32). 0 where it is not asked for (fragment-order stores
// straight to global memory) or does not fit beside the ring.
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_out_bytes(int role) {
  return role == kRoleGemm1 || role == kRoleGemm2Rows16 ? 2 : 4;
}
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_staging_bytes(int role, int block_m, int block_n, int stages, bool gated,
                                                          bool staged, int quant = kQuantNone) {
  const int bytes = block_m * (block_n + 8) * moe_wgmma_out_bytes(role);
  return staged && moe_wgmma_ring_bytes(block_m, block_n, stages, gated, quant) + bytes +
                               moe_wgmma_static_smem_bytes(block_m) <=
                           kMoeWgmmaMaxSharedBytes
             ? bytes
             : 0;
}
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_smem_bytes(int role, int block_m, int block_n, int stages, bool gated,
                                                      bool staged, int quant) {
  return moe_wgmma_ring_bytes(block_m, block_n, stages, gated, quant) +
         moe_wgmma_staging_bytes(role, block_m, block_n, stages, gated, staged, quant);
}

}  // namespace moejit
