// Epilogue of the moe_gemm kernels straight from fp32 C fragments. mma.sync m16n8 fragments and
// wgmma m64nN accumulators share one layout (a warp's 16 rows: lane holds rows lane/4 (+8), columns
// 8 * ni + 2 * (lane % 4) (+1)), so the shared-memory kernel (moe_gemm_sm80.cuh) and the wgmma one
// (moe_gemm_wgmma.cuh) store through this.
#pragma once

#include "common/mma_sm80.cuh"
#include "moe/activations.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace moe_store {

// acc[G][MI][NI][4]: a warp's fragments, MI x 16 rows from tile row tile_row, NI x 8 columns from
// tile column tile_col of each set (gate, up). GEMM1: bias, activation -> DTYPE intermediate;
// GEMM2: bias, router weight -> fp32 rows or atomic top-k sums. s_col_scale: per-B-row weight
// scales (epilogue-scaled formats only). Split-K GEMM2 adds every split's part: the bias comes with
// split 0's only.
//
// Each finished pair of outputs (columns col, col + 1 of tile row rl, routed slot `slot`) goes to
// sink(rl, col, slot, a, b): GEMM1 values are activated, GEMM2 ones carry bias and router weight.
// direct_sink below stores them to global memory; the wgmma kernel stages them in shared memory.
//
// BIAS: kBiasNone / kBiasAlways, decided once per tile (store_fragments below), or kBiasChecked,
// tested per pair (store_fragments_checked). With the test inside the loop the no-bias epilogue
// still ran a predicated-off load per pair, and the adds waiting on those loads' scoreboards
// (queued behind the tile's stores) were 31% of the stall samples of DeepSeek-V3 TP8's wgmma GEMM2
// at M = 8192 (H200, ncu source counters). The shared-memory kernel keeps the per-pair test: its
// 128-accumulator tiles spilled with two epilogue instances.
// kBiasTile: `bias` is the tile's own bias columns in shared memory, [G][BLOCK_N] by tile column
// (the persistent wgmma kernel stages them under its k loop). Read from global memory, each pair's
// bias load sat between the branches of the column tests, so the compiler kept them in order and
// every add waited a full round trip: a third of gpt-oss-120b's consumer time at M = 8192 (H100,
// ncu source counters).
enum BiasMode : int { kBiasNone = 0, kBiasAlways = 1, kBiasChecked = 2, kBiasTile = 3 };
template <int BIAS, int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_N, int G, int MI, int NI, class Sink>
__device__ inline void store_fragments_with(const MoeGemmArgs& args, const float (&acc)[G][MI][NI][4], int tile_row,
                                            int tile_col, int lane, int n0, const float* bias, const int* s_slot,
                                            const int* s_arow, const float* s_weight, const float* s_col_scale,
                                            const Sink& sink) {
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool FP8 = quant_is_fp8(QUANT);
  constexpr bool EPILOGUE_SCALED = quant_scales_in_epilogue(QUANT);
  const bool has_bias = BIAS == kBiasAlways || BIAS == kBiasTile || (BIAS == kBiasChecked && bias);
  // Sinks that take the whole tile (a staged tile: only columns < n_out leave shared memory) skip
  // the per-column test where every read stays in bounds without it (bias from the staged columns
  // or none): the branches around each pair were a third of the instructions of short-k GEMM2
  // epilogues. Padding rows are still skipped: half-empty 64-row tiles ran 2% slower without that.
  constexpr bool ALL_COLUMNS = Sink::kWholeTile && (BIAS == kBiasNone || BIAS == kBiasTile);
  // Bias of output column c in set `half` (gate / the only one = 0, up = 1).
  const unsigned s_bias = BIAS == kBiasTile ? sm80::smem_addr(bias) - 4u * n0 : 0u;  // column c at + 4 c
  auto bias_at = [&](int c, int half) {
    if constexpr (BIAS == kBiasTile) return sm80::lds_f32(s_bias + 4u * (half * BLOCK_N + c));
    else if constexpr (GATED) return bias[activation_is_interleaved(ACT) ? 2 * c + half : c + half * args.up_row_offset];
    else return bias[c];
  };
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = tile_row + mi * 16 + (lane >> 2) + h * 8;
      const int g = s_slot[rl];
      if (g < 0) continue;
      const float w = s_weight[rl];
      // Per-row activation scale (fp8 per token / per tensor); int8 weight-only has none.
      const float row_scale = (EPILOGUE_SCALED && FP8) ? args.a_scale[s_arow[rl] * args.a_scale_ld] : 1.f;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = n0 + tile_col + ni * 8 + (lane & 3) * 2;
        if (!ALL_COLUMNS && col >= args.n_out) continue;  // n_out is even: col + 1 is in range too
        float col_scale[G][2];  // (gate, up) x (col, col + 1)
#pragma unroll
        for (int s = 0; s < G; ++s)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            col_scale[s][j] = EPILOGUE_SCALED ? row_scale * s_col_scale[s * BLOCK_N + tile_col + ni * 8 + (lane & 3) * 2 + j]
                                              : 1.f;
        float v[2] = {acc[0][mi][ni][2 * h] * col_scale[0][0], acc[0][mi][ni][2 * h + 1] * col_scale[0][1]};
        if constexpr (ROLE == kRoleGemm1) {
          float out[2];
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (args.weight_on_input) v[j] *= w;
            if constexpr (GATED) {
              float u = acc[G - 1][mi][ni][2 * h + j] * col_scale[G - 1][j];
              if (args.weight_on_input) u *= w;
              if (has_bias) {
                v[j] += bias_at(col + j, 0);
                u += bias_at(col + j, 1);
              }
              out[j] = act::gated<ACT>(v[j], u, args.alpha, args.limit);
            } else {
              if (has_bias) v[j] += bias_at(col + j, 0);
              out[j] = act::single<ACT>(v[j]);
            }
          }
          sink(rl, col, g, out[0], out[1]);
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (has_bias) v[j] += bias_at(col + j, 0);
            if (args.weight_on_output) v[j] *= w;
          }
          sink(rl, col, g, v[0], v[1]);
        }
      }
    }
  }
}

