// moe_decode_gemv: the fused MoE layer for a few tokens (decode) as two GEMV kernels, routing
// included — no routing launch, no sort, no fp32 accumulator to zero and no cast kernel.
//   gemv1  every CTA picks the experts of the (<= kMoeDecodeMaxTokens) tokens itself
//          (routing_topk's warp top-k, or the caller's ids), then computes a balanced share of the
//          items (routed slot, intermediate column): x . gate row and x . up row of W1[e], bias,
//          activation -> the intermediate [slot, N] in DTYPE. CTA 0 also publishes the routing.
//   gemv2  picks the experts again (before waiting on gemv1: programmatic dependent launch), then
//          for each item (token, output column c): sum over the token's slots k of
//          w_k * (intermediate[k] . W2[e_k][c] + b2[e_k][c]) -> out in DTYPE. The token's TOPK
//          intermediate rows are contiguous, so the item is one dot product of length TOPK * N.
// Why: at M = 1 the grouped-GEMM path ran route + GEMM1 + GEMM2 + cast, four dependent launches
// with ~2 us of fixed cost each, and its tiles padded one row to 8-64. Here each item is one dot
// product that all 256 threads of a CTA share along the reduction (16-byte loads, each thread at
// most 12 loads in flight per chunk), so CTAs split the work evenly at any shape, and the
// sums are reduced across warps through shared memory. Sums are fp32; the order is fixed by the
// shape (not by the batch), but differs from the GEMM kernels': fast reduce mode only.
// QUANT: 16-bit weights (8 per 16-byte chunk), or fp8_block w8a8 (16 e4m3 per chunk): each CTA
// quantizes its activations into shared memory as moe_act_quant does (per token per 128 columns)
// and scales each chunk's product sum (gemv1: fp32 products; gemv2: products exact in f16, pairs
// added in f16, then fp32) by weight block scale x activation group scale.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "moe/activations.cuh"
#include "moe/moe_act_quant.cuh"
#include "moe/moe_decode_dot.cuh"
#include "moe/moe_decode_args.cuh"
#include "routing/routing_sort_args.cuh"
#include "routing/routing_topk.cuh"

