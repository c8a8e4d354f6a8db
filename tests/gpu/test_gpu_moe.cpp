// The fused-experts MoE layer on the GPU against the fp64 reference: every activation x dtype x
// bias x router-weight position x fused/unfused x fast/deterministic, the model shapes at
// M in {1, 7, 64, 333, 4096}, expert parallelism and top-1 weight-on-input.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "moe_gpu_util.h"
#include "autotune/tuned_db.h"
#include "jit/moe_names.h"
#include "support/moe_cases.h"
#include "support/test_support.h"
#include "templates/moe/moe_decode_args.cuh"

using namespace moejit;
using namespace moejit::test;

TEST_CASE("gpu moe: activation x dtype x bias x weight position x fused x reduce mode") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe matrix")) return;
  int checked = 0;
  for (const auto& c : moe_matrix_cases()) {
    MoeRun r = make_moe_run(rt, c.spec, 64, 1000 + checked);
    for (bool modular : {false, true}) {
      const double err = forward_and_check(r, 64, modular);
      INFO(fmt::format("{} modular={} relative error {:.3e}", c.name, modular, err));
      CHECK(within_band(err));
    }
    ++checked;
  }
  MESSAGE(fmt::format("{} layer variants checked, monolithic and modular", checked));
}

TEST_CASE("gpu moe: model shapes, M in {1, 7, 64, 333, 4096}") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe model shapes")) return;
  for (const auto& c : moe_model_cases()) {
    const int max_m = c.token_counts.back();
    MoeSpec det = c.spec;
    det.reduce = ReduceMode::Deterministic;
    MoeLayer det_layer(rt, det);
    MoeRun r = make_moe_run(rt, c.spec, max_m, 7, det_layer.workspace_bytes(max_m));
    r.layer->prepare(max_m);
    for (int m : c.token_counts) {
      const double err = forward_and_check(r, m, false);
      INFO(fmt::format("{} M={} relative error {:.3e}", c.name, m, err));
      CHECK(within_band(err));
      CHECK(r.layer->routing_error_flags(r.problem->args(m, false)) == 0);
      MESSAGE(fmt::format("{} M={} tiles {}: relative error {:.2e}", c.name, m, r.layer->tile_config(m).describe(), err));
    }
    // Deterministic mode on the largest batch too.
    r.problem->poison();
    det_layer.forward(nullptr, r.problem->args(max_m, true));
    r.problem->use_generated_topk();
    const double err = r.problem->relative_error(r.problem->output(max_m), MoeProblem::sample_tokens(max_m, kMaxCheckedTokens));
    INFO(fmt::format("{} deterministic M={} relative error {:.3e}", c.name, max_m, err));
    CHECK(within_band(err));
  }
}

TEST_CASE("gpu moe: expert parallelism (half the experts remote) and top-1 weight on input") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe expert parallel")) return;
  for (const auto& c : moe_mode_cases()) {
    if (c.spec.local_experts() == c.spec.num_experts && !c.spec.router_weight_on_input) continue;
    MoeRun r = make_moe_run(rt, c.spec, c.token_counts.back(), 11);
    for (int m : c.token_counts)
      for (bool modular : {false, true}) {
        const double err = forward_and_check(r, m, modular);
        INFO(fmt::format("{} M={} modular={} relative error {:.3e}", c.name, m, modular, err));
        CHECK(within_band(err));
      }
  }
}