template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_N, int G, int MI, int NI, class Sink>
__device__ inline void store_fragments(const MoeGemmArgs& args, const float (&acc)[G][MI][NI][4], int tile_row,
                                       int tile_col, int lane, int n0, int expert, const int* s_slot,
                                       const int* s_arow, const float* s_weight, const float* s_col_scale,
                                       const Sink& sink) {
  const float* bias = moe_tile::tile_bias<ROLE>(args, expert);
  if (bias)
    store_fragments_with<kBiasAlways, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, tile_row, tile_col, lane, n0, bias,
                                                                        s_slot, s_arow, s_weight, s_col_scale, sink);
  else
    store_fragments_with<kBiasNone, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, tile_row, tile_col, lane, n0, nullptr,
                                                                      s_slot, s_arow, s_weight, s_col_scale, sink);
}

// BIAS_STAGED: the same with the tile's bias columns staged in shared memory at s_bias (kBiasTile),
// where the tile has a bias (has_bias); else store_fragments. (s_bias is passed as is, never
// selected against null: the compiler then knows it for shared memory and addresses it with 32-bit
// offsets; a generic pointer cost 64-row GEMM2 tiles the register that kept 3 CTAs on an SM.)
template <bool BIAS_STAGED, int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_N, int G, int MI, int NI, class Sink>
__device__ inline void store_fragments_tile_bias(const MoeGemmArgs& args, const float (&acc)[G][MI][NI][4], int tile_row,
                                                 int tile_col, int lane, int n0, int expert, bool has_bias,
                                                 const float* s_bias, const int* s_slot, const int* s_arow,
                                                 const float* s_weight, const float* s_col_scale, const Sink& sink) {
  if constexpr (!BIAS_STAGED)
    store_fragments<ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, tile_row, tile_col, lane, n0, expert, s_slot, s_arow,
                                                      s_weight, s_col_scale, sink);
  else if (has_bias)
    store_fragments_with<kBiasTile, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, tile_row, tile_col, lane, n0, s_bias,
                                                                      s_slot, s_arow, s_weight, s_col_scale, sink);
  else
    store_fragments_with<kBiasNone, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, tile_row, tile_col, lane, n0, nullptr,
                                                                      s_slot, s_arow, s_weight, s_col_scale, sink);
}

template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_N, int G, int MI, int NI, class Sink>
__device__ inline void store_fragments_checked(const MoeGemmArgs& args, const float (&acc)[G][MI][NI][4], int tile_row,
                                               int tile_col, int lane, int n0, int expert, const int* s_slot,
                                               const int* s_arow, const float* s_weight, const float* s_col_scale,
                                               const Sink& sink) {
  const float* bias = moe_tile::tile_bias<ROLE>(args, expert);
  store_fragments_with<kBiasChecked, ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, tile_row, tile_col, lane, n0, bias,
                                                                       s_slot, s_arow, s_weight, s_col_scale, sink);
}

// Stores a pair straight to global memory: GEMM1 -> DTYPE intermediate row row0 + rl; GEMM2 ->
// fp32 or DTYPE row of the routed slot, or atomically added into the token's fp32 row.
template <int ROLE, int DTYPE>
struct DirectSink {
  static constexpr bool kWholeTile = false;  // columns past n_out must not be stored
  const MoeGemmArgs& args;
  int row0;
  __device__ void operator()(int rl, int col, int slot, float a, float b) const {
    if constexpr (ROLE == kRoleGemm1) {
      unsigned short* c_row = static_cast<unsigned short*>(args.c) + (row0 + rl) * args.ldc;
      *reinterpret_cast<unsigned*>(c_row + col) = sm80::pack2<DTYPE>(a, b);
    } else if constexpr (ROLE == kRoleGemm2Rows) {
      *reinterpret_cast<float2*>(static_cast<float*>(args.c) + slot * args.ldc + col) = make_float2(a, b);
    } else if constexpr (ROLE == kRoleGemm2Rows16) {
      *reinterpret_cast<unsigned*>(static_cast<unsigned short*>(args.c) + slot * args.ldc + col) = sm80::pack2<DTYPE>(a, b);
    } else {
      sm80::red_add_f32x2(static_cast<float*>(args.c) + (slot / args.top_k) * args.ldc + col, a, b);
    }
  }
};

}  // namespace moe_store
}  // namespace moejit
