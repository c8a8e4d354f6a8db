// Autotuner pieces that need no GPU: the pruned config space, the tuned DB (round trip, exact /
// nearest / missing lookups, metadata rules, corrupt files, concurrent writers), MoeSpec as JSON.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "autotune/config_space.h"
#include "autotune/tuned_db.h"
#include "common/files.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer.h"
#include "support/moe_cases.h"
#include "support/test_support.h"
#include "templates/moe/moe_decode_args.cuh"
#include "templates/moe/moe_gemm_args.cuh"
#include "templates/moe/moe_tile_walk.cuh"

using namespace moejit;
using namespace moejit::test;

namespace {
DbMetadata h200() {
  DbMetadata m;
  m.moejit_version = MOEJIT_VERSION_STRING;
  m.schema = TunedDb::kSchema;
  m.nvrtc_version = "13.0";
  m.device_name = "NVIDIA H200";
  m.sm_count = 132;
  m.arch = "sm_90a";
  return m;
}

MoeTileConfig config_with(int block_m, int gemm1_n) {
  MoeTileConfig c = heuristic_config_for_block_m(qwen3_30b_a3b_layer(), block_m);
  c.gemm1.block_n = gemm1_n;
  return c;
}
}  // namespace

TEST_CASE("autotune: the config space is pruned before compiling") {
  const MoeSpec s = qwen3_30b_a3b_layer();
  CHECK(candidate_block_ms(s, 1) == std::vector<int>{8, 16});  // 8: swap-AB tiles (fast mode)
  const auto big = candidate_block_ms(s, 8192);  // 512 rows per expert
  CHECK(std::find(big.begin(), big.end(), 128) != big.end());
  CHECK(std::find(big.begin(), big.end(), 16) == big.end());
  // 9 to 24 rows an expert: 24-row swap-AB tiles too, and nothing but swap-AB tiles at 24 rows.
  CHECK(candidate_block_ms(s, 256) == std::vector<int>{16, 24, 32});  // 16 rows per expert
  const auto at24 = candidate_tiles(s, 24, true, DeviceLimits{227 * 1024, "sm_90a"});
  CHECK_FALSE(at24.empty());
  for (const auto& t : at24) CHECK(t.swap_ab);
  for (const DeviceLimits& limits : {DeviceLimits{227 * 1024, "sm_90a"}, DeviceLimits{64 * 1024, "sm_80"}})
    for (int bm : {16, 32, 64, 128})
      for (bool gemm1 : {true, false}) {
        const auto tiles = candidate_tiles(s, bm, gemm1, limits);
        CHECK(!tiles.empty());
        for (const auto& t : tiles) {
          MoeTileConfig c = heuristic_config_for_block_m(s, bm);
          (gemm1 ? c.gemm1 : c.gemm2) = t;
          std::string why;
          // Only the tile under test is pruned; the fixed other GEMM may itself exceed a small limit.
          const bool other_fits = config_fits(s, heuristic_config_for_block_m(s, bm), limits);
          if (other_fits) CHECK_MESSAGE(config_fits(s, c, limits, &why), why);
          for (const auto& spec : moe_expert_kernel_specs(s, c, limits.arch, moe_gemm2_stores_rows16(s, c, 1)))
            if (spec.family == "moe_gemm" && other_fits) CHECK(spec.get_int("smem_bytes") <= limits.max_shared_optin);
        }
      }
  // Tiles wider than the output are not candidates: N=72 never gets 256 columns.
  MoeSpec narrow = s;
  narrow.intermediate = 72;
  for (const auto& t : candidate_tiles(narrow, 16, true, {})) CHECK(t.block_n <= 128);
}

