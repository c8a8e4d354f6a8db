// The decode GEMV pair for MXFP4 weights (w4a16: e2m1 codes, one e8m0 scale per 32 k, bf16
// activations) on tensor cores: moe_decode_mx_gemv1_kernel / moe_decode_mx_gemv2_kernel, the same
// layer as moe_decode_gemv1_kernel / moe_decode_gemv2_kernel (routing in every CTA, no sort, no
// cast) and the same MoeDecodeArgs.
// Why mma: a scalar MXFP4 GEMV (dequantize, unpack to fp32, fp32 FMAs: ~9 instructions a weight
// byte) ran gpt-oss-120b M = 1 at 75 us against the swap-AB kernels' 37 (fifteenth session): issue,
// not memory, bounded it. Here a weight byte costs ~3 instructions: the packed-code decode of
// moe_dequant.cuh (scale folded into one bf16 multiply) and a share of an m16n8k16 mma.
// How: a CTA takes strips of 8 weight rows (gemv1: 4 intermediate columns' gate and up rows, or 8
// columns without a gate; gemv2: 8 output columns of one token). Its 8 warps split the reduction:
// warp w's lane (row r = lane / 4, q = lane % 4) reads 16-byte chunk p = 32 * step + 4 * w + q of
// weight row r (32 codes: one scale), so each load is whole and carries its own scale. The weights
// are the mma's B operand (8 columns = the strip's rows), the activations its A operand (every one
// of the 16 rows the same token's). Within an mma the k order is a permutation of the chunk's
// elements, the same for A and B: thread q's k pairs (2q, 2q + 1) and (2q + 8, 2q + 9) of mma j are
// its chunk's elements 4j .. 4j + 3. Partial sums of the 8 warps add up through shared memory.
#pragma once

#include "moe/moe_decode_gemv.cuh"
#include "moe/moe_dequant.cuh"

