// Launch knobs of the wgmma tiles and the swap-AB ring, no GPU needed: the grouped walk's rows per
// sweep, ping-pong consumer groups, X gathered beforehand, GEMM1 weight multicast, fp8 activations
// in the swap-AB ring (kernel specs, round trips, describe, refusals). The tuned DB and the config
// space are in test_autotune.cpp.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>

#include "autotune/config_space.h"
#include "autotune/tuned_db.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer.h"
#include "support/moe_cases.h"
#include "support/test_support.h"
#include "templates/moe/moe_gemm_args.cuh"
#include "templates/moe/moe_tile_walk.cuh"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("autotune: the wgmma walk's rows per sweep: candidates, round trip, describe, refusals") {
  const MoeSpec q = qwen3_30b_a3b_layer();
  // The default walk (0) aside: 4, 16, 32 and the divisors of the SM count in (8, 24].
  CHECK(candidate_walk_rows(132) == std::vector<int>{4, 11, 12, 16, 22, 32});
  CHECK(candidate_walk_rows(114) == std::vector<int>{4, 16, 19, 32});
  CHECK(candidate_walk_rows(0) == std::vector<int>{4, 16, 32});
  MoeTileConfig c = heuristic_tile_config(q, 8192, true, "sm_90a");  // (GEMM2: DTYPE rows, staged)
  REQUIRE((c.gemm1.wgmma && c.gemm2.wgmma && moe_gemm2_stores_rows16(q, c, 8192)));
  const auto plain_specs = moe_expert_kernel_specs(q, c, "sm_90a", true);
  c.gemm1.walk_rows = 12;
  c.gemm2.walk_rows = 33;
  CHECK(c.describe().find(" walk12]") != std::string::npos);
  CHECK(c.describe().find(" walk33]") != std::string::npos);
  // A launch argument: the same kernels compile.
  CHECK(moe_expert_kernel_specs(q, c, "sm_90a", true) == plain_specs);
  // JSON: "walk_rows" only where set; entries without it read back with the default walk.
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm1"]["walk_rows"] == 12);
  MoeTileConfig plain = c;
  plain.gemm1.walk_rows = plain.gemm2.walk_rows = 0;
  CHECK_FALSE(tile_config_to_json(plain)["gemm1"].contains("walk_rows"));
  CHECK(tile_config_from_json(tile_config_to_json(plain)).gemm1.walk_rows == 0);
  // Refused before anything compiles: out of range, or on a kernel that takes one tile per CTA.
  MoeTileConfig odd = c;
  odd.gemm2.walk_rows = kMoeMaxWalkGroupRows + 1;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a", true), doctest::Contains("walk_rows = 257 must be in [0, 256]"),
                       Error);
  odd.gemm2.walk_rows = -1;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a", true), doctest::Contains("must be in"), Error);
  CHECK_FALSE(config_fits(q, odd, {227 * 1024, "sm_90a"}));
  MoeTileConfig sm80 = heuristic_tile_config(q, 8192, true, "sm_80");
  REQUIRE_FALSE(sm80.gemm1.wgmma);
  nlohmann::json j = tile_config_to_json(sm80);
  j["gemm1"]["walk_rows"] = 12;  // read from the DB, then refused when a layer takes it
  sm80 = tile_config_from_json(j);
  CHECK(sm80.gemm1.walk_rows == 12);
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, sm80, "sm_80"), doctest::Contains("only wgmma tiles walk"), Error);
}

namespace {
// The persistent wgmma config the tests of its launch knobs start from: GEMM1 128 columns in 4
// slots, GEMM2 256 columns.
MoeTileConfig persistent_wgmma_config(int block_m, int gemm2_stages) {
  MoeTileConfig c;
  c.block_m = block_m;
  c.gemm1 = wgmma_tile(128, 4, 0, true);
  c.gemm2 = wgmma_tile(256, gemm2_stages, 0, true);
  return c;
}
}  // namespace