TEST_CASE("autotune: tuned DB round trip, exact / nearest / missing lookups") {
  ScratchDir dir("tuned-db");
  const auto path = dir.path() / "db.json";
  const std::string key = tuned_shape_key(qwen3_30b_a3b_layer());
  TunedDb db(h200());
  db.set(key, {1, config_with(16, 32), 10.0});
  db.set(key, {4, config_with(16, 64), 20.0});
  db.set(key, {1024, config_with(128, 64), 300.0});
  db.merge_into(path);
  std::string warning;
  TunedDb back = TunedDb::load(path, &warning);
  CHECK(warning.empty());
  CHECK(back.metadata().device_name == "NVIDIA H200");
  CHECK(back.lookup(key, 1)->config == config_with(16, 32));                // exact
  CHECK(back.lookup(key, 3)->m == 4);                                       // nearest in log2 M
  CHECK(back.lookup(key, 2)->m == 1);                                       // tie: the smaller bucket
  // A bucket serves M / 4 .. 4 M (kTunedBucketReachLog2); farther batches take the heuristic.
  CHECK(back.lookup(key, 16)->m == 4);
  CHECK_FALSE(back.lookup(key, 17).has_value());
  CHECK(back.lookup(key, 256)->m == 1024);
  CHECK(back.lookup(key, 4096)->m == 1024);
  CHECK_FALSE(back.lookup(key, 4097).has_value());
  CHECK_FALSE(back.lookup(key, 100000).has_value());
  CHECK(back.lookup(key, 1024)->us == 300.0);
  CHECK_FALSE(back.lookup("E=1 other shape", 1).has_value());              // -> the heuristic
  CHECK(back.buckets(key).size() == 3);
  // Merging keeps what the file had and replaces the same bucket.
  TunedDb more(h200());
  more.set(key, {4, config_with(32, 64), 15.0});
  more.set("another", {8, config_with(16, 64), 1.0});
  more.merge_into(path);
  TunedDb merged = TunedDb::load(path, &warning);
  CHECK(merged.buckets(key).size() == 3);
  CHECK(merged.lookup(key, 4)->config == config_with(32, 64));
  CHECK(merged.lookup("another", 8).has_value());
}

TEST_CASE("autotune: the top-k sum choice round-trips; Auto follows the batch-size rule; bad ones are refused") {
  for (TopkSum sum : {TopkSum::Auto, TopkSum::Atomic, TopkSum::Rows}) {
    MoeTileConfig c = config_with(64, 128);
    c.topk_sum = sum;
    const auto j = tile_config_to_json(c);
    CHECK(j.contains("topk_sum") == (sum != TopkSum::Auto));  // absent = auto: older DBs read as before
    CHECK(tile_config_from_json(j) == c);
  }
  auto j = tile_config_to_json(config_with(64, 128));
  j["topk_sum"] = "sometimes";
  CHECK_THROWS_WITH_AS(tile_config_from_json(j), doctest::Contains("auto, atomic or rows"), Error);
  // Qwen3-30B-A3B (top_k 8, hidden 2048): 64 MiB of fp32 adds from M = 1024 on.
  const MoeSpec q = qwen3_30b_a3b_layer();
  MoeTileConfig c = config_with(64, 128);
  CHECK_FALSE(moe_gemm2_stores_rows16(q, c, 1023));
  CHECK(moe_gemm2_stores_rows16(q, c, 1024));
  c.topk_sum = TopkSum::Atomic;
  CHECK_FALSE(moe_gemm2_stores_rows16(q, c, 8192));
  c.topk_sum = TopkSum::Rows;
  CHECK(moe_gemm2_stores_rows16(q, c, 1));
  CHECK(c.describe().find("sum=rows") != std::string::npos);
  c.gemm2.split_k = 2;  // split GEMM2 parts add atomically
  CHECK_THROWS_WITH_AS(moe_gemm2_stores_rows16(q, c, 1), doctest::Contains("unsplit GEMM2"), Error);
  MoeSpec det = q;
  det.reduce = ReduceMode::Deterministic;
  c.gemm2.split_k = 0;
  CHECK_THROWS_WITH_AS(moe_gemm2_stores_rows16(det, c, 1), doctest::Contains("fast reduce mode"), Error);
  c.topk_sum = TopkSum::Auto;
  CHECK_FALSE(moe_gemm2_stores_rows16(det, c, 8192));
}

