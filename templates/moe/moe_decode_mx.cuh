// The decode GEMV pair for MXFP4 weights (w4a16: e2m1 codes, one e8m0 scale per 32 k, bf16
// activations) on tensor cores: moe_decode_mx_gemv1_kernel / moe_decode_mx_gemv2_kernel, the same
// layer as moe_decode_gemv1_kernel / moe_decode_gemv2_kernel (routing in every CTA, no sort, no
// cast) and the same MoeDecodeArgs.
// Why mma: a scalar MXFP4 GEMV (dequantize, unpack to fp32, fp32 FMAs: ~9 instructions a weight
// byte) ran gpt-oss-120b M = 1 at 75 us against the swap-AB kernels' 37 (fifteenth session): issue,
// not memory, bounded it. Here a weight byte costs ~3.5 instructions: the packed-code decode of
// moe_dequant.cuh (scale folded into one bf16 multiply) and a share of an m16n8k16 mma.
// How: a CTA takes strips of 8 weight rows (gemv1: 4 intermediate columns' gate and up rows, or 8
// columns without a gate; gemv2: 8 output columns of one token). Its 8 warps split the reduction:
// warp w's lane (row r = lane / 4, q = lane % 4) reads 16-byte chunk p = 32 * step + 4 * w + q of
// weight row r (32 codes: one scale), so each load is whole and carries its own scale. The weights
// are the mma's B operand (8 columns = the strip's rows), the activations its A operand (every one
// of the 16 rows the same token's). Within an mma the k order is a permutation of the chunk's
// elements, the same for A and B: thread q's k pairs (2q, 2q + 1) and (2q + 8, 2q + 9) of mma j are
// its chunk's elements 4j .. 4j + 3. Partial sums of the 8 warps add up through shared memory.
// Why a ring of cp.async slots: at ~3.5 instructions a byte the decode and mmas of a chunk take
// about half as long as its bytes take to arrive, so they must run under the next chunks' loads.
// With the chunks loaded into registers a batch at a time (load all, then compute all: the first
// form of this pair) the kernels streamed 1.5-1.8 TB/s and lost to the swap-AB kernels everywhere
// (gpt-oss-120b M = 1 40.8-45.8 us against 30.8-31.4, fiftieth session, H100). Here each thread
// copies its chunks into its own shared-memory slots (cp.async, one commit group a step), reads a
// slot when its group has landed and refills it at once with the chunk one batch round later
// (across batches: the next batch's rows are known from the picks), so a thread always has its
// ring's loads in flight. A thread reads only slots it filled itself: no barrier guards the ring.
// Scales (one byte a chunk) ride in registers beside their slots.
// Measured (fifty-first session, H100, gpt-oss-120b mxfp4_packed M = 1, swap-AB 30.7 us): the ring
// with each refill's address worked out from the picks ran 62.5 us (12 slots) / 47.7 us (8 slots),
// ncu: gemv1 32 us at 35% of DRAM peak, 7.7 cycles a warp between issues, two CTAs an SM. This
// form (row pointers a batch, 8 slots, three CTAs an SM) has not run on a GPU.
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
static_assert(kStepChunks == kMoeDecodeMxStepChunks, "the host's walk (moe_decode_args.cuh) is this one");

// A strip row of VEC chunks: steps, batches of G strips, ROUNDS rounds of CH steps, SLOTS ring slots
// (moe_decode_args.cuh); RAGGED: some (step, lane) of the rounds fall past the row.
template <int VEC>
struct MxWalk {
  static constexpr int STEPS = moe_decode_mx_steps(VEC);
  static constexpr int ROUNDS = moe_decode_mx_rounds(VEC);
  static constexpr int CH = moe_decode_mx_round_steps(VEC);
  static constexpr int G = moe_decode_mx_group(VEC);
  static constexpr int SLOTS = moe_decode_mx_slots(VEC);
  static constexpr bool RAGGED = ROUNDS * CH * kStepChunks != VEC;
  static_assert(SLOTS == G * CH && SLOTS <= kMoeDecodeMxRing && ROUNDS * CH >= STEPS, "the walk covers the row");
};

