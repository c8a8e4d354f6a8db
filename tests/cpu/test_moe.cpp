// The MoE layer without a GPU: every kernel the GPU tests launch compiles (sm_90a, the devices'
// arch) without spills; spec and forward-argument validation; the tile heuristic; the fp64
// reference on hand-computed cases; 16-bit conversions. (Model configs: test_model_config.cpp.)
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "autotune/config_space.h"
#include "common/error.h"
#include "common/half_float.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_layer_parts.h"
#include "runtime/moe_reference.h"
#include "templates/moe/moe_decode_args.cuh"
#include "templates/moe/moe_tile_walk.cuh"
#include "support/moe_cases.h"
#include "support/test_support.h"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("moe: every kernel the GPU tests launch compiles for sm_90a, without spills") {
  ScratchDir dir("moe-compile");
  Runtime rt(test_options(dir.path() / "cache"));
  std::vector<KernelSpec> specs;
  std::set<std::string> seen;
  auto add = [&](const MoeCase& c) {
    const int max_m = *std::max_element(c.token_counts.begin(), c.token_counts.end());
    for (auto& s : moe_layer_kernel_specs(c.spec, max_m, "sm_90a"))
      if (seen.insert(s.to_json().dump()).second) specs.push_back(s);
  };
  for (const auto& c : moe_matrix_cases()) add(c);
  for (const auto& c : moe_model_cases()) add(c);
  for (const auto& c : moe_mode_cases()) add(c);
  for (const auto& c : moe_quant_cases()) add(c);
  for (const auto& c : moe_decode_gemv_cases()) add(c);
  for (const auto& c : moe_split_k_cases()) add(c);
  auto sweep = moe_tile_sweep_cases();
  for (auto& c : moe_quant_tile_sweep_cases(227 * 1024, "sm_90a")) sweep.push_back(std::move(c));
  for (const auto& c : moe_swap_ab_cases()) sweep.push_back({c.spec, c.config});
  for (const auto& c : moe_swap_ab_wgmma_cases()) sweep.push_back({c.spec, c.config});
  for (const auto& c : moe_wgmma_cases()) sweep.push_back({c.spec, c.config});
  for (const auto& c : moe_wgmma_dequant_cases()) sweep.push_back({c.spec, c.config});
  for (const auto& c : moe_rows16_cases())  // GEMM2 storing DTYPE rows, as the forward at M = 1024 compiles it
    for (auto& s : moe_expert_kernel_specs(c.spec, c.config, "sm_90a", true))
      if (seen.insert(s.to_json().dump()).second) specs.push_back(s);
  for (const auto& c : moe_wgmma_dequant_cases())  // GEMM2 in the role their largest batch takes
    for (auto& s : moe_expert_kernel_specs(c.spec, c.config, "sm_90a",
                                           moe_gemm2_stores_rows16(c.spec, c.config, c.token_counts.back())))
      if (seen.insert(s.to_json().dump()).second) specs.push_back(s);
  for (const auto& c : sweep)  // GEMM2 in a one-token forward's role (staged rows-only tiles: DTYPE rows)
    for (auto& s : moe_expert_kernel_specs(c.spec, c.config, "sm_90a", moe_gemm2_stores_rows16(c.spec, c.config, 1)))
      if (seen.insert(s.to_json().dump()).second) specs.push_back(s);
  MESSAGE(fmt::format("{} distinct kernel specs", specs.size()));
  const auto compiled = rt.compile_all(specs);
  REQUIRE(compiled.size() == specs.size());
  for (const auto& k : compiled)
    for (const auto& e : k->entries) {
      INFO(k->spec.to_string() << " entry " << e.name);
      CHECK(e.resources.spill_store_bytes == 0);
      CHECK(e.resources.spill_load_bytes == 0);
    }
}