TEST_CASE("autotune: swap-AB tiles round-trip, are candidates only where the layer can run them") {
  MoeSpec mx = qwen3_30b_a3b_layer();
  mx.quant = kQuantMxfp4;
  // The heuristic: swap-AB for 4-bit decode in the fast mode, 8-row tiles while experts get fewer.
  const MoeTileConfig decode = heuristic_tile_config(mx, 1);
  CHECK(decode.block_m == 8);
  CHECK(decode.gemm1.swap_ab);
  CHECK(decode.gemm2.swap_ab);
  CHECK(decode.describe().find("swapab w") != std::string::npos);
  CHECK_FALSE(heuristic_tile_config(mx, 4096).gemm1.swap_ab);  // prefill: the shared-memory kernel
  CHECK_FALSE(heuristic_tile_config(mx, 1, false).gemm1.swap_ab);
  // Grids of few warps (N = 256) take more warps along k.
  MoeSpec narrow = mx;
  narrow.num_experts = 256;
  narrow.hidden = 7168;
  narrow.intermediate = 256;
  const GemmTile g1 = heuristic_tile_config(narrow, 1).gemm1;
  CHECK(g1.warps_n * g1.warps_k > 4);
  CHECK(g1.warps_n * g1.warps_k <= 16);
  // GEMM1 takes two warps along k while experts get fewer than 8 rows; 4-bit weights one from 8.
  CHECK(heuristic_tile_config(mx, 16).gemm1.warps_k == 2);
  CHECK(heuristic_tile_config(mx, 128).block_m == 8);
  CHECK(heuristic_tile_config(mx, 128).gemm1.warps_k == 1);
  MoeSpec i8 = mx;  // 8-bit weights keep two there
  i8.quant = kQuantInt8Channel;
  CHECK(heuristic_tile_config(i8, 128).block_m == 8);
  CHECK(heuristic_tile_config(i8, 128).gemm1.warps_k == 2);
  // GEMM2 takes two warps along k from 12 k blocks of 128 (N = 1536: Qwen3-235B-A22B), one below (N = 1408).
  for (MoeQuant q : {kQuantInt4Group, kQuantInt8Channel}) {
    MoeSpec n1536 = small_layer(128, 8, 4096, 1536, kActSiluMul, kDTypeBF16, q);
    n1536.quant_group = 128;
    MoeSpec n1408 = n1536;
    n1408.intermediate = 1408;
    for (int m : {1, 4}) {
      INFO(static_cast<int>(q) << " M=" << m);
      CHECK(heuristic_tile_config(n1536, m, true, "sm_90a").gemm2.warps_k == 2);
      CHECK(heuristic_tile_config(n1408, m, true, "sm_90a").gemm2.warps_k == 1);
    }
  }
  // Experts larger than the L2 (Mixtral-8x7B: 176 MB in fp8 / int8, 93 in MXFP4) at 5-8 rows an
  // expert: 16-token tiles, so that an expert's weights are read once; not int4, not at 4 rows, not
  // small experts (Qwen3-30B-A3B above: 4.7 MB).
  for (MoeQuant q : {kQuantFp8Block, kQuantInt8Channel, kQuantMxfp4Packed, kQuantInt4Group}) {
    MoeSpec big = small_layer(8, 2, 4096, 14336, kActSiluMul, kDTypeBF16, q);
    big.quant_group = 128;
    INFO(static_cast<int>(q));
    CHECK(heuristic_tile_config(big, 16, true, "sm_90a").block_m == 8);  // 4 rows
    for (int m : {20, 32}) {
      const MoeTileConfig c = heuristic_tile_config(big, m, true, "sm_90a");
      CHECK(c.block_m == (q == kQuantInt4Group ? 8 : 16));
      CHECK((c.gemm1.swap_ab && c.gemm2.swap_ab));
    }
  }
  MoeSpec small_fp8 = mx;
  small_fp8.quant = kQuantFp8Block;
  CHECK(heuristic_tile_config(small_fp8, 128, true, "sm_90a").block_m == 8);
  MoeSpec det = mx;
  det.reduce = ReduceMode::Deterministic;
  CHECK_FALSE(heuristic_tile_config(det, 1).gemm1.swap_ab);
  CHECK(candidate_block_ms(det, 1) == std::vector<int>{16});
  for (const auto& t : candidate_tiles(det, 16, true, {})) CHECK_FALSE(t.swap_ab);
  int swap_candidates = 0;
  for (const auto& t : candidate_tiles(mx, 16, true, {})) swap_candidates += t.swap_ab;
  CHECK(swap_candidates >= 4);
  for (const auto& t : candidate_tiles(mx, 8, false, {})) CHECK(t.swap_ab);  // 8 rows: swap-AB alone

  // JSON: swap-AB tiles carry warps_n / warps_k / stages (and split_k), and come back equal.
  MoeTileConfig c = decode;
  c.gemm2.split_k = 3;
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm1"].contains("warps_k"));
  CHECK_FALSE(tile_config_to_json(c)["gemm1"].contains("block_n"));

  // What the layer refuses, before anything compiles: the deterministic mode, fp8 below sm_89, tiles with
  // block_n / block_k / warps_m set, GEMM1 split across CTAs, a reduction length of partial loads.
  auto refused = [](const MoeSpec& spec, const MoeTileConfig& config, const char* what) {
    CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(spec, config, "sm_90a"), doctest::Contains(what), Error);
  };
  refused(det, decode, "fast reduce mode");
  MoeSpec fp8 = mx;
  fp8.quant = kQuantFp8Block;
  CHECK_NOTHROW(moe_expert_kernel_specs(fp8, decode, "sm_90a"));
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(fp8, decode, "sm_80"), doctest::Contains("sm_89 or newer"), Error);
  MoeTileConfig odd = decode;
  odd.gemm1.block_n = 64;
  refused(mx, odd, "derives block_n");
  odd = decode;
  odd.gemm1.split_k = 2;
  refused(mx, odd, "does not split k across CTAs");
  MoeSpec tail = qwen3_30b_a3b_layer();
  tail.hidden = 2056;  // 8-element multiple, but not a whole 16-byte load of 4-bit weights
  tail.quant = kQuantNone;
  CHECK_NOTHROW(moe_expert_kernel_specs(tail, decode, "sm_90a"));  // bf16: 8 k per load
  tail.quant = kQuantInt8Channel;
  refused(tail, decode, "whole 16-weight chunks");
}

