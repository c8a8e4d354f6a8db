// A small end-to-end tune on the GPU: the tuner finds configs no slower than the heuristic, writes
// them into a DB, and a new Runtime's MoeLayer picks them up in prepare() and computes correctly.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>

#include "autotune/tuned_db.h"
#include "autotune/tuner.h"
#include "jit/moe_names.h"
#include "moe_gpu_util.h"
#include "support/test_support.h"

using namespace moejit;
using namespace moejit::test;

namespace {
// Forwards of `layer` (prepared for 512 tokens) at each M with its DB's tiles, against the fp64 reference.
void check_forwards(Runtime& rt, const MoeSpec& spec, MoeLayer& layer, std::initializer_list<int> token_counts, int seed) {
  auto problem = std::make_unique<MoeProblem>(rt.driver(), spec, 512, layer.workspace_bytes(512), seed);
  for (int m : token_counts) {
    problem->poison();
    layer.forward(nullptr, problem->args(m, true));
    problem->use_generated_topk();
    const double err = problem->relative_error(problem->output(m), MoeProblem::sample_tokens(m, 64));
    INFO(fmt::format("M={} tuned {} relative error {:.3e}", m, layer.tile_config(m).describe(), err));
    CHECK(within_band(err));
  }
}
}  // namespace

TEST_CASE("gpu tune: small end-to-end tune, DB written, layer uses it") {
  ScratchDir dir("gpu-tune");
  Options options = test_options(dir.path() / "cache");
  options.tuned_db = dir.path() / "tuned.json";
  Runtime rt(options);
  if (!gpu_or_skip(rt, "gpu tune")) return;
  MoeSpec spec;
  spec.num_experts = 16;
  spec.top_k = 2;
  spec.hidden = 256;
  spec.intermediate = 128;
  TuneOptions to;
  to.batches = {1, 64, 512};
  to.budget_s = 60;
  const auto start = std::chrono::steady_clock::now();
  MoeTuner tuner(rt, spec, to);
  const auto results = tuner.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(results.size() == 3);
  for (const auto& r : results) {
    INFO(fmt::format("M={} best {} {:.2f} us, heuristic {:.2f} us, {} timed, {} skipped", r.m, r.config.describe(),
                     r.us, r.heuristic_us, r.timed, r.skipped));
    CHECK(r.us > 0);
    CHECK(r.heuristic_us > 0);
    CHECK(r.us <= r.heuristic_us);  // the heuristic is a candidate: never slower than the fallback
    CHECK(r.timed >= 3);
    MESSAGE(fmt::format("M={}: {} {:.2f} us (heuristic {:.2f} us), floor {:.2f} us, {} candidates", r.m,
                        r.config.describe(), r.us, r.heuristic_us, r.floor_us, r.timed));
  }
  MESSAGE(fmt::format("tuned 3 batch sizes in {:.1f} s", seconds));
  tuner.to_db(results).merge_into(options.tuned_db);

  Runtime fresh(options);  // reads the DB like an engine would
  MoeLayer layer(fresh, spec);
  layer.prepare(512);
  CHECK(layer.tuned());
  CHECK(layer.tile_config(64) == results[1].config);
  CHECK(layer.tile_config(48) == results[1].config);  // nearest bucket
  check_forwards(fresh, spec, layer, {1, 64, 512}, 3);
}

TEST_CASE("gpu tune: MOEJIT_TUNE=1 tunes on first use, saves, and uses the result") {
  ScratchDir dir("gpu-online-tune");
  Options options = test_options(dir.path() / "cache");
  options.tuned_db = dir.path() / "online.json";
  options.tune_on_first_use = true;
  Runtime rt(options);
  if (!gpu_or_skip(rt, "gpu online tune")) return;
  MoeSpec spec;
  spec.num_experts = 8;
  spec.top_k = 2;
  spec.hidden = 128;
  spec.intermediate = 64;
  spec.activation = kActGeluMul;
  MoeLayer layer(rt, spec);
  CHECK_FALSE(layer.tuned());
  layer.prepare(64);  // tunes 1, 2, 4, ..., 64 (within the online budget) and writes the DB
  CHECK(layer.tuned());
  std::string warning;
  const TunedDb saved = TunedDb::load(options.tuned_db, &warning);
  CHECK(warning.empty());
  CHECK(saved.buckets(tuned_shape_key(spec)).size() == 7);
  auto problem = std::make_unique<MoeProblem>(rt.driver(), spec, 64, layer.workspace_bytes(64), 5);
  problem->poison();
  layer.forward(nullptr, problem->args(64, false));
  problem->fetch_routing(layer, 64);
  CHECK(within_band(problem->relative_error(problem->output(64), MoeProblem::sample_tokens(64, 64))));
}

// A DB entry whose GEMM2 tile runs only as DTYPE rows (a staged 128 x 256 tile: its fp32 staging
// does not fit beside the ring) is loaded, used at every batch size, and computes correctly.
TEST_CASE("gpu tune: a DB entry with a staged rows-only GEMM2 tile is used and right") {
  ScratchDir dir("gpu-staged-db");
  Options options = test_options(dir.path() / "cache");
  options.tuned_db = dir.path() / "staged.json";
  Runtime rt(options);
  if (!gpu_or_skip(rt, "gpu staged DB entry")) return;
  if (!arch_has_wgmma(rt.device_arch())) {
    MESSAGE("SKIPPED: the staged epilogue is the sm_90a wgmma kernel's, this device is " << rt.device_arch());
    return;
  }
  MoeSpec spec;
  spec.num_experts = 16;
  spec.top_k = 4;
  spec.hidden = 520;  // a column tail in the last 256-wide tile
  spec.intermediate = 384;
  spec.has_bias = true;
  MoeTileConfig staged;
  staged.block_m = 128;
  staged.gemm1 = wgmma_tile(128, 4, 0, true);
  staged.gemm2 = wgmma_tile(256, 3, 0, true, true);
  REQUIRE(moe_gemm2_stores_rows16(spec, staged, 1));
  TunedDb db(rt.db_metadata());
  db.set(tuned_shape_key(spec), {256, staged, 1.0});
  db.merge_into(options.tuned_db);

  Runtime fresh(options);
  MoeLayer layer(fresh, spec);
  layer.prepare(512);
  REQUIRE(layer.tuned());
  CHECK(layer.tile_config(256) == staged);
  check_forwards(fresh, spec, layer, {3, 256, 512}, 5);
}