namespace moejit {
namespace moe_decode_detail {

inline constexpr int kThreads = kMoeDecodeThreads;
inline constexpr int kWarps = kThreads / 32;
// 16-byte loads per thread in flight per chunk: R weight chunks per (item, step) and X activation
// chunks per step (a batch's items share their token: batches never straddle one), at most kChunks.
inline constexpr int kChunks = 12;

// How one kernel walks its items: VEC 16-byte chunks per item and row, STEPS per thread, G items
// per batch, CH steps per chunk (R weight rows per item: 2 for gated GEMM1; X activation chunks
// per weight chunk: 2 for fp8, whose 16 e4m3 weights meet 16 f16 activations).
template <int VEC, int R, int X = 1, int BUDGET = kChunks, int G_MAX = 8>
struct Walk {
  static constexpr int STEPS = (VEC + kThreads - 1) / kThreads;
  static constexpr bool WHOLE = (R + X) * STEPS <= BUDGET;  // every step of a batch in one chunk
  static constexpr int G_FIT = WHOLE ? (BUDGET - X * STEPS) / (R * STEPS) : 1;
  static constexpr int G = G_FIT < G_MAX ? G_FIT : G_MAX;
  static constexpr int CH = WHOLE ? STEPS : BUDGET / (R + X);
  static constexpr bool RAGGED = VEC % kThreads != 0;  // the last step leaves some threads idle
};

// gemv2's item (a token's TOPK intermediate rows) in one chunk of kChunks loads but not of 10: two
// CTAs per SM with the whole item in flight (gpt-oss-120b M = 1 on an H200: 60.1 -> 57.4 us); else
// three, and items of six steps or more take chunks of 10 loads (at 80 registers 12 spilled).
__host__ __device__ constexpr int gemv2_steps(int vec) { return (vec + kThreads - 1) / kThreads; }
__host__ __device__ constexpr bool gemv2_wide(int vec, int x) {
  return (1 + x) * gemv2_steps(vec) <= kChunks && (1 + x) * gemv2_steps(vec) > 10;
}
__host__ __device__ constexpr int gemv2_min_ctas(int vec, int x) { return gemv2_wide(vec, x) ? 2 : 3; }
__host__ __device__ constexpr int gemv2_budget(int vec, int x) {
  return gemv2_wide(vec, x) || gemv2_steps(vec) < 6 ? kChunks : 10;
}
// Items of vec chunks a step reads side by side (moe_decode_split_items).
__host__ __device__ constexpr int split_items(int vec) { return moe_decode_split_items(vec); }
// The chunks one step spans (the Walk's VEC).
__host__ __device__ constexpr int step_vec(int vec) { return vec * split_items(vec); }

__device__ inline uint4 load_stream(const void* p) {  // weights: read once, keep them out of L1
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Bit t set: moe_decode_quantize_overlaps(groups, t) (a compile-time mask: the runtime test spilled
// gemv1's registers).
__host__ __device__ constexpr unsigned quantize_overlap_tokens(int groups) {
  unsigned mask = 0;
  for (int t = 1; t < kWarps; ++t)
    if (moe_decode_quantize_overlaps(groups, t)) mask |= 1u << t;
  return mask;
}

// Two e4m3 codes (code j in byte j) -> f16x2 of their values times 2^-8 (exact): the form the
// products take x in (quantize_rows, load_quantized_rows).
__device__ inline unsigned e4m3x2_to_f16_scaled(unsigned short codes) {
  unsigned f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(f) : "h"(codes));
#else
  f = 0;
#endif
  return hmul2(f, 0x1c001c00u);  // x 2^-8 in both lanes
}

// x as quantize_rows leaves it (e4m3 values as f16 times 2^-8, scale * kFp8ProductScale) from the
// host's moe_act_quant copy: rows x COLS e4m3 at q8 (COLS a multiple of 16), scales [rows][ceil(COLS
// / 128)] at s8. L2 reads (__ldcg): the workspace's lines in this SM's L1 may be an older forward's.
template <int COLS>
__device__ inline void load_quantized_rows(const unsigned char* q8, const float* s8, int rows, unsigned short* q, float* s) {
  constexpr int CHUNKS = COLS / 16, GROUPS = (COLS + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize;
  static_assert(COLS % 16 == 0, "whole 16-byte chunks of e4m3");
  for (int i = threadIdx.x; i < rows * CHUNKS; i += kThreads) {
    const int row = i / CHUNKS, c = i - row * CHUNKS;
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(q8 + static_cast<long long>(row) * COLS) + c);
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    uint4 out[2];
    unsigned* o = &out[0].x;
#pragma unroll
    for (int h = 0; h < 8; ++h) o[h] = e4m3x2_to_f16_scaled(static_cast<unsigned short>(w[h / 2] >> (16 * (h % 2))));
    uint4* dst = reinterpret_cast<uint4*>(q + static_cast<long long>(row) * COLS + c * 16);
    dst[0] = out[0];
    dst[1] = out[1];
  }
  for (int i = threadIdx.x; i < rows * GROUPS; i += kThreads) s[i] = __ldcg(s8 + i) * kFp8ProductScale;
}

// rows x cols DTYPE (row stride ld) -> the e4m3-quantized values as f16 times 2^-8, q [rows][cols],
// and scale * kFp8ProductScale, s [rows][ceil(cols / 128)], in shared memory. The quantization is
// moe_act_quant's group128 mode: one warp per (row, 128 columns), scale = max(amax, 1e-10) / 448,
// q = e4m3(x * (1 / scale)). cols is a multiple of 4. Each warp loads 8 groups before reducing any.
// The warps doing it are warp .. of `warps` (all of the CTA's, or those not routing a token).
template <int DTYPE>
__device__ inline void quantize_rows(const unsigned short* in, long long ld, int rows, int cols, unsigned short* q,
                                     float* s, int warp = threadIdx.x >> 5, int warps = kWarps) {
  constexpr int kGroup = kQuantFp8BlockSize, kBatch = kMoeDecodeQuantizeBatch;
  const int groups = (cols + kGroup - 1) / kGroup, lane = threadIdx.x & 31;
  for (int first = warp; first < rows * groups; first += warps * kBatch) {
    float v[kBatch][4];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int item = first + u * warps, row = item / groups, c = (item % groups) * kGroup + lane * 4;
      v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0.f;
      if (item < rows * groups && c < cols) act_quant::load4<DTYPE>(in + row * ld + c, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int item = first + u * warps, row = item / groups, c = (item % groups) * kGroup + lane * 4;
      if (item >= rows * groups) break;  // uniform across the warp
      const float scale = act_quant::group_scale<32>(
          fmaxf(fmaxf(fabsf(v[u][0]), fabsf(v[u][1])), fmaxf(fabsf(v[u][2]), fabsf(v[u][3]))));
      if (lane == 0) s[row * groups + item % groups] = scale * kFp8ProductScale;
      if (c < cols) {
        const unsigned packed = act_quant::pack4(v[u], act_quant::inverse(scale));
        const uint2 out = make_uint2(e4m3x2_to_f16_scaled(static_cast<unsigned short>(packed & 0xffffu)),
                                     e4m3x2_to_f16_scaled(static_cast<unsigned short>(packed >> 16)));
        *reinterpret_cast<uint2*>(q + row * cols + c) = out;
      }
    }
  }
}

// Fetch bytes (a multiple of 16, 16-byte aligned) at p into L2 without waiting (sm_90+; else nothing).
__device__ inline void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
// gemv2 prefetches its CTA's weight rows before it waits for gemv1, up to this many bytes over the
// grid (they must still be in L2 when the loads come: gemv1 streams its own weights through it).
// 12 MiB against 24 (H100, two rounds, thirty-fifth session): fp8_block DeepSeek-V3 TP8 M = 2 / 4 /
// 6 42.7-42.9 / 72.7-72.8 / 105.6 -> 41.2-41.5 / 71.8-72.2 / 104.0-104.5 us, bf16 M = 1 Qwen3-30B-A3B
// / DeepSeek-V3 TP8 29.8-30.0 / 36.0 -> 28.7-29.2 / 34.8-34.9; 0 / 4 / 8 / 16 / 40 / 64 MiB were slower.
inline constexpr long long kGemv2PrefetchBytes = 12LL << 20;

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Items [begin, end) of `total` for this CTA: an even split (sizes differ by at most one).
__device__ inline void cta_items(long long total, int& begin, int& end) {
  moe_decode_cta_items(blockIdx.x, gridDim.x, total, begin, end);
}
// The tokens of items [begin, end) of per_token items each: first and how many (at least one). Each
// kernel quantizes or loads only these tokens' rows (every CTA doing every token's was M times
// the work at M tokens).
__device__ inline void cta_tokens(int begin, int end, int per_token, int& first, int& count) {
  moe_decode_cta_tokens(begin, end, per_token, first, count);
}

// The routing both kernels share: local expert (-1 = dropped), global id and weight of every
// routed slot, in shared memory. Warp t routes token t.
struct Picks {
  int local[kMoeDecodeMaxTokens * 32];
  int global[kMoeDecodeMaxTokens * 32];
  float weight[kMoeDecodeMaxTokens * 32];
  int flags;
};

// Warp t < num_tokens routes token t (after route_begin; the caller's barrier publishes the picks).
template <int TOPK, int NUM_EXPERTS, int EPL, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE>
__device__ inline void route_token(const MoeDecodeArgs& a, Picks& p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp < a.num_tokens) {
    int id = -1;
    if (a.topk.logits) {
      RoutingTopkArgs t = a.topk;
      t.topk_ids = p.global;  // shared memory through generic addresses
      t.topk_weights = p.weight;
      id = routing_topk_detail::topk_one_token<TOPK, NUM_EXPERTS, EPL, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP,
                                               LOGIT_DTYPE>(t, warp, lane);
    } else if (lane < TOPK) {
      id = a.given_ids[warp * TOPK + lane];
      p.global[warp * TOPK + lane] = id;
      p.weight[warp * TOPK + lane] = a.given_weights[warp * TOPK + lane];
    }
    if (lane < TOPK) {  // as routing_sort's local_expert: bad ids and map entries are dropped and flagged
      int local = -1;
      if (id < 0 || id >= a.topk.num_experts) {
        atomicOr(&p.flags, kRoutingBadExpertId);
      } else if (a.expert_map == nullptr) {
        local = id;
      } else {
        local = a.expert_map[id];
        if (local < -1 || local >= a.num_local_experts) {
          atomicOr(&p.flags, kRoutingBadExpertMap);
          local = -1;
        }
      }
      p.local[warp * TOPK + lane] = local;
    }
  }
}

__device__ inline void route_begin(Picks& p) {
  if (threadIdx.x == 0) p.flags = 0;
  __syncthreads();
}

template <int TOPK, int NUM_EXPERTS, int EPL, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE>
__device__ inline void route(const MoeDecodeArgs& a, Picks& p) {
  route_begin(p);
  route_token<TOPK, NUM_EXPERTS, EPL, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, p);
  __syncthreads();
}

// CTA 0 of gemv1: ids, weights, per-expert counts and error flags where the layer's routing keeps them.
template <int TOPK>
__device__ inline void publish(const MoeDecodeArgs& a, const Picks& p) {
  const int slots = a.num_tokens * TOPK;
  for (int i = threadIdx.x; i < slots; i += kThreads) {
    a.topk_ids[i] = p.global[i];
    a.topk_weights[i] = p.weight[i];
  }
  for (int e = threadIdx.x; e < a.num_local_experts; e += kThreads) {
    int count = 0;
    for (int i = 0; i < slots; ++i) count += p.local[i] == e;
    a.expert_counts[e] = count;
  }
  if (threadIdx.x == 0) *a.error_flags = p.flags;
}

// Sums every warp's partial of value v (of G) through red[kWarps][G]; after the barrier the caller's
// threads read red. One barrier per batch: red alternates between two buffers.
template <int G>
__device__ inline void to_shared(float (&red)[kWarps][G], int g, float v) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5][g] = v;
}