// Tokens whose routed experts are all remote add nothing to the fp32 sums: their rows of out must be
// exact zeros, also when no local expert is routed at all (no row tile: the GEMMs' CTAs all exit and
// the cast alone writes out). Mixed batches still equal the fp64 reference. Swap-AB tiles (GEMM2
// split over three CTAs, one warp), the wgmma variant on sm_90a, and the heuristic's tiles for M = 5,
// each eager. (Written for the fifty-second session's fused cast, run
// there through both cast paths: docs/experiments/2026-12-07-fused-cast.patch.)
TEST_CASE("gpu moe: tokens routed only to remote experts get zeros") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe remote-only tokens")) return;
  MoeSpec spec = moe_mode_cases().front().spec;  // 64 experts, 32 local, top_k 8, fast mode
  REQUIRE(spec.reduce == ReduceMode::Fast);
  REQUIRE(spec.local_experts() < spec.num_experts);
  std::vector<MoeTileConfig> configs;
  for (int variant = 0; variant < 3; ++variant) {
    MoeTileConfig c;
    c.block_m = 8;
    c.gemm1 = swap_ab_tile(4, 2, 2);
    c.gemm2 = variant == 0 ? swap_ab_tile(4, 2, 2) : variant == 1 ? swap_ab_tile(2, 2, 2, 3) : swap_ab_tile(1, 1, 2);
    configs.push_back(c);
  }
  if (arch_has_wgmma(rt.device_arch())) {
    MoeTileConfig c;
    c.block_m = 16;
    c.gemm1 = c.gemm2 = swap_ab_wgmma_tile(4, 2);
    configs.push_back(c);
  }
  const int m = 5;
  int forwards = 0;
  MoeRun r = make_moe_run(rt, spec, m, 1701);
  r.problem->use_generated_topk();
  MoeHostTensors& host = r.problem->host();
  std::vector<int> remote;
  for (int e = 0; e < spec.num_experts; ++e)
    if (host.expert_map[e] < 0) remote.push_back(e);
  REQUIRE(static_cast<int>(remote.size()) >= spec.top_k);
  auto route_remote = [&](int token) {
    for (int s = 0; s < spec.top_k; ++s) host.topk_ids[token * spec.top_k + s] = remote[(token + 3 * s) % remote.size()];
  };
  for (int token : {0, 2, 4}) route_remote(token);  // tokens 1 and 3 keep their random experts
  r.problem->topk_ids.upload(host.topk_ids.data(), host.topk_ids.size() * sizeof(int));
  configs.push_back(r.layer->tile_config(m));
  for (const MoeTileConfig& c : configs) {
    INFO(fmt::format("{} config {}", spec.describe(), c.describe()));
    // Mixed: the remote-only rows are zero, the others match the reference.
    r.problem->poison();
    r.layer->forward_with_config(nullptr, r.problem->args(m, true), c);
    const auto out = r.problem->output(m);
    for (int token : {0, 2, 4})
      CHECK(std::all_of(out.begin() + token * spec.hidden, out.begin() + (token + 1) * spec.hidden,
                        [](float v) { return v == 0.f; }));
    CHECK(within_band(r.problem->relative_error(out, {1, 3})));
    // The first two tokens both remote-only (token 1 rerouted): no local row at all.
    std::vector<int> ids = host.topk_ids;
    for (int s = 0; s < spec.top_k; ++s) ids[spec.top_k + s] = remote[(5 * s + 1) % remote.size()];
    r.problem->topk_ids.upload(ids.data(), ids.size() * sizeof(int));
    r.problem->poison();
    r.layer->forward_with_config(nullptr, r.problem->args(2, true), c);
    const auto none = r.problem->output(2);
    CHECK(std::all_of(none.begin(), none.end(), [](float v) { return v == 0.f; }));
    r.problem->topk_ids.upload(host.topk_ids.data(), host.topk_ids.size() * sizeof(int));
    forwards += 2;
  }
  MESSAGE(fmt::format("{} forwards with remote-only tokens checked", forwards));
}

