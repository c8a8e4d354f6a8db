// routing_topk + the whole Router on the GPU against the fp64 CPU reference: every scoring rule,
// grouped top-k with correction bias, the logit types, top_k 1..32 and E up to 512 (and 1024), ties,
// M = 0, both launch paths around their boundary (and the one-launch path's few-keys branch),
// expert parallelism, and a CUDA graph.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "runtime/device_buffer.h"
#include "runtime/router.h"
#include "support/test_support.h"

using namespace moejit;

namespace {

std::vector<unsigned short> to_half_bits(const std::vector<double>& v, LogitType type) {
  std::vector<unsigned short> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    float f = static_cast<float>(v[i]);
    unsigned int bits;
    std::memcpy(&bits, &f, 4);
    if (type == LogitType::BF16) {
      out[i] = static_cast<unsigned short>(bits >> 16);  // grid values are exact: truncation is exact
    } else {  // f16: values on the grid are exact; build sign | exponent | mantissa
      const unsigned sign = (bits >> 16) & 0x8000u;
      const int exp = int((bits >> 23) & 0xff) - 127 + 15;
      const unsigned mant = (bits >> 13) & 0x3ffu;
      out[i] = f == 0.f ? static_cast<unsigned short>(sign) : static_cast<unsigned short>(sign | (exp << 10) | mant);
    }
  }
  return out;
}

struct Case {
  RouterConfig config;
  int tokens;
  bool bias = false;
  int row_pad = 0;  // row_stride = E + row_pad
  std::vector<int> expert_map = {};  // global -> local id (-1 remote); config.num_local_experts matches
  bool graph = false;                // also replay the routing from a CUDA graph
};

// "" when the device result matches the reference: ids exactly (or a near-tie swap), weights to 1e-5.
std::string run_case(Runtime& rt, const Case& c, std::mt19937& rng) {
  const RouterConfig& cfg = c.config;
  const int E = cfg.num_experts, K = cfg.top_k, M = c.tokens;
  auto logits = grid_router_logits(M, E, rng());
  std::vector<double> bias;
  if (c.bias) {
    std::uniform_int_distribution<int> b(-8, 8);
    for (int e = 0; e < E; ++e) bias.push_back(b(rng) / 8.0);
  }
  const long long stride = E + c.row_pad;
  std::vector<double> padded(std::size_t(M) * stride, 1e3);  // padding must never be read
  for (int t = 0; t < M; ++t)
    for (int e = 0; e < E; ++e) padded[std::size_t(t) * stride + e] = logits[std::size_t(t) * E + e];
  auto& api = rt.driver();
  DeviceBuffer d_logits;
  if (cfg.logit_type == LogitType::F32) {
    std::vector<float> f(padded.begin(), padded.end());
    d_logits = DeviceBuffer::from(api, f);
  } else {
    d_logits = DeviceBuffer::from(api, to_half_bits(padded, cfg.logit_type));
  }
  std::vector<float> bias_f(bias.begin(), bias.end());
  DeviceBuffer d_bias = DeviceBuffer::from(api, bias_f);
  DeviceBuffer d_map = DeviceBuffer::from(api, c.expert_map);
  const CUdeviceptr map_ptr = c.expert_map.empty() ? 0 : d_map.ptr();
  Router router(rt, cfg);
  DeviceBuffer ws(api, router.workspace_bytes(M));
  ws.fill_u32(0x7fc00001u);  // NaN poison: unwritten weights can never pass
  auto out = router.carve(ws.ptr(), M);
  router.route(nullptr, d_logits.ptr(), stride, c.bias ? d_bias.ptr() : 0, map_ptr, M, M, out);
  auto ids = std::vector<int>(std::size_t(M) * K);
  auto weights = std::vector<float>(std::size_t(M) * K);
  MOEJIT_CHECK_CU(api, Launch, cuCtxSynchronize());
  if (M > 0) {
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(ids.data(), reinterpret_cast<CUdeviceptr>(out.topk_ids), ids.size() * 4));
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(weights.data(), reinterpret_cast<CUdeviceptr>(out.topk_weights), weights.size() * 4));
  }
  auto want = reference_routing_topk(logits, M, cfg, bias);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int t = static_cast<int>(i / K);
    if (ids[i] != want.ids[i]) {
      const double a = want.select[std::size_t(t) * E + want.ids[i]];
      const double b = ids[i] >= 0 && ids[i] < E ? want.select[std::size_t(t) * E + ids[i]] : 1e30;
      if (std::abs(a - b) > 1e-6 * std::max(1.0, std::abs(a)))
        return fmt::format("token {} slot {}: expert {}, expected {}", t, i % K, ids[i], want.ids[i]);
    }
    if (!(std::abs(weights[i] - want.weights[i]) <= 1e-5 * std::max(1.0, std::abs(want.weights[i]))))
      return fmt::format("token {} slot {}: weight {}, expected {}", t, i % K, weights[i], want.weights[i]);
  }
  // And the metadata built from those ids.
  auto sorted = router.sorter().download(out.sort, M);
  auto want_sort = reference_routing_sort(ids, M, K, E, router.sorter().config().num_local_experts, c.expert_map,
                                          cfg.block_m);
  std::string diff = describe_routing_difference(want_sort, sorted);
  if (!diff.empty() || !c.graph) return diff;
  // The same routing captured into a CUDA graph: a replay over a re-poisoned workspace gives the
  // same bytes as the eager run.
  const std::vector<unsigned> eager = ws.to_vector<unsigned>(router.workspace_bytes(M) / 4);
  ws.fill_u32(0x7fc00001u);
  CUstream stream = nullptr;
  MOEJIT_CHECK_CU(api, Launch, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  MOEJIT_CHECK_CU(api, Launch, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  router.route(stream, d_logits.ptr(), stride, c.bias ? d_bias.ptr() : 0, map_ptr, M, M, out);
  CUgraph graph = nullptr;
  MOEJIT_CHECK_CU(api, Launch, cuStreamEndCapture(stream, &graph));
  CUgraphExec exec = nullptr;
  MOEJIT_CHECK_CU(api, Launch, cuGraphInstantiate(&exec, graph, 0));
  MOEJIT_CHECK_CU(api, Launch, cuGraphLaunch(exec, stream));
  MOEJIT_CHECK_CU(api, Launch, cuStreamSynchronize(stream));
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
  return ws.to_vector<unsigned>(eager.size()) == eager ? "" : "graph replay differs from the eager run";
}
}  // namespace