// Partial g's total over WARPS warps from `first` (all of them, or one split group's: split_total).
template <int G, int WARPS = kWarps>
__device__ inline float cta_total(const float (&red)[kWarps][G], int g, int first = 0) {
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) s += red[first + w][g];
  return s;
}

// A step's threads and its split_items(VEC) items (both kernels): thread t reads chunk t % VEC of
// item t / VEC of the step; batch item j's partials sit with the warps of its split group.
template <int VEC>
__device__ inline int split_sub() {  // which of a step's items the thread reads
  return split_items(VEC) > 1 ? threadIdx.x / VEC : 0;
}
template <int VEC>
__device__ inline int split_chunk(int step) {  // the thread's 16-byte chunk of its item at a step
  return (split_items(VEC) > 1 ? threadIdx.x % VEC : threadIdx.x) + step * kThreads;
}
// Batch item j's total of its partial `part` (of PARTS per item) over its split group's warps (j
// unsigned as threadIdx.x: signed division compiled to other code).
template <int VEC, int PARTS = 1, int G>
__device__ inline float split_total(const float (&red)[kWarps][G], unsigned j, int part = 0) {
  constexpr int N = split_items(VEC), WARPS = kWarps / N;
  return cta_total<G, WARPS>(red, j / N * PARTS + part, j % N * WARPS);
}

}  // namespace moe_decode_detail