TEST_CASE("autotune: ping-pong consumer groups: kernel spec, round trip, describe, refusals") {
  const MoeSpec q = qwen3_30b_a3b_layer();
  MoeTileConfig c = persistent_wgmma_config(64, 4);
  const auto plain = moe_expert_kernel_specs(q, c, "sm_90a");
  c.gemm1.pingpong = c.gemm2.pingpong = true;
  CHECK(c.describe() == "bm64 gemm1[wgmma bn128 s4 ws pp] gemm2[wgmma bn256 s4 ws pp]");
  const auto specs = moe_expert_kernel_specs(q, c, "sm_90a");
  for (int g : {0, 1}) {
    CHECK(specs[g].get_int("pingpong") == 1);
    CHECK(plain[g].get_int("pingpong") == 0);
    // Two consumer warpgroups on their own 64-row tiles and the producer; the same ring.
    CHECK(specs[g].get_int("threads") == 384);
    CHECK(plain[g].get_int("threads") == 256);
    CHECK(specs[g].get_int("smem_bytes") == plain[g].get_int("smem_bytes"));
    // Static shared memory for two tiles' row arrays.
    CHECK(moe_gemm_shared_bytes(specs[g], 64) == specs[g].get_int("smem_bytes") + moe_wgmma_static_smem_bytes(128));
  }
  CHECK(config_fits(q, c, {227 * 1024, "sm_90a"}));
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm1"]["pingpong"] == true);
  c.gemm1.pingpong = false;
  CHECK_FALSE(tile_config_to_json(c)["gemm1"].contains("pingpong"));
  c.gemm1.pingpong = true;
  // Refused before anything compiles: plain tiles, 128-row tiles, staged epilogues, epilogue scales.
  MoeTileConfig odd = c;
  odd.gemm1.persistent = false;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("only persistent wgmma tiles have ping-pong"),
                       Error);
  nlohmann::json j = tile_config_to_json(heuristic_tile_config(q, 16, true, "sm_80"));
  j["gemm2"]["pingpong"] = true;  // on a tile of another kernel: read, then refused when a layer takes it
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, tile_config_from_json(j), "sm_80"),
                       doctest::Contains("only persistent wgmma tiles have ping-pong"), Error);
  odd = c;
  odd.block_m = 128;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("pingpong = 1 needs"), Error);
  odd = c;
  odd.gemm2.staged = true;
  odd.gemm2.stages = 3;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a", true), doctest::Contains("pingpong = 1 needs"), Error);
  CHECK_FALSE(config_fits(q, odd, {227 * 1024, "sm_90a"}));
  c.gemm1.block_n = 64;  // fp8: at most 128 weight rows per tile
  c.gemm2.block_n = 128;
  MoeSpec channel = q;
  channel.quant = kQuantFp8Channel;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(channel, c, "sm_90a"), doctest::Contains("per-channel / per-tensor"), Error);
  MoeSpec block = q;
  block.quant = kQuantFp8Block;
  CHECK(moe_expert_kernel_specs(block, c, "sm_90a")[0].get_int("pingpong") == 1);
}

TEST_CASE("autotune: GEMM1 reading X gathered beforehand: same kernels, round trip, describe, refusals") {
  const MoeSpec q = qwen3_30b_a3b_layer();
  MoeTileConfig c = persistent_wgmma_config(128, 3);
  const auto plain = moe_expert_kernel_specs(q, c, "sm_90a");
  c.gemm1.pregather = true;
  CHECK(c.describe() == "bm128 gemm1[wgmma bn128 s4 ws pg] gemm2[wgmma bn256 s3 ws]");
  // A launch argument: the same compiled kernels (the copy kernel is an entry of the reduce module).
  CHECK(moe_expert_kernel_specs(q, c, "sm_90a") == plain);
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm1"]["pregather"] == true);
  CHECK_FALSE(tile_config_to_json(c)["gemm2"].contains("pregather"));
  CHECK(config_fits(q, c, {227 * 1024, "sm_90a"}));
  // Refused before anything compiles: GEMM2, plain wgmma tiles, other kernels, 16-byte chunks.
  MoeTileConfig odd = c;
  odd.gemm2.pregather = true;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("only a persistent wgmma GEMM1"), Error);
  odd = c;
  odd.gemm1.persistent = false;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("only a persistent wgmma GEMM1"), Error);
  nlohmann::json j = tile_config_to_json(heuristic_tile_config(q, 4096, true, "sm_80"));
  j["gemm1"]["pregather"] = true;  // on a tile of another kernel: read, then refused when a layer takes it
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, tile_config_from_json(j), "sm_80"),
                       doctest::Contains("only a persistent wgmma GEMM1"), Error);
  MoeSpec ragged = q;
  ragged.hidden = 2052;  // 4104 bytes a row
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(ragged, c, "sm_90a"), doctest::Contains("16-byte chunks"), Error);
}

