// moe_gemm, swap-AB decode path (sm_80+): the grouped GEMM of moe_gemm_sm80.cuh for tiles of few
// tokens (BLOCK_M = 8 .. 32 in steps of 8). The weights are the mma's A operand (16 weight rows per warp fill
// its M side) and the tile's tokens its N side (BLOCK_M / 8 n8 fragments). Each lane streams its own
// weight bytes with 16-byte cp.async into a private slot of its warp's shared-memory ring (STAGES k
// blocks in flight per warp, holding no registers while in flight), reads them back into registers
// when they land, dequantizes there and feeds mma.sync: no barrier in the k loop (a lane reads only
// what it copied itself), which is what bounds the shared-memory path for decode (4-bit weights
// above all). A ring in registers instead held 8-16 registers per k block in flight: decode ran at
// ~2 blocks in flight per warp and 45% of the DRAM bandwidth (ncu, gpt-oss-120b MXFP4, M = 16).
// fp8 layers copy their routed tokens' (pre-quantized) activations into the same ring, and so do
// weight-only 8-token tiles of 2+ warps along k (moe_swap_ab_activation_ring); the other tiles load
// theirs from global memory (L1) when the block is computed (MXFP4: one block ahead).
// WGMMA = 1 (sm_90a, 16-bit activations, up to 64 tokens): the same weight path, but the tile's
// tokens are staged per k block in shared memory and each warpgroup multiplies its 64 weight rows
// by them with register-A wgmma (moe_swap_ab_parts.cuh), so wider tiles cost no activation registers.
//
// k order. mma m16n8k16 gives lane (g = lane / 4, t = lane % 4) the A elements of rows g and g + 8
// at k slots {2t, 2t+1, 2t+8, 2t+9}, and the B elements of column g at the same slots. A dot
// product does not care in which order its k are visited as long as A and B agree, so lane t takes
// 32 weights of each of its two rows as LOADS runs of one 16-byte load each (K_PER_LOAD = 32, 16 or
// 8 weights of 4, 8 or 16 bits): run l at k = kb + K_PER_LOAD * (t + 4l), so that the four lanes of
// a row read 64 contiguous bytes per load (whole 32-byte sectors); lane-local element j (0..31) is
// run j / K_PER_LOAD, and the activations are read at the same k. Step s of the block feeds slots
// {2t, 2t+1} with j = 4s, 4s+1 and slots {2t+8, 2t+9} with j = 4s+2, 4s+3. A block is KB = 128
// consecutive k of 16 weight rows (64, 128 or 256 stored bytes per row).
//
// Rows of a warp: gated GEMM1 -> rows g (gate) and g + 8 (up) of output column n0 + 8 * wn + g, so
// the epilogue pairs them in registers; otherwise output columns n0 + 16 * wn + g and + 8.
// Warps: WARPS_N along the output columns times WARPS_K along k (block b goes to warp b % WARPS_K);
// the WARPS_K partial sums are added in warp order through shared memory (deterministic). Grid:
// (column tiles of BLOCK_N, row tiles, k splits); k splits (grid z > 1) only for the atomic GEMM2.
//
// The order of each sum over k differs from moe_gemm_sm80.cuh's, so a row's result depends on
// which path ran: the host uses this path in the fast reduce mode only.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "common/tile_flags.cuh"
#include "moe/activations.cuh"
#include "moe/moe_dequant.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_tile_rows.cuh"
#include "moe/moe_swap_ab_parts.cuh"