namespace moejit {
namespace moe_decode_mx {

using moe_decode_detail::kThreads;
using moe_decode_detail::kWarps;
inline constexpr int kChunkCodes = 32;                  // e2m1 codes per 16-byte chunk (one e8m0 scale)
inline constexpr int kStripRows = kMoeDecodeStripRows;  // weight rows a strip (the mma's n)
inline constexpr int kStepChunks = kWarps * 4;          // chunks of a row one CTA step reads
inline constexpr int kGemv1Loads = 12;                  // gemv1: weight chunks a thread has in flight
inline constexpr int kGemv2Loads = 5;                   // gemv2 (three CTAs an SM: fewer registers)

template <int CHUNKS>
struct Steps {
  static constexpr int STEPS = (CHUNKS + kStepChunks - 1) / kStepChunks;
  static constexpr bool RAGGED = CHUNKS % kStepChunks != 0;
};

// d += the products of one chunk: 16 bytes of codes w with e8m0 scale s (the mma's B side) against
// the 32 activations of the same k (A side, bf16: x[i] holds elements 8i .. 8i + 7). Word i decodes
// to pairs 4i .. 4i + 3, the B registers of mmas 2i and 2i + 1, right before them (16 decoded pairs
// held at once spilled gemv2). The folded multiply (mxfp4x8_bf16_scaled) takes scales up to 2;
// larger ones (and NaN, 255) go the exact way (dequant8) for the whole warp: a warp-uniform branch,
// since a select between the two (the first version) ran both decodes for every chunk, ~9
// instructions a weight byte (gpt-oss-120b M = 1 45.5 us against the swap-AB kernels' 30.8, H100).
template <int QUANT, bool FOLDED>
__device__ inline void mma_words(float (&d)[4], const unsigned (&words)[4], unsigned s, const uint4 (&x)[4]) {
  const unsigned factor = dequant::mxfp4_bf16_factor(s);
  const float scale = dequant::e8m0_to_float(s);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 b = FOLDED ? dequant::mxfp4x8_bf16_scaled<QUANT>(words[i], factor)
                           : dequant::dequant8<QUANT, kDTypeBF16>(words[i], 0u, scale, 0.f);
    const unsigned a0[4] = {x[i].x, x[i].x, x[i].y, x[i].y}, a1[4] = {x[i].z, x[i].z, x[i].w, x[i].w};
    sm80::mma_16816<kDTypeBF16>(d, a0, b.x, b.y);
    sm80::mma_16816<kDTypeBF16>(d, a1, b.z, b.w);
  }
}
template <int QUANT>
__device__ inline void mma_chunk(float (&d)[4], uint4 w, unsigned s, const uint4 (&x)[4]) {
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
  if (!__any_sync(0xffffffffu, !dequant::mxfp4_bf16_factor_fits(s))) mma_words<QUANT, true>(d, words, s, x);
  else mma_words<QUANT, false>(d, words, s, x);
}

// The 32 activations of chunk p from a token's row staged in shared memory (or zeros).
__device__ inline void load_x(const unsigned short* row, int p, bool ok, uint4 (&v)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v[i] = ok ? reinterpret_cast<const uint4*>(row + p * kChunkCodes)[i] : make_uint4(0, 0, 0, 0);
}
// Stages `elements` bf16 (a multiple of 8) of one token's activations from global memory into
// shared memory (the caller's barriers around it). Why: loaded per chunk from global memory beside
// the weights, each chunk's mmas waited for an L2 round trip of their own (gpt-oss-120b M = 1: the
// GEMV 41 us, the swap-AB kernels 31, H100).
template <bool L2_ONLY>
__device__ inline void stage_row(const unsigned short* src, int elements, unsigned short* dst) {
  for (int i = threadIdx.x; i < elements / 8; i += kThreads)
    reinterpret_cast<uint4*>(dst)[i] =
        L2_ONLY ? __ldcg(reinterpret_cast<const uint4*>(src) + i) : __ldg(reinterpret_cast<const uint4*>(src) + i);
}

// After the mma, lane q (< 4) of a warp holds the strip's rows 2q and 2q + 1 in d[0], d[1] (row 0
// of the A side; every A row is the same token). Each warp's lanes 0..3 store them to red[warp].
__device__ inline void strip_to_shared(float (&red)[kWarps][kStripRows], const float (&d)[4]) {
  const int lane = threadIdx.x & 31;
  if (lane < 4) {
    red[threadIdx.x >> 5][2 * lane] = d[0];
    red[threadIdx.x >> 5][2 * lane + 1] = d[1];
  }
}
__device__ inline float strip_total(const float (&red)[kWarps][kStripRows], int row) {
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) s += red[w][row];
  return s;
}

}  // namespace moe_decode_mx

// gemv1: items are strips of one routed slot (4 gated intermediate columns: rows gate n .. n + 3 then
// up n .. n + 3; else 8 columns), G strips of one token a batch (they share x's chunks).
template <int DTYPE, int ACT, int QUANT, int TOPK, int HIDDEN, int INTER, int NUM_EXPERTS, int EXPERTS_PER_LANE,
          int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE>
