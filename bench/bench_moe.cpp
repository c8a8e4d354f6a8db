// MoE layer section of moejit_bench: the whole forward (router logits -> routing -> fused experts
// -> top-k reduction), bf16 or quantized experts (--quant), timed as CUDA-graph replays that rotate over several router-logit
// sets, so consecutive forwards touch different experts (weights are not served from L2).
// Floor = max(touched-expert weight bytes + activations / copy bandwidth, flops / dense GEMM rate),
// with the touched experts counted from the device's own routing of each logit set. Quantized
// weights count as stored (codes + scales + zero points); the math floor of w8a8 (fp8) layers uses
// the dense fp8 GEMM rate, every other layer's the dense bf16 rate (weight-only formats multiply
// in bf16).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/bench_sections.h"
#include "autotune/config_space.h"
#include "autotune/device_rates.h"
#include "autotune/timing.h"
#include "common/half_float.h"
#include "runtime/device_buffer.h"
#include "runtime/moe_layer.h"
#include "runtime/moe_quant.h"
#include "jit/moe_names.h"

namespace moejit::bench {

namespace {
constexpr int kLogitSets = 4;

// Every output element written and finite (the output was poisoned with NaN before the run).
bool output_complete(const DeviceBuffer& out, std::size_t count, int dtype) {
  const auto bits = out.to_vector<std::uint16_t>(count);
  return std::all_of(bits.begin(), bits.end(), [&](std::uint16_t b) { return std::isfinite(half_bits_to_float(b, dtype)); });
}
// --balanced: token t's top_k logits are experts (t top_k + j + set) mod E, well above the rest, so
// every expert gets M top_k / E rows (+-1): the expert row tiles carry no padding beyond the last
// tile's remainder of that even count (a diagnostic against random routing's uneven counts).
std::vector<std::uint16_t> balanced_logits(std::size_t tokens, std::size_t E, int top_k, int set) {
  std::vector<std::uint16_t> bits(tokens * E);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t e = 0; e < E; ++e) bits[t * E + e] = float_to_bf16_bits(-4.f - float((t * 7 + e * 13) % 17) / 16.f);
    for (int j = 0; j < top_k; ++j)
      bits[t * E + (t * top_k + j + set) % E] = float_to_bf16_bits(4.f - 0.125f * float(j));
  }
  return bits;
}
}  // namespace