// The swap-AB kernel's 8-token tiles are compiled for 768 threads an SM (moe_swap_ab_min_ctas),
// which caps their registers at 85; the sweeps above hold no 8-token tiles. Every one of the
// tuner's space compiles without spills but two kinds, held to the spills they had when this test
// came (twenty-third session): int4's 3- and 4-stage tiles spill a little under the cap and were
// measured faster with it than without (4-16 bytes at s3, 72 at s4; moe_gemm_args.cuh), and
// MXFP4 into f16 (through fp32) at 512 threads a CTA, 128 registers, spills 4-8 bytes.
TEST_CASE("moe: the tuner's 8-token swap-AB tiles compile for sm_90a without spills (int4 s3 / s4: bounded)") {
  ScratchDir dir("moe-swap-ab-8");
  Runtime rt(test_options(dir.path() / "cache"));
  const DeviceLimits limits{227 * 1024, "sm_90a"};
  std::vector<KernelSpec> specs;
  std::set<std::string> seen;
  for (MoeQuant q : {kQuantNone, kQuantInt8Channel, kQuantInt4Group, kQuantMxfp4, kQuantMxfp4Packed, kQuantFp8Block,
                     kQuantFp8Channel, kQuantFp8Tensor})
    for (MoeDType dtype : {kDTypeBF16, kDTypeF16}) {
      MoeSpec s = small_layer(16, 4, 512, 256, quant_is_mxfp4(q) ? kActSwigluOai : kActSiluMul, dtype, q);
      if (q == kQuantInt4Group) {
        s.quant_group = 64;
        s.quant_zero_points = true;
      }
      for (bool gemm1 : {true, false})
        for (const GemmTile& t : candidate_tiles(s, 8, gemm1, limits)) {
          if (!t.swap_ab) continue;
          MoeTileConfig c;
          c.block_m = 8;
          c.gemm1 = c.gemm2 = t;
          for (auto& k : moe_expert_kernel_specs(s, c, "sm_90a"))
            if (k.family == "moe_gemm_swap_ab" && seen.insert(k.to_json().dump()).second) specs.push_back(k);
        }
    }
  MESSAGE(fmt::format("{} distinct 8-token swap-AB kernels", specs.size()));
  REQUIRE(specs.size() >= 50);
  const auto compiled = rt.compile_all(specs);
  REQUIRE(compiled.size() == specs.size());
  for (const auto& k : compiled) {
    const std::string& quant = k->spec.get_string("quant");
    const int accepted = quant == "int4_group" && k->spec.get_int("stages") >= 3 ? 72
                         : quant.starts_with("mxfp4") && k->spec.get_string("dtype") == "f16" &&
                                   k->spec.get_int("threads") >= 512
                             ? 8
                             : 0;
    for (const auto& e : k->entries) {
      INFO(k->spec.to_string() << " entry " << e.name);
      CHECK(e.resources.spill_store_bytes <= accepted);
      CHECK(e.resources.spill_load_bytes <= accepted);
    }
  }
}

// The persistent grid takes as many CTAs an SM as registers allow (resident_ctas_per_sm). 64-row
// GEMM2 tiles of narrow layers (DeepSeek-V3 TP8 decode and small prefill: K = 256, 4 k tiles a tile)
// run three: a register more (81: the bias staging of 02c11fb, rounded to 88) left two and cost
// M = 64 .. 256 6-10% on an H200. Every GEMM2 role of a bm64 bn64 persistent tile must keep three.
TEST_CASE("moe: 64-row persistent GEMM2 tiles keep three CTAs an SM") {
  ScratchDir dir("moe-gemm2-occupancy");
  Runtime rt(test_options(dir.path() / "cache"));
  const MoeSpec spec = small_layer(256, 8, 7168, 256);  // DeepSeek-V3 TP8's shape
  MoeTileConfig config;
  config.block_m = 64;
  config.gemm1 = wgmma_tile(64, 4, 0, true);
  config.gemm2 = wgmma_tile(64, 3, 0, true);
  std::vector<KernelSpec> specs;  // (a bias is a launch argument: the same kernels serve biased layers)
  for (bool rows16 : {false, true})
    for (auto& s : moe_expert_kernel_specs(spec, config, "sm_90a", rows16))
      if (s.family == "moe_gemm_wgmma" && s.get_string("role") != "gemm1") specs.push_back(s);
  REQUIRE(specs.size() == 2);  // the atomic top-k sum and DTYPE rows
  constexpr int kHopperSharedPerSm = 228 * 1024;
  for (const auto& k : rt.compile_all(specs)) {
    const auto threads = static_cast<unsigned>(k->spec.get_int("threads"));
    const auto smem = static_cast<unsigned>(k->spec.get_int("smem_bytes"));
    for (const auto& e : k->entries) {
      INFO(k->spec.to_string() << ": " << e.resources.registers << " registers, " << threads << " threads, " << smem
                               << " bytes of shared memory");
      // The runtime's own count (the persistent grid is sized by it).
      CHECK(resident_ctas_per_sm(e.resources.registers, e.resources.static_shared_bytes, threads, smem,
                                 kHopperSharedPerSm) >= 3);
    }
  }
}

