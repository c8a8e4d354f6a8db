// Weight/activation quantization schemes of the MoE GEMMs (template parameter QUANT) and their
// storage rules. Plain C++: the host includes this header too, so both sides agree on the codes.
//
// Weight-only (activations stay DTYPE; B is dequantized to DTYPE in shared memory, DTYPE mma):
//   kQuantInt8Channel  int8 weights [E, rows, K], fp32 scale per output row [E, rows]
//                      (applied to the accumulator in the epilogue: the dequantization is exact).
//   kQuantInt4Group    uint4, two per byte along K (low nibble = even k) [E, rows, K/2]; scales in
//                      DTYPE per group of `group` k [E, rows, K/group]; zero point 8 (symmetric,
//                      GPTQ "uint4b8") or per-group uint8 zero points [E, rows, K/group].
//   kQuantMxfp4        OCP MX fp4: e2m1, two per byte along K (low nibble = even k) [E, rows, K/2]
//                      (gpt-oss *_blocks [E, rows, K/32, 16]); e8m0 scale per 32 k [E, rows, K/32].
//   kQuantMxfp4Packed  kQuantMxfp4 with the bits of each 32-bit word (8 consecutive k) reordered
//                      once at load time (prepack_mxfp4, moe/mxfp4_packed.cuh): same shapes and
//                      scales, fewer instructions per weight to decode.
// w8a8 (activations quantized to e4m3 on the fly; e4m3 mma, fp32 accumulation):
//   kQuantFp8Block     weights e4m3 [E, rows, K] with fp32 scales per 128x128 block
//                      [E, ceil(rows/128), ceil(K/128)]; activations per token per 128 k.
//   kQuantFp8Channel   weights fp32 scale per output row [E, rows]; activations per token.
//   kQuantFp8Tensor    one fp32 weight scale per expert [E]; activations with a static scale [1].
// Every scale is a multiplier: w = q * scale (DeepSeek's weight_scale_inv).
#pragma once

#include "common/host_device.cuh"

namespace moejit {

enum MoeQuant : int {
  kQuantNone = 0,
  kQuantInt8Channel = 1,
  kQuantInt4Group = 2,
  kQuantMxfp4 = 3,
  kQuantFp8Block = 4,
  kQuantFp8Channel = 5,
  kQuantFp8Tensor = 6,
  kQuantMxfp4Packed = 7,
};

inline constexpr int kQuantFp8BlockSize = 128;  // the 128x128 weight blocks / 128-wide activation groups
inline constexpr int kMxfp4GroupSize = 32;
// int4_group's quant_group for one scale (and zero point) per weight row over all of k: per channel,
// as GPTQ's group_size -1. The kernels read scale column k >> kQuantGroupPerRowShift, 0 for any k.
inline constexpr int kQuantGroupPerRow = -1;
inline constexpr int kQuantGroupPerRowShift = 31;
inline constexpr float kFp8E4m3Max = 448.f;

MOEJIT_HOST_DEVICE constexpr bool quant_is_fp8(int q) { return q >= kQuantFp8Block && q <= kQuantFp8Tensor; }
// MXFP4 in either layout (the checkpoint's or prepacked).
MOEJIT_HOST_DEVICE constexpr bool quant_is_mxfp4(int q) { return q == kQuantMxfp4 || q == kQuantMxfp4Packed; }
// B is dequantized to DTYPE in shared memory before the DTYPE mma.
MOEJIT_HOST_DEVICE constexpr bool quant_dequantizes_b(int q) {
  return (q >= kQuantInt8Channel && q <= kQuantMxfp4) || q == kQuantMxfp4Packed;
}
// Bits of one stored weight element.
MOEJIT_HOST_DEVICE constexpr int quant_weight_bits(int q) {
  return q == kQuantNone ? 16 : (q == kQuantInt4Group || quant_is_mxfp4(q)) ? 4 : 8;
}
// Bytes of one A (activation) element as the mma reads it.
MOEJIT_HOST_DEVICE constexpr int quant_activation_bytes(int q) { return quant_is_fp8(q) ? 1 : 2; }
// The accumulator is scaled per output row / column in the epilogue (not per k block).
MOEJIT_HOST_DEVICE constexpr bool quant_scales_in_epilogue(int q) {
  return q == kQuantInt8Channel || q == kQuantFp8Channel || q == kQuantFp8Tensor;
}

// The wgmma kernels sum each 128-wide k tile of e4m3 products apart and add it into fp32 registers
// (every fp8 format; fp8_block scales it on the way): the tensor cores' fp8 accumulation keeps only
// ~14 bits (DeepSeek-V3 report), so one accumulator over all of K drifted. Measured, H100,
// E = 40, top_k = 5, K = 1536, N = 640, M = 4096, relative error to the fp64 reference: fp8_channel
// 1.08e-2 (band 1e-2), fp8_tensor 8.7e-3 with GEMM1 in one accumulator; 2.35e-3 on mma.sync tiles.
MOEJIT_HOST_DEVICE constexpr bool quant_promotes_k_tiles(int q) { return quant_is_fp8(q); }

// How an activation-quantization kernel picks the scale of a group (moe_act_quant, fp8 only).
enum MoeActQuantMode : int {
  kActQuantGroup128 = 0,  // per row per 128 columns: amax / 448
  kActQuantRow = 1,       // per row: amax / 448
  kActQuantStatic = 2,    // one given scale for the tensor
};
// moe_act_quant's work per warp and step: per-group scales, 128-column groups (a half-warp each, 8
// columns a lane, two groups a half-warp, so each warp has 1 KiB of loads in flight); else rows.
enum : int { kActQuantGroupsPerWarp = 4 };

}  // namespace moejit