TEST_CASE("autotune: GEMM1 weight multicast over two-CTA clusters: kernel spec, round trip, describe, refusals") {
  const MoeSpec q = qwen3_30b_a3b_layer();  // silu_mul: gated
  MoeTileConfig c = persistent_wgmma_config(128, 3);
  const auto plain = moe_expert_kernel_specs(q, c, "sm_90a");
  c.gemm1.multicast = true;
  CHECK(c.describe() == "bm128 gemm1[wgmma bn128 s4 ws mc] gemm2[wgmma bn256 s3 ws]");
  const auto specs = moe_expert_kernel_specs(q, c, "sm_90a");
  CHECK(specs[0].get_int("multicast") == 1);
  CHECK(specs[1].get_int("multicast") == 0);
  // The same CTA: threads and shared memory as without clusters.
  CHECK(specs[0].get_int("threads") == plain[0].get_int("threads"));
  CHECK(specs[0].get_int("smem_bytes") == plain[0].get_int("smem_bytes"));
  CHECK(config_fits(q, c, {227 * 1024, "sm_90a"}));
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm1"]["multicast"] == true);
  CHECK_FALSE(tile_config_to_json(c)["gemm2"].contains("multicast"));
  // fp8 block scales and interleaved gate / up rows (swigluoai) take it too.
  MoeSpec block = q;
  block.quant = kQuantFp8Block;
  MoeTileConfig b = c;
  b.gemm1.block_n = 64;
  b.gemm2.block_n = 128;
  CHECK(moe_expert_kernel_specs(block, b, "sm_90a")[0].get_int("multicast") == 1);
  MoeSpec oai = q;
  oai.activation = kActSwigluOai;
  CHECK(moe_expert_kernel_specs(oai, c, "sm_90a")[0].get_int("multicast") == 1);
  // Refused before anything compiles: GEMM2, plain tiles, single-input activations, with ping-pong.
  MoeTileConfig odd = c;
  odd.gemm2.multicast = true;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("only a persistent wgmma GEMM1"),
                       Error);
  odd = c;
  odd.gemm1.persistent = false;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("only a persistent wgmma GEMM1"),
                       Error);
  MoeSpec relu = q;
  relu.activation = kActRelu2;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(relu, c, "sm_90a"), doctest::Contains("multicast = 1 needs"), Error);
  CHECK_FALSE(config_fits(relu, c, {227 * 1024, "sm_90a"}));
  odd = c;
  odd.block_m = 64;
  odd.gemm1.pingpong = true;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a"), doctest::Contains("multicast = 1 needs"), Error);
}