// The ring: this thread's slot i is 16 bytes at ring[i * kThreads + threadIdx.x] (a warp's slot i
// is 512 consecutive bytes: no bank conflicts). The copies' and waits' "memory" clobbers keep the
// compiler from moving a slot's read past its wait or its refill above its read.
__device__ inline void ring_fill(uint4* ring, int slot, const void* src, bool ok) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(ring + slot * kThreads + threadIdx.x));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ inline void ring_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ inline void ring_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}
__device__ inline uint4 ring_read(const uint4* ring, int slot) { return ring[slot * kThreads + threadIdx.x]; }

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
// shared memory (the caller's barriers around it). Plain loads, not the ring's cp.async: a wait
// for them would also wait for every ring copy issued before.
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

// A batch: `count` strips from item `base`, all of one token (count <= 0: none). The next one
// starts where it ends and stops at the CTA's end and at the token's last item.
struct Batch {
  int base, count;
};
template <int G, int PER_TOKEN>
__device__ inline Batch batch_at(int base, int end) {
  const int token_end = (base / PER_TOKEN + 1) * PER_TOKEN;
  return {base, min(G, min(end, token_end) - base)};
}

}  // namespace moe_decode_mx

// gemv1: items are strips of one routed slot (4 gated intermediate columns: rows gate n .. n + 3 then
// up n .. n + 3; else 8 columns), G strips of one token a batch (they share x's chunks).
template <int DTYPE, int ACT, int QUANT, int TOPK, int HIDDEN, int INTER, int NUM_EXPERTS, int EXPERTS_PER_LANE,
          int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE>
__global__ void __launch_bounds__(kMoeDecodeThreads, 3) moe_decode_mx_gemv1_kernel(const MoeDecodeArgs a) {
  using namespace moe_decode_detail;
  using namespace moe_decode_mx;
  static_assert(quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16, "MXFP4 weights, bf16 activations");
  static_assert(HIDDEN % kChunkCodes == 0, "whole 32-code chunks of a W1 row");
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool INTERLEAVED = activation_is_interleaved(ACT);
  constexpr int COLS = GATED ? kStripRows / 2 : kStripRows;  // intermediate columns a strip
  constexpr int STRIPS = (INTER + COLS - 1) / COLS;          // strips a routed slot
  constexpr int VEC = moe_decode_mx_gemv1_vec(HIDDEN);
  using W = MxWalk<VEC>;
  constexpr int G = W::G, CH = W::CH;
  constexpr int kPerToken = TOPK * STRIPS;
  __shared__ Picks picks;
  __shared__ float red[2][G][kWarps][kStripRows];
  extern __shared__ uint4 dynamic_smem[];
  unsigned short* xs = reinterpret_cast<unsigned short*>(dynamic_smem);  // the batch token's x row
  uint4* ring = dynamic_smem + HIDDEN / 8;
  const unsigned short* x = static_cast<const unsigned short*>(a.x);
  int begin, end;
  cta_items(static_cast<long long>(a.num_tokens) * kPerToken, begin, end);
  pdl::wait();  // launched after whatever wrote x and the logits
  pdl::launch_dependents();  // gemv2 may start routing under this kernel's tail
  // The first batch's x row travels while the CTA routes (route's barriers publish it).
  int staged = begin / kPerToken;
  if (begin < end) stage_row<false>(x + staged * a.ldx, HIDDEN, xs);
  route<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, picks);
  if (blockIdx.x == 0) publish<TOPK>(a, picks);
  if (begin >= end) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, q = lane & 3;
  // This thread's strip row r: intermediate column offset and which W1 row (gate / up) it is.
  const int r_col = r % COLS, r_up = GATED ? r / COLS : 0;
  const unsigned char* w1 = static_cast<const unsigned char*>(a.w1);
  unsigned sc[W::SLOTS];  // the scales of the chunks in the ring's slots
  // A batch's G weight rows and their scale rows, from this lane's first chunk, and which are live:
  // a step's chunk is then an immediate offset (512 bytes, 32 scales a step). Why: the address of
  // each chunk worked out from the picks at every refill took ~25 instructions a chunk, as many as
  // its decode (first form of the ring, gpt-oss-120b M = 1 62.5 us, H100).
  struct Rows {
    const unsigned char* w[G];
    const unsigned char* s[G];
    unsigned live;
  };
  const int lane_chunk = warp * 4 + q;
  auto rows_of = [&](const Batch& b) {
    Rows rows;
    rows.live = 0;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int item = b.base + g, slot = item / STRIPS, n = (item % STRIPS) * COLS + r_col;
      const int e = g < b.count ? picks.local[slot] : -1;
      const bool ok = e >= 0 && n < INTER;
      const int w_row = !GATED ? n : INTERLEAVED ? 2 * n + r_up : n + r_up * INTER;
      const long long ee = ok ? e : 0, rr = ok ? w_row : 0;
      rows.w[g] = w1 + ee * a.w1_expert_stride + rr * a.ldw1 + lane_chunk * 16;
      rows.s[g] = a.w1_mx_scale + ee * a.w1_scale_expert_stride + rr * a.w1_scale_row_stride + lane_chunk;
      rows.live |= static_cast<unsigned>(ok) << g;
    }
    return rows;
  };
  // Refills slots c * G .. c * G + G - 1 with step `step` of a batch's rows (none: a missing batch's
  // copies are not issued and its group stays empty).
  auto fill = [&](const Rows& rows, int step, int c) {
    const bool in_row = !W::RAGGED || step * kStepChunks + lane_chunk < VEC;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const bool ok = in_row && ((rows.live >> g) & 1u);
      if (rows.live) ring_fill(ring, c * G + g, rows.w[g] + step * kStepChunks * 16, ok);
      sc[c * G + g] = ok ? __ldg(rows.s[g] + step * kStepChunks) : 0u;
    }
    ring_commit();
  };
  Batch cur = batch_at<G, kPerToken>(begin, end);
  Rows cur_rows = rows_of(cur);