template <int DTYPE, int ACT, int QUANT, int TOPK, int HIDDEN, int INTER, int NUM_EXPERTS, int EXPERTS_PER_LANE,
          int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE, bool SPAN = false>
__global__ void __launch_bounds__(kMoeDecodeThreads, 3) moe_decode_gemv1_kernel(const MoeDecodeArgs a) {
  using namespace moe_decode_detail;
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool INTERLEAVED = activation_is_interleaved(ACT);
  constexpr bool FP8 = QUANT == kQuantFp8Block;
  static_assert(QUANT == kQuantNone || FP8, "16-bit or fp8_block weights");
  constexpr int R = GATED ? 2 : 1;
  constexpr int EPC = moe_decode_chunk_elements(QUANT);  // elements per 16-byte chunk
  constexpr int GROUPS = (HIDDEN + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize;
  constexpr int X = FP8 ? 2 : 1;  // activation chunks (16 bytes) per weight chunk
  // Rows of at most half the CTA (K <= 1024 in 16 bits, 2048 in fp8) take SPLIT items per step,
  // one per VEC threads, instead of leaving the threads past VEC idle (as gemv2).
  constexpr int VEC = HIDDEN / EPC;  // 16-byte chunks of a weight row
  constexpr int SPLIT = split_items(VEC);
  // At most 4 items per batch and split group: 5 ran Qwen3 / DeepSeek-V2-Lite M = 1 (K = 2048) 6%
  // slower (H200).
  using W = Walk<step_vec(VEC), R, X, kChunks, 4>;
  static_assert(HIDDEN % EPC == 0 && INTER % EPC == 0, "whole 16-byte chunks");
  static_assert(W::G * SPLIT <= kThreads, "a thread per item of a batch");
  __shared__ Picks picks;
  __shared__ float red[2][kWarps][W::G * R];
  // fp8: x quantized, as f16 [rows][HIDDEN], then scales [rows][GROUPS]: a row for every token, at
  // its token's place, or (SPAN) gemv1_smem_tokens rows, this CTA's own tokens' from row 0.
  extern __shared__ uint4 dynamic_smem[];
  unsigned short* xq = reinterpret_cast<unsigned short*>(dynamic_smem);
  const float* xs = reinterpret_cast<const float*>(xq + (SPAN ? a.gemv1_smem_tokens : a.num_tokens) * HIDDEN);
  int x_first = 0;  // SPAN: the token at row 0 of xq / xs (0 otherwise: the same code as before SPAN)
  // fp8 with x quantized by the host (a.xq): the routing reads only what was written before that
  // quantization's kernel started (it followed everything before it), so it runs before the wait.
  // Otherwise warps 0 .. num_tokens - 1 route a token each after the wait while the others quantize
  // x (fp8) where moe_decode_quantize_overlaps: the two latency chains overlap instead of adding up.
  const bool prequantized = FP8 && a.xq != nullptr;
  auto route_tokens = [&] {
    route_begin(picks);
    route_token<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, picks);
  };
  if (prequantized) route_tokens();
  pdl::wait();  // launched after whatever wrote x and the logits
  pdl::launch_dependents();  // gemv2 may start routing under this kernel's tail
  if (!prequantized) route_tokens();
  if constexpr (FP8) {
    // The x rows of this CTA's tokens alone (cta_tokens; SPAN: at most gemv1_smem_tokens).
    int begin, end, first, rows;
    cta_items(static_cast<long long>(a.num_tokens) * TOPK * INTER, begin, end);
    cta_tokens(begin, end, TOPK * INTER, first, rows);
    if constexpr (SPAN) x_first = first;
    unsigned short* q = xq + (first - x_first) * HIDDEN;
    float* qs = const_cast<float*>(xs) + (first - x_first) * GROUPS;
    if (prequantized) {
      load_quantized_rows<HIDDEN>(a.xq + static_cast<long long>(first) * HIDDEN, a.xq_scale + first * GROUPS, rows, q, qs);
    } else {
      const int warp = threadIdx.x >> 5, spare = kWarps - a.num_tokens;
      const bool overlap = (quantize_overlap_tokens(GROUPS) >> a.num_tokens) & 1u;
      if (!overlap || warp >= a.num_tokens)
        quantize_rows<DTYPE>(static_cast<const unsigned short*>(a.x) + first * a.ldx, a.ldx, rows, HIDDEN, q, qs,
                             overlap ? warp - a.num_tokens : warp, overlap ? spare : kWarps);
    }
  }
  __syncthreads();
  if (blockIdx.x == 0) publish<TOPK>(a, picks);
  const unsigned short* x = static_cast<const unsigned short*>(a.x);
  const unsigned char* w1 = static_cast<const unsigned char*>(a.w1);
  int begin, end;
  cta_items(static_cast<long long>(a.num_tokens) * TOPK * INTER, begin, end);
  const int sub = split_sub<VEC>();
  int parity = 0;
  for (int base = begin, count = 0; base < end; base += count, parity ^= 1) {
    // This batch: up to G * SPLIT items of one token (they share the activation chunks); this
    // thread's are items g * SPLIT + sub.
    const int token = base / (TOPK * INTER);
    count = min(W::G * SPLIT, min(end, (token + 1) * TOPK * INTER) - base);
    const unsigned char* row[W::G][R];
    const float* row_scale[W::G][R];  // fp8: the weight rows' block scales (one per 128 k)
    bool live[W::G];
#pragma unroll
    for (int g = 0; g < W::G; ++g) {
      const int j = g * SPLIT + sub, item = base + j, slot = item / INTER, n = item % INTER;
      const int e = j < count ? picks.local[slot] : -1;
      live[g] = e >= 0;
      const int rows[2] = {INTERLEAVED ? 2 * n : n, INTERLEAVED ? 2 * n + 1 : n + INTER};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        row[g][r] = w1 + (live[g] ? e : 0) * a.w1_expert_stride + rows[r] * a.ldw1;
        if constexpr (FP8)
          row_scale[g][r] = a.w1_scale + (live[g] ? e : 0) * a.w1_scale_expert_stride +
                            (rows[r] / kQuantFp8BlockSize) * a.w1_scale_row_stride;
      }
    }
    float acc[W::G][R];
#pragma unroll
    for (int g = 0; g < W::G; ++g)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[g][r] = 0.f;
#pragma unroll
    for (int s0 = 0; s0 < W::STEPS; s0 += W::CH) {
      uint4 wv[W::G][R][W::CH], xv[W::CH][X];
      float sc[W::G][R][W::CH];
#pragma unroll
      for (int c = 0; c < W::CH; ++c) {
        const int p = split_chunk<VEC>(s0 + c);  // 16-byte chunk of the row
        const bool in_row = s0 + c < W::STEPS && (!W::RAGGED || p < VEC);
        const int group = p * EPC / kQuantFp8BlockSize;
#pragma unroll
        for (int h = 0; h < X; ++h)
          if constexpr (FP8)
            xv[c][h] = in_row ? reinterpret_cast<const uint4*>(xq + (token - x_first) * HIDDEN + p * EPC)[h]
                              : make_uint4(0, 0, 0, 0);
          else
            xv[c][h] = in_row ? __ldg(reinterpret_cast<const uint4*>(x + token * a.ldx) + p) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int g = 0; g < W::G; ++g)
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const bool ok = live[g] && in_row;
            wv[g][r][c] = ok ? load_stream(row[g][r] + p * 16) : make_uint4(0, 0, 0, 0);
            if constexpr (FP8) sc[g][r][c] = ok ? row_scale[g][r][group] * xs[(token - x_first) * GROUPS + group] : 0.f;
          }
      }
