// GemmTile::work_queue, the tuned per-GEMM choice between the persistent wgmma kernels' two walks
// (items claimed from a counter, or a fixed stride): which one a GEMM takes, the DB round trip, the
// description, and the tiles that refuse it. No GPU needed.
#include <doctest/doctest.h>

#include <vector>

#include "autotune/tuned_db.h"
#include "common/error.h"
#include "runtime/moe_layer.h"
#include "templates/moe/moe_tile_walk.cuh"
#include "support/moe_cases.h"

using namespace moejit;
using namespace moejit::test;

namespace {
MoeSpec layer(MoeQuant quant) { return small_layer(128, 8, 2048, 768, kActSiluMul, kDTypeBF16, quant); }

MoeTileConfig persistent(int block_m) {
  MoeTileConfig c;
  c.block_m = block_m;
  c.gemm1 = wgmma_tile(64, 6, 0, true);
  c.gemm2 = wgmma_tile(128, 3, 0, true, true);
  return c;
}
}  // namespace

TEST_CASE("work queue: the option, then the tile's choice, then the rule; only where the kernel can claim") {
  const MoeSpec bf16 = layer(kQuantNone), fp8 = layer(kQuantFp8Block);
  const GemmTile t = persistent(128).gemm1;
  // The rule: quantized layers' 128-row tiles claim, 16-bit layers and 64-row tiles walk the stride ...
  CHECK(claims_work_items(fp8, 128, false, t, false, 1, -1));
  CHECK_FALSE(claims_work_items(fp8, 64, false, t, false, 1, -1));
  CHECK_FALSE(claims_work_items(bf16, 128, false, t, false, 1, -1));
  // ... and so do 16-bit GEMM2s of a short k loop (intermediate <= 512), on 128-row tiles only.
  const MoeSpec narrow = small_layer(256, 8, 7168, 256, kActSiluMul, kDTypeBF16);
  CHECK(claims_work_items(narrow, 128, true, t, false, 1, -1));
  CHECK_FALSE(claims_work_items(narrow, 128, false, t, false, 1, -1));
  CHECK_FALSE(claims_work_items(narrow, 64, true, t, false, 1, -1));
  CHECK_FALSE(claims_work_items(bf16, 128, true, t, false, 1, -1));  // N = 768
  CHECK(claims_work_items(fp8, 128, true, t, false, 1, -1));
  // The tile's choice overrides the rule both ways.
  GemmTile on = t, off = t;
  on.work_queue = 1;
  off.work_queue = 0;
  CHECK(claims_work_items(bf16, 128, false, on, false, 1, -1));
  CHECK(claims_work_items(bf16, 64, false, on, false, 1, -1));
  CHECK_FALSE(claims_work_items(fp8, 128, false, off, false, 1, -1));
  // MOEJIT_WORK_QUEUE (Options::work_queue) overrides the tile.
  CHECK_FALSE(claims_work_items(bf16, 128, false, on, false, 1, 0));
  CHECK(claims_work_items(fp8, 128, false, off, false, 1, 1));
  // Never where the kernel cannot claim: clusters, ping-pong groups, k splits, other kernels.
  CHECK_FALSE(claims_work_items(bf16, 128, false, on, true, 1, 1));
  CHECK_FALSE(claims_work_items(bf16, 128, false, on, false, 2, 1));
  GemmTile pp = on;
  pp.pingpong = true;
  CHECK_FALSE(claims_work_items(bf16, 64, false, pp, false, 1, 1));
  GemmTile plain = on;
  plain.persistent = false;
  CHECK_FALSE(claims_work_items(fp8, 128, false, plain, false, 1, 1));
  CHECK_FALSE(claims_work_items(fp8, 128, false, GemmTile{}, false, 1, 1));
}

