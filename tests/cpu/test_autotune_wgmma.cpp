// The wgmma tiles in the config space and the tuned DB, no GPU needed: picked on sm_90a only, kernel
// specs, round trips, the staged persistent epilogues' shared memory and rules, refusals. The rest
// of the tuned DB and the config space is in test_autotune.cpp, the launch knobs in
// test_autotune_knobs.cpp.
#include <doctest/doctest.h>

#include <algorithm>

#include "autotune/config_space.h"
#include "autotune/tuned_db.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer.h"
#include "support/moe_cases.h"
#include "support/test_support.h"
#include "templates/moe/moe_gemm_args.cuh"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("autotune: wgmma tiles are picked on sm_90a only, round-trip, and bad ones are refused") {
  const MoeSpec q = qwen3_30b_a3b_layer();  // bf16, fast mode: 64 rows per expert at M = 1024
  const MoeTileConfig prefill = heuristic_tile_config(q, 8192, true, "sm_90a");
  CHECK(prefill.block_m == 128);
  CHECK(prefill.gemm1.wgmma);
  CHECK(prefill.gemm2.wgmma);
  CHECK(prefill.gemm1.block_n == 128);  // gated: 256 weight rows
  CHECK((prefill.gemm1.persistent && prefill.gemm2.persistent));
  // GEMM2 stages its 128 x 256 tiles of DTYPE rows (fused layer): rows at every batch size.
  CHECK((prefill.gemm2.staged && prefill.gemm2.stages == 3 && !prefill.gemm1.staged));
  CHECK(moe_gemm2_stores_rows16(q, prefill, 1));
  // Persistent tiles read weights by bulk tensor copies, GEMM2 its A rows too; plain ones do not.
  const auto specs = moe_expert_kernel_specs(q, prefill, "sm_90a", true);
  CHECK(specs[0].get_int("b_tma") == 1);
  CHECK(specs[0].get_int("a_tma") == 0);  // GEMM1 gathers A rows by token
  CHECK(specs[1].get_int("b_tma") == 1);
  CHECK(specs[1].get_int("a_tma") == 1);
  MoeTileConfig plain_prefill = prefill;
  plain_prefill.gemm1.persistent = plain_prefill.gemm2.persistent = false;
  plain_prefill.gemm2.staged = false;
  const auto plain_specs = moe_expert_kernel_specs(q, plain_prefill, "sm_90a");
  CHECK(plain_specs[0].get_int("b_tma") == 0);
  CHECK(plain_specs[1].get_int("a_tma") == 0);
  const MoeTileConfig mid = heuristic_tile_config(q, 128, true, "sm_90a");  // 8 rows per expert
  CHECK(mid.block_m == 64);
  CHECK(mid.gemm1.persistent);
  CHECK(mid.describe().find("wgmma bn64 s4 ws") != std::string::npos);
  // Decode (1 row per expert): the persistent 64-row tiles once GEMM1 has 128 tiles of 64 columns
  // over the touched experts (Qwen3 M = 1: 8 x 12 = 96; M = 2: 192), the shared-memory kernel's
  // split-K tiles before.
  CHECK_FALSE(heuristic_tile_config(q, 1, true, "sm_90a", false).gemm1.wgmma);
  CHECK(heuristic_tile_config(q, 2, true, "sm_90a", false).gemm1.persistent);
  for (const char* arch : {"", "sm_80", "sm_90", "sm_100a"}) CHECK_FALSE(heuristic_tile_config(q, 8192, true, arch).gemm1.wgmma);
  MoeSpec det = q;
  det.reduce = ReduceMode::Deterministic;
  CHECK_FALSE(heuristic_tile_config(det, 8192, true, "sm_90a").gemm1.wgmma);
  // Weight-only formats past decode: the persistent wgmma kernel dequantizing in its producers,
  // 64-row tiles up to 32 rows per expert (four producer warpgroups, 640 threads), beyond 128-row
  // tiles of 256 weight rows (512 threads); setmaxnreg moves registers to the consumers of both;
  // int8's X gathered beforehand on 128-row tiles; rings that fit 227
  // KiB beside the stored weights' ring (int8: 64 KiB at 256 rows).
  MoeSpec int8 = q;
  int8.quant = kQuantInt8Channel;
  for (MoeQuant wq : {kQuantInt8Channel, kQuantInt4Group, kQuantMxfp4}) {
    MoeSpec w = q;
    w.quant = wq;
    w.quant_group = 128;
    for (int m : {256, 768, 1024, 8192}) {  // 16 (swap-AB / shared-memory kernel), 48, 64, 512 rows per expert
      const MoeTileConfig c = heuristic_tile_config(w, m, true, "sm_90a");
      INFO(quant_name(wq) << " M=" << m << " " << c.describe());
      if (m == 256) {
        CHECK_FALSE(c.gemm1.wgmma);
        continue;
      }
      CHECK((c.gemm1.wgmma && c.gemm1.persistent && c.gemm2.wgmma && c.gemm2.persistent));
      CHECK(c.block_m == (m == 768 ? 64 : 128));
      CHECK(c.gemm1.pregather == (c.block_m == 128 && wq == kQuantInt8Channel));  // 4-bit at 256 rows: no
      if (c.block_m == 128) {  // gated GEMM1 128 columns (N = 768), GEMM2 256 (K = 2048)
        CHECK(c.gemm1.block_n == 128);
        CHECK(c.gemm2.block_n == 256);
        CHECK_FALSE(c.gemm2.staged);
      }
      CHECK(config_fits(w, c, {227 * 1024, "sm_90a"}));
      const auto specs = moe_expert_kernel_specs(w, c, "sm_90a", moe_gemm2_stores_rows16(w, c, m));
      CHECK(specs[0].get_int("b_tma") == 0);  // the stored weights by cp.async
      CHECK(specs[1].get_int("a_tma") == 1);
      CHECK(specs[0].get_int("threads") == (c.block_m == 128 ? 512 : 640));
    }
    CHECK_FALSE(heuristic_tile_config(w, 8192, true, "sm_80").gemm1.wgmma);
    int dq_persistent = 0;
    for (const auto& t : candidate_tiles(w, 128, true, {227 * 1024, "sm_90a"})) {
      CHECK((!t.wgmma || t.persistent));  // no plain variant
      dq_persistent += t.wgmma;
    }
    CHECK(dq_persistent >= 2);
  }
  // Producer warpgroups of the weight-only tiles: four on 64-row tiles but for MXFP4 into f16 (its
  // conversion spills at the 80 registers four leave), two on 128-row tiles; the raw ring's slot is
  // the k tile's stored bytes whatever their count.
  for (MoeDType dt : {kDTypeBF16, kDTypeF16}) {
    CHECK(moe_wgmma_threads(64, true, false, kQuantInt4Group, dt) == 640);
    CHECK(moe_wgmma_threads(64, true, false, kQuantInt8Channel, dt) == 640);
    CHECK(moe_wgmma_threads(64, true, false, kQuantMxfp4Packed, dt) == (dt == kDTypeBF16 ? 640 : 384));
    CHECK(moe_wgmma_threads(128, true, false, kQuantMxfp4, dt) == 512);
    CHECK(moe_wgmma_threads(64, true, false, kQuantNone, dt) == 256);
  }
  CHECK(moe_wgmma_raw_slot_bytes(192, kQuantMxfp4) == 192 * 32);
  CHECK(moe_wgmma_raw_slot_bytes(256, kQuantInt8Channel) == 256 * 64);
  // fp8 w8a8 prefill: persistent wgmma tiles (either variant in the tuner's space).
  MoeSpec f8 = q;
  f8.quant = kQuantFp8Channel;
  const MoeTileConfig f8_prefill = heuristic_tile_config(f8, 8192, true, "sm_90a");
  CHECK((f8_prefill.gemm1.wgmma && f8_prefill.gemm1.persistent && f8_prefill.gemm2.persistent));
  CHECK(f8_prefill.gemm1.block_n == 128);  // gated: 256 weight rows, a k tile's sums 128 rows at a time
  CHECK(f8_prefill.gemm2.block_n == 256);
  CHECK_FALSE(f8_prefill.gemm1.multicast);  // K = 2048: GEMM1's k loop too short for the clusters
  MoeSpec f8_long_k = f8;  // DeepSeek-V3 TP8-like: K = 7168, 256 experts
  f8_long_k.num_experts = 256;
  f8_long_k.hidden = 7168;
  f8_long_k.intermediate = 256;
  const MoeTileConfig f8_long = heuristic_tile_config(f8_long_k, 8192, true, "sm_90a");  // 256 rows an expert
  CHECK(f8_long.gemm1.multicast);
  CHECK_NOTHROW(moe_expert_kernel_specs(f8_long_k, f8_long, "sm_90a", moe_gemm2_stores_rows16(f8_long_k, f8_long, 8192)));
  CHECK_FALSE(heuristic_tile_config(f8_long_k, 2048, true, "sm_90a").gemm1.multicast);  // 64 rows
  CHECK_NOTHROW(moe_expert_kernel_specs(f8, f8_prefill, "sm_90a", moe_gemm2_stores_rows16(f8, f8_prefill, 8192)));
  for (MoeQuant fq : {kQuantFp8Channel, kQuantFp8Block}) {  // the tuner's base config per block_m validates
    MoeSpec f = q;
    f.quant = fq;
    for (int bm : {64, 128}) {
      const MoeTileConfig base = heuristic_config_for_block_m(f, bm, "sm_90a");
      INFO(quant_name(fq) << " block_m " << bm << ": " << base.describe());
      CHECK(base.block_m == bm);
      CHECK_NOTHROW(moe_expert_kernel_specs(f, base, "sm_90a", moe_gemm2_stores_rows16(f, base, 8192)));
    }
  }
  int f8_persistent = 0;
  for (const auto& t : candidate_tiles(f8, 128, true, {227 * 1024, "sm_90a"})) f8_persistent += t.wgmma && t.persistent;
  CHECK(f8_persistent >= 3);
  // Candidates: plain and persistent wgmma tiles at 64 rows and more on sm_90a; 64-row tiles at
  // every batch size there.
  int plain = 0, persistent = 0;
  for (const auto& t : candidate_tiles(q, 128, true, {227 * 1024, "sm_90a"})) (t.persistent ? persistent : plain) += t.wgmma;
  CHECK(plain >= 6);
  CHECK(persistent >= 6);
  for (const auto& t : candidate_tiles(q, 128, true, {227 * 1024, "sm_80"})) CHECK_FALSE(t.wgmma);
  for (const auto& t : candidate_tiles(det, 128, false, {227 * 1024, "sm_90a"})) CHECK_FALSE(t.wgmma);
  const auto bms = candidate_block_ms(q, 1, "sm_90a");
  CHECK(std::find(bms.begin(), bms.end(), 64) != bms.end());
  CHECK(candidate_block_ms(q, 1) == std::vector<int>{8, 16});

  // JSON: block_n, stages, persistent (and split_k) come back equal.
  MoeTileConfig c = mid;
  c.gemm2.split_k = 2;
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm1"]["persistent"] == true);
  // block_m: powers of two, or the swap-AB kernel's 24.
  MoeTileConfig three;
  three.block_m = 24;
  three.gemm1 = three.gemm2 = swap_ab_tile(4, 2, 2);
  CHECK(tile_config_from_json(tile_config_to_json(three)) == three);
  auto forty = tile_config_to_json(three);
  forty["block_m"] = 40;
  CHECK_THROWS_WITH_AS(tile_config_from_json(forty), doctest::Contains("power of two"), Error);
  CHECK_FALSE(tile_config_to_json(c)["gemm1"].contains("warps_m"));

  // Refused before anything compiles: other archs, quantized weights, the deterministic mode,
  // block_m other than 64 / 128, more than 256 weight rows, GEMM1 split, persistent non-wgmma tiles.
  CHECK_NOTHROW(moe_expert_kernel_specs(q, prefill, "sm_90a", true));
  auto refused = [](const MoeSpec& spec, const MoeTileConfig& config, const char* arch, const char* what) {
    CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(spec, config, arch), doctest::Contains(what), Error);
  };
  refused(q, prefill, "sm_90", "needs sm_90a");
  refused(q, prefill, "sm_100a", "needs sm_90a");
  CHECK_NOTHROW(moe_expert_kernel_specs(int8, heuristic_tile_config(int8, 8192, true, "sm_90a"), "sm_90a", true));
  MoeTileConfig dq192 = heuristic_tile_config(int8, 8192, true, "sm_90a");  // 192 weight rows: not two halves of 128
  dq192.gemm1.block_n = 96;
  refused(int8, dq192, "sm_90a", "takes 64, 128 or 256 weight rows per tile");
  for (MoeQuant fp8 : {kQuantFp8Channel, kQuantFp8Tensor}) {  // each k tile's sums apart: a second accumulator set
    MoeSpec f = q;
    f.quant = fp8;
    // 256 weight rows: the persistent variant's 128-row tiles only (they keep 128 rows' sums at a time).
    CHECK_NOTHROW(moe_expert_kernel_specs(f, prefill, "sm_90a", true));
    refused(f, plain_prefill, "sm_90a", "takes at most 128 weight rows per tile");
    MoeTileConfig short_rows = prefill;
    short_rows.block_m = 64;
    refused(f, short_rows, "sm_90a", "takes at most 128 weight rows per tile");
    MoeTileConfig part_chunk = prefill;  // 192 weight rows: past 128, whole chunks of 128 only
    part_chunk.gemm1.block_n = 96;
    refused(f, part_chunk, "sm_90a", "takes at most 128 weight rows per tile");
  }
  MoeSpec fp8_block = q;
  fp8_block.quant = kQuantFp8Block;
  MoeTileConfig straddling = prefill;  // a 128-row scale block across two of a tile's 192 columns
  straddling.gemm2.block_n = 192;
  refused(fp8_block, straddling, "sm_90a", "block_n dividing 128 or a multiple of it");
  refused(int8, plain_prefill, "sm_90a", "dequantized by the persistent variant's producer warpgroup");
  refused(det, prefill, "sm_90a", "fast reduce mode");
  MoeTileConfig odd = prefill;
  odd.block_m = 32;
  refused(q, odd, "sm_90a", "out of range [64, 128]");
  odd = prefill;
  odd.gemm1.block_n = 256;  // gated: 512 weight rows
  refused(q, odd, "sm_90a", "must be 64, 128, 192 or 256");
  odd = prefill;
  odd.gemm1.split_k = 2;
  refused(q, odd, "sm_90a", "does not split k");
  odd = heuristic_tile_config(q, 8192);
  odd.gemm2.persistent = true;
  refused(q, odd, "sm_90a", "only wgmma tiles have a persistent variant");
  odd = plain_prefill;
  odd.gemm2.stages = 8;  // 8 x 48 KiB
  refused(q, odd, "sm_90a", "shared memory");
  // The persistent variant's work queue outlasts its ring by two items: 6 stages at most (7 and 8
  // failed in NVRTC, on a static assertion, with a DB that asked for them).
  odd = prefill;
  odd.gemm2.staged = false;
  odd.gemm2.block_n = 64;
  odd.gemm2.stages = 6;
  CHECK_NOTHROW(moe_expert_kernel_specs(q, odd, "sm_90a", false));
  for (int stages : {7, 8}) {
    odd.gemm2.stages = stages;
    refused(q, odd, "sm_90a", "keeps at most 6 stages");
  }
}

