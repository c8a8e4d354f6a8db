// Tile configurations of the MoE expert GEMMs and the heuristic that picks one by batch size. The
// tuner (later) replaces the heuristic per shape; the heuristic stays its fallback and never fails.
#pragma once

#include <string>
#include <vector>

#include "runtime/moe_spec.h"

namespace moejit {

struct GemmTile {
  int block_n = 64;
  int block_k = 64;
  int warps_m = 2;
  int warps_n = 2;
  int stages = 3;
  // Splits of the k loop (a launch parameter, not a kernel parameter): 0 = chosen at launch (decode
  // grids smaller than the SM count, fast reduce mode only), 1 = none, n = n splits (<= kMoeMaxSplitK).
  int split_k = 0;
  // swap_ab: the decode kernel (moe_gemm_swap_ab) instead of the shared-memory one; it takes
  // warps_n, warps_k and stages (k blocks in flight per warp), and derives its block_n / block_k:
  // those and warps_m are 0 in its tiles.
  bool swap_ab = false;
  int warps_k = 0;
  // swap_ab_wgmma (swap-AB tiles, sm_90a): the kernel's wgmma variant: the tile's tokens staged in
  // shared memory per k block and one warpgroup MMA per k16 step with the dequantized weights from
  // registers, for up to 64 tokens (warps_n a multiple of 4, warps_k 1, 16-bit activations).
  bool swap_ab_wgmma = false;
  // wgmma: the sm_90a prefill kernel (moe_gemm_wgmma); it takes block_n and stages and derives
  // block_k (64) and its warps (one warpgroup per 64 rows): block_k, warps_m and warps_n are 0.
  bool wgmma = false;
  // persistent (wgmma tiles only): a CTA per SM walks the tiles, a producer warpgroup feeding the
  // ring across them (moe_gemm_wgmma's persistent variant).
  bool persistent = false;
  // staged (persistent wgmma tiles only): the epilogue stages the tile in shared memory of its own
  // beside the ring and stores rows by bulk copies, left in flight over the next tile's k loop.
  // Faster where the epilogue weighs (GEMM2s of short reductions: DeepSeek-V3 TP8 M = 8192 on an
  // H200, 2.71 -> 2.26 ms), slower on 64-row tiles; the tuner picks.
  bool staged = false;
  // walk_rows (wgmma tiles only): row tiles per column sweep of the kernel's grouped walk
  // (MoeGemmArgs::walk_rows, moe_tile_walk.cuh), 1 .. kMoeMaxWalkGroupRows; 0 = the default
  // (kMoeWalkGroupRows). A launch argument: every value runs the same compiled kernel.
  int walk_rows = 0;
  // pingpong (persistent wgmma tiles of block_m 64, unstaged, no per-channel / per-tensor fp8
  // scales): two consumer warpgroups take alternate tiles, their k loops in turn, so that one's
  // epilogue runs under the other's wgmmas ("pp"). Not in the tuner's space yet (written in a
  // session without device time: GPU tests and bench A/B first).
  bool pingpong = false;
  // multicast (persistent wgmma GEMM1 tiles of gated activations): clusters of two CTAs walk pairs
  // of row tiles; where both are one expert's each CTA copies one weight box into both ("mc"),
  // halving the weight bytes read out of L2. Not in the tuner's space yet (as pingpong).
  bool multicast = false;
  // pregather (persistent wgmma GEMM1 tiles): a copy kernel after the routing gathers X's rows into
  // padded-row order first, so that the producer reads whole A tiles by bulk tensor copies (as
  // GEMM2's A) instead of issuing ~1000 16-byte cp.async per k tile ("pg"). A launch argument
  // (MoeGemmArgs::a_pregathered): the same compiled kernel either way.
  bool pregather = false;
  // work_queue (persistent wgmma tiles without clusters, ping-pong groups or k splits): 1 = the CTAs
  // claim their work items in walk order from a counter the routing zeroed (tail tiles of 128 rows
  // then leave a warpgroup idle), 0 = each CTA walks a fixed stride, -1 = the layer's rule
  // (work_queue_by_default). A launch argument: the same compiled kernel either way ("wq" / "nowq").
  // MOEJIT_WORK_QUEUE (Options::work_queue) overrides it.
  int work_queue = -1;
  bool operator==(const GemmTile&) const = default;
};

// How the fast mode's GEMM2 forms each token's top-k sum: Auto = by batch size (moe_gemm2_stores_rows16);
// Atomic = fp32 adds into the token's row, then a cast; Rows = each routed slot's row stored in
// DTYPE, then summed per token by a second kernel (needs an unsplit GEMM2). The deterministic mode
// always stores fp32 rows.
enum class TopkSum { Auto, Atomic, Rows };

struct MoeTileConfig {
  int block_m = 64;  // shared by both GEMMs: the routing pads each expert's rows to it
  GemmTile gemm1;
  GemmTile gemm2;
  TopkSum topk_sum = TopkSum::Auto;
  // gemv: the decode GEMV pair (moe_decode_gemv) instead of routing + grouped GEMMs: the routing
  // inside both kernels, no sort, no accumulator, no cast; up to kMoeDecodeMaxTokens tokens. The
  // other fields are unused (default) in such a config.
  bool gemv = false;
  bool operator==(const MoeTileConfig&) const = default;
  std::string describe() const;  // "bm64 gemm1[bn64 bk64 w2x2 s3] gemm2[swapab w4x2 s4]" (+ " sum=rows"); "gemv"
};

// The decode GEMV config, and whether a layer can run it (on arch; empty = any that runs its
// quantization): the fused layer in the fast reduce mode (its sums run in another order than the
// GEMM kernels'), 16-bit weights with K and N multiples of 8, or fp8_block weights (sm_89+) with
// K and N multiples of 16; and the most tokens it takes (fp8: each CTA's tokens' activations
// quantized in shared memory, at most kMoeDecodeMaxSmemBytes: moe_decode_gemv_fits).
MoeTileConfig decode_gemv_config();
bool decode_gemv_supported(const MoeSpec& spec, const std::string& arch = "");
int decode_gemv_max_tokens(const MoeSpec& spec);
// The share of the decode GEMV's thread steps that read a chunk, weighted by the weight bytes of
// gemv1 (W1) and gemv2 (W2): rows of K (gemv1) and TOPK x N (gemv2) 16-byte chunks (moe_decode_lane_use).
double decode_gemv_lane_use(const MoeSpec& spec);

// The rule for GemmTile::work_queue = -1: quantized layers' 128-row tiles claim their items (same-run
// A/Bs, H200, M = 2048 .. 8192: MXFP4 gpt-oss-120b -3..-6%, fp8_block DeepSeek-V3 TP8 -2.5..-4.4%,
// int4 Qwen3 -1..-2.4%); 64-row tiles were 0.6-0.8% slower with the queue, and 16-bit layers move
// both ways (H100, M = 1024 / 2048: gpt-oss-120b and DeepSeek-V3 TP8 -1.2..-1.7%, Mixtral-8x7B
// +13..+30%): their buckets take it from the tuned DB, but for the GEMM2 of a short k loop
// (intermediate <= kMoeWorkQueueGemm2MaxInner). There the fixed stride's CTAs drift apart over
// their many short items, and an expert's row tiles stop sharing its weight tiles in L2: ncu (H100,
// bf16 DeepSeek-V3 TP8, N = 256, M = 8192) had GEMM2 read 1.82 GB from DRAM for 0.94 GB of weights
// (1.04 GB with the queue), 1041 -> 761 us; the forward 2337 / 2334 -> 2136 / 2148 us, M = 4096
// 1562 / 1556 -> 1528 / 1530, while Qwen3-30B-A3B (N = 768) moved by < 1% and Mixtral-8x7B
// (N = 14336) ran 3-6% slower (thirty-first session).
inline constexpr int kMoeWorkQueueGemm2MaxInner = 512;
bool work_queue_by_default(const MoeSpec& spec, int block_m, bool gemm2);
// Whether a tile's kernel can claim its items (persistent wgmma, no multicast, no ping-pong, no
// fixed k split): the tiles that take GemmTile::work_queue.
bool can_claim_work_items(const GemmTile& tile);
// Whether a GEMM of this tile claims its items from the work queue: the kernel can (the tile can,
// no clusters and one k split at launch), then option (Options::work_queue: -1 unset, 0 / 1
// forced), then the tile's work_queue, then the rule.
bool claims_work_items(const MoeSpec& spec, int block_m, bool gemm2, const GemmTile& tile, bool clusters, int splits,
                       int option);

// Bounds of block_m over every config: the routing workspace is sized for them.
constexpr int kMoeMinBlockM = 8;
constexpr int kMoeMaxBlockM = 128;
// Most splits of a GEMM's k loop (GEMM1's partial-sum workspace is sized for it).
constexpr int kMoeMaxSplitK = 8;

// Picks by rows per local expert (num_tokens * top_k / local experts): small tiles that keep every
// SM streaming weights for decode, 128-row tiles for prefill.
// swap_ab = false: the shared-memory kernel's tiles only.
// arch: the device's; on sm_90a the wgmma kernel takes the tiles of 64 rows and more where the
// layer can run it (wgmma_supported). Empty: the portable kernels only.
// decode_gemv: the decode GEMV pair (decode_gemv_config) for up to kGemvHeuristicMaxTokens tokens
// whose routed slots are at most half the local experts (slots seldom share an expert: it reads
// each slot's weights on its own), and up to kGemvHeuristicWideTokens whose slots are at most
// 3/8 of them (16-bit weights; fp8_block: gemv_heuristic_most_tokens).
MoeTileConfig heuristic_tile_config(const MoeSpec& spec, int num_tokens, bool swap_ab = true,
                                    const std::string& arch = "", bool decode_gemv = true);
constexpr int kGemvHeuristicMaxTokens = 4;
constexpr int kGemvHeuristicWideTokens = 6;
// fp8_block: 2 tokens, 4 where the intermediate size N is at most kGemvHeuristicNarrowFp8 and
// kGemvHeuristicMostTokensNarrowestFp8 where it is at most kGemvHeuristicNarrowestFp8 (gemv_heuristic_most_tokens):
// the swap-AB GEMMs of a narrow expert (2N GEMM1 rows) leave more of each decode step to their
// fixed chain (routing launch, x and intermediate quantization, cast), which the GEMV does not run.
// Forty-fifth session (H100, no DB against a user DB forcing the GEMV, two rounds, M = 3 / 4 / 5 / 6):
// Kimi-K2 TP8 (E = 384, K = 7168, N = 256) 62.6 / 75.5 / 93.5 / 105.9 -> 54.6 / 69.5 / 85.8 / 99.3 us,
// DeepSeek-V3 TP8 (N = 256) -12 / -9 / -7 / -5.5%, DeepSeek-V3 TP4 (N = 512) 106.5 / 139.4 / 166.6 /
// 192.2 -> 99.2 / 127.9 / 164.3 / 190.1, Qwen3-30B-A3B (K = 2048, N = 768) 53.5 / 64.6 / 75.3 / 85.9
// -> 49.1 / 63.3 / 76.1 / 90.2; wider experts lost or tied from 3 or 4 tokens: DeepSeek-V2-Lite (N =
// 1408) M = 3 / 4 / 5 -0.4 / +4 / +17%, GLM-4.5-Air-shaped (K = 4096, N = 1408) M = 3 / 4 +0.2 / +6.5%,
// K = 3072 / 4096, N = 1536 M = 3 +4.7 / +2%, DeepSeek-V3 (N = 2048) within 0.3%.
// Seven and eight tokens of the narrowest fp8 experts came with each CTA's shared memory holding
// only its own tokens' rows (forty-sixth session; before, eight DeepSeek-V3-wide x rows did not fit):
// H100, the shipped DB's swap-AB tiles against a user DB forcing the GEMV, M = 7 / 8: DeepSeek-V3 TP8
// 122.6 / 135.7 -> 114.9 / 131.0 us, Kimi-K2 TP8 (no DB) 128.1 / 141.3 -> 114.3 / 131.5.
constexpr int kGemvHeuristicMaxTokensFp8 = 2;
constexpr int kGemvHeuristicNarrowFp8 = 768;
constexpr int kGemvHeuristicNarrowestFp8 = 256;
constexpr int kGemvHeuristicMostTokensNarrowestFp8 = 8;
// The most tokens the heuristic gives the decode GEMV (before its sparsity, lane-use and shared-memory
// conditions), by format and intermediate size.
int gemv_heuristic_most_tokens(const MoeSpec& spec);
// fp8_block: the GEMV where its threads have a chunk to read in at least this share of its steps,
// by weight bytes (decode_gemv_lane_use): its e4m3 products cost more instructions per byte than
// the swap-AB kernel's, so idle lanes are lost issue slots. gpt-oss-120b-shaped fp8_block (K = 2880:
// 180 chunks a W1 row, 76 of 256 threads idle; 0.78) ran M = 1 / 2 54.6 / 92.8 us on the GEMV and
// 48.9 / 86.7 on swap-AB tiles; DeepSeek-V3 TP8 (0.92), Qwen3-30B-A3B (0.92) and DeepSeek-V2-Lite
// (0.90) shapes keep the GEMV (H100, thirty-fifth session).
constexpr double kGemvHeuristicMinLaneUseFp8 = 0.85;
// A swap-AB tile (GemmTile::swap_ab), and whether the layer can run one for GEMM1 / GEMM2: the fast
// reduce mode (its sums' order differs from the shared-memory kernel's) and a reduction length made
// of whole 16-byte chunks of weights.
GemmTile swap_ab_tile(int warps_n, int warps_k, int stages, int split_k = 0);
GemmTile swap_ab_wgmma_tile(int warps_n, int stages, int split_k = 0);  // warps_k 1
// Whether the layer can run the wgmma variant of the swap-AB kernel on both GEMMs on `arch`.
bool swap_ab_wgmma_supported(const MoeSpec& spec, const std::string& arch);
bool swap_ab_supported(const MoeSpec& spec, bool gemm1);
bool swap_ab_supported_both(const MoeSpec& spec);  // GEMM1 and GEMM2 (block_m 8 needs both)
// A wgmma tile (GemmTile::wgmma), and whether the layer can run one on arch: sm_90a, 16-bit
// weights or fp8 w8a8 (block scales: gate / up rows stacked on 128-row block edges), the fast
// reduce mode (its fp32 sums within a k tile run in another order than the shared-memory
// kernel's, so a row's result would depend on which kernel the batch size picked).
GemmTile wgmma_tile(int block_n, int stages, int split_k = 0, bool persistent = false, bool staged = false);
bool wgmma_supported(const MoeSpec& spec, const std::string& arch);
// Every config the heuristic returns for 1 <= num_tokens <= max_tokens (for eager compiles).
std::vector<MoeTileConfig> heuristic_tile_configs(const MoeSpec& spec, int max_tokens, const std::string& arch = "");
// The batch sizes whose configs stand for 1 .. max_tokens (ascending, max_tokens last): every count
// up to 2^16, then steps of 1/4096. Decode tiles change inside a bucket (swap-AB warps along k with
// the touched experts, the GEMV's token limit); past 2^16 tokens every rule depends on rows per
// expert alone (> 64 there unless E / top_k > 1024). MoeLayer::prepare samples its tuned path the
// same way.
std::vector<int> config_batch_sizes(int max_tokens);

}  // namespace moejit