// The decode GEMV's launches (plan_decode_gemv_launch) on an H100's numbers: fp8_block DeepSeek-V3 TP8
// gemv1 (80 registers, 3344 static bytes: the kernels' report) keeps every token's x rows, the code
// before SPAN, while they leave three CTAs an SM (M <= 5), and takes SPAN (two token rows a CTA) from
// M = 6, where every token's rows leave two, and at M = 7 / 8, where they pass 96 KiB.
TEST_CASE("moe: the decode GEMV takes its SPAN kernels only where they fit more CTAs an SM") {
  constexpr int kHopperSharedPerSm = 228 * 1024;
  const MoeSpec spec = small_layer(256, 8, 7168, 256, kActSiluMul, kDTypeBF16, kQuantFp8Block);
  auto smem_of = [&](int tokens) { return moe_decode_gemv1_smem(spec.quant, tokens, spec.hidden); };
  const KernelResources gemv1{80, 3344};  // registers, static shared memory
  for (int m = 1; m <= kMoeDecodeMaxTokens; ++m) {
    const long long items = moe_decode_gemv1_items(m, spec.top_k, spec.intermediate);
    const DecodeGemvLaunch l = plan_decode_gemv_launch(m, items, 8 * 256, smem_of(1), 132, kHopperSharedPerSm, gemv1, &gemv1);
    INFO("M = " << m << ": span " << l.span << ", grid " << l.grid << ", " << l.smem << " bytes, " << l.ctas
                << " CTAs an SM");
    CHECK(l.span == (m >= 6));
    CHECK(l.ctas == 3);
    CHECK(l.grid == 396);
    CHECK(l.tokens == (m >= 6 ? 2 : m));
    CHECK(l.smem == smem_of(l.tokens));
    // The forward passes one token's bytes: the rows' shared memory must be linear in tokens.
    CHECK(smem_of(m) == m * smem_of(1));
    CHECK(moe_decode_gemv2_smem(spec.quant, m, spec.top_k, spec.intermediate) ==
          m * moe_decode_gemv2_smem(spec.quant, 1, spec.top_k, spec.intermediate));
    // Without the SPAN entry (a module that has none): every token's rows, two CTAs at M = 6, none
    // from 7 (decode_gemv_max_tokens never asks that of such a layer).
    const DecodeGemvLaunch whole = plan_decode_gemv_launch(m, items, 8 * 256, smem_of(1), 132, kHopperSharedPerSm, gemv1, nullptr);
    CHECK_FALSE(whole.span);
    CHECK(whole.ctas == (m <= 5 ? 3 : m == 6 ? 2 : 0));
  }
  // 16-bit weights: no shared memory, every CTA count the registers allow, never SPAN.
  const DecodeGemvLaunch b16 = plan_decode_gemv_launch(8, 8 * 2048, 2048, 0, 132, kHopperSharedPerSm, gemv1, nullptr);
  CHECK_FALSE(b16.span);
  CHECK(b16.grid == 396);
  // A GPU of 4 SMs: a SPAN grid of kMoeDecodeMinGrid CTAs (more than the 12 it holds at once), so
  // that a CTA spans no more tokens than decode_gemv_max_tokens assumed (K = 16384: 32.5 KiB a token).
  const MoeSpec wide = small_layer(16, 8, 16384, 256, kActSiluMul, kDTypeBF16, kQuantFp8Block);
  REQUIRE(decode_gemv_max_tokens(wide) == kMoeDecodeMaxTokens);
  const DecodeGemvLaunch small_gpu = plan_decode_gemv_launch(
      8, 8 * 2048, 2048, moe_decode_gemv1_smem(wide.quant, 1, wide.hidden), 4, kHopperSharedPerSm, gemv1, &gemv1);
  CHECK(small_gpu.span);
  CHECK(small_gpu.grid == kMoeDecodeMinGrid);
  CHECK(small_gpu.tokens == 2);
  CHECK(small_gpu.smem <= kMoeDecodeMaxSmemBytes);
}

