// The kernel-level GPU cases (tests/support/moe_cases.h): layers and tile configs for the
// swap-AB, wgmma, weight-only wgmma and DTYPE-row GEMM2 kernels, each against the fp64 reference.
#include <fmt/format.h>

#include "autotune/config_space.h"
#include "common/error.h"
#include "jit/moe_names.h"
#include "support/moe_cases.h"

namespace moejit::test {

namespace {
// The swap-AB kernel's layers: K and N tails against every block length (KB = 128 / 64 / 32 for 4 /
// 8 / 16-bit weights), every weight format.
std::vector<MoeSpec> swap_ab_specs() {
  auto layer = [](MoeActivation act, MoeDType dtype, MoeQuant quant, int hidden, int intermediate) {
    MoeSpec s = small_layer(8, 2, hidden, intermediate, act, dtype, quant);
    s.quant_group = 32;
    return s;
  };
  std::vector<MoeSpec> specs;
  MoeSpec s = layer(kActSwigluOai, kDTypeBF16, kQuantMxfp4, 352, 96);  // gpt-oss: interleaved, biases
  s.has_bias = true;
  specs.push_back(s);
  specs.push_back(layer(kActSiluMul, kDTypeF16, kQuantMxfp4, 288, 160));  // f16 through fp32
  s.quant = kQuantMxfp4Packed;
  specs.push_back(s);
  specs.push_back(layer(kActSiluMul, kDTypeF16, kQuantMxfp4Packed, 288, 160));
  s = layer(kActGeluMul, kDTypeBF16, kQuantInt4Group, 448, 192);
  s.quant_group = 64;
  s.quant_zero_points = true;
  specs.push_back(s);
  s = layer(kActRelu2, kDTypeF16, kQuantInt4Group, 416, 96);  // one input per column, group 32
  specs.push_back(s);
  s.quant_group = kQuantGroupPerRow;  // one scale and zero point per weight row
  s.quant_zero_points = true;
  specs.push_back(s);
  s = layer(kActSiluMul, kDTypeBF16, kQuantInt8Channel, 208, 80);
  s.has_bias = true;
  specs.push_back(s);
  s = layer(kActSwigluOai, kDTypeBF16, kQuantNone, 200, 72);
  s.has_bias = true;
  specs.push_back(s);
  // w8a8 e4m3 (f16 mma): 128 x 128 blocks with K / N tails (the up rows straddle a block edge),
  // per channel, per tensor with static activation scales.
  s = layer(kActSwigluOai, kDTypeF16, kQuantFp8Block, 400, 144);
  s.has_bias = true;
  specs.push_back(s);
  specs.push_back(layer(kActSiluMul, kDTypeBF16, kQuantFp8Channel, 208, 80));
  specs.push_back(layer(kActRelu2, kDTypeBF16, kQuantFp8Tensor, 208, 80));
  s = layer(kActSiluMul, kDTypeF16, kQuantNone, 232, 120);
  s.fused = false;  // raw GEMM1 rows, GEMM2 rows + the top-k sum
  specs.push_back(s);
  s = layer(kActSiluMul, kDTypeBF16, kQuantNone, 192, 64);
  s.router_weight_on_input = true;
  s.top_k = 1;
  specs.push_back(s);
  return specs;
}
}  // namespace

std::vector<MoeKernelCase> moe_swap_ab_cases() {
  std::vector<MoeKernelCase> out;
  for (const MoeSpec& spec : swap_ab_specs())
    for (int bm : {8, 16, 24, 32})
      for (int variant = 0; variant < 4; ++variant) {
        MoeTileConfig c;
        c.block_m = bm;
        // One warp column and many along k; several columns with a ring of one; two along k with
        // GEMM2 split over three CTAs (k blocks not a multiple of it); rings deeper than the k
        // blocks (most of a turn's copies are empty groups).
        if (variant == 0) c.gemm1 = c.gemm2 = swap_ab_tile(1, 4, 2);
        if (variant == 1) c.gemm1 = c.gemm2 = swap_ab_tile(8, 1, 1);
        if (variant == 2) {
          c.gemm1 = swap_ab_tile(4, 2, 2);
          c.gemm2 = swap_ab_tile(2, 2, 2, spec.fused ? 3 : 1);
        }
        if (variant == 3) {
          c.gemm1 = swap_ab_tile(2, 1, 8);
          // fp8 rings hold activations too: 5 stages at 32 tokens would need 240 KiB.
          c.gemm2 = swap_ab_tile(4, 2, quant_is_fp8(spec.quant) ? 3 : 5);
        }
        out.push_back({spec, c, {1, 7, 40}});
      }
  return out;
}

std::vector<MoeKernelCase> moe_swap_ab_wgmma_cases() {
  std::vector<MoeKernelCase> out;
  for (const MoeSpec& spec : swap_ab_specs()) {
    if (quant_is_fp8(spec.quant)) continue;  // e4m3 activations: not this variant
    for (int bm : {8, 16, 32, 64})
      for (int variant = 0; variant < 2; ++variant) {
        MoeTileConfig c;
        c.block_m = bm;
        // One warpgroup, two blocks in flight; two warpgroups, four in flight, against one
        // warpgroup with a ring deeper than the k blocks and GEMM2 split over three CTAs. 64 tokens
        // on two warpgroups (one holds too many staging loads: its family check refuses most).
        const int wn = bm == 64 ? 8 : 4;
        c.gemm1 = variant == 0 ? swap_ab_wgmma_tile(wn, 2) : swap_ab_wgmma_tile(8, 4);
        c.gemm2 = variant == 0 ? swap_ab_wgmma_tile(wn, 2) : swap_ab_wgmma_tile(wn, bm == 64 ? 4 : 6, spec.fused ? 3 : 1);
        out.push_back({spec, c, {1, 7, 40, 300}});
      }
  }
  return out;
}

std::vector<MoeKernelCase> moe_wgmma_cases() {
  std::vector<MoeSpec> specs;
  MoeSpec s = small_layer(8, 2, 200, 72, kActSwigluOai, kDTypeBF16, kQuantNone);  // interleaved, biases
  s.has_bias = true;
  specs.push_back(s);
  specs.push_back(small_layer(8, 2, 264, 160, kActSiluMul, kDTypeF16, kQuantNone));
  specs.push_back(small_layer(8, 2, 328, 136, kActRelu2, kDTypeBF16, kQuantNone));  // one input per column
  s = small_layer(8, 2, 192, 80, kActGeluMul, kDTypeBF16, kQuantNone);
  s.fused = false;  // raw GEMM1 rows (act none, 160 columns), GEMM2 rows + the top-k sum
  specs.push_back(s);
  s = small_layer(8, 1, 128, 64, kActSiluMul, kDTypeBF16, kQuantNone);
  s.router_weight_on_input = true;
  specs.push_back(s);
  s = small_layer(16, 4, 576, 384, kActSiluMul, kDTypeBF16, kQuantNone);  // 9 and 6 k tiles
  s.has_bias = true;
  specs.push_back(s);

  std::vector<MoeKernelCase> out;
  for (const MoeSpec& spec : specs) {
    const int g1 = spec.fused && activation_is_gated(spec.activation) ? 2 : 1;  // weight rows per GEMM1 column
    for (int bm : {64, 128})
      for (int variant = 0; variant < 13; ++variant) {
        MoeTileConfig c;
        c.block_m = bm;
        std::vector<int> tokens = {40, 300};
        if (variant >= 11) {  // GEMM1 reading X gathered beforehand (the workspace holds it at M = 8000)
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true, variant == 12 && bm == 64);
          c.gemm2 = wgmma_tile(256, 3, 0, true);
          c.gemm1.pregather = true;
          // 64-row tiles: fp32 adds, zeroed only after GEMM1 has read X out of their buffer.
          if (bm == 64 && variant == 11 && spec.fused) c.topk_sum = TopkSum::Atomic;
          if (variant == 12 && spec.fused && activation_is_gated(spec.activation)) c.gemm1.multicast = true;
          tokens.push_back(8000);
        } else if (variant == 0) {
          c.gemm1 = wgmma_tile(256 / g1, 4);
          c.gemm2 = wgmma_tile(256, 4);
        } else if (variant == 1) {  // (and a grouped walk of 12 rows per column sweep)
          c.gemm1 = wgmma_tile(128 / g1, 3);
          c.gemm2 = wgmma_tile(192, 5);
          c.gemm1.walk_rows = c.gemm2.walk_rows = 12;
        } else if (variant == 2) {
          c.gemm1 = wgmma_tile(192 / g1, bm == 64 ? 6 : 5);  // 6 slots of 128 x 192 exceed 227 KiB
          c.gemm2 = wgmma_tile(128, 3, spec.fused ? 3 : 1);
        } else if (variant == 3) {  // persistent: producer warpgroup, CTAs walking the tiles
          c.gemm1 = wgmma_tile(256 / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(256, 3, 0, true);
        } else if (variant == 4) {  // (walks of 3 and 1 row tiles per column sweep)
          c.gemm1 = wgmma_tile(128 / g1, 5, 0, true);
          c.gemm2 = wgmma_tile(192, 4, spec.fused ? 3 : 1, true);
          c.gemm1.walk_rows = 3;
          c.gemm2.walk_rows = 1;
        } else if (variant == 5) {  // staged epilogues: GEMM1 DTYPE rows, GEMM2 fp32 adds / rows (split too)
          c.gemm1 = wgmma_tile(256 / g1, 3, 0, true, true);
          c.gemm2 = wgmma_tile(128, 3, spec.fused ? 2 : 1, true, true);
        } else if (variant == 6) {  // staged GEMM2 of 256 columns: DTYPE rows only (fused), at every batch size
          if (!spec.fused) continue;
          c.gemm1 = wgmma_tile(64 / g1, 6, 0, true, true);
          c.gemm2 = wgmma_tile(256, 3, 0, true, true);
        } else if (variant >= 9) {  // GEMM1 weight tiles multicast over clusters of two CTAs (gated)
          if (!(spec.fused && activation_is_gated(spec.activation))) continue;
          c.gemm1 = variant == 9 ? wgmma_tile(128 / g1, 4, 0, true) : wgmma_tile(64 / g1, 3, 0, true, bm == 64);
          c.gemm2 = wgmma_tile(256, 4, 0, true);
          c.gemm1.multicast = true;
          if (variant == 10) c.gemm1.walk_rows = 3;  // (and a 3-slot ring, staged at 64 rows)
          tokens.push_back(8000);
        } else {  // ping-pong consumer groups (64-row tiles): several items per CTA at M = 8000
          if (bm != 64) continue;
          if (variant == 7) {  // (GEMM1 walking 3 rows per sweep, GEMM2 split)
            c.gemm1 = wgmma_tile(128 / g1, 4, 0, true);
            c.gemm2 = wgmma_tile(256, 4, spec.fused ? 2 : 1, true);
            c.gemm1.walk_rows = 3;
          } else {  // the shallowest ring
            c.gemm1 = wgmma_tile(64 / g1, 3, 0, true);
            c.gemm2 = wgmma_tile(128, 3, 0, true);
          }
          c.gemm1.pingpong = c.gemm2.pingpong = true;
          tokens.push_back(8000);
        }
        out.push_back({spec, c, tokens});
      }
  }
  // fp8 w8a8 (e4m3 wgmma, plain and persistent variants): 128 x 128 blocks with a K tail (gate / up
  // stacked on block edges), per channel with interleaved gate / up, per tensor.
  std::vector<MoeSpec> fp8;
  s = small_layer(8, 2, 400, 256, kActSiluMul, kDTypeBF16, kQuantFp8Block);
  s.has_bias = true;
  fp8.push_back(s);
  fp8.push_back(small_layer(8, 2, 208, 80, kActSwigluOai, kDTypeBF16, kQuantFp8Channel));
  fp8.push_back(small_layer(8, 2, 208, 80, kActRelu2, kDTypeF16, kQuantFp8Tensor));
  for (const MoeSpec& spec : fp8) {
    const int g1 = activation_is_gated(spec.activation) ? 2 : 1;
    for (int bm : {64, 128})
      for (int variant = 0; variant < 10; ++variant) {
        MoeTileConfig c;
        c.block_m = bm;
        std::vector<int> tokens = {40, 300};
        const bool persistent = variant >= 2;
        if (variant >= 8) {  // 256 weight rows (128-row persistent tiles: a k tile's sums 128 rows at a time)
          if (bm != 128 || (variant == 9 && g1 != 2)) continue;
          c.gemm1 = wgmma_tile(256 / g1, variant == 8 ? 3 : 4, 0, true, variant == 8);
          c.gemm2 = wgmma_tile(256, 3, 0, true, true);  // (staged: DTYPE rows)
          if (variant == 9) {  // and GEMM1's weight tiles multicast, a grouped walk of 5 rows
            c.gemm1.multicast = true;
            c.gemm1.walk_rows = 5;
          }
          tokens.push_back(8000);
        } else if (variant == 7) {  // GEMM1 reading the e4m3 X gathered beforehand
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(128, 3, 0, true);
          c.gemm1.pregather = true;
          tokens.push_back(8000);
        } else if (variant == 6) {  // GEMM1 weight tiles multicast over clusters of two CTAs (gated layers)
          if (g1 != 2) continue;
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(128, 3, 0, true);
          c.gemm1.multicast = true;
          tokens.push_back(8000);
        } else if (variant == 5) {  // ping-pong consumer groups (64-row tiles, not with per-channel / tensor scales)
          if (bm != 64 || spec.quant != kQuantFp8Block) continue;
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(128, 3, 0, true);
          c.gemm1.pingpong = c.gemm2.pingpong = true;
          tokens.push_back(8000);
        } else if (variant == 4) {  // staged epilogues
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true, true);
          c.gemm2 = wgmma_tile(128, 3, 2, true, true);
        } else if (variant % 2 == 0) {
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, persistent);
          c.gemm2 = wgmma_tile(128, 3, 0, persistent);
        } else {
          // (fp8: at most 128 weight rows per tile, quant_promotes_k_tiles)
          c.gemm1 = wgmma_tile(64 / g1, persistent ? 4 : 3, 0, persistent);
          c.gemm2 = wgmma_tile(64, 5, 2, persistent);
          c.gemm1.walk_rows = persistent ? 5 : 0;  // (a grouped walk of 5 rows per sweep)
        }
        out.push_back({spec, c, tokens});
      }
  }
  return out;
}