#pragma unroll
  for (int c = 0; c < CH; ++c) fill(cur_rows, c, c);
  for (int parity = 0;; parity ^= 1) {
    const Batch next = batch_at<G, kPerToken>(cur.base + cur.count, end);
    const Rows next_rows = rows_of(next);
    const int token = cur.base / kPerToken;
    float d[G][4];
#pragma unroll
    for (int g = 0; g < G; ++g) d[g][0] = d[g][1] = d[g][2] = d[g][3] = 0.f;
#pragma unroll 1
    for (int round = 0; round < W::ROUNDS; ++round) {
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int step = round * CH + c, p = step * kStepChunks + warp * 4 + q;
        ring_wait<CH - 1>();  // this step's group has landed (one group a step, CH in flight)
        uint4 xv[4];
        load_x(xs, p, !W::RAGGED || p < VEC, xv);
#pragma unroll
        for (int g = 0; g < G; ++g) mma_chunk<QUANT>(d[g], ring_read(ring, c * G + g), sc[c * G + g], xv);
        if (round + 1 < W::ROUNDS) fill(cur_rows, step + CH, c);
        else fill(next_rows, c, c);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) strip_to_shared(red[parity][g], d[g]);
    __syncthreads();  // also: every warp is done with xs
    // Thread j finishes column j % COLS of strip j / COLS: router weight (on input), bias, activation.
    const int j = threadIdx.x, g = j / COLS, col = j % COLS;
    if (g < cur.count) {
      const int item = cur.base + g, slot = item / STRIPS, n = (item % STRIPS) * COLS + col;
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
    if (next.count <= 0) break;
    if (next.base / kPerToken != token) {  // uniform; the next token's weight copies are in flight
      stage_row<false>(x + (next.base / kPerToken) * a.ldx, HIDDEN, xs);
      __syncthreads();
    }
    cur = next;
    cur_rows = next_rows;
  }
  ring_wait<0>();  // nothing in flight at exit (the last groups are empty)
}