// The swap-AB decode pair's per-tile handover (swap_ab_tile_handover): by default where GEMM1 runs
// more than one wave and at most kTileHandoverMaxWaves; MOEJIT_TILE_HANDOVER (Options::tile_handover)
// decides where set; never for fp8 (its intermediate is quantized between the GEMMs).
TEST_CASE("moe: the swap-AB pair hands rows over per tile between one and 16 waves of GEMM1, not for fp8") {
  constexpr long long wave = 396;  // 132 SMs x 3 CTAs
  CHECK_FALSE(swap_ab_tile_handover(-1, kQuantMxfp4Packed, 360, wave));  // one wave: the CTAs end together
  CHECK_FALSE(swap_ab_tile_handover(-1, kQuantMxfp4Packed, wave, wave));
  CHECK(swap_ab_tile_handover(-1, kQuantMxfp4Packed, wave + 1, wave));
  CHECK(swap_ab_tile_handover(-1, kQuantInt8Channel, 5760, wave));
  CHECK(swap_ab_tile_handover(-1, kQuantInt4Group, kTileHandoverMaxWaves * wave, wave));
  CHECK_FALSE(swap_ab_tile_handover(-1, kQuantMxfp4Packed, kTileHandoverMaxWaves * wave + 1, wave));
  CHECK_FALSE(swap_ab_tile_handover(-1, kQuantFp8Block, 2000, wave));
  CHECK_FALSE(swap_ab_tile_handover(-1, kQuantFp8Channel, 2000, wave));
  CHECK(swap_ab_tile_handover(1, kQuantMxfp4, 100, wave));  // the option, both ways, but for fp8
  CHECK_FALSE(swap_ab_tile_handover(0, kQuantInt8Channel, 2000, wave));
  CHECK_FALSE(swap_ab_tile_handover(1, kQuantFp8Block, 2000, wave));
}

TEST_CASE("moe: spec validation explains every unsupported field") {
  MoeSpec s;
  s.num_experts = 8;
  s.top_k = 9;
  s.hidden = 100;
  s.intermediate = 64;
  const auto why = s.unsupported();
  CHECK(why.size() == 2);
  try {
    s.validate();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.phase() == Phase::Validate);
    CHECK(std::string(e.what()).find("top_k = 9 exceeds num_experts = 8") != std::string::npos);
    CHECK(std::string(e.what()).find("hidden = 100 must be a positive multiple of 8") != std::string::npos);
  }
  s.top_k = 2;
  s.hidden = 128;
  CHECK(s.unsupported().empty());
  s.n_group = 3;  // 8 experts into 3 groups
  Runtime rt(test_options(""));
  CHECK_THROWS_AS(MoeLayer(rt, s), Error);
}

namespace {
// Well-formed arguments with fake (aligned, non-null) device addresses: check() never touches them.
MoeForwardArgs fake_args(const MoeLayer& layer, int m) {
  const MoeSpec& s = layer.spec();
  const std::int64_t K = s.hidden, N = s.intermediate, R = s.w1_rows(), E = s.num_experts, EL = s.local_experts();
  MoeForwardArgs a;
  CUdeviceptr next = 0x10000000;
  auto addr = [&]() { return next += 0x1000000; };
  a.hidden = TensorView::contiguous(addr(), ScalarType::BF16, {m, K});
  a.router_logits = TensorView::contiguous(addr(), ScalarType::BF16, {m, E});
  a.w1 = TensorView::contiguous(addr(), ScalarType::BF16, {EL, R, K});
  a.w2 = TensorView::contiguous(addr(), ScalarType::BF16, {EL, K, N});
  a.out = TensorView::contiguous(addr(), ScalarType::BF16, {m, K});
  a.workspace = addr();
  a.workspace_size = layer.workspace_bytes(m);
  return a;
}

std::string check_error(const MoeLayer& layer, const MoeForwardArgs& a) { return layer_check_error(layer, a); }
}  // namespace