TEST_CASE("autotune: staged persistent epilogues: candidates, shared memory, round trip, the rows-only rule, refusals") {
  const MoeSpec q = qwen3_30b_a3b_layer();
  const DeviceLimits h = {227 * 1024, "sm_90a"};
  // 128 x 256 GEMM2 tiles beside 3 ring slots: a DTYPE tile (128 x 264 x 2 bytes) fits, an fp32 one not.
  MoeTileConfig c = heuristic_tile_config(q, 8192, true, "sm_90a");
  c.block_m = 128;
  c.gemm2 = wgmma_tile(256, 3, 0, true, true);
  CHECK(c.describe().find("gemm2[wgmma bn256 s3 ws st]") != std::string::npos);
  CHECK(moe_gemm2_stores_rows16(q, c, 1));  // Auto: rows at every batch size
  const auto rows16 = moe_expert_kernel_specs(q, c, "sm_90a", true);
  CHECK(rows16[1].get_int("staged_epilogue") == 1);
  CHECK(rows16[1].get_int("smem_bytes") == moe_wgmma_ring_bytes(128, 256, 3, false) + 128 * 264 * 2);
  CHECK(config_fits(q, c, h));
  MoeTileConfig atomic = c;
  atomic.topk_sum = TopkSum::Atomic;
  CHECK_FALSE(moe_gemm2_stores_rows16(q, atomic, 8192));
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, atomic, "sm_90a", false), doctest::Contains("does not fit beside 3"),
                       Error);
  CHECK_FALSE(config_fits(q, atomic, h));
  // The unstaged tile keeps the batch-size rule and its smaller shared memory.
  MoeTileConfig direct = c;
  direct.gemm2.staged = false;
  CHECK_FALSE(moe_gemm2_stores_rows16(q, direct, 1));
  CHECK(moe_expert_kernel_specs(q, direct, "sm_90a")[1].get_int("smem_bytes") == moe_wgmma_ring_bytes(128, 256, 3, false));
  // An fp32 staged tile where it fits (128 x 128 beside 3 slots).
  MoeTileConfig small = c;
  small.gemm2 = wgmma_tile(128, 3, 0, true, true);
  CHECK_FALSE(moe_gemm2_stores_rows16(q, small, 1));
  CHECK(moe_expert_kernel_specs(q, small, "sm_90a")[1].get_int("smem_bytes") ==
        moe_wgmma_ring_bytes(128, 128, 3, false) + 128 * 136 * 4);
  // Candidates: staged ones among the persistent tiles, each fitting.
  int staged = 0;
  for (bool gemm1 : {true, false})
    for (const auto& t : candidate_tiles(q, 128, gemm1, h)) {
      CHECK((!t.staged || t.persistent));
      staged += t.staged;
    }
  CHECK(staged >= 6);
  // JSON: "staged" only where set; old entries read back unstaged.
  CHECK(tile_config_from_json(tile_config_to_json(c)) == c);
  CHECK(tile_config_to_json(c)["gemm2"]["staged"] == true);
  CHECK_FALSE(tile_config_to_json(direct)["gemm2"].contains("staged"));
  // Refused: staged plain tiles, staged tiles beside a full ring.
  MoeTileConfig odd = c;
  odd.gemm2.persistent = false;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a", true), doctest::Contains("only persistent wgmma tiles"),
                       Error);
  odd = c;
  odd.gemm2.stages = 4;  // 4 x 48 KiB + 66 KiB
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(q, odd, "sm_90a", true), doctest::Contains("does not fit beside 4"),
                       Error);
}
