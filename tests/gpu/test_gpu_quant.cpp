// Quantized experts on the GPU against the fp64 reference computed from the dequantized weights
// (and, for w8a8, from activations quantized and dequantized as the kernels do): every format on
// small layers with tails, gpt-oss-20b in MXFP4, a DeepSeek-V3-like block-scaled fp8 layer, the
// modular forward, CUDA-graph replay, and the tuner's tile space on a quantized layer.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <memory>

#include "autotune/config_space.h"
#include "moe_gpu_util.h"
#include "jit/moe_names.h"
#include "support/moe_cases.h"
#include "support/test_support.h"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("gpu moe quant: every format against the fp64 reference") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe quantized experts")) return;
  for (const auto& c : moe_quant_cases()) {
    const int max_m = c.token_counts.back();
    MoeRun r = make_moe_run(rt, c.spec, max_m, 21);
    r.layer->prepare(max_m);
    for (int m : c.token_counts)
      for (bool modular : {false, true}) {
        if (modular && m != c.token_counts[1]) continue;  // one modular run per layer
        const double err = forward_and_check(r, m, modular);
        const double band = quant_error_band(c.spec.quant);
        INFO(fmt::format("{} M={} modular={} relative error {:.3e} (band {:.0e})", c.name, m, modular, err, band));
        CHECK(std::isfinite(err));
        CHECK(err <= band);
        MESSAGE(fmt::format("{} M={}{} tiles {}: relative error {:.2e}", c.name, m, modular ? " modular" : "",
                            r.layer->tile_config(m).describe(), err));
      }
  }
}

namespace {
// Raises every 8th e8m0 scale block of one stored weight matrix by 2^10 (codes ~120 -> ~130: scales
// above 2), on the device and in the host copy the reference reads. The layer must keep one weight
// set per local expert (expert_patterns() == 0): device scale i then covers host weights
// [32 i, 32 i + 32).
void raise_mxfp4_scales(DeviceBuffer& scales, std::vector<float>& dequantized) {
  std::vector<std::uint8_t> codes(dequantized.size() / kMxfp4GroupSize);
  REQUIRE(scales.bytes() == codes.size());
  scales.download(codes.data(), codes.size());
  int raised = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    if ((i * 2654435761u >> 7) % 8 != 0 || codes[i] + 10 > 254) continue;
    codes[i] = static_cast<std::uint8_t>(codes[i] + 10);
    for (int j = 0; j < kMxfp4GroupSize; ++j) dequantized[i * kMxfp4GroupSize + j] *= 1024.f;
    ++raised;
  }
  REQUIRE(raised > 0);
  scales.upload(codes.data(), codes.size());
}
}  // namespace

// MXFP4 into bf16 folds the e8m0 scale into one bf16 multiply while the scale is at most 2; larger
// scales (real checkpoints have few) take the exact dequantization, per warp and k block. Random
// weights have scales near 2^-7, so these layers raise every 8th block's scale by 2^10 (silu_mul:
// both matrices; swigluoai, whose clamp at 7 would hide GEMM1's raised blocks: W2 only), and run
// the decode (swap-AB, its wgmma variant on sm_90a) and prefill tiles against the fp64 reference.
TEST_CASE("gpu moe quant: MXFP4 scales above 2 (the exact dequantization) equal the fp64 reference") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe quant MXFP4 large scales")) return;
  int forwards = 0;
  for (MoeQuant quant : {kQuantMxfp4, kQuantMxfp4Packed})
    for (MoeActivation act : {kActSiluMul, kActSwigluOai}) {
      MoeSpec spec = small_layer(8, 2, 352, 96, act, kDTypeBF16, quant);
      spec.has_bias = true;
      spec.validate();
      MoeRun r = make_moe_run(rt, spec, 333, 4242);
      REQUIRE(r.problem->expert_patterns() == 0);
      if (act == kActSiluMul) raise_mxfp4_scales(r.problem->weights.w1_scale, r.problem->host().w1);
      raise_mxfp4_scales(r.problem->weights.w2_scale, r.problem->host().w2);
      std::vector<std::pair<int, MoeTileConfig>> runs;
      for (int m : {1, 7, 40, 333}) runs.push_back({m, r.layer->tile_config(m)});
      MoeTileConfig swap;
      swap.block_m = 8;
      swap.gemm1 = swap.gemm2 = swap_ab_tile(4, 2, 2);
      runs.push_back({7, swap});
      if (arch_has_wgmma(rt.device_arch())) {
        swap.block_m = 16;
        swap.gemm1 = swap.gemm2 = swap_ab_wgmma_tile(4, 2);
        runs.push_back({7, swap});
      }
      for (const auto& [m, config] : runs) {
        const double err = forward_and_check(r, m, config);
        INFO(fmt::format("{} M={} tiles {} relative error {:.3e}", spec.describe(), m, config.describe(), err));
        CHECK(err <= quant_error_band(quant));
        ++forwards;
      }
    }
  MESSAGE(fmt::format("{} MXFP4 forwards with scales above 2 checked", forwards));
}