namespace moejit {

template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int WARPS_N, int WARPS_K, int STAGES, int WGMMA,
          int HANDOVER>
__global__ void __launch_bounds__(WARPS_N* WARPS_K * 32,
                                  moe_swap_ab_min_ctas(BLOCK_M, STAGES, QUANT, DTYPE, WARPS_N* WARPS_K * 32, WGMMA))
    moe_gemm_swap_ab_kernel(const MoeGemmArgs args) {
  using namespace swap_ab_detail;
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr int BITS = quant_weight_bits(QUANT);
  constexpr int KB = moe_swap_ab_block_k();             // k per block: 32 per lane
  constexpr int K_PER_LOAD = moe_swap_ab_load_k(QUANT);  // weights per 16-byte load
  constexpr int LOADS = 32 / K_PER_LOAD;                 // 16-byte loads per row and lane
  constexpr int ROW_BYTES = KB * BITS / 8;               // stored bytes of a row per block
  constexpr int NF = BLOCK_M / 8;                      // n8 fragments (tokens)
  constexpr int X_LOADS = moe_swap_ab_activation_loads(QUANT);  // 16-byte activation loads per fragment
  // Activations in the ring too (moe_gemm_args.cuh says where).
  constexpr bool ACT_RING = moe_swap_ab_activation_ring(QUANT, BLOCK_M, WGMMA != 0, WARPS_K, WARPS_N * WARPS_K);
  constexpr int SLOTS = 2 * LOADS + (ACT_RING ? NF * X_LOADS : 0);  // 16-byte ring slots of a lane per stage
  constexpr int BLOCK_N = moe_swap_ab_block_n(WARPS_N, GATED);  // the host sizes the grid with it
  constexpr int THREADS = WARPS_N * WARPS_K * 32;
  // w8a8 e4m3: weights and the (pre-quantized) activations both become f16 in registers (exact)
  // for an f16 mma with fp32 sums: the same products as an e4m3 mma, which sm_90 emulates anyway.
  constexpr bool FP8 = quant_is_fp8(QUANT);
  constexpr bool BLOCK_SCALED = QUANT == kQuantFp8Block;  // 128 x 128 blocks: one per k block
  constexpr bool SCALED_GROUPS = BITS == 4 || BLOCK_SCALED;  // scales loaded per k block
  constexpr int EB = quant_activation_bytes(QUANT);  // bytes per activation element
  constexpr bool HAS_ZERO = QUANT == kQuantInt4Group;  // zero points exist for int4 alone
  constexpr int MMA_DTYPE = FP8 ? kDTypeF16 : DTYPE;
  static_assert(!FP8 || KB == kQuantFp8BlockSize, "a k block is one fp8 scale block");
  static_assert(K_PER_LOAD * BITS == 128 && LOADS * K_PER_LOAD == 32, "whole 16-byte loads per lane chunk");
  // The wgmma variant: warpgroups of 4 warps along the columns (64 weight rows each), every warp on
  // every k block, the tokens' activations staged in shared memory (moe_swap_ab_parts.cuh).
  constexpr bool WG = WGMMA != 0;
  static_assert(BLOCK_M % 8 == 0 && NF >= 1 && NF <= (WG ? 8 : 4), "BLOCK_M is 8 .. 32 (wgmma: .. 64) in steps of 8");
  static_assert(!WG || (WARPS_K == 1 && WARPS_N % 4 == 0 && !ACT_RING && !FP8 && EB == 2),
                "wgmma variant: whole warpgroups along the columns, one along k, 16-bit activations");
  static_assert(STAGES >= 1 && STAGES <= 16, "1..16 k blocks in flight");

  // GEMM2 reads nothing of the kernel before it until its first block's activations: under
  // programmatic dependent launch it stages its tile and starts its first weight copies while
  // that kernel finishes (the routing's tile map was complete before GEMM1 let it launch: GEMM1
  // waits for the routing first), and waits just before the activations: those of the activation
  // ring (fp8: the intermediate quantization's e4m3 rows) right after the first weight copies,
  // the others before the first block's math (below).
  constexpr bool WAIT_FIRST = ROLE == kRoleGemm1;
  if constexpr (WAIT_FIRST) pdl::wait();
  pdl::launch_dependents();
  const int tile = blockIdx.y;
  if (tile >= args.totals[2]) return;
  // GEMM2's wait for its activations: the kernel before as a whole, or only the pieces of its own
  // row tile (args.tile_ready), so that it starts on finished tiles under that kernel's last wave.
  // Upper bound measured first (GEMM2 not waiting at all; thirty-seventh session, H100): MXFP4
  // gpt-oss-120b M = 4 / 8 96.1 / 161.1-162.1 -> 91.9 / 153.8-154.5 us, int4 Qwen3-30B-A3B M = 1 /
  // 8 21.1-21.5 / 75.6-76.7 -> 19.1 / 70.3-70.5, fp8_block DeepSeek-V3 TP8 M = 8 (its intermediate
  // quantization not waiting either) 137.2 -> 126.2-126.3.
  // HANDOVER (an entry of its own, "gemm_tiles": choosing at run time cost the grid-wide wait 1-4%).
  static_assert(!HANDOVER || (ROLE == kRoleGemm2Atomic && !WGMMA), "per-tile handover: the mma.sync atomic GEMM2");
  auto wait_for_activations = [&]() {
    if constexpr (HANDOVER) {
      if (threadIdx.x == 0) tile_flags::wait_for(args.tile_ready + tile, args.tile_ready_target);
      __syncthreads();
    } else {
      pdl::wait();
    }
  };
  const int n0 = blockIdx.x * BLOCK_N;
  const int row0 = tile * BLOCK_M;
  __shared__ int s_slot[BLOCK_M];  // token * top_k + slot, -1 = padding row
  __shared__ int s_arow[BLOCK_M];  // row of A to read, -1 = zeros
  __shared__ float s_partial[WARPS_K > 1 ? WARPS_K - 1 : 1][WARPS_K > 1 ? WARPS_N : 1][WARPS_K > 1 ? NF * 4 : 1]
                            [WARPS_K > 1 ? 32 : 1];  // warps wk >= 1
  static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_partial) ==
                    moe_swap_ab_static_smem_bytes(BLOCK_M, WARPS_N, WARPS_K),
                "the host checks shared memory with moe_swap_ab_static_smem_bytes");
  // The tile's slots start by cp.async, as a group of their own before the weights', while the
  // expert loads: the CTA's first round trips overlap instead of chaining (expert, then slots,
  // then router weights, all before the staging barrier). The router weights are loaded by the
  // epilogue. ncu (H100, gpt-oss-120b MXFP4 M = 16) had 16.5% of GEMM1's warp samples waiting at
  // that barrier; same-run A/B, two rounds: MXFP4 M = 16 / 128 297.8 -> 291.1 / 770 -> 751.8 us,
  // fp8_block DeepSeek-V3 TP8 M = 16 / 64 227.0 -> 220.9 / 477.3 -> 460.7 us.
  if (threadIdx.x < BLOCK_M) sm80::cp_async_4(sm80::smem_addr(&s_slot[threadIdx.x]), args.gather_index + row0 + threadIdx.x);
  sm80::cp_async_commit();
  const int expert = args.tile_expert[tile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp % WARPS_N, wk = warp / WARPS_N;
  const int g = lane >> 2, t = lane & 3;

  // This lane's two weight rows (-1 past the output columns: they read row 0 and are never stored).
  int wrow[2], col[2];
  if constexpr (GATED) {
    col[0] = col[1] = n0 + wn * 8 + g;
    wrow[0] = moe_tile::weight_row<ACT>(args, col[0], 0);
    wrow[1] = moe_tile::weight_row<ACT>(args, col[0], 1);
  } else {
    col[0] = n0 + wn * 16 + g;
    col[1] = col[0] + 8;
    wrow[0] = moe_tile::weight_row<ACT>(args, col[0], 0);
    wrow[1] = moe_tile::weight_row<ACT>(args, col[1], 0);
  }

  // k blocks of this CTA (its split) and of this warp: b = b_begin + wk, + WARPS_K, ...; lane t
  // reads its runs of each block (k order above), loads past the reduction length read nothing (zeros).
  const int blocks = (args.inner + KB - 1) / KB;
  const int per_split = args.k_tiles_per_split > 0 ? args.k_tiles_per_split : blocks;
  const int b_begin = blockIdx.z * per_split;
  const int b_end = min(blocks, b_begin + per_split);
  const int b_first = b_begin + wk;
  // The ring turn's first block and this lane's k left from it (pointers below follow it).
  int b_base = b_first;
  constexpr int RUN_STRIDE = 4 * K_PER_LOAD;  // k from one of a lane's runs to its next
  int k_left = args.inner - (b_first * KB + K_PER_LOAD * t);

  // Pointers at block b_first; the ring reads block b_first + i * WARPS_K at compile-time offsets.
  constexpr int kScaleBytes = QUANT == kQuantInt4Group ? 2 : BLOCK_SCALED ? 4 : 1;
  const unsigned char* w_ptr[2];
  const unsigned char* scale_ptr[2];  // 4-bit formats: this lane's scale of its row at b_first
  const unsigned char* zero_ptr[2];
  // The lane's first run at b_first (4-bit: its whole chunk, one scale group; fp8 blocks: the
  // block's scale whatever the run).
  const int k_first = b_first * KB + K_PER_LOAD * t;
  // Scales per ring step; for MXFP4 (groups of 32 by the format) a literal, so that each block's
  // scale loads are immediate offsets of one pointer, not address arithmetic. MXFP4 only: measured
  // (H200, same run) for fp8 blocks and int4 with the whole-block loads below, 0.5-1.7% slower.
  constexpr int kFixedScaleShift = quant_is_mxfp4(QUANT) ? 5 : -1;
  static_assert(kFixedScaleShift < 0 || 1 << kFixedScaleShift == kMxfp4GroupSize,
                "the host's b_scale_k_shift for MXFP4 (moe_layer.cpp)");
  const int scale_step = (WARPS_K * KB) >> (kFixedScaleShift >= 0 ? kFixedScaleShift : args.b_scale_k_shift);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = wrow[h] < 0 ? 0 : wrow[h];
    w_ptr[h] = static_cast<const unsigned char*>(args.b) + expert * args.b_expert_stride + row * args.ldb +
               static_cast<long long>(k_first) * BITS / 8;
    const long long si = expert * args.b_scale_expert_stride + (row >> args.b_scale_row_shift) * args.b_scale_row_stride +
                         (k_first >> args.b_scale_k_shift);
    scale_ptr[h] = SCALED_GROUPS ? static_cast<const unsigned char*>(args.b_scale) + si * kScaleBytes : nullptr;
    zero_ptr[h] = args.b_zero ? args.b_zero + si : nullptr;
  }
  // The tile's rows (slots landed, A rows) in shared memory, then this lane's activation
  // pointers: its 32 k of each n8 fragment's token (padding rows read the tile's first row, a routed
  // row: tiles start with one; they are never stored), and for fp8 blocks the A rows of its
  // accumulator columns (tokens 2t, 2t + 1 of each fragment).
  const unsigned char* a_ptr[NF];
  bool x_live[NF];  // token g of fragment f is routed (not a padding row)
  int a_row[BLOCK_SCALED ? NF : 1][2];
  auto stage_tile_rows = [&]() {
    sm80::cp_async_wait<ACT_RING ? 0 : STAGES>();  // the slots' group (the STAGES weight groups are younger)
    if (threadIdx.x < BLOCK_M) s_arow[threadIdx.x] = moe_tile::a_row<ROLE>(args, s_slot[threadIdx.x], row0 + threadIdx.x);
    __syncthreads();
#pragma unroll
    for (int f = 0; f < (WG ? 0 : NF); ++f) {  // the wgmma variant: stage_items below
      const int arow = s_arow[f * 8 + g] >= 0 ? s_arow[f * 8 + g] : s_arow[0];
      x_live[f] = s_arow[f * 8 + g] >= 0;
      a_ptr[f] = static_cast<const unsigned char*>(args.a) + arow * args.lda + static_cast<long long>(k_first) * EB;
    }
    if constexpr (BLOCK_SCALED) {
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int r = s_arow[f * 8 + 2 * t + j];
          a_row[f][j] = r >= 0 ? r : s_arow[0];
        }
    }
  };

  // This lane's slots of its warp's ring: stage s holds the weights (row h, load l) at slot h * LOADS
  // + l and, with ACT_RING, the activations (fragment f, load l) at 2 * LOADS + f * X_LOADS + l, each
  // slot x 32 lanes, so a warp's 16-byte copies and reads are contiguous (conflict-free).
  extern __shared__ __align__(16) uint4 s_ring[];  // [warps][STAGES][SLOTS][32]
  static_assert(WARPS_N * WARPS_K * STAGES * SLOTS * 32 * 16 ==
                    moe_swap_ab_ring_bytes(WARPS_N * WARPS_K, STAGES, QUANT, BLOCK_M, WG, WARPS_K),
                "the host sizes the ring with moe_swap_ab_ring_bytes");
  uint4* const lane_ring = s_ring + warp * (STAGES * SLOTS * 32) + lane;
  auto ring_slot = [&](int s, int h, int l) -> uint4& { return lane_ring[(s * SLOTS + h * LOADS + l) * 32]; };
  auto ring_act = [&](int s, int f, int l) -> uint4& { return lane_ring[(s * SLOTS + 2 * LOADS + f * X_LOADS + l) * 32]; };
  // The wgmma variant's two activation stages after the rings, on 1024-byte swizzle atoms (the host
  // adds 1024 bytes: moe_swap_ab_smem_bytes).
  const unsigned act_stages =
      WG ? (sm80::smem_addr(s_ring) + moe_swap_ab_ring_bytes(WARPS_N * WARPS_K, STAGES, QUANT, BLOCK_M, WG, WARPS_K) + 1023u) & ~1023u : 0u;
  static_assert(!WG || moe_swap_ab_smem_bytes(WARPS_N, STAGES, QUANT, BLOCK_M, true) ==
                           moe_swap_ab_ring_bytes(WARPS_N, STAGES, QUANT, BLOCK_M, WG) + 1024 + kWgmmaStages * wgmma_stage_bytes(BLOCK_M),
                "the host sizes the activation stages with moe_swap_ab_smem_bytes");
  // Activations: XK per 16-byte load, in the weights' run order; load l's k relative to a block.
  constexpr int XK = 16 / EB;
  static_assert(K_PER_LOAD % XK == 0 && X_LOADS * XK == 32, "an activation load stays inside one weight run");
  auto act_k = [](int l) { return (l * XK / K_PER_LOAD) * RUN_STRIDE + (l * XK) % K_PER_LOAD; };

  // Starts block b_base + i * WARPS_K (i is a compile-time step when unrolled) into ring stage s:
  // the weights (and with ACT_RING the activations) by cp.async, zero-filled past k_left (0 * a
  // non-finite weight would poison the sum), the scales into registers. Activations are cached in L1
  // (.ca): the WARPS_N warps of a k slice copy the same ones. `part`: kIssueWeights (the weights and
  // their scales, no commit: the group of the next call that commits takes them), kIssueActs (the
  // activations, then the commit) or both.
  constexpr int kIssueWeights = 1, kIssueActs = 2, kIssueBoth = 3;
  auto issue_block = [&](int i, int s, int part) {
    LaneScales v;
    const int kb = i * WARPS_K * KB;  // k of the block relative to the turn's
    const bool in_block = b_base + i * WARPS_K < b_end;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (in_block) {
        if (part & kIssueWeights)
#pragma unroll
          for (int l = 0; l < LOADS; ++l)
            sm80::cp_async_16(sm80::smem_addr(&ring_slot(s, h, l)),
                              w_ptr[h] + static_cast<long long>(i) * WARPS_K * ROW_BYTES + l * RUN_STRIDE * BITS / 8,
                              kb + l * RUN_STRIDE < k_left);
        // The activations right after the first row's weights, before any scale load: issued after
        // the scales instead, fp8_block ran 0.2-0.8% slower (H200, same run).
        if constexpr (ACT_RING) {
          // The routed tokens' alone. A padding token's slots keep whatever they held (any bits);
          // they meet only its own accumulator column, which is never stored.
          if (h == 0 && (part & kIssueActs))
#pragma unroll
            for (int f = 0; f < NF; ++f)
              if (x_live[f])
#pragma unroll
                for (int l = 0; l < X_LOADS; ++l)
                  sm80::cp_async_16_ca(sm80::smem_addr(&ring_act(s, f, l)),
                                       a_ptr[f] + static_cast<long long>(kb + act_k(l)) * EB, kb + act_k(l) < k_left);
        }
      }
      v.scale[h] = 0u;
      v.zero[h] = 8u;
      if constexpr (SCALED_GROUPS) {
        // fp8 blocks: every lane needs its row's block scale (the mma sums all four lanes' k).
        if ((part & kIssueWeights) && in_block && (BLOCK_SCALED || kb < k_left)) {
          if constexpr (QUANT == kQuantInt4Group)
            v.scale[h] = __ldg(reinterpret_cast<const unsigned short*>(scale_ptr[h]) + i * scale_step);
          else if constexpr (BLOCK_SCALED)
            v.scale[h] = __float_as_uint(__ldg(reinterpret_cast<const float*>(scale_ptr[h]) + i * scale_step));
          else
            v.scale[h] = __ldg(scale_ptr[h] + i * scale_step);
          if (HAS_ZERO && zero_ptr[h]) v.zero[h] = __ldg(zero_ptr[h] + i * scale_step);
        }
      }
    }
    if (part & kIssueActs) sm80::cp_async_commit();  // one group per block, empty past b_end: the waits count blocks
    return v;
  };

  float acc[NF][4];
  // MXFP4 into bf16, 8-token tiles: a block's mma steps alternate between two accumulator sets,
  // added at the end, so that each chain of dependent mma is half as long (H200 same run,
  // gpt-oss-120b M = 16: 267.6-270.1 -> 264.0-264.6 us). Not for int4 (slower: its GEMM2 instances
  // spill with the second set) nor MXFP4 into f16 or wider tiles (spills at 512 threads).
  constexpr bool TWO_CHAINS = !WG && quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16 && NF == 1;
  float acc2[NF][4];  // unused (and compiled away) without TWO_CHAINS
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[f][e] = acc2[f][e] = 0.f;

  // Activations of the lane's elements for each token, in the weights' run order: landed in the
  // ring (fp8), or loaded from global memory (L1), zeros past the reduction length.
  // MXFP4 (bf16, two-stage rings: below) loads them one block ahead: block i + 1's load l of a
  // fragment goes out as soon as block i's mma of group l have read it, so the loads have a block's
  // math to land. ncu (H100, gpt-oss-120b M = 128, GEMM1): 37% of the stall samples were the first
  // mma of a block waiting for the activations loaded at its start. Same run, two rounds, M = 1 / 16 / 128: mxfp4_packed
  // 33.3-33.5 / 278.8-278.9 / 716.4-717.0 -> 32.5 / 270.9-271.1 / 683.4-687.1 us, mxfp4 16 / 128
  // 290.1-290.8 / 737.5-738.7 -> 276.3-276.8 / 696.5-697.0; gpt-oss-20b M = 64 / 128 264-266 /
  // 400-405 -> 247.6-247.7 / 375-378. int4 / int8 the same way: 0-1.8% slower (int4 spills), so
  // they load at the block's start. MXFP4 also skips a padding token's loads (a decode tile holds
  // ~1-4 routed tokens of 8; ncu had GEMM1's L1TEX at 75% of its peak; M = 128 746-750 -> 738-739
  // us) and loads past the end: the registers keep older finite values (zeros first), which meet
  // zero-filled weights or a column that is never stored. No per-block branch either (whole block
  // or tail): ptxas had wrapped such loads in divergent branches (BSSY / BRA / BSYNC).
  // bf16 two-stage rings without the activation ring (one warp along k, or 16 warps; the tuned
  // 8-token tiles of two warps along k copy their activations with the weights instead): the
  // registers of the next block's activations fit there; three stages or f16 (through fp32) spill
  // 8-16 bytes with them, and load at the block's start as before.
  constexpr bool X_AHEAD = !WG && !ACT_RING && quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16 && STAGES <= 2;
  uint4 xa[NF][X_LOADS];  // X_AHEAD: the next block's activations
  // Load l of fragment f in block i (relative to the ring turn): its k and address.
  auto x_k = [&](int l, int i) { return i * WARPS_K * KB + act_k(l); };
  auto x_src = [&](int f, int l, int i) { return a_ptr[f] + static_cast<long long>(x_k(l, i)) * EB; };
  auto load_x = [&](int f, int l, int i) {
    const bool inside = x_k(l, i) < k_left;
    if constexpr (X_AHEAD) ldg16_if<ROLE == kRoleGemm1>(xa[f][l], x_src(f, l, i), x_live[f] && inside);
    else xa[f][l] = inside ? ldg16<ROLE == kRoleGemm1 || !HANDOVER>(x_src(f, l, i)) : make_uint4(0u, 0u, 0u, 0u);
  };
  // The wgmma variant stages the tile's activations, one block ahead: the NF * X_LOADS (fragment,
  // load) items of a block go round the warps (warp w: items w, w + WARPS_N, ...), each lane (g, t)
  // loading its 16 bytes of token 8f + g (as load_x would) and storing them in the stage's k order.
  constexpr int X_ITEMS = WG ? (NF * X_LOADS + WARPS_N - 1) / WARPS_N : 1;
  const unsigned char* xs_ptr[X_ITEMS];
  int xs_k[X_ITEMS];  // the item's k in a block (act_k)
  bool xs_live[X_ITEMS], xs_valid[X_ITEMS];
  unsigned xs_off[X_ITEMS], xs_key[X_ITEMS];
  uint4 xs[X_ITEMS];
  auto stage_items = [&]() {
#pragma unroll
    for (int it = 0; it < X_ITEMS; ++it) {
      const int u = warp + WARPS_N * it;
      xs_valid[it] = u < NF * X_LOADS;  // warp-uniform
      const int f = xs_valid[it] ? u / X_LOADS : 0, l = u % X_LOADS, n = 8 * f + g;
      xs_live[it] = xs_valid[it] && s_arow[n] >= 0;
      const int arow = s_arow[n] >= 0 ? s_arow[n] : s_arow[0];
      xs_k[it] = act_k(l);
      xs_ptr[it] = static_cast<const unsigned char*>(args.a) + arow * args.lda +
                   static_cast<long long>(k_first + xs_k[it]) * EB;
      xs_off[it] = wgmma_stage_offset(BLOCK_M, n, l, t);
      xs_key[it] = wgmma_stage_chunk_key(n, l);
      xs[it] = make_uint4(0u, 0u, 0u, 0u);  // finite where nothing is loaded (padding tokens, k past the end)
    }
  };
  auto load_items = [&](int i) {  // block i of the ring turn
#pragma unroll
    for (int it = 0; it < X_ITEMS; ++it)
      if (xs_valid[it])
        ldg16_if<ROLE == kRoleGemm1>(xs[it], xs_ptr[it] + static_cast<long long>(i) * KB * EB,
                                      xs_live[it] && i * KB + xs_k[it] < k_left);
  };
  auto store_items = [&](int which) {  // then every thread's stores reach the tensor cores' reads
    const unsigned stage = act_stages + which * wgmma_stage_bytes(BLOCK_M);
#pragma unroll
    for (int it = 0; it < X_ITEMS; ++it)
      if (xs_valid[it]) wgmma_stage_store(stage, xs_off[it], xs_key[it], xs[it]);
    wgmma_stage_publish();
  };
  int act_stage = 0;  // the stage holding the block being computed
  unsigned afrag[WG ? 8 : 1][4];  // the wgmma variant's A fragments of a block's eight k16 steps

  auto compute_block = [&](const LaneBlock<LOADS, NF, X_LOADS>& v, int i) {
    if constexpr (WG) {
      // Dequantize the block's eight k16 steps into A fragments, then one warpgroup MMA run.
      auto fill = [&](bool EXACT_MXFP4) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint4 p0 = dequant_group<QUANT, DTYPE, K_PER_LOAD>(v, 0, q, EXACT_MXFP4),
                     p1 = dequant_group<QUANT, DTYPE, K_PER_LOAD>(v, 1, q, EXACT_MXFP4);
          afrag[2 * q][0] = p0.x, afrag[2 * q][1] = p1.x, afrag[2 * q][2] = p0.y, afrag[2 * q][3] = p1.y;
          afrag[2 * q + 1][0] = p0.z, afrag[2 * q + 1][1] = p1.z, afrag[2 * q + 1][2] = p0.w, afrag[2 * q + 1][3] = p1.w;
        }
      };
      bool exact = false;
      if constexpr (quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16)
        exact = __any_sync(0xffffffffu, !dequant::mxfp4_bf16_factor_fits(v.scales.scale[0]) ||
                                            !dequant::mxfp4_bf16_factor_fits(v.scales.scale[1]));
      if (exact)
        fill(true);
      else
        fill(false);
      wgmma_block<BLOCK_M, MMA_DTYPE == kDTypeBF16>(&acc[0][0], afrag, act_stages + act_stage * wgmma_stage_bytes(BLOCK_M));
      (void)i;
      return;
    }
    uint4 (&xr)[NF][X_LOADS] = xa;
    if constexpr (ACT_RING) {
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int l = 0; l < X_LOADS; ++l) xr[f][l] = v.x[f][l];
    } else if constexpr (!X_AHEAD) {
      // A block wholly inside the reduction length loads MXFP4 activations without predicates (their
      // zeroing cost ~12 instructions a block), under one branch for the block.
      const bool whole_block = quant_is_mxfp4(QUANT) && (b_base + i * WARPS_K + 1) * KB <= args.inner;
      if (whole_block) {
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
          for (int l = 0; l < X_LOADS; ++l)
            xr[f][l] = ldg16<ROLE == kRoleGemm1 || !HANDOVER>(x_src(f, l, i));
      } else {
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
          for (int l = 0; l < X_LOADS; ++l) load_x(f, l, i);
      }
    }
    // Eight activations (four MMA_DTYPE pairs) of group q for fragment f.
    auto x_group = [&](int f, int q) {
      if constexpr (FP8) {
        const uint4 r = xr[f][q / 2];
        return q % 2 ? e4m3x8_to_f16(r.z, r.w) : e4m3x8_to_f16(r.x, r.y);
      } else {
        return xr[f][q];
      }
    };
    // fp8 blocks: this block's sums apart, then times the token's and the row's block scales.
    float part[NF][4];
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[f][e] = 0.f;
    float (&sums)[NF][4] = BLOCK_SCALED ? part : acc;
    // The block's mma chain, called with a literal flag in each branch below: inlined, each variant is
    // one branch-free run of dequantization and mma the scheduler can interleave.
    auto mma_block = [&](bool EXACT_MXFP4) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 p0 = dequant_group<QUANT, DTYPE, K_PER_LOAD>(v, 0, q, EXACT_MXFP4),
                     p1 = dequant_group<QUANT, DTYPE, K_PER_LOAD>(v, 1, q, EXACT_MXFP4);
        const unsigned a0[4] = {p0.x, p1.x, p0.y, p1.y};  // step 2q: k 8q + 0..3
        const unsigned a1[4] = {p0.z, p1.z, p0.w, p1.w};  // step 2q + 1: k 8q + 4..7