#pragma unroll
      for (int g = 0; g < W::G; ++g)
#pragma unroll
        for (int c = 0; c < W::CH; ++c)
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if constexpr (FP8) acc[g][r] = fmaf(dot16_e4m3<true>(wv[g][r][c], xv[c][0], xv[c][X - 1]), sc[g][r][c], acc[g][r]);
            else acc[g][r] = dot8<DTYPE>(wv[g][r][c], xv[c][0], acc[g][r]);
          }
    }
#pragma unroll
    for (int g = 0; g < W::G; ++g)
#pragma unroll
      for (int r = 0; r < R; ++r) to_shared(red[parity], g * R + r, acc[g][r]);
    __syncthreads();
    // Thread j finishes item base + j: router weight (on input), bias, activation.
    const int item = base + threadIdx.x, slot = item / INTER, n = item % INTER;
    if (static_cast<int>(threadIdx.x) < count && picks.local[slot] >= 0) {
      const int e = picks.local[slot];
      const float w = a.weight_on_input ? picks.weight[slot] : 1.f;
      float v = split_total<VEC, R>(red[parity], threadIdx.x, 0) * w;
      const float* bias = a.b1 ? a.b1 + e * a.b1_expert_stride : nullptr;
      float out;
      if constexpr (GATED) {
        float u = split_total<VEC, R>(red[parity], threadIdx.x, 1) * w;
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

// SPLIT_BATCH: split items per batch (DeepSeek-V3 TP8 fp8_block: 128 chunks an item). Entry gemv2
// takes 10: its 18-19 items a CTA at M = 1 in one batch of 2 x 10 (M = 1 / 2 28.3 / 49.0 -> 26.5 /
// 48.3 us on an H100). Entry gemv2_many takes 8, launched from kMoeDecodeManyTokens tokens on (more
// items a CTA): M = 4 / 6 71.7-72.4 / 104.0-104.5 -> 70.1-70.2 / 100.6-100.8 us, but M = 1 / 2
// 25.4-25.7 / 41.2-41.4 -> 27.2-27.5 / 42.2-42.6 (H100, thirty-fifth session).
template <int DTYPE, int ACT, int QUANT, int TOPK, int HIDDEN, int INTER, int NUM_EXPERTS, int EXPERTS_PER_LANE,
          int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE, int SPLIT_BATCH,
          bool SPAN = false>
__global__ void __launch_bounds__(kMoeDecodeThreads,
                                      moe_decode_detail::gemv2_min_ctas(
                                          moe_decode_detail::step_vec(moe_decode_gemv2_vec(QUANT, TOPK, INTER)),
                                          QUANT == kQuantFp8Block ? 2 : 1)) moe_decode_gemv2_kernel(const MoeDecodeArgs a) {
  using namespace moe_decode_detail;
  constexpr bool FP8 = QUANT == kQuantFp8Block;
  constexpr int EPC = moe_decode_chunk_elements(QUANT);
  constexpr int GROUPS = (INTER + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize;
  constexpr int VEC = moe_decode_gemv2_vec(QUANT, TOPK, INTER);  // 16-byte chunks of a token's intermediate rows
  constexpr int X = FP8 ? 2 : 1;
  // Items shorter than half the CTA (DeepSeek-V3 TP8 fp8: 128 chunks) take SPLIT items per step,
  // one per VEC threads, instead of leaving the threads past VEC idle.
  constexpr int SPLIT = split_items(VEC);
  // Split items take batches of up to SPLIT_BATCH (kernel entries gemv2 / gemv2_many); a whole-CTA
  // item keeps 8 per batch.
  using W = Walk<step_vec(VEC), 1, X, gemv2_budget(step_vec(VEC), X), (SPLIT > 1 ? SPLIT_BATCH : 8)>;
  __shared__ Picks picks;
  __shared__ float red[2][kWarps][W::G];
  // fp8: the intermediate quantized, as f16 [rows * TOPK][INTER], then scales: rows for every token,
  // at its token's place, or (SPAN) for gemv2_smem_tokens tokens, this CTA's own from row 0.
  extern __shared__ uint4 dynamic_smem[];
  unsigned short* iq = reinterpret_cast<unsigned short*>(dynamic_smem);
  const float* is = reinterpret_cast<const float*>(iq + (SPAN ? a.gemv2_smem_tokens : a.num_tokens) * TOPK * INTER);
  int i_first = 0;  // SPAN: the token at row 0 of iq / is (0 otherwise)
  // The picks need only the logits (or given ids), written before gemv1 started: route first, then
  // wait for gemv1's intermediate.
  route<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(a, picks);
  const unsigned char* w2 = static_cast<const unsigned char*>(a.w2);
  int begin, end;
  cta_items(static_cast<long long>(a.num_tokens) * HIDDEN, begin, end);
  {
    // The weight rows need only the picks: start them towards L2 while gemv1 finishes (its last
    // CTAs leave the bandwidth idle). Each (column, slot) row is INTER weights; the first items'
    // rows up to this CTA's share of kGemv2PrefetchBytes.
    constexpr unsigned kRowBytes = INTER * (FP8 ? 1 : 2);
    const int rows = min((end - begin) * TOPK, static_cast<int>(kGemv2PrefetchBytes / gridDim.x / kRowBytes));
    for (int i = threadIdx.x; i < rows; i += kThreads) {
      const int item = begin + i / TOPK, t = item / HIDDEN, col = item % HIDDEN;
      const int e = picks.local[t * TOPK + i % TOPK];
      if (e >= 0) prefetch_l2(w2 + e * a.w2_expert_stride + col * a.ldw2, kRowBytes);
    }
  }
  pdl::wait();
  const unsigned short* inter = static_cast<const unsigned short*>(a.inter);
  if constexpr (FP8) {  // dropped slots' rows are never read below
    // The intermediate rows of this CTA's tokens alone (cta_tokens; SPAN: at most gemv2_smem_tokens).
    int first, tokens;
    cta_tokens(begin, end, HIDDEN, first, tokens);
    if constexpr (SPAN) i_first = first;
    quantize_rows<DTYPE>(inter + static_cast<long long>(first) * TOPK * INTER, INTER, tokens * TOPK, INTER,
                         iq + (first - i_first) * TOPK * INTER, const_cast<float*>(is) + (first - i_first) * TOPK * GROUPS);
    __syncthreads();
  }
  const int sub = split_sub<VEC>();
  int parity = 0;
  for (int base = begin, count = 0; base < end; base += count, parity ^= 1) {
    // This batch: up to G * SPLIT output columns of one token (they share the intermediate chunks).
    const int t = base / HIDDEN;
    count = min(W::G * SPLIT, min(end, (t + 1) * HIDDEN) - base);
    float acc[W::G];
#pragma unroll
    for (int g = 0; g < W::G; ++g) acc[g] = 0.f;
#pragma unroll
    for (int s0 = 0; s0 < W::STEPS; s0 += W::CH) {
      uint4 wv[W::G][W::CH], iv[W::CH][X];
      float scale[W::G][W::CH];
#pragma unroll
      for (int c = 0; c < W::CH; ++c) {
        const int p = split_chunk<VEC>(s0 + c);
        const int k = p * EPC / INTER, off = p * EPC - k * INTER;  // slot of the chunk, column in its row
        const bool in_row = s0 + c < W::STEPS && (!W::RAGGED || p < VEC);
        const int e = in_row ? picks.local[t * TOPK + k] : -1;  // a dropped slot's rows are not read
        const float w = e >= 0 && !a.weight_on_input ? picks.weight[t * TOPK + k] : 1.f;
        const int group = off / kQuantFp8BlockSize;
#pragma unroll
        for (int h = 0; h < X; ++h)
          if constexpr (FP8)
            iv[c][h] = e >= 0 ? reinterpret_cast<const uint4*>(iq + static_cast<long long>(t - i_first) * TOPK * INTER + p * EPC)[h]
                              : make_uint4(0, 0, 0, 0);
          else
            iv[c][h] = e >= 0 ? *reinterpret_cast<const uint4*>(inter + static_cast<long long>(t) * TOPK * INTER + p * 8)
                              : make_uint4(0, 0, 0, 0);
        const float act_scale = FP8 && e >= 0 ? is[((t - i_first) * TOPK + k) * GROUPS + group] : 1.f;
#pragma unroll
        for (int g = 0; g < W::G; ++g) {
          const int j = g * SPLIT + sub;  // the item's place in the batch
          const int col = (base + j) % HIDDEN;
          const bool ok = e >= 0 && j < count;
          wv[g][c] = ok ? load_stream(w2 + e * a.w2_expert_stride + col * a.ldw2 + off * (FP8 ? 1 : 2)) : make_uint4(0, 0, 0, 0);
          scale[g][c] = w;
          if constexpr (FP8)
            if (ok)
              scale[g][c] *= a.w2_scale[e * a.w2_scale_expert_stride + (col / kQuantFp8BlockSize) * a.w2_scale_row_stride +
                                        group] *
                             act_scale;
        }
      }
#pragma unroll
      for (int g = 0; g < W::G; ++g)
#pragma unroll
        for (int c = 0; c < W::CH; ++c) {
          if constexpr (FP8) acc[g] = fmaf(scale[g][c], dot16_e4m3<false>(wv[g][c], iv[c][0], iv[c][X - 1]), acc[g]);
          else acc[g] = fmaf(scale[g][c], dot8<DTYPE>(wv[g][c], iv[c][0], 0.f), acc[g]);
        }
    }
#pragma unroll
    for (int g = 0; g < W::G; ++g) to_shared(red[parity], g, acc[g]);
    __syncthreads();
    const int item = base + threadIdx.x, col = item % HIDDEN;
    if (static_cast<int>(threadIdx.x) < count) {
      float v = split_total<VEC>(red[parity], threadIdx.x);
      if (a.b2) {  // sum of w_k * b2[e_k][col] (w_k = 1 when the weight went on the input)
#pragma unroll
        for (int k = 0; k < TOPK; ++k) {
          const int e = picks.local[t * TOPK + k];
          if (e >= 0) v = fmaf(a.weight_on_input ? 1.f : picks.weight[t * TOPK + k], a.b2[e * a.b2_expert_stride + col], v);
        }
      }
      static_cast<unsigned short*>(a.out)[t * a.ldo + col] = sm80::from_float<DTYPE>(v);
    }
  }
}

}  // namespace moejit