void bench_moe(Runtime& rt, const Context& ctx, const std::vector<BenchShape>& shapes, nlohmann::json& results) {
  auto& api = rt.driver();
  const DeviceLimits limits{rt.device().info().max_shared_per_block_optin, rt.device_arch()};
  const std::string title = shapes.empty() || shapes[0].spec.quant == kQuantNone
                                ? std::string("MoE layer (bf16)")
                                : fmt::format("MoE layer ({})", quant_name(shapes[0].spec.quant));
  fmt::print("\n{:<18} {:>4} {:>5} {:>6} {:>6} {:>10} {:>10} {:>7} {:>5}  {}\n", title, "E", "top_k", "K", "M", "us",
             "floor us", "eff", "bound", "tiles");
  const int max_m = *std::max_element(ctx.token_counts.begin(), ctx.token_counts.end());
  for (const auto& shape : shapes) {
    const MoeSpec& s = shape.spec;
    MoeLayer layer(rt, s);
    layer.prepare(max_m);
    const std::size_t K = s.hidden, N = s.intermediate, R = s.w1_rows(), E = s.num_experts, EL = s.local_experts();
    DeviceBuffer hidden(api, std::max<std::size_t>(max_m * K * 2, 16));
    DeviceBuffer out(api, std::max<std::size_t>(max_m * K * 2, 16)), ws(api, layer.workspace_bytes(max_m));
    const DeviceExpertWeights weights = random_device_weights(api, *ctx.filler, ctx.stream, s, 11);
    DeviceBuffer b1, b2;
    ctx.filler->fill(ctx.stream, hidden.ptr(), max_m * K, ScalarType::BF16, 13, 1.f);
    if (s.has_bias) {
      b1 = DeviceBuffer(api, EL * R * 4);
      b2 = DeviceBuffer(api, EL * K * 4);
      ctx.filler->fill(ctx.stream, b1.ptr(), EL * R, ScalarType::F32, 14, 0.5f);
      ctx.filler->fill(ctx.stream, b2.ptr(), EL * K, ScalarType::F32, 15, 0.5f);
    }
    std::vector<DeviceBuffer> logits;
    for (int i = 0; i < kLogitSets; ++i) {
      logits.emplace_back(api, std::max<std::size_t>(max_m * E * 2, 16));
      if (ctx.balanced)
        logits.back().upload(balanced_logits(max_m, E, s.top_k, i).data(), max_m * E * 2);
      else
        ctx.filler->fill(ctx.stream, logits.back().ptr(), max_m * E, ScalarType::BF16, 100 + i, 4.f);
    }
    for (int m : ctx.token_counts) {
      MoeTileConfig config = layer.tile_config(m);
      const long long rows_per_expert = (static_cast<long long>(m) * s.top_k + EL - 1) / EL;
      const long long swap_ab_rows = ctx.swap_ab && ctx.swap_ab->swap_ab_wgmma ? 64 : 32;
      if (ctx.swap_ab && rows_per_expert <= swap_ab_rows && swap_ab_supported_both(s)) {
        config.block_m = ctx.block_m ? *ctx.block_m
                         : rows_per_expert <= 8 ? 8 : rows_per_expert <= 16 ? 16 : rows_per_expert <= 32 ? 32 : 64;
        config.gemm1 = config.gemm2 = *ctx.swap_ab;
        config.gemv = false;
      }
      if (ctx.gemv) {
        const bool runs = decode_gemv_supported(s, rt.device_arch()) && m <= decode_gemv_max_tokens(s);
        if (*ctx.gemv && runs)
          config = decode_gemv_config();
        else if (!*ctx.gemv && config.gemv)
          config = heuristic_tile_config(s, m, true, rt.device_arch(), false);
      }
      if (ctx.walk_rows)
        for (GemmTile* t : {&config.gemm1, &config.gemm2})
          if (t->wgmma) t->walk_rows = *ctx.walk_rows;
      if (ctx.pingpong)  // where the kernel takes it (its checks decide: config_fits)
        for (GemmTile* t : {&config.gemm1, &config.gemm2}) {
          if (!t->persistent) continue;
          t->pingpong = true;
          if (!config_fits(s, config, limits)) t->pingpong = false;
        }
      if (ctx.pregather && config.gemm1.persistent) config.gemm1.pregather = true;
      if (ctx.multicast && config.gemm1.persistent) {
        config.gemm1.multicast = true;
        if (!config_fits(s, config, limits)) config.gemm1.multicast = false;
      }
      if (ctx.gemm2_split) {
        config.gemm2.split_k = *ctx.gemm2_split;
        config.topk_sum = TopkSum::Atomic;
        if (!config_fits(s, config, limits)) config.gemm2.staged = false;
        if (!config_fits(s, config, limits))
          throw Error(Phase::Validate, fmt::format("moejit_bench: --gemm2-split {}: {} does not fit", *ctx.gemm2_split,
                                                   config.describe()));
      }
      auto forward = [&](const MoeForwardArgs& a) { layer.forward_with_config(ctx.stream, a, config); };
      auto args = [&](int set) {
        MoeDevicePointers p;
        p.hidden = hidden.ptr();
        p.router_logits = logits[set].ptr();
        weights.point(p);
        p.b1 = b1.ptr();
        p.b2 = b2.ptr();
        p.out = out.ptr();
        p.workspace = ws.ptr();
        p.workspace_size = ws.bytes();
        return contiguous_moe_args(s, m, p);
      };
      // Each logit set once, eagerly: the output must be complete, and the routing tells how many
      // experts the forward touches.
      double touched = 0;
      for (int set = 0; set < kLogitSets; ++set) {
        out.fill_u32(0x7fc07fc0u);
        forward(args(set));
        MOEJIT_CHECK_CU(api, Launch, cuStreamSynchronize(ctx.stream));
        if (!output_complete(out, std::size_t(m) * K, s.dtype))
          throw Error(Phase::Launch, fmt::format("{} M={}: output has unwritten or non-finite elements", shape.name, m));
        touched += layer.experts_touched(args(set));
      }
      touched /= kLogitSets;
      const int inner = m <= 1024 ? 2 * kLogitSets : kLogitSets;
      const double us = time_graph_us(api, ctx.stream, inner, ctx.reps,
                                      [&](int i) { forward(args(i % kLogitSets)); });
      const double weight_bytes = touched * double(quant_expert_weight_bytes(s)) +
                                  (s.has_bias ? touched * (R + K) * 4.0 : 0.0);
      const double bytes = weight_bytes + 2.0 * m * K * 2 + 2.0 * m * E;
      const double flops = 2.0 * m * s.top_k * double(R * K + K * N);
      const double mem_us = bytes / ctx.bandwidth * 1e6;
      // w8a8 layers multiply on the fp8 tensor cores: their math floor is the fp8 rate.
      const double rate = quant_is_fp8(s.quant) ? ctx.fp8_gemm_rate : ctx.gemm_rate;
      const double math_us = rate > 0 ? flops / rate * 1e6 : 0.0;
      const double floor_us = std::max(mem_us, math_us);
      fmt::print("{:<18} {:>4} {:>5} {:>6} {:>6} {:>10.2f} {:>10.2f} {:>6.1f}% {:>5}  {}\n", shape.name, E, s.top_k, K, m,
                 us, floor_us, 100.0 * floor_us / us, mem_us >= math_us ? "mem" : "math",
                 config.describe());
      results.push_back({{"kernel", "moe_layer"}, {"shape", shape.name}, {"quant", quant_name(s.quant)}, {"E", E}, {"top_k", s.top_k}, {"K", K},
                         {"N", N}, {"M", m}, {"us", us}, {"floor_us", floor_us}, {"memory_floor_us", mem_us},
                         {"math_floor_us", math_us}, {"touched_experts", touched}, {"efficiency", floor_us / us},
                         {"tiles", config.describe()}});
    }
  }
}

}  // namespace moejit::bench