#pragma unroll
        for (int f = 0; f < NF; ++f) {
          const uint4 x = x_group(f, q);
          sm80::mma_16816<MMA_DTYPE>(sums[f], a0, x.x, x.y);
          if constexpr (TWO_CHAINS) sm80::mma_16816<MMA_DTYPE>(acc2[f], a1, x.z, x.w);
          else sm80::mma_16816<MMA_DTYPE>(sums[f], a1, x.z, x.w);
          if constexpr (X_AHEAD) load_x(f, q, i + 1);
        }
      }
    };
    // Scales above 2 (and NaN) make the folded MXFP4 multiply overflow: the block goes the exact way
    // (decided once per block and warp, not per weight word).
    if constexpr (quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16) {
      if (__any_sync(0xffffffffu, !dequant::mxfp4_bf16_factor_fits(v.scales.scale[0]) ||
                                      !dequant::mxfp4_bf16_factor_fits(v.scales.scale[1])))
        mma_block(true);
      else
        mma_block(false);
    } else {
      mma_block(false);
    }
    if constexpr (BLOCK_SCALED) {
      const int block = b_base + i * WARPS_K;
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float a_sc = __ldg(args.a_scale + a_row[f][j] * args.a_scale_ld + block);
#pragma unroll
          for (int h = 0; h < 2; ++h) acc[f][2 * h + j] += part[f][2 * h + j] * (a_sc * __uint_as_float(v.scales.scale[h]));
        }
    }
  };

  // Ring: STAGES blocks in flight per warp; each landed stage is read into registers, refilled with
  // the block STAGES further on, then computed, so the copies stay in flight through the math.
  {
    LaneScales scales_in_flight[STAGES];
    // Without the activation ring the first blocks' copies need no tile rows: they start before the
    // rows are staged (the slots' copy landing, a division and a barrier), so a CTA's first weights
    // are on their way while it reads its rows.
    // The weight-only formats' activation ring (16-bit activations): the weights go out first in
    // both GEMMs, the rows are staged under them, then the routed tokens' activations.
    constexpr bool ROWS_LATE = ACT_RING && !FP8;
    if constexpr (ACT_RING && !ROWS_LATE) stage_tile_rows();
    // GEMM2 with the activation ring: the first blocks' weights go out before the wait, their
    // activations after it, one group a block as ever (the first group also takes every early
    // weight copy, so a landed group still means a landed block). H100, same run, two rounds
    // (thirty-third session): fp8_block DeepSeek-V3 TP8 M = 4 / 16 79.4-79.5 / 215.8-215.9 ->
    // 78.4-78.6 / 215.0-215.1 us, M = 128 547.7-547.8 -> 549.6-549.9; fp8_channel Qwen3-30B-A3B
    // (heuristic tiles) M = 4 / 16 66.2-66.4 / 150.9-151.3 -> 64.1-64.3 / 147.7-147.9.
    constexpr bool WEIGHTS_FIRST = ACT_RING && (!WAIT_FIRST || ROWS_LATE);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) scales_in_flight[s] = issue_block(s, s, WEIGHTS_FIRST ? kIssueWeights : kIssueBoth);
    if constexpr (WEIGHTS_FIRST) {
      if constexpr (ROWS_LATE) stage_tile_rows();  // waits for the slots' group alone: the weights are uncommitted
      if constexpr (!WAIT_FIRST) wait_for_activations();  // the activations (and their scales) of the kernel before
#pragma unroll
      for (int s = 0; s < STAGES; ++s) issue_block(s, s, kIssueActs);
    }
    if constexpr (!ACT_RING) stage_tile_rows();
    if constexpr (!WAIT_FIRST && !WEIGHTS_FIRST) wait_for_activations();  // GEMM1's intermediate (A), from the first block on
    if constexpr (WG) {
      stage_items();
      load_items(0);
      store_items(0);
    }
    if constexpr (X_AHEAD) {
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int l = 0; l < X_LOADS; ++l) {
          xa[f][l] = make_uint4(0u, 0u, 0u, 0u);
          load_x(f, l, 0);
        }
    }
    for (; b_base < b_end;) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        sm80::cp_async_wait<STAGES - 1>();  // this lane's copies of stage s have landed
        LaneBlock<LOADS, NF, X_LOADS> cur;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int l = 0; l < LOADS; ++l) cur.w[h][l] = ring_slot(s, h, l);
        if constexpr (ACT_RING)
