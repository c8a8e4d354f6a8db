// Routing section of moejit_bench: routing_topk on bf16 logits + routing_sort metadata, verified
// against the CPU reference before timing, timed as CUDA-graph replays.
#include <fmt/format.h>

#include <random>

#include "bench/bench_sections.h"
#include "autotune/device_rates.h"
#include "autotune/timing.h"
#include "runtime/device_buffer.h"
#include "runtime/router.h"

namespace moejit::bench {

void bench_routing(Runtime& rt, const Context& ctx, const std::vector<BenchShape>& shapes, nlohmann::json& results) {
  auto& api = rt.driver();
  fmt::print("{:<18} {:>4} {:>5} {:>6} {:>10} {:>10} {:>8}  {}\n", "routing (top-k+sort)", "E", "top_k", "M", "us",
             "floor us", "eff", "what");
  std::mt19937 rng(1234);
  for (const auto& shape : shapes) {
    const RouterConfig config = shape.spec.router_config();
    const int E = config.num_experts, K = config.top_k;
    Router router(rt, config);
    router.prepare();
    for (int tokens : ctx.token_counts) {
      DeviceBuffer d_logits(api, std::max<std::size_t>(std::size_t(tokens) * E * 2, 2));
      ctx.filler->fill(ctx.stream, d_logits.ptr(), std::size_t(tokens) * E, ScalarType::BF16, rng(), 4.f);
      std::vector<float> bias(E);
      for (int e = 0; e < E; ++e) bias[e] = 0.01f * float(e % 7);
      DeviceBuffer d_bias = DeviceBuffer::from(api, bias);
      const CUdeviceptr bias_ptr = config.n_group > 1 ? d_bias.ptr() : 0;
      DeviceBuffer ws(api, router.workspace_bytes(tokens));
      ws.fill_u32(0xdeadbeefu);
      auto out = router.carve(ws.ptr(), tokens);
      // Verify the metadata against the ids the top-k produced before timing (the top-k itself is
      // checked against the fp64 reference by the GPU tests): a fast wrong answer is no result.
      router.route(ctx.stream, d_logits.ptr(), E, bias_ptr, 0, tokens, tokens, out);
      auto got = router.sorter().download(out.sort, tokens);
      std::vector<int> ids(std::size_t(tokens) * K);
      if (tokens)
        MOEJIT_CHECK_CU(api, Launch, cuMemcpyDtoH(ids.data(), reinterpret_cast<CUdeviceptr>(out.topk_ids), ids.size() * 4));
      auto diff = describe_routing_difference(reference_routing_sort(ids, tokens, K, E, E, {}, config.block_m), got);
      if (!diff.empty()) throw Error(Phase::Launch, fmt::format("{} M={}: wrong result: {}", shape.name, tokens, diff));
      const int inner = tokens <= 1024 ? 20 : 5;
      const double us = time_graph_us(api, ctx.stream, inner, ctx.reps, [&](int) {
        router.route(ctx.stream, d_logits.ptr(), E, bias_ptr, 0, tokens, tokens, out);
      });
      // Must move: logits in (bf16), ids + weights out, ids re-read, scatter index out, gather index
      // out (padded rows), per-expert counts/offsets/tiles.
      const double slots = double(tokens) * K;
      const double bytes = 2.0 * tokens * E + 4.0 * (4 * slots + router.sorter().gather_capacity(tokens) + 3.0 * E);
      const double floor_us = bytes / ctx.bandwidth * 1e6;
      const bool fused = tokens <= kRouterFusedTokens && config.num_experts <= kRouterFusedMaxLocalExperts;
      fmt::print("{:<18} {:>4} {:>5} {:>6} {:>10.2f} {:>10.3f} {:>7.1f}%  {}, graph replay x{}\n", shape.name, E, K,
                 tokens, us, floor_us, 100.0 * floor_us / us, fused ? "1 launch" : "3 launches", inner);
      results.push_back({{"kernel", "routing"}, {"shape", shape.name}, {"E", E}, {"top_k", K}, {"M", tokens},
                         {"us", us}, {"floor_us", floor_us}, {"efficiency", floor_us / us}});
    }
  }
}

}  // namespace moejit::bench
