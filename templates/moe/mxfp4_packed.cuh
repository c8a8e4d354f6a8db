// The prepacked MXFP4 layout (kQuantMxfp4Packed): the 32 bits of each little-endian word of the
// checkpoint's codes (8 consecutive k, code j at bits 4j .. 4j + 3: m, e0, e1, s from the low bit)
// are reordered once at load time (prepack_mxfp4) so that each bf16 pair the mma reads comes out
// of the word with few integer instructions. Plain C++: the host prepacks and the tests check the
// decode with the same functions the kernels run.
//
// Pair p holds codes 2p (low 16-bit lane) and 2p + 1 (high lane). Decoded, a lane carries the
// code's magnitude bits m, e0, e1 at bits 6, 7, 8 and its sign at bit 15: a bf16 whose value is the
// e2m1 value times 2^-126 (dequant8 in moe_dequant.cuh explains the trick), so one multiply by a
// power of two scales it. From the packed word w (M = kMxfp4PairMask):
//   pair 0: w & M                 (the bits stored where they land)
//   pair 1: rotr(w, 6) & M        (stored 6 bits above)
//   pair 2: rotr(w, 3) & M        (stored 3 bits above)
//   pair 3: ((w & 0x001b001b) * 0x1084) & M   (m, e0, e1, s stored at bits 4, 0, 1, 3 of the
//            lane; the multiply adds the copies shifted by 2, 7 and 12, which do not carry into M)
// 12 instructions per 8 weights with the scale multiply, against 19 from the checkpoint's order
// (no rotation set places all four pairs: checked exhaustively, docs/quantization.md).
#pragma once

#include "common/host_device.cuh"

namespace moejit {

inline constexpr unsigned kMxfp4PairMask = 0x81c081c0u;  // bits 6, 7, 8, 15 of both lanes

MOEJIT_HOST_DEVICE inline unsigned mxfp4_rotr(unsigned w, int r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(w, w, r);
#else
  return (w >> r) | (w << (32 - r));
#endif
}

// Pair p (0..3) of a packed word, decoded to the bf16 bit positions above (both lanes).
MOEJIT_HOST_DEVICE inline unsigned mxfp4_packed_pair(unsigned w, int p) {
  return p == 0   ? w & kMxfp4PairMask
         : p == 1 ? mxfp4_rotr(w, 6) & kMxfp4PairMask
         : p == 2 ? mxfp4_rotr(w, 3) & kMxfp4PairMask
                  : ((w & 0x001b001bu) * 0x1084u) & kMxfp4PairMask;
}

// Where prepacking stores bit b (0 m, 1 e0, 2 e1, 3 s) of code j (0..7) of a word.
MOEJIT_HOST_DEVICE constexpr int mxfp4_packed_bit(int j, int b) {
  const int p = j / 2, lane = 16 * (j % 2);
  constexpr int kLands[4] = {6, 7, 8, 15};   // where a lane's bit is read after the decode
  constexpr int kPair3[4] = {4, 0, 1, 3};    // pair 3's stored bits (the multiply moves them)
  const int target = lane + kLands[b];
  return p == 0 ? target : p == 1 ? (target + 6) % 32 : p == 2 ? (target + 3) % 32 : lane + kPair3[b];
}

// A checkpoint word -> the packed word (and back).
MOEJIT_HOST_DEVICE constexpr unsigned mxfp4_pack_word(unsigned w) {
  unsigned out = 0;
  for (int j = 0; j < 8; ++j)
    for (int b = 0; b < 4; ++b) out |= ((w >> (4 * j + b)) & 1u) << mxfp4_packed_bit(j, b);
  return out;
}
// Code j (0..7) of a packed word, as the checkpoint stores it (the slow paths: f16 activations).
MOEJIT_HOST_DEVICE inline unsigned mxfp4_packed_code(unsigned w, int j) {
  const unsigned v = mxfp4_packed_pair(w, j / 2) >> (16 * (j % 2));
  return ((v >> 6) & 7u) | ((v >> 12) & 8u);
}

}  // namespace moejit