// A few variants at small M that together reach every kernel family and epilogue path: the suite
// compute-sanitizer runs (memcheck, racecheck) — the full suite is too slow under the tools.
TEST_CASE("gpu moe: reduced suite (for compute-sanitizer)") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe reduced suite")) return;
  const auto matrix = moe_matrix_cases();
  int index = 0;
  for (const auto& c : matrix) {
    const MoeSpec& s = c.spec;
    // silu_mul (gated, halves), swigluoai (interleaved), relu2 (single input); all four modes.
    const bool pick = (s.activation == kActSiluMul || s.activation == kActSwigluOai || s.activation == kActRelu2) &&
                      s.dtype == (index % 2 ? kDTypeF16 : kDTypeBF16) && s.has_bias == s.router_weight_on_input;
    ++index;
    if (!pick) continue;
    MoeRun r = make_moe_run(rt, s, 64, 500 + index);
    for (int m : {5, 64}) {
      const double err = forward_and_check(r, m, m == 5);
      INFO(fmt::format("{} M={} relative error {:.3e}", c.name, m, err));
      CHECK(within_band(err));
    }
  }
  for (const auto& c : moe_mode_cases()) {
    if (c.spec.local_experts() == c.spec.num_experts) continue;
    MoeRun r = make_moe_run(rt, c.spec, 64, 600);
    const double err = forward_and_check(r, 64, false);
    INFO(fmt::format("{} relative error {:.3e}", c.name, err));
    CHECK(within_band(err));
  }
}

TEST_CASE("gpu moe: every tile config the tuner may pick computes the same function") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe tile sweep")) return;
  const auto cases = moe_tile_sweep_cases();
  const int m = 200;  // ~50 rows per expert: several tiles per expert for small block_m
  std::vector<KernelSpec> specs;
  for (const auto& c : cases)
    for (auto& s : moe_expert_kernel_specs(c.spec, c.config, rt.device_arch(), moe_gemm2_stores_rows16(c.spec, c.config, m)))
      specs.push_back(std::move(s));
  rt.compile_all(specs);  // in parallel, before timing-free checks
  std::unique_ptr<MoeRun> run;
  MoeSpec current{};
  int checked = 0;
  for (const auto& c : cases) {
    if (!run || tuned_shape_key(current) != tuned_shape_key(c.spec)) {
      run = std::make_unique<MoeRun>(make_moe_run(rt, c.spec, m, 77));
      current = c.spec;
    }
    run->problem->poison();
    run->layer->forward_with_config(nullptr, run->problem->args(m, true), c.config);
    run->problem->use_generated_topk();
    const double err = run->problem->relative_error(run->problem->output(m), MoeProblem::sample_tokens(m, 64));
    INFO(fmt::format("{} config {} relative error {:.3e}", c.spec.describe(), c.config.describe(), err));
    CHECK(within_band(err));
    ++checked;
  }
  MESSAGE(fmt::format("{} tile configs checked against the fp64 reference", checked));
}

namespace {
// Runs every case's forwards (a fresh layer per spec; cases of one layer follow each other) against
// the fp64 reference, then checks that the deterministic mode refuses the first case's config with
// an error naming `kernel`. Returns the forwards checked.
bool uses_pingpong(const MoeKernelCase& c) { return c.config.gemm1.pingpong || c.config.gemm2.pingpong; }
bool uses_multicast(const MoeKernelCase& c) { return c.config.gemm1.multicast; }
// Paths written in a session without device time run as test cases of their own.
bool own_case(const MoeKernelCase& c) { return uses_pingpong(c) || uses_multicast(c); }

int check_kernel_cases(Runtime& rt, const std::vector<MoeKernelCase>& cases, int seed, const char* kernel) {
  std::vector<KernelSpec> specs;
  for (const auto& c : cases) {  // GEMM2 in the role the forward at the largest M picks
    const bool rows16 = moe_gemm2_stores_rows16(c.spec, c.config, c.token_counts.back());
    for (auto& s : moe_expert_kernel_specs(c.spec, c.config, rt.device_arch(), rows16)) specs.push_back(std::move(s));
  }
  rt.compile_all(specs);
  std::unique_ptr<MoeRun> run;
  const MoeSpec* current = nullptr;
  int checked = 0, run_tokens = 0;
  for (const auto& c : cases) {
    if (!run || current->describe() != c.spec.describe() ||
        current->router_weight_on_input != c.spec.router_weight_on_input || c.token_counts.back() > run_tokens) {
      run_tokens = c.token_counts.back();
      run = std::make_unique<MoeRun>(make_moe_run(rt, c.spec, run_tokens, seed + checked));
      current = &c.spec;
    }
    for (int m : c.token_counts) {
      run->problem->poison();
      run->layer->forward_with_config(nullptr, run->problem->args(m, true), c.config);
      run->problem->use_generated_topk();
      const double err = run->problem->relative_error(run->problem->output(m), MoeProblem::sample_tokens(m, 64));
      INFO(fmt::format("{} M={} config {} relative error {:.3e}", c.spec.describe(), m, c.config.describe(), err));
      CHECK(within_band(err));
      ++checked;
    }
  }
  // The deterministic mode's sums must not depend on the batch: these kernels are refused there.
  MoeSpec det = cases[0].spec;
  det.reduce = ReduceMode::Deterministic;
  const int m = cases[0].token_counts.front();
  MoeRun d = make_moe_run(rt, det, m, seed + 90);
  CHECK_THROWS_WITH_AS(d.layer->forward_with_config(nullptr, d.problem->args(m, true), cases[0].config),
                       doctest::Contains(kernel), Error);
  return checked;
}
}  // namespace