// gemv2: items are strips of 8 output columns of one token; the reduction runs over the token's
// TOPK intermediate rows (W2[e_k] row c against intermediate row k). Each slot's chunks are padded to
// a multiple of 4 so that an mma (4 lanes' chunks) never spans two slots: its sums take the slot's
// router weight in fp32 (scaled after each chunk's mmas). G strips of one token a batch.
template <int DTYPE, int ACT, int QUANT, int TOPK, int HIDDEN, int INTER, int NUM_EXPERTS, int EXPERTS_PER_LANE,
          int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE>
__global__ void __launch_bounds__(kMoeDecodeThreads, 3) moe_decode_mx_gemv2_kernel(const MoeDecodeArgs a) {
  using namespace moe_decode_detail;
  using namespace moe_decode_mx;
  static_assert(quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16, "MXFP4 weights, bf16 activations");
  static_assert(INTER % kChunkCodes == 0, "whole 32-code chunks of a W2 row");
  constexpr int SLOT_VEC = INTER / kChunkCodes;     // chunks of one slot's row
  constexpr int SLOT_PAD = (SLOT_VEC + 3) / 4 * 4;  // ... padded to whole mma groups
  constexpr int VEC = moe_decode_mx_gemv2_vec(TOPK, INTER);
  static_assert(VEC == TOPK * SLOT_PAD, "the host's gemv2 row");
  using W = MxWalk<VEC>;
  constexpr int G = W::G, CH = W::CH;
  constexpr int STRIPS = (HIDDEN + kStripRows - 1) / kStripRows;  // strips a token
  __shared__ Picks picks;
  __shared__ float red[2][G][kWarps][kStripRows];
  extern __shared__ uint4 dynamic_smem[];
  unsigned short* is = reinterpret_cast<unsigned short*>(dynamic_smem);  // the batch token's TOPK rows
  uint4* ring = dynamic_smem + TOPK * INTER / 8;
  route<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, picks);
  const unsigned char* w2 = static_cast<const unsigned char*>(a.w2);
  int begin, end;
  cta_items(static_cast<long long>(a.num_tokens) * STRIPS, begin, end);
  if (begin >= end) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 2, q = lane & 3;
  unsigned sc[W::SLOTS];
  // A batch's token and its G strips' W2 rows (this lane's row r) and scale rows, and which are live;
  // a step adds its slot's expert and chunk offset (as gemv1's Rows: few instructions a refill).
  struct Rows {
    const unsigned char* w[G];
    const unsigned char* s[G];
    int token;
    unsigned live;
  };
  const int lane_chunk = warp * 4 + q;
  auto rows_of = [&](const Batch& b) {
    Rows rows;
    rows.live = 0;
    rows.token = b.base / STRIPS;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int col = ((b.base + g) % STRIPS) * kStripRows + r;
      const bool ok = g < b.count && col < HIDDEN;
      const long long cc = ok ? col : 0;
      rows.w[g] = w2 + cc * a.ldw2;
      rows.s[g] = a.w2_mx_scale + cc * a.w2_scale_row_stride;
      rows.live |= static_cast<unsigned>(ok) << g;
    }
    return rows;
  };
  // Refills slots c * G .. c * G + G - 1 with step `step` of a batch's strips (as gemv1's).
  auto fill = [&](const Rows& rows, int step, int c) {
    const int p = step * kStepChunks + lane_chunk, k = p / SLOT_PAD, off = p - k * SLOT_PAD;
    const bool in_row = (!W::RAGGED || p < VEC) && off < SLOT_VEC;
    const int e = rows.live && in_row ? picks.local[rows.token * TOPK + k] : -1;
    const long long ee = e >= 0 ? e : 0;
    const long long w_off = ee * a.w2_expert_stride + off * 16, s_off = ee * a.w2_scale_expert_stride + off;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const bool ok = e >= 0 && ((rows.live >> g) & 1u);
      if (rows.live) ring_fill(ring, c * G + g, rows.w[g] + w_off, ok);
      sc[c * G + g] = ok ? __ldg(rows.s[g] + s_off) : 0u;
    }
    ring_commit();
  };
  // The weights need only the picks: the first round's copies go out before the wait for gemv1, and
  // the rest of this CTA's rows start towards L2 (as gemv2 of the 16-bit pair).
  Batch cur = batch_at<G, STRIPS>(begin, end);
  Rows cur_rows = rows_of(cur);