TEST_CASE("routing_topk: softmax / sigmoid / softmax-after-topk, renormalize, dtypes, top_k 1..32, E to 512") {
  test::ScratchDir dir("gpu-topk");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "routing_topk vs reference")) return;
  std::mt19937 rng(99);
  int n = 0;
  for (Scoring scoring : {Scoring::Softmax, Scoring::Sigmoid, Scoring::SoftmaxAfterTopk})
    for (int experts : {8, 60, 64, 128, 160, 256, 384, 512})
      for (int top_k : {1, 2, 3, 5, 6, 7, 8, 10, 16, 32}) {
        if (top_k > experts) continue;
        RouterConfig cfg{.num_experts = experts, .top_k = top_k, .scoring = scoring, .renormalize = (n % 2 == 0),
                         .logit_type = n % 3 == 0 ? LogitType::F32 : n % 3 == 1 ? LogitType::BF16 : LogitType::F16};
        for (int tokens : {1, 31, 1000}) {
          INFO(fmt::format("{} E={} top_k={} M={} renorm={} dtype={}", scoring_name(scoring), experts, top_k, tokens,
                           cfg.renormalize, int(cfg.logit_type)));
          CHECK(run_case(rt, {cfg, tokens, false, n % 4 == 0 ? 3 : 0}, rng) == "");
        }
        ++n;
      }
  MESSAGE(n << " router configurations checked");
}

TEST_CASE("routing_topk: grouped top-k with correction bias and scaling (DeepSeek-V3), Llama-4 top-1, M = 0") {
  test::ScratchDir dir("gpu-topk-grouped");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "routing_topk grouped")) return;
  std::mt19937 rng(3);
  RouterConfig v3{.num_experts = 256, .top_k = 8, .scoring = Scoring::Sigmoid, .renormalize = true, .n_group = 8,
                  .topk_group = 4, .routed_scaling_factor = 2.5f};
  for (int tokens : {1, 64, 4096}) {
    INFO("DeepSeek-V3 M=" << tokens);
    CHECK(run_case(rt, {v3, tokens, true}, rng) == "");
  }
  RouterConfig v2 = v3;  // group max without bias (DeepSeek-V2 style), softmax
  v2.scoring = Scoring::Softmax;
  v2.num_experts = 160;
  v2.n_group = 8;
  v2.topk_group = 3;
  v2.top_k = 6;
  v2.routed_scaling_factor = 1.f;
  CHECK(run_case(rt, {v2, 333, false}, rng) == "");
  RouterConfig most = v3;  // keeps 6 of 8 groups: chosen by dropping the two worst
  most.num_experts = 64;
  most.topk_group = 6;
  most.top_k = 6;
  for (int tokens : {5, 257}) CHECK(run_case(rt, {most, tokens, true}, rng) == "");
  RouterConfig llama4{.num_experts = 128, .top_k = 1, .scoring = Scoring::Sigmoid, .renormalize = false};
  CHECK(run_case(rt, {llama4, 777, false}, rng) == "");
  CHECK(run_case(rt, {v3, 0, true}, rng) == "");
}

