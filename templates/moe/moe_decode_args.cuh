// Arguments and constants of the decode GEMV kernels (moe_decode_gemv.cuh): the whole fused MoE
// layer for a few tokens in two launches, routing included. Plain C++: the host includes this too.
#pragma once

#include "common/host_device.cuh"
#include "moe/quant_kinds.cuh"
#include "routing/routing_topk_args.cuh"

namespace moejit {

// Threads per CTA of both kernels; tokens one forward may have (one routing warp per token).
// kMoeDecodeManyTokens: from this many tokens the host launches gemv2_many (smaller batches of
// split items) as gemv2.
enum : int { kMoeDecodeThreads = 256, kMoeDecodeMaxTokens = 8, kMoeDecodeManyTokens = 4 };

struct MoeDecodeArgs {
  // Routing. topk.logits non-null: every CTA picks the experts from the logits itself (its
  // topk_ids / topk_weights are ignored: the kernels keep the picks in shared memory); null: the
  // caller's given_ids / given_weights [num_tokens, TOPK].
  RoutingTopkArgs topk;
  const int* given_ids;
  const float* given_weights;
  const int* expert_map;  // [num_experts] global -> local (-1 = not here, dropped); null = identity
  int num_local_experts;
  int num_tokens;  // 1 .. kMoeDecodeMaxTokens
  // CTA 0 of gemv1 publishes the routing for routing_result / experts_touched / error flags.
  int* topk_ids;       // [num_tokens, TOPK] global ids
  float* topk_weights;  // [num_tokens, TOPK]
  int* expert_counts;  // [num_local_experts] routed slots per local expert
  int* error_flags;    // RoutingErrorFlags bits
  // Experts (row-major, reduction dim contiguous). x / out / inter strides in elements, weight
  // strides in bytes (QUANT: 16-bit or e4m3 weights).
  const void* x;  // [num_tokens, ldx] DTYPE
  long long ldx;
  // fp8_block, where gemv1's CTAs would not quantize x beside their routing (the host asks
  // moe_decode_quantize_overlaps): x quantized once before gemv1 (moe_act_quant, launched after
  // everything before it), e4m3 [num_tokens, K] and fp32 scales [num_tokens, ceil(K / 128)]; gemv1
  // then routes before its dependent-launch wait and loads these after it. Null: every gemv1 CTA
  // quantizes x itself.
  const unsigned char* xq;
  const float* xq_scale;
  const void* w1;  // [E_local, W1 rows, K]
  long long w1_expert_stride, ldw1;
  const float* b1;  // [E_local, b1_expert_stride] or null
  long long b1_expert_stride;
  const void* w2;  // [E_local, K, N]
  long long w2_expert_stride, ldw2;
  // fp8_block: fp32 weight scales [E_local, ceil(rows / 128), ceil(inner / 128)] (strides in elements).
  const float* w1_scale;
  long long w1_scale_expert_stride, w1_scale_row_stride;
  const float* w2_scale;
  long long w2_scale_expert_stride, w2_scale_row_stride;
  const float* b2;  // [E_local, b2_expert_stride] or null
  long long b2_expert_stride;
  void* inter;  // [num_tokens * TOPK, N] DTYPE, by routed slot (gemv1 writes, gemv2 reads)
  void* out;    // [num_tokens, ldo] DTYPE
  long long ldo;
  int weight_on_input;  // router weight scales GEMM1's product (before bias) instead of GEMM2's result
  float alpha, limit;   // swigluoai / swiglustep
  // fp8_block, the SPAN kernels: the token rows each kernel's dynamic shared memory holds
  // (moe_decode_cta_token_span of its grid): a CTA keeps only its own tokens' quantized rows, the
  // first of them at row 0.
  int gemv1_smem_tokens, gemv2_smem_tokens;
};

// Weights per 16-byte load of the GEMV's rows: e4m3 (fp8_block) or 16-bit.
MOEJIT_HOST_DEVICE constexpr int moe_decode_chunk_elements(int quant) { return quant == kQuantFp8Block ? 16 : 8; }
// Items (gemv1: a weight row of K; gemv2: a token's TOPK intermediate rows) of vec 16-byte chunks
// a step reads side by side: several when one is at most half the CTA, a whole number of warps
// each (else 1: threads past vec idle).
MOEJIT_HOST_DEVICE constexpr int moe_decode_split_items(int vec) {
  return vec % 32 == 0 && 2 * vec <= kMoeDecodeThreads && kMoeDecodeThreads % vec == 0 ? kMoeDecodeThreads / vec : 1;
}
// gemv2's items (an output element of a token: its TOPK intermediate rows) in 16-byte chunks, and
// whether they are split (then its batch size, the kernel's SPLIT_BATCH, matters: the host launches
// gemv2_many from kMoeDecodeManyTokens tokens on; else both entries would be the same code, and
// gemv2_many is not instantiated).
MOEJIT_HOST_DEVICE constexpr int moe_decode_gemv2_vec(int quant, int top_k, int inter) {
  return top_k * inter / moe_decode_chunk_elements(quant);
}
MOEJIT_HOST_DEVICE constexpr bool moe_decode_gemv2_splits(int quant, int top_k, int inter) {
  return moe_decode_split_items(moe_decode_gemv2_vec(quant, top_k, inter)) > 1;
}
// The share of a CTA's threads with a chunk to read in its steps over items of vec chunks (the
// last step of a long row leaves the threads past its end idle; split items leave none).
MOEJIT_HOST_DEVICE constexpr double moe_decode_lane_use(int vec) {
  const int step = vec * moe_decode_split_items(vec), steps = (step + kMoeDecodeThreads - 1) / kMoeDecodeThreads;
  return static_cast<double>(step) / (static_cast<double>(steps) * static_cast<int>(kMoeDecodeThreads));
}

// fp8_block: gemv1's CTAs quantize x while warps 0 .. tokens - 1 route (one token each) where the
// spare warps need no more passes of kMoeDecodeQuantizeBatch groups than all warps would (one token of
// DeepSeek-V3's 56 groups: 7 warps x 8 at once; two tokens on 6 warps were 2 us slower). Else the
// host quantizes x once before gemv1 (MoeDecodeArgs::xq): each CTA's quantization after its routing
// was compute-bound, 2.9 us a pass of 8 groups a warp with the grid's three CTAs an SM repeating it
// (fp8_block DeepSeek-V3 TP8 M = 2 / 4: 5.5 / 11.6 us, H100 %globaltimer stamps).
inline constexpr int kMoeDecodeQuantizeBatch = 8;  // groups a warp of quantize_rows loads before reducing any
MOEJIT_HOST_DEVICE constexpr bool moe_decode_quantize_overlaps(int groups, int tokens) {
  constexpr int kWarps = kMoeDecodeThreads / 32;
  if (tokens < 1 || tokens >= kWarps) return false;
  const int g = tokens * groups, spare = (kWarps - tokens) * kMoeDecodeQuantizeBatch, all = kWarps * kMoeDecodeQuantizeBatch;
  return (g + spare - 1) / spare <= (g + all - 1) / all;
}

// fp8_block: each CTA quantizes its activations into shared memory (e4m3 values as f16 + one fp32
// scale per token per 128 columns, as moe_act_quant does): gemv1 the tokens' x rows, gemv2 their
// TOPK intermediate rows. Dynamic shared memory of each (0 for 16-bit weights), and the cap on it.
inline constexpr long long kMoeDecodeMaxSmemBytes = 96 * 1024;
// CTA b of grid: items [begin, end) of total (an even split), and the tokens they span (first and
// how many, at least one) at per_token items a token.
MOEJIT_HOST_DEVICE constexpr void moe_decode_cta_items(long long b, long long grid, long long total, int& begin, int& end) {
  begin = static_cast<int>(b * total / grid);
  end = static_cast<int>((b + 1) * total / grid);
}
MOEJIT_HOST_DEVICE constexpr void moe_decode_cta_tokens(int begin, int end, int per_token, int& first, int& count) {
  first = begin / per_token;
  count = ((end > begin + 1 ? end : begin + 1) - 1) / per_token - first + 1;
}
// A CTA quantizes only the tokens its items span (moe_decode_cta_items / moe_decode_cta_tokens), so
// its shared memory holds at most this many token rows: items / grid items (rounded up) touch at
// most (that - 1) / per_token + 2 tokens. Sized for every token instead, DeepSeek-V3-wide x rows
// (14 KB a token) held gemv1 to two CTAs an SM at six tokens and out of seven and eight.
MOEJIT_HOST_DEVICE constexpr int moe_decode_cta_token_span(long long items, long long per_token, long long grid,
                                                          int tokens) {
  const long long most = (items + grid - 1) / grid;
  const long long span = (most - 1) / per_token + 2;
  return span < tokens ? static_cast<int>(span) : tokens;
}
// The host launches at least this many CTAs of each kernel (more than one wave on a smaller GPU), so
// that moe_decode_gemv_fits (decode_gemv_max_tokens) bounds every CTA's token span without knowing
// the device.
inline constexpr long long kMoeDecodeMinGrid = 16;
MOEJIT_HOST_DEVICE constexpr long long moe_decode_gemv1_items(int tokens, int top_k, int inter) {
  return static_cast<long long>(tokens) * top_k * inter;
}
MOEJIT_HOST_DEVICE constexpr long long moe_decode_gemv2_items(int tokens, int hidden) {
  return static_cast<long long>(tokens) * hidden;
}
MOEJIT_HOST_DEVICE constexpr long long moe_decode_quant_smem(int quant, long long rows, long long cols) {
  return quant == kQuantFp8Block ? rows * cols * 2 + rows * ((cols + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize) * 4 : 0;
}
// Of `tokens` token rows (a CTA's span).
MOEJIT_HOST_DEVICE constexpr long long moe_decode_gemv1_smem(int quant, int tokens, int hidden) {
  return moe_decode_quant_smem(quant, tokens, hidden);
}
MOEJIT_HOST_DEVICE constexpr long long moe_decode_gemv2_smem(int quant, int tokens, int top_k, int inter) {
  return moe_decode_quant_smem(quant, static_cast<long long>(tokens) * top_k, inter);
}
// Whether a layer's GEMV module carries the SPAN kernels (each CTA's shared memory holding only its
// own tokens' rows): fp8_block layers whose rows for kMoeDecodeMaxTokens tokens pass
// kMoeDecodeSpanSmemBytes (three CTAs of an SM could not hold them). Elsewhere every token's rows
// fit: the kernels without SPAN keep their code (with SPAN, the first token's offset held in a
// register cost DeepSeek-V3 TP8 M = 1 .. 4 1-3% on an H100, forty-sixth session).
inline constexpr long long kMoeDecodeSpanSmemBytes = 64 * 1024;
MOEJIT_HOST_DEVICE constexpr bool moe_decode_gemv_span_wanted(int quant, int top_k, int hidden, int inter) {
  return quant == kQuantFp8Block && (moe_decode_gemv1_smem(quant, kMoeDecodeMaxTokens, hidden) > kMoeDecodeSpanSmemBytes ||
                                     moe_decode_gemv2_smem(quant, kMoeDecodeMaxTokens, top_k, inter) > kMoeDecodeSpanSmemBytes);
}
// Whether a forward of `tokens` fits: every token's rows, or (SPAN kernels) the largest span any grid
// of at least kMoeDecodeMinGrid CTAs (or one per item) gives its CTAs, in at most kMoeDecodeMaxSmemBytes.
MOEJIT_HOST_DEVICE constexpr bool moe_decode_gemv_fits(int quant, int tokens, int top_k, int hidden, int inter) {
  const long long items1 = moe_decode_gemv1_items(tokens, top_k, inter), items2 = moe_decode_gemv2_items(tokens, hidden);
  const int span1 = moe_decode_cta_token_span(items1, static_cast<long long>(top_k) * inter,
                                              items1 < kMoeDecodeMinGrid ? items1 : kMoeDecodeMinGrid, tokens);
  const int span2 = moe_decode_cta_token_span(items2, hidden, items2 < kMoeDecodeMinGrid ? items2 : kMoeDecodeMinGrid,
                                              tokens);
  const bool all = moe_decode_gemv1_smem(quant, tokens, hidden) <= kMoeDecodeMaxSmemBytes &&
                   moe_decode_gemv2_smem(quant, tokens, top_k, inter) <= kMoeDecodeMaxSmemBytes;
  return all || (moe_decode_gemv_span_wanted(quant, top_k, hidden, inter) &&
                 moe_decode_gemv1_smem(quant, span1, hidden) <= kMoeDecodeMaxSmemBytes &&
                 moe_decode_gemv2_smem(quant, span2, top_k, inter) <= kMoeDecodeMaxSmemBytes);
}

}  // namespace moejit