// The swap-AB decode kernel: weights dequantized in registers on the mma's M side.
TEST_CASE("gpu moe: the swap-AB kernel equals the fp64 reference in every weight format") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe swap-AB")) return;
  const int checked = check_kernel_cases(rt, moe_swap_ab_cases(), 1300, "swap-AB");
  MESSAGE(fmt::format("{} swap-AB forwards checked against the fp64 reference", checked));
  // A ring beyond the device's shared memory (16 warps x 8 stages of 16-bit rows: 512 KiB) is a
  // clear error before any launch, and the output stays as it was.
  MoeSpec spec = moe_swap_ab_cases().front().spec;
  spec.quant = kQuantNone;
  spec.validate();
  MoeRun r = make_moe_run(rt, spec, 4, 1390);
  MoeTileConfig huge;
  huge.block_m = 8;
  huge.gemm1 = huge.gemm2 = swap_ab_tile(4, 4, 8);
  r.problem->poison();
  CHECK_THROWS_WITH_AS(r.layer->forward_with_config(nullptr, r.problem->args(4, true), huge),
                       doctest::Contains("bytes of shared memory per CTA"), Error);
  const auto out = r.problem->output_bits(4);  // nothing ran: still the bf16 NaN poison
  CHECK(std::all_of(out.begin(), out.end(), [](std::uint16_t b) { return b == 0x7fc0; }));
}

namespace {
// A GPU with wgmma (sm_90a), or a visible skip.
bool wgmma_gpu_or_skip(Runtime& rt, const char* test_name) {
  if (!gpu_or_skip(rt, test_name)) return false;
  if (arch_has_wgmma(rt.device_arch())) return true;
  MESSAGE("SKIPPED: the wgmma kernel needs sm_90a, this device is " << rt.device_arch());
  return false;
}
}  // namespace

// The swap-AB kernel's wgmma variant: the tokens staged in shared memory, a warpgroup MMA with the
// weights dequantized into registers (the A operand).
TEST_CASE("gpu moe: the swap-AB kernel's wgmma variant equals the fp64 reference") {
  Runtime rt(test_options(""));
  if (!wgmma_gpu_or_skip(rt, "gpu moe swap-AB wgmma")) return;
  const int checked = check_kernel_cases(rt, moe_swap_ab_wgmma_cases(), 1500, "swap-AB");
  MESSAGE(fmt::format("{} swap-AB wgmma forwards checked against the fp64 reference", checked));
}

// The sm_90a wgmma kernel (prefill): warpgroup MMA from a 128-byte-swizzled cp.async ring, plain
// and persistent.
TEST_CASE("gpu moe: the wgmma kernel equals the fp64 reference") {
  Runtime rt(test_options(""));
  if (!wgmma_gpu_or_skip(rt, "gpu moe wgmma")) return;
  auto cases = moe_wgmma_cases();
  std::erase_if(cases, own_case);  // their own cases below
  const int checked = check_kernel_cases(rt, cases, 2100, "wgmma");
  MESSAGE(fmt::format("{} wgmma forwards checked against the fp64 reference", checked));
}