std::vector<MoeKernelCase> moe_wgmma_dequant_cases() {
  // Weight-only formats dequantized by the persistent wgmma kernel's producer warpgroup: K tails
  // against the 64-wide k tile (16-byte pieces of 32 or 16 weights), interleaved / stacked / single
  // weight rows, f16 (MXFP4 through fp32), zero points, the unfused layer, several k tiles per tile.
  auto layer = [](int e, int top_k, int hidden, int intermediate, MoeActivation act, MoeDType dtype, MoeQuant q) {
    MoeSpec s = small_layer(e, top_k, hidden, intermediate, act, dtype, q);
    s.quant_group = 32;
    return s;
  };
  std::vector<MoeSpec> specs;
  MoeSpec s = layer(8, 2, 352, 96, kActSwigluOai, kDTypeBF16, kQuantMxfp4);  // gpt-oss: interleaved, biases
  s.has_bias = true;
  specs.push_back(s);
  specs.push_back(layer(8, 2, 288, 160, kActSiluMul, kDTypeF16, kQuantMxfp4));
  s.quant = kQuantMxfp4Packed;
  specs.push_back(s);
  specs.push_back(layer(8, 2, 288, 160, kActSiluMul, kDTypeF16, kQuantMxfp4Packed));
  s = layer(8, 2, 448, 192, kActGeluMul, kDTypeBF16, kQuantInt4Group);
  s.quant_group = 64;
  s.quant_zero_points = true;
  specs.push_back(s);
  specs.push_back(layer(8, 2, 416, 96, kActRelu2, kDTypeF16, kQuantInt4Group));  // one input per column
  s = layer(8, 2, 416, 96, kActSiluMul, kDTypeBF16, kQuantInt4Group);
  s.quant_group = kQuantGroupPerRow;  // one scale per weight row
  specs.push_back(s);
  s = layer(8, 2, 208, 80, kActSiluMul, kDTypeBF16, kQuantInt8Channel);
  s.has_bias = true;
  specs.push_back(s);
  s = layer(8, 2, 272, 144, kActSwigluOai, kDTypeF16, kQuantInt8Channel);
  s.fused = false;  // raw GEMM1 rows, GEMM2 rows + the top-k sum
  specs.push_back(s);
  specs.push_back(layer(16, 4, 576, 384, kActSiluMul, kDTypeBF16, kQuantMxfp4));  // 9 and 6 k tiles
  std::vector<MoeKernelCase> out;
  for (const MoeSpec& spec : specs) {
    const int g1 = spec.fused && activation_is_gated(spec.activation) ? 2 : 1;
    for (int bm : {64, 128})
      for (int variant = 0; variant < 5; ++variant) {
        MoeTileConfig c;
        c.block_m = bm;
        std::vector<int> tokens = {40, 300};
        if (variant == 0) {  // several items per CTA at M = 8000
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(128, 4, 0, true);
          tokens.push_back(8000);
        } else if (variant == 1) {  // the most weight rows, 256 (2 pieces per thread, int8 4; 128-row
          // tiles: registers moved to the consumers, each k step as two m64n128 halves)
          c.gemm1 = wgmma_tile(256 / g1, 3, 0, true);
          c.gemm2 = wgmma_tile(256, 3, 0, true);
          if (bm == 128) tokens.push_back(8000);
        } else if (variant == 2) {  // staged epilogues (GEMM2 split in the fused layer)
          c.gemm1 = wgmma_tile(64 / g1, 4, 0, true, true);
          c.gemm2 = wgmma_tile(128, 3, spec.fused ? 2 : 1, true, true);
        } else if (variant == 3) {  // GEMM1 reading X gathered beforehand, walking 3 rows per sweep
          c.gemm1 = wgmma_tile(128 / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(bm == 64 ? 192 : 64, 3, 0, true);
          c.gemm1.pregather = true;
          c.gemm1.walk_rows = 3;
          tokens.push_back(8000);
        } else {  // 192 / 64 weight rows (192: 1.5 pieces per thread), a deep ring
          c.gemm1 = wgmma_tile((bm == 64 ? 192 : 64) / g1, 4, 0, true);
          c.gemm2 = wgmma_tile(bm == 64 ? 64 : 128, bm == 64 ? 6 : 5, 0, true);
        }
        out.push_back({spec, c, tokens});
      }
  }
  return out;
}

std::vector<MoeKernelCase> moe_rows16_cases() {
  // M = 1024 x top_k 8 x hidden 2048 x 4 bytes = 64 MiB of fp32 adds: GEMM2 stores DTYPE rows.
  std::vector<MoeKernelCase> out;
  for (MoeQuant q : {kQuantNone, kQuantFp8Block, kQuantInt4Group}) {
    MoeSpec spec = small_layer(16, 8, 2048, 384, kActSiluMul, kDTypeBF16, q);
    spec.has_bias = true;
    if (q == kQuantInt4Group) spec.quant_group = 64;
    const MoeTileConfig smem = heuristic_config_for_block_m(spec, 64, "");  // the shared-memory kernel
    MoeTileConfig swap;
    swap.block_m = 8;
    swap.gemm1 = swap_ab_tile(4, 1, 2);
    swap.gemm2 = swap_ab_tile(4, 2, 2);
    out.push_back({spec, swap, {1024}});  // first: check_kernel_cases' deterministic refusal names swap-AB
    out.push_back({spec, smem, {1024}});
    if (q == kQuantInt4Group) continue;  // the wgmma kernel: 16-bit and fp8 weights
    MoeTileConfig plain, persistent;
    plain.block_m = 128;
    plain.gemm1 = wgmma_tile(64, 4);
    plain.gemm2 = wgmma_tile(q == kQuantNone ? 256 : 128, 4);
    persistent.block_m = 64;
    persistent.gemm1 = wgmma_tile(q == kQuantNone ? 128 : 64, 4, 0, true);  // fp8_block: <= 128 weight rows
    persistent.gemm2 = wgmma_tile(q == kQuantNone ? 192 : 128, 3, 0, true);
    out.push_back({spec, plain, {1024}});
    out.push_back({spec, persistent, {1024}});
    MoeTileConfig pingpong = persistent;  // ping-pong consumer groups
    pingpong.gemm1.pingpong = pingpong.gemm2.pingpong = true;
    out.push_back({spec, pingpong, {1024}});
    MoeTileConfig multicast = persistent;  // GEMM1 weight tiles over clusters of two CTAs
    multicast.gemm1.multicast = true;
    out.push_back({spec, multicast, {1024}});
    MoeTileConfig pregather = persistent;  // GEMM1 reading X gathered beforehand
    pregather.gemm1.pregather = true;
    out.push_back({spec, pregather, {1024}});
    persistent.block_m = 128;  // the staged epilogue's tile of DTYPE rows
    persistent.gemm1.staged = persistent.gemm2.staged = true;
    persistent.gemm1.stages = persistent.gemm2.stages = 3;
    out.push_back({spec, persistent, {1024}});
  }
  return out;
}

}  // namespace moejit::test