// The swap-AB ring's size is one formula for the host (the launch) and the kernel (its
// static_assert): fp8 layers and the weight-only formats' 8-token tiles carry their activations in it,
// other tiles load them per block.
TEST_CASE("autotune: the swap-AB ring holds fp8 and 8-token weight-only activations beside the weights") {
  constexpr int kSlot = 32 * 16;  // one 16-byte slot for each lane of a warp
  CHECK(moe_swap_ab_activation_ring(kQuantFp8Block));
  CHECK(moe_swap_ab_activation_ring(kQuantFp8Tensor));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantMxfp4));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantNone));
  // Weight-only (MXFP4, int4, int8) 8-token mma.sync tiles of 2+ warps along k (and fewer than 16
  // warps) carry their routed tokens' activations too; wider, wgmma or one-warp-along-k tiles do
  // not, nor 16-bit weights.
  CHECK(moe_swap_ab_activation_ring(kQuantMxfp4, 8, false, 2, 8));
  CHECK(moe_swap_ab_activation_ring(kQuantMxfp4Packed, 8, false, 3, 12));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantMxfp4, 8, false, 4, 16));  // 16 warps: spills
  CHECK(moe_swap_ab_register_bound(16));
  CHECK_FALSE(moe_swap_ab_register_bound(14));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantMxfp4, 8, false, 1));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantMxfp4, 16, false, 2));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantMxfp4, 8, true, 2));
  CHECK(moe_swap_ab_activation_ring(kQuantInt4Group, 8, false, 2, 8));
  CHECK(moe_swap_ab_activation_ring(kQuantInt8Channel, 8, false, 2, 8));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantInt4Group, 8, false, 1, 8));
  CHECK_FALSE(moe_swap_ab_activation_ring(kQuantNone, 8, false, 2, 8));
  // int4: one 16-byte weight load for each of two rows, four activation loads; int8: two and four.
  CHECK(moe_swap_ab_ring_bytes(8, 2, kQuantInt4Group, 8, false, 2) == 8 * 2 * (2 + 4) * kSlot);
  CHECK(moe_swap_ab_ring_bytes(8, 3, kQuantInt8Channel, 8, false, 2) == 8 * 3 * (2 * 2 + 4) * kSlot);
  CHECK(moe_swap_ab_ring_bytes(8, 2, kQuantMxfp4, 8, false, 2) == 8 * 2 * (2 + 4) * kSlot);
  CHECK(moe_swap_ab_ring_bytes(4, 2, kQuantMxfp4, 8, false, 1) == 4 * 2 * 2 * kSlot);
  // The launch sizes it with the tile's warps along k.
  {
    MoeSpec m = qwen3_30b_a3b_layer();
    m.quant = kQuantMxfp4;
    MoeTileConfig t;
    t.block_m = 8;
    t.gemm1 = t.gemm2 = swap_ab_tile(4, 2, 2);
    CHECK(moe_expert_kernel_specs(m, t, "sm_90a")[0].get_int("smem_bytes") ==
          moe_swap_ab_ring_bytes(8, 2, kQuantMxfp4, 8, false, 2));
  }
  // fp8: two 16-byte weight loads for each of two rows, two activation loads per 8-token fragment.
  CHECK(moe_swap_ab_ring_bytes(8, 2, kQuantFp8Block, 16) == 8 * 2 * (2 * 2 + 2 * 2) * kSlot);
  CHECK(moe_swap_ab_ring_bytes(8, 4, kQuantFp8Tensor, 32) == 8 * 4 * (2 * 2 + 4 * 2) * kSlot);
  // 4-bit and 16-bit weights: weights alone, whatever the tokens.
  CHECK(moe_swap_ab_ring_bytes(8, 2, kQuantMxfp4, 32) == 8 * 2 * 2 * kSlot);
  CHECK(moe_swap_ab_ring_bytes(4, 3, kQuantNone, 8) == 4 * 3 * 2 * 4 * kSlot);
  // The launch's dynamic shared memory comes from it, and a ring past the device limit is refused.
  MoeSpec s = qwen3_30b_a3b_layer();
  s.quant = kQuantFp8Block;
  MoeTileConfig c;
  c.block_m = 32;
  c.gemm1 = c.gemm2 = swap_ab_tile(4, 2, 4);
  const auto specs = moe_expert_kernel_specs(s, c, "sm_90a");
  CHECK(specs[0].get_int("smem_bytes") == moe_swap_ab_ring_bytes(8, 4, kQuantFp8Block, 32));
  CHECK(config_fits(s, c, {227 * 1024, "sm_90a"}));
  c.gemm1 = c.gemm2 = swap_ab_tile(4, 2, 5);  // 240 KiB
  CHECK_FALSE(config_fits(s, c, {227 * 1024, "sm_90a"}));
}