namespace {
// The wgmma and DTYPE-row cases `pick` takes, checked as a test case of their own (paths written in
// a session without device time: a hang or a wrong result is theirs alone).
void check_own_cases(const char* test_name, bool (*pick)(const MoeKernelCase&), int seed, const char* what) {
  Runtime rt(test_options(""));
  if (!wgmma_gpu_or_skip(rt, test_name)) return;
  std::vector<MoeKernelCase> cases;
  for (auto& c : moe_wgmma_cases())
    if (pick(c)) cases.push_back(c);
  for (auto& c : moe_rows16_cases())
    if (pick(c)) cases.push_back(c);
  REQUIRE(cases.size() >= 10);
  const int checked = check_kernel_cases(rt, cases, seed, "wgmma");
  MESSAGE(fmt::format("{} {} forwards checked against the fp64 reference", checked, what));
}
}  // namespace

// Ping-pong consumer groups of the persistent wgmma kernel (64-row tiles, two consumer warpgroups
// on alternate tiles, turn barriers).
TEST_CASE("gpu moe: ping-pong consumer groups equal the fp64 reference") {
  check_own_cases("gpu moe ping-pong", uses_pingpong, 2300, "ping-pong");
}

// GEMM1 weight tiles multicast over clusters of two CTAs (pairs of one expert's row tiles; a pair's
// missing half past the tile map; experts changing inside a pair).
TEST_CASE("gpu moe: GEMM1 weight tiles multicast over two-CTA clusters equal the fp64 reference") {
  check_own_cases("gpu moe multicast", uses_multicast, 2500, "multicast");
}

// Weight-only formats on the persistent wgmma kernel: the producer warpgroup dequantizes int8 / int4 /
// MXFP4 weights into the ring the wgmmas read.
TEST_CASE("gpu moe: weight-only formats dequantized on the wgmma kernel equal the fp64 reference") {
  Runtime rt(test_options(""));
  if (!wgmma_gpu_or_skip(rt, "gpu moe wgmma dequant")) return;
  const int checked = check_kernel_cases(rt, moe_wgmma_dequant_cases(), 2700, "wgmma");
  MESSAGE(fmt::format("{} dequantizing wgmma forwards checked against the fp64 reference", checked));
}

// The persistent wgmma kernels' two walks, each where the default does not pick it: 16-bit layers
// claiming their items from the work queue (with tail tiles' idle warpgroup) by their tiles' choice
// (GemmTile::work_queue = 1, as a tuned DB sets it), quantized layers walking the fixed stride by
// MOEJIT_WORK_QUEUE=0 (Options::work_queue; the default runs the other way round in the test cases
// above).
TEST_CASE("gpu moe: the persistent wgmma kernels' work queue and fixed stride both equal the fp64 reference") {
  for (const int queue : {1, 0}) {
    Options options = test_options("");
    if (queue == 0) options.work_queue = 0;
    Runtime rt(options);
    if (!wgmma_gpu_or_skip(rt, "gpu moe work queue")) return;
    // Persistent cases whose default is the other walk: 16-bit weights for the queue, quantized
    // ones for the stride.
    std::vector<MoeKernelCase> cases;
    const auto pick = [&](const MoeKernelCase& c) {
      return (c.config.gemm1.persistent || c.config.gemm2.persistent) && !own_case(c) &&
             (c.spec.quant == kQuantNone) == (queue == 1);
    };
    for (auto* list : {moe_wgmma_cases, moe_wgmma_dequant_cases, moe_rows16_cases})
      for (auto& c : list())
        if (pick(c)) cases.push_back(c);
    REQUIRE(cases.size() >= 4);
    if (queue == 1)
      for (auto& c : cases)
        for (GemmTile* t : {&c.config.gemm1, &c.config.gemm2})
          if (can_claim_work_items(*t)) t->work_queue = 1;
    const int checked = check_kernel_cases(rt, cases, 2900 + queue, "wgmma");
    MESSAGE(fmt::format("{} forwards with {} checked against the fp64 reference", checked,
                        queue ? "claimed items (the tiles' choice)" : "the fixed stride (MOEJIT_WORK_QUEUE=0)"));
  }
}