__global__ void __launch_bounds__(kMoeDecodeThreads, 2) moe_decode_mx_gemv1_kernel(const MoeDecodeArgs a) {
  using namespace moe_decode_detail;
  using namespace moe_decode_mx;
  static_assert(quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16, "MXFP4 weights, bf16 activations");
  static_assert(HIDDEN % kChunkCodes == 0, "whole 32-code chunks of a W1 row");
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool INTERLEAVED = activation_is_interleaved(ACT);
  constexpr int COLS = GATED ? kStripRows / 2 : kStripRows;  // intermediate columns a strip
  constexpr int STRIPS = (INTER + COLS - 1) / COLS;          // strips a routed slot
  constexpr int VEC = HIDDEN / kChunkCodes;
  using S = Steps<VEC>;
  constexpr int G = S::STEPS >= kGemv1Loads ? 1 : (kGemv1Loads / S::STEPS < 4 ? kGemv1Loads / S::STEPS : 4);
  constexpr int CH = G == 1 ? (S::STEPS < kGemv1Loads ? S::STEPS : kGemv1Loads) : S::STEPS;  // steps a chunk of loads
  __shared__ Picks picks;
  __shared__ float red[2][G][kWarps][kStripRows];
  extern __shared__ uint4 dynamic_smem[];
  unsigned short* xs = reinterpret_cast<unsigned short*>(dynamic_smem);  // the batch token's x row
  const unsigned short* x = static_cast<const unsigned short*>(a.x);
  constexpr int kPerToken = TOPK * STRIPS;
  int begin, end;
  cta_items(static_cast<long long>(a.num_tokens) * kPerToken, begin, end);
  pdl::wait();  // launched after whatever wrote x and the logits
  pdl::launch_dependents();  // gemv2 may start routing under this kernel's tail
  // The first batch's x row travels while the CTA routes (route's barriers publish it).
  int staged = begin / kPerToken;
  if (begin < end) stage_row<false>(x + staged * a.ldx, HIDDEN, xs);
  route<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, picks);
  if (blockIdx.x == 0) publish<TOPK>(a, picks);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, q = lane & 3;
  // This thread's strip row r: intermediate column offset and which W1 row (gate / up) it is.
  const int r_col = r % COLS, r_up = GATED ? r / COLS : 0;
  const unsigned char* w1 = static_cast<const unsigned char*>(a.w1);
  int parity = 0;
  for (int base = begin, count = 0; base < end; base += count, parity ^= 1) {
    const int token = base / kPerToken;
    count = min(G, min(end, (token + 1) * kPerToken) - base);
    if (token != staged) {  // uniform: every thread walks the same batches
      __syncthreads();      // the previous token's readers are done
      stage_row<false>(x + token * a.ldx, HIDDEN, xs);
      staged = token;
      __syncthreads();
    }
    const unsigned char* row[G];
    const unsigned char* srow[G];
    bool live[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int item = base + g, slot = item / STRIPS, n = (item % STRIPS) * COLS + r_col;
      const int e = g < count ? picks.local[slot] : -1;
      live[g] = e >= 0 && n < INTER;
      const int w_row = !GATED ? n : INTERLEAVED ? 2 * n + r_up : n + r_up * INTER;
      const int ee = live[g] ? e : 0, rr = live[g] ? w_row : 0;
      row[g] = w1 + ee * a.w1_expert_stride + rr * a.ldw1;
      srow[g] = a.w1_mx_scale + ee * a.w1_scale_expert_stride + rr * a.w1_scale_row_stride;
    }
    float d[G][4];
#pragma unroll
    for (int g = 0; g < G; ++g) d[g][0] = d[g][1] = d[g][2] = d[g][3] = 0.f;
#pragma unroll
    for (int s0 = 0; s0 < S::STEPS; s0 += CH) {
      uint4 wv[G][CH];
      unsigned sc[G][CH];
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int p = (s0 + c) * kStepChunks + warp * 4 + q;
        const bool in_row = s0 + c < S::STEPS && (!S::RAGGED || p < VEC);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const bool ok = live[g] && in_row;
          wv[g][c] = ok ? load_stream(row[g] + p * 16) : make_uint4(0, 0, 0, 0);
          sc[g][c] = ok ? __ldg(srow[g] + p) : 0u;
        }
      }
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int p = (s0 + c) * kStepChunks + warp * 4 + q;
        const bool in_row = s0 + c < S::STEPS && (!S::RAGGED || p < VEC);
        uint4 xv[4];
        load_x(xs, p, in_row, xv);