TEST_CASE("Router: one-launch / three-launch boundary, expert_map with half remote, graph replay == eager") {
  test::ScratchDir dir("gpu-router-ep");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "Router expert_map and graph")) return;
  std::mt19937 rng(17);
  RouterConfig v3{.num_experts = 256, .top_k = 8, .scoring = Scoring::Sigmoid, .renormalize = true, .n_group = 8,
                  .topk_group = 4, .routed_scaling_factor = 2.5f, .block_m = 32};
  RouterConfig qwen{.num_experts = 128, .top_k = 8, .logit_type = LogitType::F16, .block_m = 16};
  RouterConfig odd{.num_experts = 60, .top_k = 6, .renormalize = false, .block_m = 64};
  for (const RouterConfig& base : {v3, qwen, odd}) {
    const int E = base.num_experts;
    std::vector<int> map(E);  // odd experts live here (local id = e / 2), even ones are remote
    for (int e = 0; e < E; ++e) map[e] = e % 2 ? e / 2 : -1;
    RouterConfig ep = base;
    ep.num_local_experts = E / 2;
    for (int tokens : {1, 2, 4, 5, 31, 32, 33, 64, 2049}) {
      INFO(fmt::format("E={} top_k={} M={}", E, base.top_k, tokens));
      CHECK(run_case(rt, {base, tokens, base.n_group > 1, 0, {}, true}, rng) == "");
      CHECK(run_case(rt, {ep, tokens, base.n_group > 1, 1, map, true}, rng) == "");
    }
  }
  // Bad expert_map entries (past the local experts) are dropped and flagged, on both paths: every
  // third expert maps to local id 100 of 64, odd others are local (e / 2), even others remote.
  {
    RouterConfig bad = qwen;
    bad.num_local_experts = 64;
    std::vector<int> map(128);
    for (int e = 0; e < 128; ++e) map[e] = e % 3 == 0 ? 100 : e % 2 ? e / 2 : -1;
    for (int tokens : {1, 2, 4, 33}) {
      INFO("bad expert_map entries, M=" << tokens);
      CHECK(run_case(rt, {bad, tokens, false, 0, map, true}, rng) == "");
    }
  }
  // Few keys (M * top_k <= 32: the route kernel's warp-0 path) with more rows an expert than a
  // tile holds: several tiles per expert, padding rows, and the last key of 32.
  RouterConfig few{.num_experts = 3, .top_k = 1, .block_m = 8};
  RouterConfig pairs{.num_experts = 5, .top_k = 2, .renormalize = false, .block_m = 8};
  for (int tokens : {1, 7, 20, 32, 33}) {
    INFO("E=3 top_k=1 M=" << tokens);
    CHECK(run_case(rt, {few, tokens, false, 0, {}, true}, rng) == "");
  }
  for (int tokens : {3, 16, 17}) {
    INFO("E=5 top_k=2 M=" << tokens);
    CHECK(run_case(rt, {pairs, tokens, false, 0, {}, true}, rng) == "");
  }
  // The widest router (E = 1024, 32 experts per lane) on both paths.
  // fp32 logits: the grid's values (k / 128 up to 4) are not all exact in bf16 for E = 1024.
  RouterConfig wide{.num_experts = 1024, .top_k = 4, .logit_type = LogitType::F32, .block_m = 16};
  for (int tokens : {1, 32, 100}) CHECK(run_case(rt, {wide, tokens, false, 0, {}, true}, rng) == "");
}