#pragma unroll
          for (int f = 0; f < NF; ++f)
#pragma unroll
            for (int l = 0; l < X_LOADS; ++l) cur.x[f][l] = ring_act(s, f, l);
        cur.scales = scales_in_flight[s];
        scales_in_flight[s] = issue_block(s + STAGES, s, kIssueBoth);
        if constexpr (WG) {
          // Block b + 1's activations load under block b's math and land in the other stage after it.
          if (b_base + s < b_end) {
            const bool next = b_base + s + 1 < b_end;  // CTA-uniform (one warp along k)
            if (next) load_items(s + 1);
            compute_block(cur, s);
            act_stage = act_stage == kWgmmaStages - 1 ? 0 : act_stage + 1;
            if (next) store_items(act_stage);
          }
        } else if (b_base + s * WARPS_K < b_end) {
          compute_block(cur, s);
        }
      }
      // Advance to the next ring turn.
      const int turn = STAGES * WARPS_K;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w_ptr[h] += static_cast<long long>(turn) * ROW_BYTES;
        if constexpr (SCALED_GROUPS) {
          scale_ptr[h] += kScaleBytes * STAGES * scale_step;
          if (HAS_ZERO && zero_ptr[h]) zero_ptr[h] += STAGES * scale_step;
        }
      }