#pragma unroll
  for (int c = 0; c < CH; ++c) fill(cur_rows, c, c);
  {
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
  stage_row<true>(inter + static_cast<long long>(begin / STRIPS) * TOPK * INTER, TOPK * INTER, is);
  __syncthreads();
  for (int parity = 0;; parity ^= 1) {
    const Batch next = batch_at<G, STRIPS>(cur.base + cur.count, end);
    const Rows next_rows = rows_of(next);
    const int t = cur.base / STRIPS;
    float acc[G][4];
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.f;
#pragma unroll 1
    for (int round = 0; round < W::ROUNDS; ++round) {
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        // The 4 lanes of an mma share p / 4, so k, the slot's expert and its weight (4 | SLOT_PAD);
        // the mma itself is warp-wide, so the router weight is taken by the group's first chunk.
        const int step = round * CH + c, p = step * kStepChunks + warp * 4 + q, k = p / SLOT_PAD;
        const int off = p - k * SLOT_PAD, p0 = step * kStepChunks + warp * 4, k0 = p0 / SLOT_PAD;
        const bool in_row = (!W::RAGGED || p < VEC) && off < SLOT_VEC;
        const int e = in_row ? picks.local[t * TOPK + k] : -1;
        const int e0 = !W::RAGGED || p0 < VEC ? picks.local[t * TOPK + k0] : -1;
        const float w = e0 >= 0 && !a.weight_on_input ? picks.weight[t * TOPK + k0] : 1.f;
        ring_wait<CH - 1>();
        uint4 xv[4];
        load_x(is + k * INTER, off, e >= 0, xv);  // a dropped slot's row (never written) reads as zeros
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float d[4] = {0.f, 0.f, 0.f, 0.f};
          mma_chunk<QUANT>(d, ring_read(ring, c * G + g), sc[c * G + g], xv);
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[g][i] = fmaf(w, d[i], acc[g][i]);
        }
        if (round + 1 < W::ROUNDS) fill(cur_rows, step + CH, c);
        else fill(next_rows, c, c);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) strip_to_shared(red[parity][g], acc[g]);
    __syncthreads();  // also: every warp is done with is
    const int j = threadIdx.x, g = j / kStripRows, jj = j % kStripRows;
    const int c_out = ((cur.base + g) % STRIPS) * kStripRows + jj;
    if (g < cur.count && c_out < HIDDEN) {
      float v = strip_total(red[parity][g], jj);
      if (a.b2) {  // sum of w_k * b2[e_k][col] (w_k = 1 when the weight went on the input)
#pragma unroll
        for (int k = 0; k < TOPK; ++k) {
          const int e = picks.local[t * TOPK + k];
          if (e >= 0) v = fmaf(a.weight_on_input ? 1.f : picks.weight[t * TOPK + k], a.b2[e * a.b2_expert_stride + c_out], v);
        }
      }
      static_cast<unsigned short*>(a.out)[t * a.ldo + c_out] = sm80::from_float<DTYPE>(v);
    }
    if (next.count <= 0) break;
    if (next.base / STRIPS != t) {  // uniform; a dropped slot's row (never written) is staged but not read
      stage_row<true>(inter + static_cast<long long>(next.base / STRIPS) * TOPK * INTER, TOPK * INTER, is);
      __syncthreads();
    }
    cur = next;
    cur_rows = next_rows;
  }
  ring_wait<0>();
}

}  // namespace moejit