TEST_CASE("moe: forward arguments are checked before any launch (no GPU needed)") {
  Runtime rt(test_options(""));
  MoeSpec s;
  s.num_experts = 16;
  s.top_k = 4;
  s.hidden = 256;
  s.intermediate = 192;
  MoeLayer layer(rt, s);
  const int m = 33;
  CHECK(check_error(layer, fake_args(layer, m)) == "");
  auto expect = [&](const char* what, auto&& mutate, const char* message) {
    MoeForwardArgs a = fake_args(layer, m);
    mutate(a);
    const std::string err = check_error(layer, a);
    INFO(what << ": " << err);
    CHECK(err.find(message) != std::string::npos);
  };
  expect("dtype", [](MoeForwardArgs& a) { a.hidden.dtype = ScalarType::F16; }, "hidden f16[33, 256]");
  expect("dtype", [](MoeForwardArgs& a) { a.hidden.dtype = ScalarType::F16; }, "dtype must be bf16");
  expect("shape", [](MoeForwardArgs& a) { a.w1.shape[1] = 192; }, "w1 bf16[16, 192, 256]");
  expect("out rows", [](MoeForwardArgs& a) { a.out.shape[0] = 32; }, "out bf16[32, 256]");
  expect("stride", [](MoeForwardArgs& a) { a.hidden.strides[0] = 200; }, "overlaps");
  expect("inner stride", [](MoeForwardArgs& a) { a.w2.strides[2] = 2; }, "contiguous");
  expect("row alignment", [](MoeForwardArgs& a) { a.hidden.strides[0] = 260; }, "multiple of 16 bytes");
  expect("pointer alignment", [](MoeForwardArgs& a) { a.w2.data += 2; }, "16-byte aligned");
  expect("null", [](MoeForwardArgs& a) { a.w1.data = 0; }, "null pointer");
  expect("missing", [](MoeForwardArgs& a) { a.out = TensorView{}; }, "out is required");
  expect("both routings", [](MoeForwardArgs& a) {
    a.topk_ids = TensorView::contiguous(0x1000, ScalarType::I32, {33, 4});
    a.topk_weights = TensorView::contiguous(0x2000, ScalarType::F32, {33, 4});
  }, "not both");
  expect("neither routing", [](MoeForwardArgs& a) { a.router_logits = TensorView{}; }, "not neither");
  expect("workspace", [](MoeForwardArgs& a) { a.workspace_size -= 1; }, "workspace of");
  expect("workspace alignment", [](MoeForwardArgs& a) { a.workspace += 128; }, "256-byte aligned");
  expect("bias without has_bias", [](MoeForwardArgs& a) {
    a.b1 = TensorView::contiguous(0x1000, ScalarType::F32, {16, 384});
  }, "has_bias = false");
  expect("logits dtype", [](MoeForwardArgs& a) { a.router_logits.dtype = ScalarType::F32; }, "router_logits");
  // M = 0: a valid no-op (no workspace needed).
  MoeForwardArgs zero = fake_args(layer, 0);
  zero.workspace = 0;
  CHECK(check_error(layer, zero) == "");
  // Expert parallelism requires the map.
  MoeSpec ep = s;
  ep.num_local_experts = 8;
  MoeLayer ep_layer(rt, ep);
  CHECK(check_error(ep_layer, fake_args(ep_layer, m)).find("expert_map is required") != std::string::npos);
}

TEST_CASE("moe: the workspace never shrinks as M grows (split-K buffers included)") {
  Runtime rt(test_options(""));
  for (const auto& c : moe_model_cases())
    for (ReduceMode mode : {ReduceMode::Fast, ReduceMode::Deterministic}) {
      MoeSpec s = c.spec;
      s.reduce = mode;
      MoeLayer layer(rt, s);
      std::size_t previous = 0;
      for (int m = 0; m <= 4096; m = m < 64 ? m + 1 : m * 5 / 4) {
        const std::size_t bytes = layer.workspace_bytes(m);
        INFO(fmt::format("{} M={}: {} bytes after {}", s.describe(), m, bytes, previous));
        CHECK(bytes >= previous);
        previous = bytes;
      }
    }
}

TEST_CASE("moe: the batch sizes prepare() samples: every count to 2^16, then 1/4096 steps, ending at the max") {
  const auto small = config_batch_sizes(3000);
  REQUIRE(small.size() == 3000);
  for (int i = 0; i < 3000; ++i) CHECK(small[i] == i + 1);
  CHECK(config_batch_sizes(0) == std::vector<int>{1});
  const int big = (1 << 16) + 100000;
  const auto wide = config_batch_sizes(big);
  CHECK(wide.back() == big);
  for (std::size_t i = 1; i < wide.size(); ++i) {
    CHECK(wide[i] > wide[i - 1]);
    if (wide[i - 1] >= (1 << 16)) CHECK(wide[i] - wide[i - 1] <= wide[i - 1] / 4096 + 1);
  }
  CHECK(wide[(1 << 16) - 1] == 1 << 16);
}