TEST_CASE("gpu moe quant: CUDA graph replay equals eager") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe quant graph")) return;
  auto& api = rt.driver();
  for (const auto& c : moe_quant_cases()) {
    if (c.spec.hidden > 1024) continue;  // the small layers reach every kernel path
    MoeRun r = make_moe_run(rt, c.spec, 64, 5);
    r.layer->prepare(64);
    r.problem->poison();
    r.layer->forward(nullptr, r.problem->args(64, true));
    REQUIRE(api.cuCtxSynchronize() == CUDA_SUCCESS);
    const auto eager = r.problem->output_bits(64);
    CUstream stream;
    REQUIRE(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CUgraph graph;
    CUgraphExec exec;
    r.problem->poison();
    REQUIRE(api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
    r.layer->forward(stream, r.problem->args(64, true));
    REQUIRE(api.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
    REQUIRE(api.cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
    REQUIRE(api.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(api.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    const auto replay = r.problem->output_bits(64);
    INFO(c.name);
    if (c.spec.reduce == ReduceMode::Deterministic) CHECK(replay == eager);
    r.problem->use_generated_topk();
    CHECK(r.problem->relative_error(r.problem->output(64), MoeProblem::sample_tokens(64, kMaxCheckedTokens)) <=
          quant_error_band(c.spec.quant));
    api.cuGraphExecDestroy(exec);
    api.cuGraphDestroy(graph);
    api.cuStreamDestroy(stream);
  }
}

TEST_CASE("gpu moe quant: every tile config of the tuner's space computes the same function") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe quant tile sweep")) return;
  int checked = 0;
  std::unique_ptr<MoeRun> r;
  const auto cases = moe_quant_tile_sweep_cases(rt.device().info().max_shared_per_block_optin, rt.device_arch());
  // Every kernel first, in parallel (one by one inside the forwards took over ten minutes).
  std::vector<KernelSpec> specs;
  for (const auto& c : cases)
    for (auto& s : moe_expert_kernel_specs(c.spec, c.config, rt.device_arch(), moe_gemm2_stores_rows16(c.spec, c.config, 200)))
      specs.push_back(std::move(s));
  rt.compile_all(specs);
  for (const auto& c : cases) {
    if (!r || !(r->layer->spec().quant == c.spec.quant)) r = std::make_unique<MoeRun>(make_moe_run(rt, c.spec, 200, 9));
    r->problem->poison();
    r->layer->forward_with_config(nullptr, r->problem->args(200, true), c.config);
    r->problem->use_generated_topk();
    const double err =
        r->problem->relative_error(r->problem->output(200), MoeProblem::sample_tokens(200, kMaxCheckedTokens));
    INFO(fmt::format("{} {}: relative error {:.3e}", quant_name(c.spec.quant), c.config.describe(), err));
    CHECK(err <= quant_error_band(c.spec.quant));
    ++checked;
  }
  MESSAGE(fmt::format("{} quantized tile configs checked", checked));
}

// The e4m3 wgmma tiles sum each 128-wide k tile apart before fp32 (quant_promotes_k_tiles): over a
// long K their error stays within a small factor of the mma.sync tiles' (fp32 sums every 32 k). Before, per
// channel / tensor layers summed all of K in the wgmma accumulator: E = 40, top_k = 5, K = 1536,
// M = 4096 (H100) gave 1.08e-2 / 8.7e-3 against 2.35e-3 on mma.sync tiles.
TEST_CASE("gpu moe quant: fp8 wgmma tiles over a long K stay as accurate as mma.sync tiles") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe quant long K")) return;
  if (rt.device_arch() != "sm_90a") {
    MESSAGE("skipped: the wgmma tiles need sm_90a, this GPU is " << rt.device_arch());
    return;
  }
  constexpr int kTokens = 700;
  MoeTileConfig sm80;  // mma.sync tiles (gated fp8_block keeps at most 96 accumulators: bn32)
  sm80.block_m = 64;
  sm80.gemm1.block_n = 32;
  sm80.gemm2.block_n = 128;
  for (GemmTile* t : {&sm80.gemm1, &sm80.gemm2}) {
    t->block_k = 128;
    t->warps_m = t->warps_n = 2;
    t->stages = 3;
  }
  MoeTileConfig persistent;  // as the fp8 prefill heuristic
  persistent.block_m = 128;
  persistent.gemm1 = wgmma_tile(64, 6, 0, true);
  persistent.gemm2 = wgmma_tile(128, 3, 0, true, true);
  MoeTileConfig plain;
  plain.gemm1 = wgmma_tile(64, 4);
  plain.gemm2 = wgmma_tile(128, 3);
  // 256 weight rows a tile, their k tile sums kept 128 rows at a time (the persistent kernel's WIDE
  // tiles): gated GEMM1 block_n 128, GEMM2 block_n 256.
  MoeTileConfig wide;
  wide.block_m = 128;
  wide.gemm1 = wgmma_tile(128, 4, 0, true);
  wide.gemm2 = wgmma_tile(256, 3, 0, true);
  MoeTileConfig wide_staged = wide;
  wide_staged.gemm1 = wgmma_tile(128, 3, 0, true, true);
  MoeTileConfig wide_gemm1 = persistent;  // GEMM1's alone
  wide_gemm1.gemm1 = wide.gemm1;
  // The second layer's last column tiles end inside a tile's second 128 weight rows (N = 384:
  // GEMM1's third tile; hidden 3968: GEMM2's sixteenth, its second chunk all past n_out).
  for (const auto& [q, hidden, inter] :
       {std::tuple{kQuantFp8Channel, 4096, 256}, {kQuantFp8Tensor, 4096, 256}, {kQuantFp8Block, 4096, 256},
        {kQuantFp8Block, 3968, 384}, {kQuantFp8Channel, 3968, 384}}) {
    const MoeSpec spec = small_layer(16, 4, hidden, inter, kActSiluMul, kDTypeBF16, q);  // 31-32 k tiles in GEMM1
    MoeRun r = make_moe_run(rt, spec, kTokens, 33);
    auto error = [&](const MoeTileConfig& c) {
      r.problem->poison();
      r.layer->forward_with_config(nullptr, r.problem->args(kTokens, true), c);
      r.problem->use_generated_topk();
      return r.problem->relative_error(r.problem->output(kTokens), MoeProblem::sample_tokens(kTokens, kMaxCheckedTokens));
    };
    const double base = error(sm80);
    for (const MoeTileConfig* c : {&persistent, &plain, &wide, &wide_staged, &wide_gemm1}) {
      const double err = error(*c);
      INFO(fmt::format("{} {}: relative error {:.3e}, mma.sync tiles {:.3e}", quant_name(q), c->describe(), err, base));
      CHECK(err <= quant_error_band(q));
      CHECK(err <= 3.5 * base);  // (H100, K = 2048: 2.4x, the sums of 4 x k32 wgmmas in the tensor cores)
      MESSAGE(fmt::format("{} {}: relative error {:.2e} (mma.sync tiles {:.2e})", quant_name(q), c->describe(), err, base));
    }
  }
}