// The swap-AB kernel's wgmma variant: MXFP4 into bf16 at 12 .. 28 rows an expert, int4 at 9 .. 28 and int8 at
// 14 .. 32 on sm_90a only; its tiles round-trip, reach the kernel as wgmma = 1 with the activation stages in
// its shared memory, and what it cannot run is refused before anything compiles.
TEST_CASE("autotune: the swap-AB kernel's wgmma variant: picked, round-trip, refused where it cannot run") {
  MoeSpec mx = qwen3_30b_a3b_layer();  // E = 128, top_k = 8: rows per expert = M / 16
  mx.quant = kQuantMxfp4;
  MoeSpec i4 = mx;
  i4.quant = kQuantInt4Group;
  i4.quant_group = 128;
  for (int m : {192, 256, 320, 384, 448}) {
    const MoeTileConfig c = heuristic_tile_config(mx, m, true, "sm_90a");
    INFO("M=" << m << " " << c.describe());
    CHECK((c.gemm1.swap_ab && c.gemm1.swap_ab_wgmma && c.gemm2.swap_ab_wgmma));
    CHECK(c.block_m == (m <= 192 ? 16 : 32));
    CHECK(c.describe().find("swapab wg w8x1 s2") != std::string::npos);
    const auto specs = moe_expert_kernel_specs(mx, c, "sm_90a");
    CHECK(specs[0].get_int("wgmma") == 1);
    CHECK(specs[0].get_int("smem_bytes") == moe_swap_ab_smem_bytes(8, 2, kQuantMxfp4, c.block_m, true));
    CHECK(specs[0].get_int("smem_bytes") > moe_swap_ab_ring_bytes(8, 2, kQuantMxfp4, c.block_m));
    CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
    CHECK(tile_config_to_json(c)["gemm1"]["swap_ab_wgmma"] == true);
    CHECK(heuristic_tile_config(i4, m, true, "sm_90a").gemm1.swap_ab_wgmma);
  }
  CHECK(heuristic_tile_config(i4, 144, true, "sm_90a").gemm1.swap_ab_wgmma);  // int4 from 9 rows
  CHECK(heuristic_tile_config(i4, 144, true, "sm_90a").block_m == 16);
  CHECK_FALSE(heuristic_tile_config(i4, 128, true, "sm_90a").gemm1.swap_ab_wgmma);
  CHECK_FALSE(heuristic_tile_config(mx, 176, true, "sm_90a").gemm1.swap_ab_wgmma);  // MXFP4 from 12
  // int8: 24-token mma.sync tiles of one warp along k at 9 .. 13 rows, 32-token wgmma-variant tiles at
  // 14 .. 32, the weight-only wgmma kernel's 64-row tiles past them.
  MoeSpec i8 = mx;
  i8.quant = kQuantInt8Channel;
  for (int m : {144, 208}) {
    const MoeTileConfig c = heuristic_tile_config(i8, m, true, "sm_90a");
    INFO("int8 M=" << m << " " << c.describe());
    CHECK(c.block_m == 24);
    CHECK((c.gemm1.swap_ab && !c.gemm1.swap_ab_wgmma && c.gemm1.warps_k == 1 && c.gemm2.warps_k == 1));
  }
  for (int m : {224, 384, 512}) {
    const MoeTileConfig c = heuristic_tile_config(i8, m, true, "sm_90a");
    INFO("int8 M=" << m << " " << c.describe());
    CHECK((c.block_m == 32 && c.gemm1.swap_ab_wgmma && c.gemm2.swap_ab_wgmma));
  }
  CHECK(heuristic_tile_config(i8, 528, true, "sm_90a").gemm1.wgmma);
  CHECK(heuristic_tile_config(i8, 528, true, "sm_90a").block_m == 64);
  CHECK(heuristic_tile_config(i8, 256, true, "sm_80").block_m == 24);  // no wgmma: the mma.sync tiles to 16 rows
  for (int m : {464, 1024}) CHECK_FALSE(heuristic_tile_config(mx, m, true, "sm_90a").gemm1.swap_ab_wgmma);
  for (const char* arch : {"", "sm_80", "sm_90", "sm_100a"})
    CHECK_FALSE(heuristic_tile_config(mx, 256, true, arch).gemm1.swap_ab_wgmma);
  MoeSpec f16 = mx;  // MXFP4 into f16 and bf16 weights: not measured there, the mma.sync tiles
  f16.dtype = kDTypeF16;
  CHECK_FALSE(heuristic_tile_config(f16, 256, true, "sm_90a").gemm1.swap_ab_wgmma);
  MoeSpec fp8 = mx;
  fp8.quant = kQuantFp8Block;
  CHECK_FALSE(heuristic_tile_config(fp8, 256, true, "sm_90a").gemm1.swap_ab_wgmma);
  // The tuner's candidates at 16 and 32 rows on sm_90a, none elsewhere.
  int wg = 0;
  for (const auto& t : candidate_tiles(mx, 16, true, {227 * 1024, "sm_90a"})) wg += t.swap_ab_wgmma;
  CHECK(wg >= 2);
  for (const auto& t : candidate_tiles(mx, 16, true, {227 * 1024, "sm_80"})) CHECK_FALSE(t.swap_ab_wgmma);
  for (const auto& t : candidate_tiles(fp8, 16, true, {227 * 1024, "sm_90a"})) CHECK_FALSE(t.swap_ab_wgmma);
  // Refused: another arch, e4m3 activations, warps along k, a partial warpgroup, 40 tokens on the
  // mma.sync variant.
  MoeTileConfig c;
  c.block_m = 16;
  c.gemm1 = c.gemm2 = swap_ab_wgmma_tile(8, 2);
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(mx, c, "sm_80"), doctest::Contains("wgmma variant, which needs sm_90a"),
                       Error);
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(fp8, c, "sm_90a"), doctest::Contains("16-bit activations"), Error);
  MoeTileConfig bad = c;
  bad.gemm1.warps_k = 2;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(mx, bad, "sm_90a"), doctest::Contains("one warp along k"), Error);
  bad = c;
  bad.gemm2.warps_n = 6;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(mx, bad, "sm_90a"), doctest::Contains("whole warpgroups"), Error);
  bad = c;
  bad.gemm2 = wgmma_tile(128, 4, 0, true);
  bad.gemm2.swap_ab_wgmma = true;  // read from a DB entry on any tile kind: refused, not dropped
  CHECK(tile_config_from_json(tile_config_to_json(bad)) == bad);
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(mx, bad, "sm_90a"), doctest::Contains("only a swap-AB tile"), Error);
  bad = c;
  bad.block_m = 64;
  bad.gemm1 = bad.gemm2 = swap_ab_tile(4, 1, 2);
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(mx, bad, "sm_90a"), doctest::Contains("exceeds 32"), Error);
}