TEST_CASE("moe: tile heuristic stays in bounds and prepare() covers every config it returns") {
  for (int e : {8, 60, 128, 256})
    for (int k : {1, 2, 6, 8}) {
      if (k > e) continue;
      MoeSpec s;
      s.num_experts = e;
      s.top_k = k;
      s.hidden = 1024;
      s.intermediate = 512;
      const int max_m = 3000;
      const auto all = heuristic_tile_configs(s, max_m);
      for (int m = 1; m <= max_m; ++m) {
        const MoeTileConfig c = heuristic_tile_config(s, m);
        CHECK(c.block_m >= kMoeMinBlockM);
        CHECK(c.block_m <= kMoeMaxBlockM);
        if (std::find(all.begin(), all.end(), c) == all.end()) FAIL("E=" << e << " k=" << k << " M=" << m << " not covered");
      }
      // Every config the heuristic returns is a valid kernel spec (completes without error).
      for (const auto& c : all) CHECK_NOTHROW(moe_expert_kernel_specs(s, c, "sm_90a"));
    }
}

TEST_CASE("moe: on sm_90a, prepare()'s heuristic configs cover every batch size in every weight format") {
  // The heuristic's decode tiles (swap-AB warps along k, the GEMV) change with M inside a bucket:
  // an untuned layer's prepare() must compile each, or a forward compiles under an engine's graph capture.
  struct Shape {
    int e, k, hidden, inter;
    MoeActivation act;
  };
  for (const Shape& sh : {Shape{128, 4, 2880, 2880, kActSwigluOai}, Shape{128, 8, 2048, 768, kActSiluMul},
                          Shape{256, 8, 7168, 256, kActSiluMul}, Shape{8, 2, 4096, 14336, kActSiluMul},
                          Shape{48, 6, 2880, 640, kActSiluMul}})
    for (MoeQuant q : {kQuantNone, kQuantMxfp4, kQuantInt4Group, kQuantInt8Channel, kQuantFp8Block, kQuantFp8Channel}) {
      MoeSpec s;
      s.num_experts = sh.e;
      s.top_k = sh.k;
      s.hidden = sh.hidden;
      s.intermediate = sh.inter;
      s.activation = sh.act;
      s.has_bias = sh.act == kActSwigluOai;
      s.quant = q;
      if (q == kQuantFp8Block && sh.act == kActSwigluOai) continue;  // interleaved gate / up across 128-row blocks
      const int max_m = 8192;
      const auto all = heuristic_tile_configs(s, max_m, "sm_90a");
      int missed = 0;
      for (int m = 1; m <= max_m; ++m) {
        const MoeTileConfig c = heuristic_tile_config(s, m, true, "sm_90a");
        if (std::find(all.begin(), all.end(), c) == all.end() && missed++ < 3)
          FAIL_CHECK(fmt::format("{} M={}: {} is not among prepare()'s configs", s.describe(), m, c.describe()));
      }
      CHECK(missed == 0);
    }
}