// Large batches in the fast mode: GEMM2 stores each routed slot's row in DTYPE and reduce16 sums a
// token's rows (moe_gemm2_stores_rows16), on every kernel family that can run GEMM2.
TEST_CASE("gpu moe: GEMM2's DTYPE rows and their top-k sum equal the fp64 reference") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe rows16")) return;
  auto cases = moe_rows16_cases();
  std::erase_if(cases, own_case);  // in the ping-pong and multicast cases
  for (const auto& c : cases) REQUIRE(moe_gemm2_stores_rows16(c.spec, c.config, c.token_counts.front()));
  if (!arch_has_wgmma(rt.device_arch())) {
    MESSAGE("SKIPPED (wgmma cases only): they need sm_90a, this device is " << rt.device_arch());
    std::erase_if(cases, [](const MoeKernelCase& c) { return c.config.gemm1.wgmma || c.config.gemm2.wgmma; });
  }
  const int checked = check_kernel_cases(rt, cases, 2500, "swap-AB");
  MESSAGE(fmt::format("{} forwards with GEMM2 rows in DTYPE checked against the fp64 reference", checked));
}

// Split-K (fast mode): GEMM1 parks partial sums and the last split runs the epilogue; GEMM2 splits
// add atomically. Every split count, uneven splits (k tiles not a multiple of the splits), gated /
// interleaved / single-input activations with biases, and block-scaled fp8 and MXFP4 weights.
TEST_CASE("gpu moe: split-K at every split count equals the fp64 reference") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe split-K")) return;
  const auto cases = moe_split_k_cases();
  int checked = 0;
  for (const auto& c : cases) {
    const MoeSpec& spec = c.spec;
    MoeRun r = make_moe_run(rt, spec, c.token_counts.back(), 900 + checked);
    for (int m : c.token_counts)
      for (int splits : {1, 2, 3, 5, 8}) {
        MoeTileConfig config = r.layer->tile_config(m);
        if (config.gemv || config.gemm1.swap_ab || config.gemm2.swap_ab) config = heuristic_tile_config(spec, m, false);
        config.gemm1.split_k = splits;
        config.gemm2.split_k = splits;
        config.gemm2.staged = false;  // split sums add fp32: a staged 128 x 256 tile holds DTYPE rows only
        r.problem->poison();
        r.layer->forward_with_config(nullptr, r.problem->args(m, true), config);
        r.problem->use_generated_topk();
        const double err = r.problem->relative_error(r.problem->output(m), MoeProblem::sample_tokens(m, 64));
        INFO(fmt::format("{} M={} config {} relative error {:.3e}", spec.describe(), m, config.describe(), err));
        CHECK(within_band(err));
        ++checked;
      }
  }
  MESSAGE(fmt::format("{} split-K forwards checked against the fp64 reference", checked));
  // The deterministic mode's sums must not depend on the batch: split-K is refused before any launch.
  MoeSpec det = cases[0].spec;
  det.reduce = ReduceMode::Deterministic;
  MoeRun d = make_moe_run(rt, det, 4, 950);
  MoeTileConfig config = d.layer->tile_config(4);
  config.gemm1.split_k = 2;
  CHECK_THROWS_WITH_AS(d.layer->forward_with_config(nullptr, d.problem->args(4, true), config),
                       doctest::Contains("split-K"), Error);
}