#pragma unroll
        for (int g = 0; g < G; ++g) mma_chunk<QUANT>(d[g], wv[g][c], sc[g][c], xv);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) strip_to_shared(red[parity][g], d[g]);
    __syncthreads();
    // Thread j finishes column j % COLS of strip j / COLS: router weight (on input), bias, activation.
    const int j = threadIdx.x, g = j / COLS, col = j % COLS;
    if (g < count) {
      const int item = base + g, slot = item / STRIPS, n = (item % STRIPS) * COLS + col;
      const int e = picks.local[slot];
      if (e >= 0 && n < INTER) {
        const float w = a.weight_on_input ? picks.weight[slot] : 1.f;
        float v = strip_total(red[parity][g], col) * w;
        const float* bias = a.b1 ? a.b1 + e * a.b1_expert_stride : nullptr;
        float out;
        if constexpr (GATED) {
          float u = strip_total(red[parity][g], col + COLS) * w;
          if (bias) {
            v += bias[INTERLEAVED ? 2 * n : n];
            u += bias[INTERLEAVED ? 2 * n + 1 : n + INTER];
          }
          out = act::gated<ACT>(v, u, a.alpha, a.limit);
        } else {
          if (bias) v += bias[n];
          out = act::single<ACT>(v);
        }
        static_cast<unsigned short*>(a.inter)[static_cast<long long>(slot) * INTER + n] = sm80::from_float<DTYPE>(out);
      }
    }
  }
}

// gemv2: items are strips of 8 output columns of one token; the reduction runs over the token's
// TOPK intermediate rows (W2[e_k] row c against intermediate row k). Each slot's chunks are padded to
// a multiple of 4 so that an mma (4 lanes' chunks) never spans two slots: its sums take the slot's
// router weight in fp32 (scaled after each chunk's mmas).
template <int DTYPE, int ACT, int QUANT, int TOPK, int HIDDEN, int INTER, int NUM_EXPERTS, int EXPERTS_PER_LANE,
          int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE>