TEST_CASE("autotune: the decode GEMV config: heuristic rule, round trip, kernels, nearest bucket, refusals") {
  const MoeSpec q = qwen3_30b_a3b_layer();
  // Up to kGemvHeuristicMaxTokens tokens whose slots are at most half the experts, then up to
  // kGemvHeuristicWideTokens whose slots are at most 3/8 of them (Qwen3: 6 x 8 = 48 of 128).
  for (int m = 1; m <= kGemvHeuristicWideTokens; ++m) CHECK(heuristic_tile_config(q, m, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(q, kGemvHeuristicWideTokens + 1, true, "sm_90a").gemv);
  MoeSpec dsv2 = q;  // DeepSeek-V2-Lite: 5 x 6 slots are 30 of 64 experts
  dsv2.num_experts = 64;
  dsv2.top_k = 6;
  CHECK(heuristic_tile_config(dsv2, kGemvHeuristicMaxTokens, true, "sm_90a").gemv);  // 24 <= 64 / 2
  CHECK_FALSE(heuristic_tile_config(dsv2, kGemvHeuristicMaxTokens + 1, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(q, 1, false).gemv);  // the shared-memory kernel's tiles only
  MoeSpec mixtral = q;
  mixtral.num_experts = 8;
  mixtral.top_k = 2;
  CHECK(heuristic_tile_config(mixtral, 2).gemv);
  CHECK_FALSE(heuristic_tile_config(mixtral, 3).gemv);  // 6 slots over 8 experts: shared weights re-read
  MoeSpec det = q, unfused = q, quant = q;
  det.reduce = ReduceMode::Deterministic;
  unfused.fused = false;
  quant.quant = kQuantInt4Group;
  for (const MoeSpec* s : {&det, &unfused, &quant}) {
    CHECK_FALSE(decode_gemv_supported(*s));
    CHECK_FALSE(heuristic_tile_config(*s, 1).gemv);
    CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(*s, decode_gemv_config(), "sm_90a"), doctest::Contains("decode GEMV"),
                         Error);
  }
  // fp8_block: e4m3 conversions (sm_89+); activations quantized in shared memory bound the tokens.
  MoeSpec fp8 = q;
  fp8.quant = kQuantFp8Block;
  CHECK(decode_gemv_supported(fp8, "sm_90a"));
  CHECK_FALSE(decode_gemv_supported(fp8, "sm_80"));
  // Up to 4 tokens for experts of N <= 768 (Qwen3's), 2 for wider ones, 8 for N <= 256 (the sparsity and
  // shared-memory conditions still apply).
  CHECK(gemv_heuristic_most_tokens(fp8) == kGemvHeuristicMaxTokens);
  for (int m = 1; m <= kGemvHeuristicMaxTokens; ++m) CHECK(heuristic_tile_config(fp8, m, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(fp8, kGemvHeuristicMaxTokens + 1, true, "sm_90a").gemv);
  MoeSpec wide = fp8;  // DeepSeek-V2-Lite-shaped: N = 1408
  wide.num_experts = 64;
  wide.top_k = 6;
  wide.intermediate = 1408;
  CHECK(gemv_heuristic_most_tokens(wide) == kGemvHeuristicMaxTokensFp8);
  CHECK(heuristic_tile_config(wide, kGemvHeuristicMaxTokensFp8, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(wide, kGemvHeuristicMaxTokensFp8 + 1, true, "sm_90a").gemv);
  MoeSpec narrow = fp8;  // DeepSeek-V3 TP8: E = 256, K = 7168, N = 256
  narrow.num_experts = 256;
  narrow.hidden = 7168;
  narrow.intermediate = 256;
  CHECK(gemv_heuristic_most_tokens(narrow) == kGemvHeuristicMostTokensNarrowestFp8);
  CHECK(decode_gemv_max_tokens(narrow) >= kGemvHeuristicMostTokensNarrowestFp8);  // each CTA's own x rows
  for (int m = 1; m <= kGemvHeuristicMostTokensNarrowestFp8; ++m)
    CHECK(heuristic_tile_config(narrow, m, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(narrow, kGemvHeuristicMostTokensNarrowestFp8 + 1, true, "sm_90a").gemv);
  narrow.num_experts = 64;  // 6 x 8 slots are more than 3/8 of 64 experts: swap-AB tiles
  CHECK(heuristic_tile_config(narrow, 2, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(narrow, 5, true, "sm_90a").gemv);
  CHECK(gemv_heuristic_most_tokens(q) == kGemvHeuristicWideTokens);  // 16-bit weights
  // ... where its threads stay busy: rows of 128 / 384 16-byte chunks (Qwen3's K = 2048 split in two
  // items a step; 8 x 768 in two steps of 256, 3/4 used), but not gpt-oss-120b's K = 2880 (180 of
  // 256 threads a step).
  CHECK(moe_decode_lane_use(128) == 1.0);
  CHECK(moe_decode_lane_use(384) == 0.75);
  CHECK(moe_decode_lane_use(180) == doctest::Approx(180.0 / 256));
  CHECK(decode_gemv_lane_use(fp8) == doctest::Approx((2 * 1.0 + 0.75) / 3));
  MoeSpec oss = fp8;
  oss.num_experts = 128;
  oss.top_k = 4;
  oss.hidden = oss.intermediate = 2880;
  oss.activation = kActSwigluOai;
  CHECK(decode_gemv_lane_use(oss) < kGemvHeuristicMinLaneUseFp8);
  CHECK_FALSE(heuristic_tile_config(oss, 1, true, "sm_90a").gemv);
  oss.quant = kQuantNone;  // 16-bit weights keep the GEMV there
  CHECK(heuristic_tile_config(oss, 1, true, "sm_90a").gemv);
  CHECK_FALSE(heuristic_tile_config(fp8, 1, true, "sm_80").gemv);
  // With the activation quantization kernel second: X once before gemv1 for the batches whose X the
  // GEMV's CTAs would not quantize beside their routing (MoeLayer::kernels_for takes it from there).
  const auto fp8_specs = moe_expert_kernel_specs(fp8, decode_gemv_config(), "sm_90a");
  REQUIRE(fp8_specs.size() == 2);
  CHECK(fp8_specs[0].get_string("quant") == "fp8_block");
  CHECK(fp8_specs[1].family == "moe_act_quant");
  CHECK(fp8_specs[1].get_string("mode") == "group128");
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(fp8, decode_gemv_config(), "sm_80"), doctest::Contains("sm_89"), Error);
  // The overlap rule: the routing warps' tokens each leave one warp fewer for x's 128-column groups.
  CHECK(moe_decode_quantize_overlaps(56, 1));        // DeepSeek-V3 (K = 7168): 7 warps x 8 groups, one pass
  CHECK_FALSE(moe_decode_quantize_overlaps(56, 2));  // 112 groups: 3 passes on 6 warps against 2 on 8
  CHECK(moe_decode_quantize_overlaps(16, 2));        // K = 2048: one pass either way
  CHECK_FALSE(moe_decode_quantize_overlaps(16, 3));
  CHECK_FALSE(moe_decode_quantize_overlaps(1, 0));
  CHECK_FALSE(moe_decode_quantize_overlaps(1, kMoeDecodeThreads / 32));  // no warp left over
  // Each CTA's shared memory holds only its own tokens' rows (two at most here, with any grid of
  // kMoeDecodeMinGrid CTAs or more): every token count fits.
  CHECK(decode_gemv_max_tokens(fp8) == kMoeDecodeMaxTokens);
  fp8.hidden = 16384;  // x as f16 in shared memory, 32.5 KiB per token: two fit 96 KiB
  CHECK(decode_gemv_max_tokens(fp8) == kMoeDecodeMaxTokens);
  fp8.hidden = 32768;  // 65 KiB per token: one token alone (from two on, a CTA may span two)
  CHECK(decode_gemv_max_tokens(fp8) == 1);
  // Only layers whose rows for 8 tokens could not sit three CTAs an SM carry the SPAN kernels.
  CHECK(moe_decode_gemv_span_wanted(kQuantFp8Block, 8, 7168, 256));   // DeepSeek-V3 TP8: x rows 14 KB a token
  CHECK(moe_decode_gemv_span_wanted(kQuantFp8Block, 8, 256, 2048));   // gemv2: 33 KB a token
  CHECK_FALSE(moe_decode_gemv_span_wanted(kQuantFp8Block, 8, 2048, 128));
  CHECK_FALSE(moe_decode_gemv_span_wanted(kQuantNone, 8, 7168, 256));  // 16-bit weights: no shared rows
  // The span bound holds for every CTA of every grid (the kernels' own split of the items).
  for (int tokens = 1; tokens <= kMoeDecodeMaxTokens; ++tokens)
    for (long long per_token : {1LL, 7LL, 128LL, 2048LL, 7168LL})
      for (long long grid : {1LL, 3LL, 16LL, 132LL, 264LL, 396LL, 1000LL}) {
        const long long items = tokens * per_token;
        if (grid > items) continue;
        const int span = moe_decode_cta_token_span(items, per_token, grid, tokens);
        int widest = 0;
        for (long long b = 0; b < grid; ++b) {
          int begin = 0, end = 0, first = 0, count = 0;
          moe_decode_cta_items(b, grid, items, begin, end);
          moe_decode_cta_tokens(begin, end, static_cast<int>(per_token), first, count);
          CHECK(first + count <= tokens);
          widest = std::max(widest, count);
        }
        CHECK(widest <= span);
        CHECK(span <= widest + 1);  // not far above it
      }
  // One kernel set: routing parameters from the layer's router, the shape as template arguments.
  const MoeTileConfig gemv = decode_gemv_config();
  CHECK(gemv.describe() == "gemv");
  const auto specs = moe_expert_kernel_specs(q, gemv, "sm_80");
  REQUIRE(specs.size() == 1);
  CHECK(specs[0].family == "moe_decode_gemv");
  CHECK(specs[0].get_int("hidden") == 2048);
  CHECK(specs[0].get_int("intermediate") == 768);
  CHECK(specs[0].get_int("top_k") == 8);
  CHECK(specs[0].get_int("num_experts") == 128);
  CHECK_FALSE(moe_gemm2_stores_rows16(q, gemv, 1 << 20));
  CHECK(moe_gemm2_roles_upto(q, gemv, 1 << 20) == std::vector<bool>{false});
  const auto layer_specs = moe_layer_kernel_specs(q, 1, "sm_90a");  // CI compiles it with the layer
  CHECK(std::find(layer_specs.begin(), layer_specs.end(), specs[0]) == layer_specs.end());  // other arch
  CHECK(std::find(layer_specs.begin(), layer_specs.end(), moe_expert_kernel_specs(q, gemv, "sm_90a")[0]) !=
        layer_specs.end());
  // JSON: {"gemv": true} alone.
  CHECK(tile_config_to_json(gemv) == nlohmann::json{{"gemv", true}});
  CHECK(tile_config_from_json(tile_config_to_json(gemv)) == gemv);
  CHECK_THROWS_WITH_AS(tile_config_from_json(nlohmann::json{{"gemv", true}, {"block_m", 64}}),
                       doctest::Contains("no other keys"), Error);
  // A gemv bucket serves batches it can run: beyond, the nearest other bucket.
  const std::vector<TunedEntry> buckets = {{1, gemv, 20.0}, {8, gemv, 150.0}, {32, config_with(64, 64), 300.0}};
  auto runnable = [](int m) {
    return [m](const MoeTileConfig& c) { return !c.gemv || m <= kMoeDecodeMaxTokens; };
  };
  CHECK(nearest_bucket(buckets, 8, runnable(8))->m == 8);
  CHECK(nearest_bucket(buckets, 12)->m == 8);
  CHECK(nearest_bucket(buckets, 12, runnable(12))->m == 32);
  CHECK(nearest_bucket({{1, gemv, 20.0}}, 12, runnable(12)) == nullptr);  // -> the heuristic
  CHECK(nearest_bucket({{1, gemv, 20.0}, {64, config_with(64, 64), 300.0}}, 12, runnable(12)) == nullptr);  // out of reach
}

TEST_CASE("autotune: DB metadata rules, corrupt files, bad entries") {
  TunedDb db(h200());
  DbMetadata now = h200();
  CHECK(db.match(now) == DbMatch::Same);
  now.moejit_version = "9.9.9";
  CHECK(db.match(now) == DbMatch::Stale);  // soft: used, re-tune advised
  now = h200();
  now.nvrtc_version = "13.1";
  CHECK(db.match(now) == DbMatch::Stale);
  now = h200();
  now.device_name = "NVIDIA H100 80GB HBM3";
  CHECK(db.match(now) == DbMatch::OtherDevice);  // hard: ignored
  now = h200();
  now.arch = "sm_100a";
  CHECK(db.match(now) == DbMatch::OtherDevice);

  std::string warning;
  TunedDb corrupt = TunedDb::parse("{\"metadata\": {", "corrupt.json", &warning);
  CHECK(corrupt.empty());
  CHECK(warning.find("unreadable") != std::string::npos);
  warning.clear();
  nlohmann::json j = TunedDb(h200()).to_json();
  j["entries"]["k"]["16"] = {{"config", tile_config_to_json(config_with(16, 64))}, {"us", 3.0}};
  j["entries"]["k"]["32"] = {{"config", {{"block_m", 48}}}, {"us", 3.0}};  // malformed
  j["entries"]["k"]["x"] = {{"config", tile_config_to_json(config_with(16, 64))}};
  TunedDb partial = TunedDb::parse(j.dump(), "partial.json", &warning);
  CHECK(partial.buckets("k").size() == 1);
  CHECK(warning.find("2 malformed entries") != std::string::npos);
  warning.clear();
  CHECK(TunedDb::load("/nonexistent/dir/db.json", &warning).empty());  // missing: empty, no warning
  CHECK(warning.empty());
}

TEST_CASE("autotune: two concurrent writers lose nothing") {
  ScratchDir dir("tuned-db-race");
  const auto path = dir.path() / "db.json";
  constexpr int kPerWriter = 40;
  auto writer = [&](int id) {
    for (int i = 0; i < kPerWriter; ++i) {
      TunedDb db(h200());
      db.set(fmt::format("writer{}", id), {i + 1, config_with(16, 64), double(i)});
      db.merge_into(path);
    }
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  std::string warning;
  TunedDb db = TunedDb::load(path, &warning);
  CHECK(warning.empty());
  CHECK(db.buckets("writer0").size() == kPerWriter);
  CHECK(db.buckets("writer1").size() == kPerWriter);
}

TEST_CASE("MoeSpec as JSON: round trip, unknown fields rejected") {
  MoeSpec s = qwen3_30b_a3b_layer();
  s.activation = kActSwigluOai;
  s.has_bias = true;
  s.reduce = ReduceMode::Deterministic;
  s.num_local_experts = 64;
  const MoeSpec back = MoeSpec::from_json(s.to_json());
  CHECK(back.to_json() == s.to_json());
  CHECK(tuned_shape_key(back) == tuned_shape_key(s));
  CHECK_THROWS_WITH_AS(MoeSpec::from_json({{"num_experts", 8}, {"top_k", 2}, {"hidden", 64}, {"intermediate", 64},
                                           {"topk", 3}}),
                       doctest::Contains("unknown field 'topk'"), Error);
  CHECK_THROWS_WITH_AS(MoeSpec::from_json({{"num_experts", 8}, {"top_k", 2}}), doctest::Contains("'hidden' is required"),
                       Error);
}