// The decode GEMV pair (tile config gemv): routing inside both kernels, GEMM1 + bias + activation,
// GEMM2 + bias + router weights + top-k sum, for 1 .. kMoeDecodeMaxTokens tokens, on every layer of
// the suites it supports (activations, dtypes, biases, weight on input, expert parallelism,
// grouped routing, model shapes, fp8_block w8a8), monolithic and modular. Its routing must pick what the route
// kernel picks.
TEST_CASE("gpu moe: the decode GEMV equals the fp64 reference and routes as the route kernel") {
  Runtime rt(test_options(""));
  if (!gpu_or_skip(rt, "gpu moe decode GEMV")) return;
  std::vector<MoeCase> cases;
  for (const auto& list : {moe_matrix_cases(), moe_model_cases(), moe_mode_cases(), moe_quant_cases(), moe_decode_gemv_cases()})
    for (const auto& c : list)
      if (decode_gemv_supported(c.spec, rt.device_arch())) cases.push_back(c);
  REQUIRE(cases.size() >= 10);
  auto& api = rt.driver();
  auto routing = [&](MoeRun& r, int m) {  // (ids, weights) the last monolithic forward published
    const RoutingResult res = r.layer->routing_result(r.problem->args(m, false));
    std::vector<int> ids(std::size_t(m) * r.layer->spec().top_k);
    std::vector<float> weights(ids.size());
    MOEJIT_CHECK_CU(api, Launch, cuCtxSynchronize());
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(ids.data(), reinterpret_cast<CUdeviceptr>(res.topk_ids), ids.size() * 4));
    MOEJIT_CHECK_CU(api, Launch,
                    cuMemcpyDtoH(weights.data(), reinterpret_cast<CUdeviceptr>(res.topk_weights), weights.size() * 4));
    return std::pair(ids, weights);
  };
  int checked = 0;
  for (const auto& c : cases) {
    const int max_m = decode_gemv_max_tokens(c.spec);
    MoeRun r = make_moe_run(rt, c.spec, max_m, 3000 + checked);
    for (int m : {1, std::min(3, max_m), max_m})
      for (bool modular : {false, true}) {
        std::pair<std::vector<int>, std::vector<float>> routed;
        if (!modular) {  // the route kernel's picks for these logits
          r.layer->forward_with_config(nullptr, r.problem->args(m, false), heuristic_tile_config(c.spec, m, true, rt.device_arch(), false));
          routed = routing(r, m);
        }
        r.problem->poison();
        r.layer->forward_with_config(nullptr, r.problem->args(m, modular), decode_gemv_config());
        if (modular) {
          r.problem->use_generated_topk();
        } else {
          r.problem->fetch_routing(*r.layer, m);
          const auto gemv = routing(r, m);
          CHECK(gemv.first == routed.first);
          for (std::size_t i = 0; i < gemv.second.size(); ++i) CHECK(gemv.second[i] == doctest::Approx(routed.second[i]).epsilon(1e-6));
          CHECK(r.layer->routing_error_flags(r.problem->args(m, false)) == 0);
          CHECK(r.layer->experts_touched(r.problem->args(m, false)) > 0);
        }
        const double err = r.problem->relative_error(r.problem->output(m), MoeProblem::sample_tokens(m, 64));
        INFO(fmt::format("{} ({}) M={} modular={} relative error {:.3e}", c.name, c.spec.describe(), m, modular, err));
        CHECK(err <= quant_error_band(c.spec.quant));
        CHECK(std::isfinite(err));
        ++checked;
      }
  }
  MESSAGE(fmt::format("{} decode GEMV forwards over {} layers checked against the fp64 reference", checked,
                      cases.size()));
  // More tokens than it takes, or a deterministic layer: a clear error before any launch (out stays poisoned).
  MoeRun r = make_moe_run(rt, cases[0].spec, kMoeDecodeMaxTokens + 1, 3999);
  r.problem->poison();
  CHECK_THROWS_WITH_AS(
      r.layer->forward_with_config(nullptr, r.problem->args(kMoeDecodeMaxTokens + 1, true), decode_gemv_config()),
      doctest::Contains("at most"), Error);
  const auto out = r.problem->output(kMoeDecodeMaxTokens + 1);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
  MoeSpec det = cases[0].spec;
  det.reduce = ReduceMode::Deterministic;
  MoeRun d = make_moe_run(rt, det, 1, 3998);
  CHECK_THROWS_WITH_AS(d.layer->forward_with_config(nullptr, d.problem->args(1, true), decode_gemv_config()),
                       doctest::Contains("decode GEMV"), Error);
}