TEST_CASE("work queue: tuned DB round trip, description, refusals before anything compiles") {
  const MoeSpec bf16 = layer(kQuantNone);
  MoeTileConfig c = persistent(128);
  CHECK(c.gemm1.work_queue == -1);  // a config without the choice takes the rule
  CHECK_FALSE(tile_config_to_json(c)["gemm1"].contains("work_queue"));
  CHECK(tile_config_from_json(tile_config_to_json(c)).gemm1.work_queue == -1);
  c.gemm1.work_queue = 1;
  c.gemm2.work_queue = 0;
  CHECK(c.describe() == "bm128 gemm1[wgmma bn64 s6 ws wq] gemm2[wgmma bn128 s3 ws st nowq]");
  const nlohmann::json j = tile_config_to_json(c);
  CHECK(j["gemm1"]["work_queue"] == true);
  CHECK(j["gemm2"]["work_queue"] == false);
  CHECK(tile_config_from_json(j) == c);
  // The same kernels as without the choice (a launch argument).
  const auto specs = moe_expert_kernel_specs(bf16, c, "sm_90a");
  CHECK(specs == moe_expert_kernel_specs(bf16, persistent(128), "sm_90a"));
  // Refused: tiles that walk no queue, and values other than -1 / 0 / 1.
  MoeTileConfig odd = c;
  odd.gemm1.persistent = false;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(bf16, odd, "sm_90a"), doctest::Contains("chooses its walk"), Error);
  odd = c;
  odd.gemm1.multicast = true;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(bf16, odd, "sm_90a"), doctest::Contains("chooses its walk"), Error);
  odd = c;
  odd.gemm2.work_queue = 2;
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(bf16, odd, "sm_90a"), doctest::Contains("must be -1"), Error);
  nlohmann::json shared = tile_config_to_json(heuristic_tile_config(bf16, 16, true, "sm_80"));
  shared["gemm2"]["work_queue"] = true;  // on a tile of another kernel: read, then refused when a layer takes it
  CHECK_THROWS_WITH_AS(moe_expert_kernel_specs(bf16, tile_config_from_json(shared), "sm_80"),
                       doctest::Contains("chooses its walk"), Error);
}

TEST_CASE("work queue: each item is taken once, the first two of every CTA by the fixed stride") {
  // A grid of `walkers` CTAs run as the kernel's producer does (moe_gemm_wgmma_persistent.cuh): two
  // takes at the start, then per item the take after next, ending at the first item past the end
  // (its look-ahead take is dropped). The CTAs step in a shuffled order, so the counter's claims
  // reach them in any order.
  for (int walkers : {1, 3, 132}) {
    for (int items : {0, 1, walkers - 1, walkers, 2 * walkers - 1, 2 * walkers, 2 * walkers + 1, 7 * walkers + 5}) {
      int counter = 0;
      struct Cta {
        int taken = 0, pending = 0, n = 0;
        std::vector<int> entries;
        bool done = false;
      };
      std::vector<Cta> ctas(static_cast<std::size_t>(walkers));
      auto take = [&](int cta) {
        Cta& c = ctas[static_cast<std::size_t>(cta)];
        const int n = c.taken++;
        if (n < kMoeQueueStrideItems) {
          CHECK(moe_queue_item(n, cta, walkers, 0) == cta + n * walkers);
          return moe_queue_item(n, cta, walkers, 0);
        }
        return moe_queue_item(n, cta, walkers, counter++);
      };
      for (int cta = 0; cta < walkers; ++cta) {
        Cta& c = ctas[static_cast<std::size_t>(cta)];
        c.entries.push_back(take(cta));
        c.pending = take(cta);
      }
      std::vector<int> times(static_cast<std::size_t>(items), 0);
      int left = walkers;
      unsigned rng = 12345u + static_cast<unsigned>(items * 31 + walkers);
      while (left > 0) {
        rng = rng * 1664525u + 1013904223u;
        const int cta = static_cast<int>((rng >> 8) % static_cast<unsigned>(walkers));
        Cta& c = ctas[static_cast<std::size_t>(cta)];
        if (c.done) continue;
        const int item = c.entries[static_cast<std::size_t>(c.n++)];
        if (item >= items) {
          c.done = true;
          --left;
          continue;
        }
        c.entries.push_back(c.pending);
        c.pending = take(cta);
        ++times[static_cast<std::size_t>(item)];
      }
      for (int i = 0; i < items; ++i)
        CHECK_MESSAGE(times[static_cast<std::size_t>(i)] == 1, "item ", i, " of ", items, " on ", walkers, " CTAs");
    }
  }
}