__global__ void __launch_bounds__(kMoeDecodeThreads, 3) moe_decode_mx_gemv2_kernel(const MoeDecodeArgs a) {
  using namespace moe_decode_detail;
  using namespace moe_decode_mx;
  static_assert(quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16, "MXFP4 weights, bf16 activations");
  static_assert(INTER % kChunkCodes == 0, "whole 32-code chunks of a W2 row");
  constexpr int SLOT_VEC = INTER / kChunkCodes;            // chunks of one slot's row
  constexpr int SLOT_PAD = (SLOT_VEC + 3) / 4 * 4;         // ... padded to whole mma groups
  constexpr int VEC = TOPK * SLOT_PAD;
  using S = Steps<VEC>;
  constexpr int CH = S::STEPS < kGemv2Loads ? S::STEPS : kGemv2Loads;
  constexpr int STRIPS = (HIDDEN + kStripRows - 1) / kStripRows;  // strips a token
  __shared__ Picks picks;
  __shared__ float red[2][kWarps][kStripRows];
  extern __shared__ uint4 dynamic_smem[];
  unsigned short* is = reinterpret_cast<unsigned short*>(dynamic_smem);  // the item token's TOPK rows
  route<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, picks);
  const unsigned char* w2 = static_cast<const unsigned char*>(a.w2);
  int begin, end;
  cta_items(static_cast<long long>(a.num_tokens) * STRIPS, begin, end);
  {
    // The weight rows need only the picks: start them towards L2 while gemv1 finishes (as gemv2).
    constexpr unsigned kRowBytes = INTER / 2;
    const int rows = min((end - begin) * kStripRows * TOPK,
                         static_cast<int>(kGemv2PrefetchBytes / gridDim.x / kRowBytes));
    for (int i = threadIdx.x; i < rows; i += kThreads) {
      const int item = begin + i / (kStripRows * TOPK), t = item / STRIPS;
      const int col = (item % STRIPS) * kStripRows + (i / TOPK) % kStripRows;
      const int e = picks.local[t * TOPK + i % TOPK];
      if (e >= 0 && col < HIDDEN) prefetch_l2(w2 + e * a.w2_expert_stride + col * a.ldw2, kRowBytes);
    }
  }
  pdl::wait();
  const unsigned short* inter = static_cast<const unsigned short*>(a.inter);
  int staged = begin / STRIPS;
  if (begin < end) stage_row<true>(inter + static_cast<long long>(staged) * TOPK * INTER, TOPK * INTER, is);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, q = lane & 3;
  int parity = 0;
  for (int item = begin; item < end; ++item, parity ^= 1) {
    const int t = item / STRIPS, col = (item % STRIPS) * kStripRows + r;
    const bool col_ok = col < HIDDEN;
    if (t != staged) {  // uniform; a dropped slot's row (never written) is staged but not read
      __syncthreads();
      stage_row<true>(inter + static_cast<long long>(t) * TOPK * INTER, TOPK * INTER, is);
      staged = t;
      __syncthreads();
    }
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1  // one chunk of loads at a time (hoisting the next chunk's loads spilled at 80 registers)
    for (int s0 = 0; s0 < S::STEPS; s0 += CH) {
      uint4 wv[CH];
      unsigned sc[CH];
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int p = (s0 + c) * kStepChunks + warp * 4 + q, k = p / SLOT_PAD, off = p - k * SLOT_PAD;
        const bool in_row = s0 + c < S::STEPS && (!S::RAGGED || p < VEC) && off < SLOT_VEC;
        const int e = in_row ? picks.local[t * TOPK + k] : -1;
        const bool ok = e >= 0 && col_ok;
        wv[c] = ok ? load_stream(w2 + e * a.w2_expert_stride + col * a.ldw2 + off * 16) : make_uint4(0, 0, 0, 0);
        sc[c] = ok ? __ldg(a.w2_mx_scale + e * a.w2_scale_expert_stride + col * a.w2_scale_row_stride + off) : 0u;
      }
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        // The 4 lanes of an mma share p / 4, so k, the slot's expert and its weight (warp-uniform
        // per 4 lanes; the mma itself is warp-wide: every lane runs it).
        const int p = (s0 + c) * kStepChunks + warp * 4 + q, k = p / SLOT_PAD, off = p - k * SLOT_PAD;
        const bool in_row = s0 + c < S::STEPS && (!S::RAGGED || p < VEC) && off < SLOT_VEC;
        const int e = in_row ? picks.local[t * TOPK + k] : -1;
        uint4 xv[4];
        load_x(is + k * INTER, off, e >= 0, xv);
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma_chunk<QUANT>(d, wv[c], sc[c], xv);
        // The chunk group's slot is the same for all lanes of this warp at this step (4 | SLOT_PAD).
        const int k0 = ((s0 + c) * kStepChunks + warp * 4) / SLOT_PAD;
        const bool group_in = s0 + c < S::STEPS && (!S::RAGGED || (s0 + c) * kStepChunks + warp * 4 < VEC);
        const int e0 = group_in ? picks.local[t * TOPK + k0] : -1;
        const float w = e0 >= 0 && !a.weight_on_input ? picks.weight[t * TOPK + k0] : 1.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = fmaf(w, d[i], acc[i]);
      }
    }
    strip_to_shared(red[parity], acc);
    __syncthreads();
    const int j = threadIdx.x, c_out = (item % STRIPS) * kStripRows + j;
    if (j < kStripRows && c_out < HIDDEN) {
      float v = strip_total(red[parity], j);
      if (a.b2) {  // sum of w_k * b2[e_k][col] (w_k = 1 when the weight went on the input)
#pragma unroll
        for (int k = 0; k < TOPK; ++k) {
          const int e = picks.local[t * TOPK + k];
          if (e >= 0) v = fmaf(a.weight_on_input ? 1.f : picks.weight[t * TOPK + k], a.b2[e * a.b2_expert_stride + c_out], v);
        }
      }
      static_cast<unsigned short*>(a.out)[t * a.ldo + c_out] = sm80::from_float<DTYPE>(v);
    }
  }
}

}  // namespace moejit