TEST_CASE("routing_topk: ties go to the lower expert id") {
  test::ScratchDir dir("gpu-topk-ties");
  Runtime rt(test::test_options(dir.path()));
  if (!test::gpu_or_skip(rt, "routing_topk ties")) return;
  auto& api = rt.driver();
  const int E = 64, K = 6;
  std::vector<float> logits(E, 0.5f);  // all equal: the answer is experts 0..5
  logits[40] = 1.f;                    // one clear winner first
  DeviceBuffer d = DeviceBuffer::from(api, logits);
  Router router(rt, {.num_experts = E, .top_k = K, .logit_type = LogitType::F32});
  DeviceBuffer ws(api, router.workspace_bytes(1));
  auto out = router.carve(ws.ptr(), 1);
  router.route(nullptr, d.ptr(), E, 0, 0, 1, 1, out);
  std::vector<int> ids(K);
  MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(ids.data(), reinterpret_cast<CUdeviceptr>(out.topk_ids), K * 4));
  CHECK(ids == std::vector<int>{40, 0, 1, 2, 3, 4});

  // Grouped: group 7 scores highest, groups 0..6 tie. Keeping 2 of 8 groups (chosen best-first)
  // keeps groups 7 and 0; keeping 6 (chosen by dropping the worst, ties dropping the higher group)
  // drops 6 and 5. Either way the picks are group 7's experts, then the lowest ids.
  const int GE = 64, GK = 12;
  std::vector<float> grouped(GE, 0.5f);
  for (int e = 56; e < 64; ++e) grouped[e] = 1.f;
  DeviceBuffer dg = DeviceBuffer::from(api, grouped);
  for (int keep : {2, 6}) {
    INFO("topk_group=" << keep);
    Router gr(rt, {.num_experts = GE, .top_k = GK, .scoring = Scoring::Sigmoid, .n_group = 8, .topk_group = keep,
                   .logit_type = LogitType::F32});
    DeviceBuffer gws(api, gr.workspace_bytes(1));
    auto gout = gr.carve(gws.ptr(), 1);
    gr.route(nullptr, dg.ptr(), GE, 0, 0, 1, 1, gout);
    std::vector<int> gids(GK);
    MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(gids.data(), reinterpret_cast<CUdeviceptr>(gout.topk_ids), GK * 4));
    CHECK(gids == std::vector<int>{56, 57, 58, 59, 60, 61, 62, 63, 0, 1, 2, 3});
  }
}

TEST_CASE("Router: bad input is a clear error before any launch") {
  test::ScratchDir dir("router-validate");
  Runtime rt(test::test_options(dir.path()));
  CHECK_THROWS_WITH_AS(Router(rt, {.num_experts = 4, .top_k = 6}), doctest::Contains("exceeds num_experts"), Error);
  CHECK_THROWS_WITH_AS(Router(rt, {.num_experts = 250, .top_k = 8, .n_group = 8}), doctest::Contains("not divisible"), Error);
  CHECK_THROWS_WITH_AS(Router(rt, {.num_experts = 64, .top_k = 9, .n_group = 8, .topk_group = 1}),
                       doctest::Contains("kept groups"), Error);
  CHECK_THROWS_WITH_AS(Router(rt, {.num_experts = 2048, .top_k = 8}), doctest::Contains("num_experts"), Error);
  // Zeroing a caller's region on the way: only the one-launch route kernel, small, whole 16-byte
  // words; anything else is refused before a launch (no GPU needed up to there).
  Router r(rt, {.num_experts = 64, .top_k = 4});
  CHECK(r.zeroes_for(1, 4096));
  CHECK(r.zeroes_for(kRouterFusedTokens, kRouterZeroMaxBytes));
  CHECK_FALSE(r.zeroes_for(kRouterFusedTokens + 1, 4096));
  CHECK_FALSE(r.zeroes_for(1, kRouterZeroMaxBytes + 16));
  CHECK_FALSE(r.zeroes_for(1, 8));
  const CUdeviceptr fake = CUdeviceptr(1) << 20;
  const RoutingResult res = r.carve(fake, 64);
  CHECK_THROWS_WITH_AS(r.route(nullptr, fake, 64, 0, 0, 64, 64, res, 16, fake, 4096), doctest::Contains("cannot zero"),
                       Error);
  CHECK_THROWS_WITH_AS(r.route(nullptr, fake, 64, 0, 0, 1, 64, res, 16, fake + 8, 4096),
                       doctest::Contains("cannot zero"), Error);
}