TEST_CASE("moe: fp64 reference on hand-computed cases") {
  CHECK(reference_activation_gated(kActSwigluOai, 10.0, 10.0, 1.702, 7.0) ==
        doctest::Approx(7.0 / (1.0 + std::exp(-1.702 * 7.0)) * 8.0));
  CHECK(reference_activation_gated(kActSwigluOai, -1.0, -9.0, 1.702, 7.0) ==
        doctest::Approx(-1.0 / (1.0 + std::exp(1.702)) * (-6.0)));
  CHECK(reference_activation_gated(kActSwigluStep, 20.0, -9.0, 1.702, 7.0) == doctest::Approx(7.0 * -7.0));
  CHECK(reference_activation_gated(kActSiluMul, 1.0, 3.0, 0, 0) == doctest::Approx(3.0 / (1.0 + std::exp(-1.0))));
  CHECK(reference_activation_single(kActRelu2, -2.0) == 0.0);
  CHECK(reference_activation_single(kActRelu2, 3.0) == 9.0);
  CHECK(reference_activation_single(kActGelu, 1.0) == doctest::Approx(0.8413447460685429));
  CHECK(reference_activation_single(kActGeluTanh, 1.0) == doctest::Approx(0.8411919906082768));

  // Identity weights, relu2, two experts, top-2 with weights 0.5 and 0.25, expert 1 remote.
  MoeSpec s;
  s.num_experts = 2;
  s.top_k = 2;
  s.hidden = 8;
  s.intermediate = 8;
  s.activation = kActRelu2;
  MoeHostTensors t;
  t.hidden = {1, -2, 3, 0.5, 0, 2, -1, 1};
  t.w1.assign(2 * 8 * 8, 0.f);
  t.w2.assign(2 * 8 * 8, 0.f);
  for (int e = 0; e < 2; ++e)
    for (int i = 0; i < 8; ++i) t.w1[(e * 8 + i) * 8 + i] = t.w2[(e * 8 + i) * 8 + i] = float(e + 1);
  t.topk_ids = {1, 0};
  t.topk_weights = {0.25f, 0.5f};
  const auto out = reference_moe(s, t, {0});
  for (int i = 0; i < 8; ++i) {
    const double r = std::max(0.0, double(t.hidden[i]));
    CHECK(out[i] == doctest::Approx(0.5 * r * r + 0.25 * 2.0 * (2.0 * r) * (2.0 * r)));
  }
  s.num_local_experts = 1;  // expert 0 remote, expert 1 local as 0
  t.expert_map = {-1, 0};
  const auto ep = reference_moe(s, t, {0});
  for (int i = 0; i < 8; ++i) {
    const double r = std::max(0.0, double(t.hidden[i]));
    CHECK(ep[i] == doctest::Approx(0.25 * r * r));
  }
  // Repeated weight sets (MoeProblem's large layers): with one pattern both experts have expert 0's
  // identity weights.
  s.num_local_experts = 0;
  t.expert_map.clear();
  t.expert_patterns = 1;
  t.w1.resize(8 * 8);
  t.w2.resize(8 * 8);
  const auto rep = reference_moe(s, t, {0});
  for (int i = 0; i < 8; ++i) {
    const double r = std::max(0.0, double(t.hidden[i]));
    CHECK(rep[i] == doctest::Approx(0.75 * r * r));
  }
}

TEST_CASE("half floats: round to nearest even, exact round trips") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bf16_bits(1.00390625f) == 0x3f80);  // halfway: ties to even (down)
  CHECK(float_to_bf16_bits(1.01171875f) == 0x3f82);  // halfway: ties to even (up)
  CHECK(float_to_f16_bits(1.0f) == 0x3c00);
  CHECK(float_to_f16_bits(-2.5f) == 0xc100);
  for (float f : {0.5f, -3.25f, 1e-3f, 65504.f})
    CHECK(f16_bits_to_float(float_to_f16_bits(f)) == doctest::Approx(f).epsilon(1e-3));
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
}

TEST_CASE("moe: the wgmma kernels' grouped walk visits each (row tile, column tile) once") {
  for (int group_rows : {1, 3, kMoeWalkGroupRows, 12, 33, kMoeMaxWalkGroupRows})
    for (int col_tiles : {1, 2, 7, 28, 56})
      for (int row_tiles : {1, 3, 8, 9, 130, 640}) {
        std::vector<int> seen(static_cast<std::size_t>(col_tiles) * row_tiles, 0);
        bool in_range = true;
        for (int item = 0; item < col_tiles * row_tiles && in_range; ++item) {
          const MoeWalkItem w = moe_walk_item(item, col_tiles, row_tiles, group_rows);
          in_range = w.tile >= 0 && w.tile < row_tiles && w.col_tile >= 0 && w.col_tile < col_tiles;
          if (in_range) ++seen[static_cast<std::size_t>(w.tile) * col_tiles + w.col_tile];
        }
        INFO(fmt::format("group rows {} col tiles {} row tiles {}", group_rows, col_tiles, row_tiles));
        CHECK(in_range);
        CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
      }
  // The first group sweeps 8 row tiles (the default) per column tile before the next column tile.
  const MoeWalkItem a = moe_walk_item(0, 56, 130), b = moe_walk_item(1, 56, 130), c = moe_walk_item(8, 56, 130);
  CHECK((a.tile == 0 && a.col_tile == 0 && b.tile == 1 && b.col_tile == 0 && c.tile == 0 && c.col_tile == 1));
  // 12 rows per sweep on a grid of 132 CTAs: CTA b keeps row b % 12 of its group and the column
  // partners b - b % 12 .. +11 for every item of the first group (11 columns per wave).
  for (int cta : {0, 5, 131})
    for (int wave = 0; wave < 5; ++wave) {
      const MoeWalkItem w = moe_walk_item(cta + 132 * wave, 112, 20, 12);
      CHECK((w.tile == cta % 12 && w.col_tile == cta / 12 + 11 * wave));
    }
}