#pragma unroll
      for (int f = 0; f < (WG ? 0 : NF); ++f) a_ptr[f] += static_cast<long long>(turn) * KB * EB;
#pragma unroll
      for (int it = 0; it < (WG ? X_ITEMS : 0); ++it) xs_ptr[it] += static_cast<long long>(turn) * KB * EB;
      b_base += turn;
      k_left -= turn * KB;
    }
    sm80::cp_async_wait<0>();  // the empty tail groups: nothing left in flight at exit
  }

  if constexpr (TWO_CHAINS)
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[f][e] += acc2[f][e];
  // Sum the WARPS_K partial sums in warp order.
  if constexpr (WARPS_K > 1) {
    if (wk > 0)
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_partial[wk - 1][wn][f * 4 + e][lane] = acc[f][e];
    __syncthreads();
    if (wk > 0) return;  // (the tile's signal below counts on the WARPS_N warps of wk = 0)
#pragma unroll
    for (int w = 0; w < WARPS_K - 1; ++w)
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[f][e] += s_partial[w][wn][f * 4 + e][lane];
  }

  swap_ab_detail::store_tile<ROLE, DTYPE, ACT, QUANT, NF>(args, acc, wrow, col, s_slot, s_arow, row0, expert, t);
  if (ROLE == kRoleGemm1 && args.tile_ready) {  // this CTA's columns of the tile are stored
    storers_barrier<WARPS_N * 32>();
    if (threadIdx.x == 0) tile_flags::release(args.tile_ready + tile, 1);
  }
}

}  // namespace moejit
