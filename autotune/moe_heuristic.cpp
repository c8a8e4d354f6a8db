#include "autotune/moe_heuristic.h"

#include <fmt/format.h>

#include <algorithm>

#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_quant.h"
#include "templates/moe/moe_decode_args.cuh"
#include "templates/moe/moe_gemm_args.cuh"

namespace moejit {

namespace {
// Buckets of rows per local expert, upper bounds inclusive; the last is open.
constexpr int kBucketRows[] = {16, 32, 64};
// sm_90a, 16-bit weights: rows per expert from which the wgmma kernel takes over; below, when
// GEMM1 has at least kWgmmaMinDecodeTiles tiles of 64 columns over the touched experts (its
// persistent 64-row variant streams weights by bulk copies but does not split k: fewer tiles leave
// SMs idle). H200, no DB, M = 1 / 4 / 16: Mixtral-8x7B 226 -> 186 / 503 -> 445 / 693 -> 679 us,
// DeepSeek-V2-Lite 45.5 -> 42.7 / 133 -> 112 / 229 -> 223; DeepSeek-V3 TP8 M = 1 (32 tiles)
// 46.8 -> 66.5 without the tile bound.
constexpr int kWgmmaMinRows = 8;
// bf16 and fp8 wgmma tiles: 128 rows from this many rows per expert on (64 before). H100, no DB,
// 64 -> 128-row tiles at 49-64 rows: bf16 Qwen3-30B-A3B M = 1024 532 -> 485 us, DeepSeek-V2-Lite M
// = 640 463 -> 440, Mixtral-8x7B M = 256 1052 -> 991, fp8_block Qwen3-30B-A3B M = 1024 317 -> 305;
// at 37-50 rows within -2 .. +1.5% (two rounds each).
constexpr int kWgmmaWideRows = 48;
constexpr long long kWgmmaMinDecodeTiles = 128;
// Experts of at least this many weight bytes (W1 + W2 as stored) outgrow the L2 (50 MB on an H100 /
// H200): an expert split over two 8-token tiles reads its weights twice from DRAM, so at 5-8 rows
// an expert the swap-AB tiles take 16 tokens (kBigExpertMinRows). H100, no DB, forty-fourth session,
// 8 -> 16-token tiles (4 x 2 warps) at 5 / 6 / 7 / 8 rows: Mixtral-8x7B (176 MB fp8) fp8_block M =
// 20 / 24 / 28 / 32 535 / 559 / 582 / 652 -> 504 / 506 / 508 / 509 us, int8 533 / 558 / 586 / 668
// -> 523 / 526 / 530 / 531, MXFP4 (prepacked, 93 MB) 338 / 371 / 403 / 444 -> 331 / 341 / 354 /
// 367; DeepSeek-V3 (N = 2048, 44 MB fp8) M = 160 / 192 / 224 / 256 3981 / 4064 / 4147 / 4241 ->
// 3911 / 3956 / 3977 / 4010. Not below: gpt-oss-120b fp8_block (25 MB) M = 192 / 256 +1.1 / +0.2%,
// DeepSeek-V2-Lite / Qwen3-30B-A3B / DeepSeek-V3 TP8 fp8_block (4.7-8.6 MB) +2..+29%; nor at 4
// rows (int8 Mixtral M = 16 +0.7%); nor int4 (its 16-token tiles: Mixtral M = 20 .. 32 +15..+48%).
constexpr double kBigExpertBytes = 32.0 * (1 << 20);
constexpr int kBigExpertMinRows = 5;

// GEMM1 tiles of 64 columns over the experts num_tokens can touch (the decode rule below).
long long gemm1_decode_tiles(const MoeSpec& spec, long long num_tokens) {
  return std::min<long long>(spec.local_experts(), std::max(num_tokens, 1LL) * spec.top_k) *
         ((spec.intermediate + 63) / 64);
}

int rows_per_expert(const MoeSpec& spec, long long num_tokens) {
  const long long rows = num_tokens * spec.top_k;
  return static_cast<int>((rows + spec.local_experts() - 1) / spec.local_experts());
}
// Swap-AB decode tiles, 2 k blocks in flight per warp (gpt-oss-120b MXFP4 on an H200 at M = 1 /
// 16 / 128: w4x1 s2 45 / 332 / 817 us, s4 48 / 369 / 916, w8x1 s2 49 / 369 / 922, w16x1 s2 50 /
// 392 / 989). Warps along k: enough that the grid holds about 16 warps per SM of a 132-SM part
// (its k blocks shared out), and no more (gpt-oss GEMM1 at M = 1 has 1440 warps at one per row
// group: w4x2 ran slower than w4x1). Narrow layers (DeepSeek-V3 TP8: N = 256) take 2 warps along
// the columns and up to 8 along k (16 warps per CTA at most).
constexpr long long kSwapAbTargetWarps = 132 * 16;
// GEMM2's k blocks from which swap_ab_decode_tile gives it at least two warps along k.
constexpr long long kSwapAbGemm2TwoWarpsKBlocks = 12;

GemmTile swap_ab_decode_tile(const MoeSpec& spec, int num_tokens, int block_m, bool gemm1) {
  const bool gated = gemm1 && spec.fused && activation_is_gated(spec.activation);
  const long long cols = gemm1 ? (spec.fused ? spec.intermediate : spec.w1_rows()) : spec.hidden;
  const long long rows = static_cast<long long>(std::max(num_tokens, 1)) * spec.top_k;
  const long long tiles = std::min<long long>(rows, spec.local_experts()) + rows / block_m;  // ~ one partial per expert
  const long long k_blocks = ((gemm1 ? spec.hidden : spec.intermediate) + moe_swap_ab_block_k() - 1) / moe_swap_ab_block_k();
  for (int wn : {4, 2}) {
    const long long block_n = moe_swap_ab_block_n(wn, gated);
    const long long warps = (cols + block_n - 1) / block_n * tiles * wn;  // at one warp along k
    // GEMM1 takes at least two warps along k where its k blocks allow: H100, no DB, MXFP4 gpt-oss-120b
    // M = 1 / 4 / 16 / 64 38.9 / 120.7 / 330.8 / 700.7 -> 35.0 / 111.4 / 302.8 / 653.0 us, int4
    // Mixtral-8x7B M = 4 / 16 272 / 411 -> 244 / 376, int4 DeepSeek-V3 TP8 77.4 / 189.8 -> 66.0 /
    // 170.3, fp8_block DeepSeek-V3 TP8 M = 16 / 64 224.6 / 470.7 -> 220.0 / 462.9 (the tuner's
    // usual pick). GEMM2 too from 16 k blocks (N >= 1921; the tuner kept one warp for Qwen3's N = 768
    // and DeepSeek-V3 TP8's 256): MXFP4 gpt-oss-120b M = 4 / 16 / 64 112.1 / 302.8 / 653.9 -> 110.0
    // / 290.7 / 633.0, int4 Mixtral-8x7B M = 4 / 16 243.4 / 376.1 -> 223.8 / 368.3, int8
    // gpt-oss-120b M = 16 478.4 -> 471.3 (two rounds each). From 12 k blocks (N >= 1409) since the
    // forty-fifth session: N = 1536 layers (K = 4096, E = 128, top_k = 8; H100, no DB against a user DB,
    // two rounds, M = 1 / 2 / 3 / 4 / 6 / 8) int4 52.4 / 80.5 / 108.7 / 138.0 / 188.3 / 225.8 -> 46.7 /
    // 80.5 / 108.6 / 137.7 / 189.5 / 228.6 us, int8 -7 / -1.7 / -2.4 / -2 / -1.8 / -1.9%, fp8_block (M >= 3)
    // -0.6..-0.9%, MXFP4 (K = 2880, top_k = 4) M = 2 .. 6 -1..-4%; at N = 1408 (11 blocks) and 1024 (8)
    // int4 was mixed (-5..+3.4%).
    // Not for 4-bit weights on full 8-token tiles (8 rows an expert: the heuristic's 8-token tiles
    // end there), the tuner's pick in both shipped DBs. H100, no DB, two rounds, against two warps along k: MXFP4 gpt-oss-120b
    // M = 256 986 -> 857 us, gpt-oss-20b M = 64 276-282 -> 243, int4 Qwen3-30B-A3B M = 128 245 ->
    // 217, DeepSeek-V2-Lite M = 80 210-213 -> 191, DeepSeek-V3 TP8 M = 256 639-642 -> 621-623,
    // Mixtral-8x7B M = 32 482-495 -> 479-480. Slower for int8 (Qwen3 M = 128 / 192 / 256 +1.5 / +7 /
    // +6%, Mixtral M = 32 / 48 / 64 +1.5 / +6.5 / +7%, gpt-oss-120b M = 256 / 384 / 512 +1 / +3.5 /
    // +2.5%), fp8 (DeepSeek-V3 TP8 fp8_block M = 256 +2.3%, Qwen3 fp8_channel M = 128 +2.6%) and
    // MXFP4's 24-row tiles (gpt-oss-120b M = 320 1021 -> 1084-1097).
    // int8's 24-token tiles (9-13 rows an expert) likewise take one warp along k (forty-fourth
    // session, H100: their 8 x 1 and 4 x 1 tiles within 2% of each other, 4 x 2 1.2-1.7x slower).
    const long long most = std::max(1LL, k_blocks / 4);
    const bool full_4bit_tiles = quant_weight_bits(spec.quant) == 4 && block_m == 8 &&
                                 rows_per_expert(spec, std::max(num_tokens, 1)) >= 8;
    const bool int8_24 = spec.quant == kQuantInt8Channel && block_m == 24;
    const long long least = std::min(!full_4bit_tiles && !int8_24 && (gemm1 || k_blocks >= kSwapAbGemm2TwoWarpsKBlocks) ? 2LL : 1LL, most);
    const long long wk = std::clamp<long long>(kSwapAbTargetWarps / warps, least, most);
    if (wk <= 16 / wn || wn == 2) return swap_ab_tile(wn, static_cast<int>(std::min<long long>(wk, 16 / wn)), 2);
  }
  return swap_ab_tile(4, 1, 2);  // not reached
}

// Prefill on sm_90a (more than kWgmmaWideRows rows an expert), 16-bit and fp8 layers alike: 128
// rows x 256 weight rows, persistent; GEMM2 with the staged epilogue where its DTYPE rows fit
// beside 3 slots (the fused layer; then the top-k sum comes from DTYPE rows at every batch size).
// H200, against 4 slots unstaged: DeepSeek-V3 TP8 M = 8192 2706 -> 2260 us, DeepSeek-V2-Lite M =
// 1024 .. 4096 1-10%, Mixtral-8x7B M = 1024 .. 8192 1-2% faster; 64-row tiles lost 2-8% with it.
void set_prefill_wgmma_tiles(MoeTileConfig& c, const MoeSpec& spec, bool gemm1_gated) {
  c.block_m = 128;
  c.gemm1 = wgmma_tile(gemm1_gated ? 128 : 256, 4, 0, true);
  c.gemm2 = spec.fused ? wgmma_tile(256, 3, 0, true, true) : wgmma_tile(256, 4, 0, true);
}
}  // namespace

std::string MoeTileConfig::describe() const {
  if (gemv) return "gemv";
  auto tile = [](const GemmTile& t) {
    const std::string split = t.split_k ? fmt::format(" k/{}", t.split_k) : std::string();
    if (t.swap_ab)
      return fmt::format("swapab{} w{}x{} s{}{}", t.swap_ab_wgmma ? " wg" : "", t.warps_n, t.warps_k, t.stages, split);
    if (t.wgmma)
      return fmt::format("wgmma bn{} s{}{}{}{}{}{}{}{}{}", t.block_n, t.stages, t.persistent ? " ws" : "",
                         t.staged ? " st" : "", t.pingpong ? " pp" : "", t.multicast ? " mc" : "",
                         t.pregather ? " pg" : "", split,
                         t.walk_rows ? fmt::format(" walk{}", t.walk_rows) : std::string(),
                         t.work_queue == 1 ? " wq" : t.work_queue == 0 ? " nowq" : "");
    return fmt::format("bn{} bk{} w{}x{} s{}{}", t.block_n, t.block_k, t.warps_m, t.warps_n, t.stages, split);
  };
  const char* sum = topk_sum == TopkSum::Rows ? " sum=rows" : topk_sum == TopkSum::Atomic ? " sum=atomic" : "";
  return fmt::format("bm{} gemm1[{}] gemm2[{}]{}", block_m, tile(gemm1), tile(gemm2), sum);
}

bool work_queue_by_default(const MoeSpec& spec, int block_m, bool gemm2) {
  if (block_m < 128) return false;
  return spec.quant != kQuantNone || (gemm2 && spec.intermediate <= kMoeWorkQueueGemm2MaxInner);
}

bool can_claim_work_items(const GemmTile& tile) {
  return tile.persistent && tile.wgmma && !tile.multicast && !tile.pingpong && tile.split_k <= 1;
}

bool claims_work_items(const MoeSpec& spec, int block_m, bool gemm2, const GemmTile& tile, bool clusters, int splits,
                       int option) {
  if (!can_claim_work_items(tile) || clusters || splits != 1) return false;
  if (option >= 0) return option == 1;
  return tile.work_queue >= 0 ? tile.work_queue == 1 : work_queue_by_default(spec, block_m, gemm2);
}

GemmTile swap_ab_tile(int warps_n, int warps_k, int stages, int split_k) {
  GemmTile t;
  t.swap_ab = true;
  t.block_n = t.block_k = t.warps_m = 0;
  t.warps_n = warps_n;
  t.warps_k = warps_k;
  t.stages = stages;
  t.split_k = split_k;
  return t;
}

GemmTile swap_ab_wgmma_tile(int warps_n, int stages, int split_k) {
  GemmTile t = swap_ab_tile(warps_n, 1, stages, split_k);
  t.swap_ab_wgmma = true;
  return t;
}

bool swap_ab_wgmma_supported(const MoeSpec& spec, const std::string& arch) {
  return arch_has_wgmma(arch) && !quant_is_fp8(spec.quant) && swap_ab_supported_both(spec);
}

bool swap_ab_supported(const MoeSpec& spec, bool gemm1) {
  const int inner = gemm1 ? spec.hidden : spec.intermediate;
  return spec.reduce == ReduceMode::Fast && inner % moe_swap_ab_load_k(spec.quant) == 0;
}

bool swap_ab_supported_both(const MoeSpec& spec) { return swap_ab_supported(spec, true) && swap_ab_supported(spec, false); }

MoeTileConfig decode_gemv_config() {
  MoeTileConfig c;
  c.gemv = true;
  return c;
}

bool decode_gemv_supported(const MoeSpec& spec, const std::string& arch) {
  const bool fp8 = spec.quant == kQuantFp8Block;
  const int chunk = moe_decode_chunk_elements(spec.quant);
  return spec.fused && spec.reduce == ReduceMode::Fast && (spec.quant == kQuantNone || fp8) &&
         (!fp8 || arch.empty() || arch_has_fp8_mma(arch)) && spec.hidden % chunk == 0 && spec.intermediate % chunk == 0 &&
         decode_gemv_max_tokens(spec) >= 1;
}

double decode_gemv_lane_use(const MoeSpec& spec) {
  const int chunk = moe_decode_chunk_elements(spec.quant);
  const double rows1 = activation_is_gated(spec.activation) ? 2.0 : 1.0;  // W1 rows per intermediate column
  const double use1 = moe_decode_lane_use(spec.hidden / chunk);
  const double use2 = moe_decode_lane_use(spec.top_k * spec.intermediate / chunk);
  return (rows1 * use1 + use2) / (rows1 + 1.0);  // by bytes: gemv1 reads rows1 of every 1 + rows1
}

int decode_gemv_max_tokens(const MoeSpec& spec) {
  int t = kMoeDecodeMaxTokens;
  while (t > 0 && !moe_decode_gemv_fits(spec.quant, t, spec.top_k, spec.hidden, spec.intermediate)) --t;
  return t;
}

GemmTile wgmma_tile(int block_n, int stages, int split_k, bool persistent, bool staged) {
  GemmTile t;
  t.wgmma = true;
  t.persistent = persistent;
  t.staged = staged;
  t.block_n = block_n;
  t.block_k = t.warps_m = t.warps_n = 0;
  t.stages = stages;
  t.split_k = split_k;
  return t;
}

bool wgmma_supported(const MoeSpec& spec, const std::string& arch) {
  if (!arch_has_wgmma(arch) || spec.reduce != ReduceMode::Fast) return false;
  // Weight-only formats: the persistent variant dequantizes them (moe_gemm_wgmma_dequant.cuh).
  if (spec.quant == kQuantNone || spec.quant == kQuantFp8Channel || spec.quant == kQuantFp8Tensor ||
      quant_dequantizes_b(spec.quant))
    return true;
  // 128 x 128 blocks: each set's weight rows of a tile in one block (gate / up rows stacked, the
  // up half starting on a block edge).
  const bool gated = spec.fused && activation_is_gated(spec.activation);
  return spec.quant == kQuantFp8Block && !(gated && activation_is_interleaved(spec.activation)) &&
         (!gated || spec.intermediate % kQuantFp8BlockSize == 0);
}

int gemv_heuristic_most_tokens(const MoeSpec& spec) {
  if (spec.quant != kQuantFp8Block) return kGemvHeuristicWideTokens;
  if (spec.intermediate <= kGemvHeuristicNarrowestFp8) return kGemvHeuristicMostTokensNarrowestFp8;
  return spec.intermediate <= kGemvHeuristicNarrowFp8 ? kGemvHeuristicMaxTokens : kGemvHeuristicMaxTokensFp8;
}

MoeTileConfig heuristic_tile_config(const MoeSpec& spec, int num_tokens, bool swap_ab, const std::string& arch,
                                    bool decode_gemv) {
  // H200, against the tuned grouped-GEMM configs (whole forward): M = 1 Qwen3-30B-A3B 32.0 -> 26.6
  // us, DeepSeek-V3 TP8 36.8 -> 29.6, DeepSeek-V2-Lite 38.4 -> 33.4, gpt-oss-120b 64.8 -> 56.7,
  // Mixtral-8x7B 185 -> 166; faster up to M = 4 (Mixtral: M = 2), slower where slots share
  // experts (Mixtral M = 4: 442 -> 522 us; Qwen3, DeepSeek-V2-Lite M = 8).
  // fp8_block (DeepSeek-V3 TP8): 31.8 -> 30.2 us at M = 1, 51.7 -> 48.6 at M = 2, but 72.6 -> 88 at
  // M = 4 against the swap-AB e4m3 kernels: its products cost more instructions per byte. With x
  // quantized once before gemv1 (thirty-fourth session, H100): M = 2 / 3 / 4 44.2 / 57.6 / 77.0
  // against the swap-AB tiles' 47.6 / 62.7 / 75.7 (tuned) and 63.7 / 77.7 (these heuristic tiles);
  // other fp8_block shapes lose at M = 3 but narrow experts win (gemv_heuristic_most_tokens).
  // Five and six tokens where at most 3/8 of the experts get a slot (H100, no DB, two rounds: M = 5
  // / 6 Qwen3-30B-A3B 133 / 152 -> 126 / 139.5 us, DeepSeek-V3 TP8 162 / 187 -> 149 / 175, gpt-oss-120b
  // 342 / 398 -> 344 / 386; slower at M = 7 / 8, Qwen3 171 / 182 -> 175 / 194, gpt-oss 452 / 499
  // -> 474 / 523, and for DeepSeek-V2-Lite at M = 5, slots 0.94 of the experts, 171 -> 181).
  const long long slots = static_cast<long long>(num_tokens) * spec.top_k;
  const bool sparse = num_tokens <= kGemvHeuristicMaxTokens ? 2 * slots <= spec.local_experts()
                                                             : 8 * slots <= 3LL * spec.local_experts();
  const int most = gemv_heuristic_most_tokens(spec);
  const bool lanes = spec.quant != kQuantFp8Block || decode_gemv_lane_use(spec) >= kGemvHeuristicMinLaneUseFp8;
  if (decode_gemv && swap_ab && num_tokens >= 1 && num_tokens <= most && sparse && lanes &&
      num_tokens <= decode_gemv_max_tokens(spec) && decode_gemv_supported(spec, arch))
    return decode_gemv_config();
  // GEMM1 with a gated activation carries gate and up accumulators: half the columns per tile.
  const bool gemm1_gated = spec.fused && activation_is_gated(spec.activation);
  const int wide = 128, gemm1_n = gemm1_gated ? 64 : wide;
  const int rows = rows_per_expert(spec, std::max(num_tokens, 1));
  MoeTileConfig c;
  if (rows <= kBucketRows[0]) {
    c.block_m = 16;
    c.gemm1 = {gemm1_n, 64, 1, 4, 4};
    c.gemm2 = {wide, 64, 1, 4, 4};
  } else if (rows <= kBucketRows[1]) {
    c.block_m = 32;
    c.gemm1 = {gemm1_n, 64, 1, 4, 4};
    c.gemm2 = {wide, 64, 1, 4, 4};
  } else if (rows <= kBucketRows[2]) {
    c.block_m = 64;
    c.gemm1 = {gemm1_n, 64, 2, 2, 3};
    c.gemm2 = {wide, 64, 2, 2, 3};
  } else {
    c.block_m = 128;
    c.gemm1 = {gemm1_n, 64, 4, 2, 3};
    c.gemm2 = {wide, 64, 4, 2, 3};
  }
  if (quant_is_fp8(spec.quant)) {  // one byte per element: 128 k fill the same 128-byte smem rows
    c.gemm1.block_k = 128;
    c.gemm2.block_k = 128;
  }
  // Decode streams weights. A 16-bit k tile of 64 reads 128 bytes of each weight row; 4-bit weights
  // read 64 per row with k tiles of 128 (fewer barriers per byte; 256 would leave one CTA per SM).
  if (c.block_m <= 32 && quant_dequantizes_b(spec.quant)) {
    const bool four_bit = quant_weight_bits(spec.quant) == 4;
    for (GemmTile* t : {&c.gemm1, &c.gemm2}) {
      t->block_k = four_bit ? 128 : 64;
      t->stages = 4;  // with the DTYPE tile, 4 slots keep two CTAs per SM
    }
  }
  // Few tokens per expert and 4-bit weights: the swap-AB kernel (dequantization in registers; in
  // shared memory it bounds decode). Eight tokens per tile while most experts get fewer. fp8 (w8a8)
  // up to 8 rows per expert too, as the tuner picks for DeepSeek-V3 TP8 fp8_block M = 4 .. 128.
  // H100, no DB, against the bm16 shared-memory tiles before: DeepSeek-V3 TP8 fp8_block M = 4 / 16
  // / 64 / 128 / 256 98.9 / 264.9 / 529.3 / 614.3 / 642.3 -> 85.6 / 224.6 / 471.5 / 558.0 / 634.5
  // us; unseen layers fp8_block E = 48, top_k = 6, K = 2880, N = 640 M = 4 / 16 / 64 80.7 / 150.4 /
  // 169.2 -> 64.5 / 123.3 / 134.8, fp8_channel E = 40, top_k = 5, K = 1536, N = 384 36.0 / 55.9 /
  // 62.1 -> 26.2 / 48.8 / 57.9.
  // int8 (w8a16) as the 4-bit formats (H100, no DB, int8_channel against the bm16 shared-memory
  // tiles: Qwen3-30B-A3B M = 1 / 16 / 64 / 256 47.4 / 266.4 / 394.3 / 560.0 -> 29.3 / 167.2 /
  // 245.8 / 390.1 us, gpt-oss-120b 94.2 / 789.5 / 1659.6 / 1947.0 -> 53.4 / 494.1 / 1053.0 /
  // 1373.2). The 64-row wgmma tiles from 9 rows instead ran these formats 9-51% slower.
  const bool swap_ab_format = quant_weight_bits(spec.quant) == 4 || spec.quant == kQuantInt8Channel ||
                              (quant_is_fp8(spec.quant) && rows <= 8);
  // MXFP4 into bf16 from 9 rows an expert: 24-row tiles. Routed counts scatter around the mean,
  // so 16-row tiles split most experts in two and dequantize their weights twice (gpt-oss-20b M =
  // 128: L2 hit rate 49%); 24 rows keep the activations ahead in registers (116 at two CTAs an SM;
  // 32 rows take 138: one CTA). H100, same run, two rounds, against 16-row tiles: gpt-oss-20b M =
  // 96 / 128 302-304 / 376-378 -> 298-300 / 350-352 us, gpt-oss-120b M = 384 / 512 1122 / 1426 ->
  // 1086 / 1274. (int4 Qwen3-30B-A3B M = 192: 307 -> 464: not for int4.)
  const bool three_fragments = quant_is_mxfp4(spec.quant) && spec.dtype == kDTypeBF16;
  // sm_90a, MXFP4 into bf16 at 12 .. 28 rows an expert and int4 at 9 .. 28: the swap-AB kernel's wgmma
  // variant (the tokens staged in shared memory instead of registers, one warpgroup MMA per k16
  // step), 32 rows a tile (16 at 12 rows). H100, against the 24-row mma.sync tiles (MXFP4, no DB) or
  // the shipped DB's 64-row wgmma tiles: gpt-oss-20b M = 96 / 128 / 192 299.5 / 345.1 / 385.2 ->
  // 291.5 / 308.2 / 322.3 us, gpt-oss-120b M = 384 / 512 / 640 / 720 / 800 / 880 (DB) 1380 / 1386 /
  // 1379 / 1381 / 1393 / 1394 -> 1055 / 1130 / 1155 / 1183 / 1239 / 1305, int4 Qwen3-30B-A3B M = 192 /
  // 256 / 320 / 384 / 416 (DB) 334 / 332 / 335 / 339 / 340 -> 264 / 269 / 279 / 299 / 308. 16-row
  // tiles from 13 rows split most experts in two (gpt-oss-120b M = 512 / 640 1213 / 1411, Qwen3 256 /
  // 320 315 / 386). int4 from 9 rows (Qwen3 M = 144 / 160 / 176, no DB: 262.4 / 269.5 / 278.3 ->
  // 235.1 / 242.4 / 256.7), not at 8 (M = 128 224.3 -> 233.7). MXFP4 not at 9-10 rows (gpt-oss-20b
  // M = 72 261.8 -> 268.7; gpt-oss-120b M = 320 1001 (DB) -> 1003) nor 32 (M = 256: 386.8 ->
  // 403.4; int4 Qwen3 M = 512 336 -> 373). (int8 with its fp32 conversions lost: Qwen3 M = 256 385 -> 501.)
  // int8 (w8a16) since its weights convert by byte permutes (moe_dequant.cuh; the fp32 conversions
  // had bounded it): 24-token mma.sync tiles at 9 .. 13 rows an expert, one warp along k
  // (swap_ab_decode_tile), and 32-token wgmma-variant tiles at 14 .. 32 rows. H100, no DB, forty-fourth
  // session, against the 16-token tiles (4 x 2 warps) or 64-row wgmma tiles before, us (24-token tiles
  // of 4 x 1 warps at 10 rows, 8 x 1 at 13): Qwen3-30B-A3B M = 160 / 208 / 256 / 384 / 448 / 512 279 /
  // 301 / 332 / 393 / 393 / 394 -> 285 / 301 / 294 / 322 / 335 / 378, Mixtral-8x7B M = 40 / 52 / 64 /
  // 96 / 112 / 128 565 / 656 / 736 / 823 / 827 / 825 -> 545 / 553 / 560 / 603 / 731 / 815,
  // gpt-oss-120b M = 320 / 416 / 512 / 768 / 1024 1389 / 1495 / 1673 / 2035 / 2036 -> 1318 / 1349 /
  // 1400 / 1463 / 1767, DeepSeek-V3 TP8 M = 320 / 416 / 512 / 768 / 1024 683 / 763 / 855 / 1043 / 1063
  // -> 683 / 706 / 754 / 882 / 1030. The wgmma-variant tiles lose at 48 rows (Mixtral M = 192 836 ->
  // 1036), 16-token ones everywhere (+1..+7%).
  const bool int8 = spec.quant == kQuantInt8Channel;
  const bool wgmma_format = three_fragments || spec.quant == kQuantInt4Group || int8;
  const int wgmma_min_rows = spec.quant == kQuantInt4Group ? 9 : int8 ? 14 : 12;
  const int wgmma_max_rows = int8 ? 32 : 28;
  if (swap_ab && wgmma_format && rows >= wgmma_min_rows && rows <= wgmma_max_rows && swap_ab_wgmma_supported(spec, arch)) {
    c.block_m = rows <= 12 ? 16 : 32;
    c.gemm1 = c.gemm2 = swap_ab_wgmma_tile(8, 2);
    return c;
  }
  if (swap_ab && rows <= 16 && swap_ab_format && swap_ab_supported_both(spec)) {
    const bool big_experts =
        static_cast<double>(quant_expert_weight_bytes(spec)) >= kBigExpertBytes && spec.quant != kQuantInt4Group;
    c.block_m = rows <= 8 ? (big_experts && rows >= kBigExpertMinRows ? 16 : 8) : three_fragments || int8 ? 24 : 16;
    c.gemm1 = swap_ab_decode_tile(spec, num_tokens, c.block_m, true);
    c.gemm2 = swap_ab_decode_tile(spec, num_tokens, c.block_m, false);
    return c;
  }
  // fp8 past the swap-AB tiles, up to kWgmmaWideRows rows per expert: 64-row persistent e4m3 wgmma
  // tiles (the tuner's pick for DeepSeek-V3 TP8 fp8_block M = 1024), where the shared-memory
  // mma.sync tiles were 1.1-2.8x slower. H100, no DB: DeepSeek-V3 TP8 fp8_block M = 300 / 512 / 1024 / 2048 620 /
  // 816 / 1235 / 1894 -> 590 / 619 / 672 / 887 us; unseen fp8_block E = 48, top_k = 6, K = 2880,
  // N = 640 M = 100 / 256 / 512 164 / 257 / 386 -> 141 / 149 / 177, E = 64, top_k = 6, K = 2048, N =
  // 1408 M = 150 / 333 / 600 274 / 435 / 569 -> 246 / 254 / 273, fp8_channel E = 40, top_k = 5,
  // K = 1536, N = 384 M = 256 / 512 99 / 138 -> 72 / 84 (M = 100, 13 rows: 65.5 -> 68.5).
  if (quant_is_fp8(spec.quant) && rows > 8 && wgmma_supported(spec, arch)) {
    if (rows <= kWgmmaWideRows) {
      c.block_m = 64;
      c.gemm1 = wgmma_tile(gemm1_gated ? 64 : 128, 5, 0, true);
      c.gemm2 = wgmma_tile(64, 3, 0, true);
    } else {
      // fp8 prefill: e4m3 wgmma on the 16-bit layers' tiles (the consumers keep a k tile's sums 128
      // weight rows at a time; while one warpgroup scales them the other multiplies). H100, no DB,
      // same run against 128-weight-row tiles (GEMM1 64 columns s6, GEMM2 128 staged), M = 2048 /
      // 4096 / 8192:
      // fp8_block DeepSeek-V3 TP8 791 / 1200 / 1993 -> 759 / 1150 / 1907 us, Mixtral-8x7B 2093 /
      // 3815 / 7378 -> 1901 / 3437 / 6316, Qwen3-30B-A3B 380 / 616 / 1171 -> 372 / 566 / 1017,
      // DeepSeek-V2-Lite 428 / 753 / 1434 -> 400 / 661 / 1208, DeepSeek-V3 (E = 256, N = 2048) M
      // = 8192 9111 -> 8598; fp8_channel DeepSeek-V3 TP8 M = 2048 / 8192 966 / 2292 -> 864 / 2054.
      set_prefill_wgmma_tiles(c, spec, gemm1_gated);
      // GEMM1's weight tiles multicast over pairs of row tiles from a full tile an expert, where
      // the k loop is long (K >= 4096). H100, no DB, same runs, fp8_block: DeepSeek-V3 TP8 (K = 7168)
      // M = 4096 / 8192 (128 / 256 rows) 1151 / 1903 -> 1028 / 1664 us, DeepSeek-V3 (N = 2048) M =
      // 4096 / 8192 5761 / 8482 -> 5149 / 7877, at 64 rows (M = 2048) +-0.3%; Mixtral-8x7B (K =
      // 4096) M = 1024 .. 8192 -2 .. +0.4%; with K = 2048 it lost at 64-128 rows (Qwen3-30B-A3B M =
      // 1024 / 2048 +2 / +3%) and won 5% at 512 (M = 8192): not taken there.
      c.gemm1.multicast = gemm1_gated && rows >= 128 && spec.hidden >= 4096;
    }
    return c;
  }
  // Weight-only formats past decode (sm_90a): the persistent wgmma kernel, its producer warpgroups
  // (two; four on 64-row tiles) dequantizing the weights into the ring (in place of the
  // shared-memory kernel's mma.sync).
  if (quant_dequantizes_b(spec.quant) && rows > kBucketRows[0] && wgmma_supported(spec, arch)) {
    // 64-row tiles below 64 rows per expert (H100, 48 rows: gpt-oss-120b MXFP4 M = 1536 1275-1306
    // against 1317-1365 us, int4 Qwen3-30B-A3B M = 768 304-308 against 370-380 on 128-row tiles).
    c.block_m = rows < kBucketRows[2] ? 64 : 128;
    if (c.block_m == 64) {
      // 64-row tiles wide, both staged (the tuner's pick for MXFP4 gpt-oss-120b M = 512 / 1024 and
      // int4 Qwen3-30B-A3B M = 256 / 512). H100, no DB, against GEMM1 64 / GEMM2 128 columns:
      // MXFP4 gpt-oss-120b M = 1024 1804-1823 -> 1498-1500 us, int4 Qwen3-30B-A3B M = 512 / 1024
      // 416 / 576-579 -> 341-345 / 490-496, int8 within -1.6 .. +0.6%.
      c.gemm1 = wgmma_tile(128, 4, 0, true, true);
      c.gemm2 = wgmma_tile(256, 3, 0, true, spec.fused);
    } else {
      // 128-row tiles of 256 weight rows (as narrow as the layer where it is narrower), unstaged:
      // each producer thread converts two pieces a k tile, so the per-k-tile work that bounded the
      // producers (barrier waits, copies' bookkeeping, fences) is paid once per two, and a k tile's
      // A rows serve twice the weight rows. H100, forty-first session, same binaries, against
      // 128 weight rows (GEMM1 64 columns, GEMM2 128 staged): MXFP4 gpt-oss-120b M = 2048 / 4096 /
      // 8192 1836-1863 (64-row tiles) / 2758-2776 / 4688-4689 -> 1473-1548 / 2392-2456 /
      // 4145-4150 us, int4 Qwen3-30B-A3B M = 1024 / 8192 424-428 (64-row tiles) / 2099-2102 ->
      // 370 / 1839-1882, int8 Mixtral-8x7B M = 8192 15379-15460 -> 14177-14263 (3 stages).
      auto weight_rows = [](long long width) {  // a power of two from 128 to 256
        return static_cast<int>(std::clamp<long long>(next_pow2(width), 128, 256));
      };
      c.gemm1 = wgmma_tile(weight_rows(spec.w1_rows()) / (gemm1_gated ? 2 : 1), 4, 0, true);
      c.gemm2 = wgmma_tile(weight_rows(spec.hidden), 4, 0, true);
    }
    // 128-row tiles of 128 weight rows, and int8's (four pieces a producer thread): X gathered
    // beforehand, so the producers only convert (H100: gpt-oss-120b mxfp4 M = 4096 / 8192 4104 /
    // 6807 -> 3709 / 6164 us, Mixtral-8x7B int4 M = 8192 19287 -> 17327 on 128 weight rows; no
    // change on 64-row tiles; int8 Mixtral-8x7B on 256: M = 1024 / 8192 within +-1%). 4-bit tiles of
    // 256 weight rows gather their rows themselves: the extra pass cost more than the producers'
    // four A copies a k tile (H100, forty-first session, gathered -> not: MXFP4 gpt-oss-120b M =
    // 2048 / 4096 / 8192 1507-1535 / 2423-2429 / 4178-4186 -> 1477-1535 / 2371-2416 / 4074-4109 us,
    // int4 Qwen3-30B-A3B M = 2048 / 4096 / 8192 573-579 / 1012-1022 / 1843-1874 -> 549 / 914-915 /
    // 1754-1796, M = 1024 367-368 -> 371-372).
    const int gemm1_weight_rows = c.gemm1.block_n * (gemm1_gated ? 2 : 1);
    c.gemm1.pregather = c.block_m == 128 && (gemm1_weight_rows <= 128 || quant_weight_bits(spec.quant) == 8);
    // Fewer slots where 4 and the stored weights' ring (int8: 64 KiB at 256 rows) pass 227 KiB.
    auto fit_stages = [&](GemmTile& t, int role, bool gated) {
      while (t.stages > 3 && moe_wgmma_smem_bytes(role, c.block_m, t.block_n, t.stages, gated, t.staged, spec.quant) +
                                     moe_wgmma_static_smem_bytes(c.block_m) >
                                 kMoeWgmmaMaxSharedBytes)
        --t.stages;
    };
    fit_stages(c.gemm1, kRoleGemm1, gemm1_gated);
    fit_stages(c.gemm2, spec.fused ? kRoleGemm2Rows16 : kRoleGemm2Rows, false);
    return c;
  }
  // sm_90a, 8 rows per expert and more: warpgroup MMA. Up to kWgmmaWideRows rows, 64-row tiles of the
  // persistent kernel (its producer streams weights across tiles; on an H200 the tuner picked it
  // for Mixtral-8x7B M = 32 .. 128, Qwen3-30B-A3B and DeepSeek-V2-Lite M = 128 / 256, DeepSeek-V3
  // TP8 M = 64 .. 1024); beyond, 128 x 256-weight-row tiles, persistent too: their weight (and
  // GEMM2's A) tiles come by bulk tensor copies (the tuner's pick for Mixtral-8x7B M = 1024 .. 8192
  // and the other layers' M = 8192 on an H200).
  if ((rows >= kWgmmaMinRows || gemm1_decode_tiles(spec, num_tokens) >= kWgmmaMinDecodeTiles) &&
      spec.quant == kQuantNone && wgmma_supported(spec, arch)) {
    if (rows <= kWgmmaWideRows) {
      c.block_m = 64;
      c.gemm1 = wgmma_tile(gemm1_gated ? 64 : 128, 4, 0, true);
      c.gemm2 = wgmma_tile(128, 4, 0, true);
    } else {
      set_prefill_wgmma_tiles(c, spec, gemm1_gated);
    }
    return c;
  }
  // Narrower tiles where the accumulators would not fit the registers (gated fp8_block).
  for (GemmTile* t : {&c.gemm1, &c.gemm2}) {
    const bool gated = t == &c.gemm1 && gemm1_gated;
    while (moe_gemm_accumulators(c.block_m, t->block_n, t->warps_m, t->warps_n, gated, spec.quant) >
               moe_gemm_max_accumulators(gated, spec.quant) &&
           t->block_n > 16 * t->warps_n)
      t->block_n /= 2;
  }
  return c;
}

std::vector<int> config_batch_sizes(int max_tokens) {
  // (A bucket's first count alone missed the decode tiles: 4-bit layers compiled swap-AB tiles at
  // their first forward, under an engine's graph capture.)
  constexpr int kExactCounts = 1 << 16;
  const int last = std::max(max_tokens, 1);
  std::vector<int> out;
  for (int m = 1;; m = m < kExactCounts ? m + 1 : static_cast<int>(std::min<long long>(last, m + m / 4096LL))) {
    out.push_back(std::min(m, last));
    if (m >= last) break;
  }
  return out;
}

std::vector<MoeTileConfig> heuristic_tile_configs(const MoeSpec& spec, int max_tokens, const std::string& arch) {
  std::vector<MoeTileConfig> out;
  for (int m : config_batch_sizes(max_tokens)) {
    const MoeTileConfig c = heuristic_tile_config(spec, m, true, arch);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

}  // namespace moejit
