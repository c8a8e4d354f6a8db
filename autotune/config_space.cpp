#include "autotune/config_space.h"

#include <algorithm>
#include <tuple>

#include "common/error.h"
#include "jit/families.h"
#include "runtime/moe_layer.h"
#include "templates/moe/moe_gemm_args.cuh"

namespace moejit {

namespace {
constexpr int kBlockMs[] = {16, 32, 64, 128};
// Warp layouts worth trying per block_m: one warp row per 16 rows at most, 4 or 8 warps.
std::vector<std::pair<int, int>> warp_layouts(int block_m) {
  if (block_m == 16) return {{1, 4}, {1, 8}};
  if (block_m == 32) return {{1, 4}, {2, 2}, {2, 4}};
  return {{2, 2}, {4, 2}, {2, 4}};
}
}  // namespace

std::vector<int> candidate_block_ms(const MoeSpec& spec, int num_tokens, const std::string& arch) {
  const long long rows = (static_cast<long long>(std::max(num_tokens, 1)) * spec.top_k + spec.local_experts() - 1) /
                         spec.local_experts();
  const long long expected = next_pow2(rows);
  std::vector<int> out;
  // From a quarter to twice the expected rows: smaller tiles waste less padding, larger ones
  // re-read less of the weights.
  const long long lower = std::min<long long>(std::max<long long>(16, expected / 4), kBlockMs[3]);
  const long long upper = std::max<long long>(16, 2 * expected);
  // Eight-row tiles for the swap-AB kernel while most experts get fewer rows than that; 24-row
  // ones (three token fragments) from 9 to 24 rows an expert, where 16-row tiles split most experts
  // in two (gpt-oss-120b MXFP4 M = 512 on an H100: 1426 -> 1274 us).
  if (expected <= 8 && swap_ab_supported_both(spec)) out.push_back(8);
  if (rows > 8 && rows <= 24 && swap_ab_supported_both(spec)) out.push_back(24);
  for (int bm : kBlockMs)
    if ((bm >= lower && bm <= upper) || (bm == 64 && wgmma_supported(spec, arch))) out.push_back(bm);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> candidate_walk_rows(int sm_count) {
  std::vector<int> out = {4, 16, 32};
  for (int d = 9; d <= 24; ++d)
    if (sm_count > 0 && sm_count % d == 0 && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  std::sort(out.begin(), out.end());
  return out;
}

MoeTileConfig heuristic_config_for_block_m(const MoeSpec& spec, int block_m, const std::string& arch) {
  if (block_m < 16 || block_m == 24) {  // the swap-AB kernel's alone
    MoeTileConfig c;
    c.block_m = block_m;
    c.gemm1 = c.gemm2 = swap_ab_tile(4, 1, 2);
    return c;
  }
  // The heuristic picks block_m from rows per expert; ask it at a batch that lands on block_m (the
  // shared-memory kernel's tiles: swap-AB ones are candidates of their own).
  const int rows = block_m == 16 ? 1 : block_m == 32 ? 32 : block_m == 64 ? 64 : 1024;
  const long long m = std::max<long long>(1, static_cast<long long>(rows) * spec.local_experts() / spec.top_k);
  // (The wgmma kernel's tiles have 64 rows at least: the shared-memory kernel's below that.)
  MoeTileConfig c = heuristic_tile_config(spec, static_cast<int>(std::min<long long>(m, 1 << 20)), false,
                                          block_m >= 64 ? arch : std::string());
  // Asked at 64 rows an expert, the heuristic returns 128-row tiles, whose fp8 GEMMs take 256
  // weight rows: at block_m 64 they narrow to what those tiles take.
  if (quant_promotes_k_tiles(spec.quant))
    for (GemmTile* t : {&c.gemm1, &c.gemm2}) {
      const int sets = t == &c.gemm1 && spec.fused && activation_is_gated(spec.activation) ? 2 : 1;
      const int max_rows = moe_wgmma_promoted_max_b_rows(block_m, t->persistent);
      if (t->wgmma && sets * t->block_n > max_rows) t->block_n = max_rows / sets;
    }
  c.block_m = block_m;
  return c;
}

bool config_fits(const MoeSpec& spec, const MoeTileConfig& config, const DeviceLimits& limits, std::string* why) {
  try {
    // GEMM2 in the role a forward of one token takes (fp32 adds need the most shared memory where
    // staged; a staged tile that fits only as DTYPE rows takes those at every batch size).
    for (const auto& s :
         moe_expert_kernel_specs(spec, config, limits.arch, moe_gemm2_stores_rows16(spec, config, 1)))
      if (moe_gemm_shared_bytes(s, config.block_m) > limits.max_shared_optin) {
        if (why) *why = "shared memory over the device limit";
        return false;
      }
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
  return true;
}

std::vector<GemmTile> candidate_tiles(const MoeSpec& spec, int block_m, bool gemm1, const DeviceLimits& limits) {
  const int width = gemm1 ? (spec.fused ? spec.intermediate : spec.w1_rows()) : spec.hidden;
  const MoeTileConfig base = heuristic_config_for_block_m(spec, block_m, limits.arch);
  std::vector<GemmTile> out = {gemm1 ? base.gemm1 : base.gemm2};
  auto add_if_fits = [&](const GemmTile& t) {
    if (std::find(out.begin(), out.end(), t) != out.end()) return;
    MoeTileConfig c = base;
    (gemm1 ? c.gemm1 : c.gemm2) = t;
    if (config_fits(spec, c, limits)) out.push_back(t);
  };
  // Swap-AB (decode): warps along the columns x along k, and k blocks in flight per warp (a
  // shared-memory ring: depth costs no registers, but 3 won over 2 and 4 for 4-bit and fp8 decode).
  // 8 x 2 (thirty-fourth session): the fp8_block DeepSeek-V3 TP8 GEMM1 at M = 3 / 4 (64 weight rows
  // a CTA of 512 threads, one CTA an SM) 63.8-64.0 / 78.1-78.2 -> 63.4 / 76.1 us on an H100.
  if (block_m <= 32 && swap_ab_supported(spec, gemm1))
    for (const auto& [wn, wk, stages] :
         {std::tuple{4, 1, 2}, {4, 2, 2}, {4, 4, 2}, {2, 8, 2}, {8, 1, 2}, {8, 2, 2}, {4, 1, 4}, {4, 1, 3}, {8, 1, 3}})
      add_if_fits(swap_ab_tile(wn, wk, stages));
  // Its wgmma variant (sm_90a, 16-bit activations), 16 to 32 tokens a tile: one or two warpgroups,
  // two or four k blocks in flight.
  if ((block_m == 16 || block_m == 32) && swap_ab_wgmma_supported(spec, limits.arch))
    for (const auto& [wn, stages] : {std::pair{8, 2}, {8, 4}, {4, 2}}) add_if_fits(swap_ab_wgmma_tile(wn, stages));
  // wgmma (sm_90a prefill), plain, persistent and persistent with the staged epilogue: weight rows
  // per tile (G * block_n) of 64, 128, 192 or 256 (64: finer tiles even out a decode step's wave),
  // ring depths.
  if (block_m >= 64 && wgmma_supported(spec, limits.arch)) {
    const bool gated = gemm1 && spec.fused && activation_is_gated(spec.activation);
    for (int variant : {0, 1, 2})
      for (int rows : {256, 128, 192, 64})
        if (variant >= 1 || !quant_dequantizes_b(spec.quant))  // weight-only formats: persistent only
        for (int stages : {4, 3, 5, 6})
          if (rows / (gated ? 2 : 1) <= std::max<long long>(64, next_pow2(width)))
            add_if_fits(wgmma_tile(rows / (gated ? 2 : 1), stages, 0, variant >= 1, variant == 2));
  }
  // The shared-memory kernel's tiles have 16 rows at least, a multiple of 16 (24: swap-AB alone).
  if (block_m < 16 || block_m % 16 != 0) return out;
  // k step in elements: a 128-byte smem row, or a 64-byte one (fp8: one byte per element).
  // 4-bit weights: 256 or 128 k per step read as many bytes per weight row as 64 16-bit ones.
  const int step_lengths[2] = {quant_weight_bits(spec.quant) == 4 ? 256 : quant_is_fp8(spec.quant) ? 128 : 64,
                               quant_weight_bits(spec.quant) == 4 ? 128 : quant_is_fp8(spec.quant) ? 64 : 32};
  for (int bn : {32, 64, 128, 256}) {
    if (bn > std::max<long long>(32, next_pow2(width))) continue;  // wider than the output: all waste
    for (const auto& [wm, wn] : warp_layouts(block_m))
      for (int stages : {3, 4, 6})
        for (int bk : step_lengths) {
          if (bk == step_lengths[1] && (stages < 4 || block_m > 32)) continue;  // short steps: decode, deep ring
          if (stages > 4 && (block_m > 32 || spec.quant == kQuantNone)) continue;  // quantized decode only
          add_if_fits(GemmTile{bn, bk, wm, wn, stages});
        }
  }
  return out;
}

}  // namespace moejit
