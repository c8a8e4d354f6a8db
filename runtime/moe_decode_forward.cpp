// MoeLayer's decode path (tile config gemv): the fused layer for up to kMoeDecodeMaxTokens tokens
// as the two kernels of moe_decode_gemv — gemv1 (routing in every CTA, GEMM1, bias, activation)
// and gemv2 (routing again, GEMM2, bias, router weights, top-k sum, DTYPE out) — instead of the
// route kernel, the two grouped GEMMs and the cast. gemv2 starts under gemv1's tail on sm_90+
// (programmatic dependent launch): its routing runs before it waits for the intermediate.
#include <algorithm>

#include "common/error.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer_parts.h"
#include "runtime/runtime.h"
#include "templates/moe/moe_decode_args.cuh"

namespace moejit {

void MoeLayer::Kernels::bind_decode_gemv(const Module& gemv) {
  gemv1 = &gemv.kernel("gemv1");
  gemv2 = &gemv.kernel("gemv2");
  // Layers whose gemv2 items are not split have no gemv2_many (moe_decode_gemv2_splits): the same code.
  const Kernel* many = gemv.find_kernel("gemv2_many");
  gemv2_many = many != nullptr ? many : gemv2;
}

void MoeLayer::forward_decode(CUstream stream, const MoeForwardArgs& args, int m, const Kernels& k) {
  MOEJIT_REQUIRE(m <= decode_gemv_max_tokens(spec_),
                 "moe: tile config gemv (the decode GEMV) takes at most {} tokens per forward of this layer, not {}",
                 decode_gemv_max_tokens(spec_), m);
  const Workspace w = carve(args, m);
  const RouterConfig& router = router_.config();
  auto ptr = [](const TensorView& t) { return t.given() ? reinterpret_cast<const void*>(t.data) : nullptr; };
  MoeDecodeArgs a{};
  if (args.router_logits.given()) {
    a.topk.logits = ptr(args.router_logits);
    a.topk.row_stride = args.router_logits.strides[0];
    a.topk.correction_bias = static_cast<const float*>(ptr(args.correction_bias));
  } else {  // the modular entry: the caller's top-k
    a.given_ids = static_cast<const int*>(ptr(args.topk_ids));
    a.given_weights = static_cast<const float*>(ptr(args.topk_weights));
  }
  a.topk.num_tokens = m;
  a.topk.num_experts = spec_.num_experts;
  a.topk.routed_scaling_factor = router.routed_scaling_factor;
  a.expert_map = static_cast<const int*>(ptr(args.expert_map));
  a.num_local_experts = spec_.local_experts();
  a.num_tokens = m;
  a.topk_ids = w.routing.topk_ids;
  a.topk_weights = w.routing.topk_weights;
  a.expert_counts = w.routing.sort.expert_counts;
  a.error_flags = w.routing.sort.error_flags;
  a.x = ptr(args.hidden);
  a.ldx = args.hidden.strides[0];
  // fp8_block batches whose X the GEMV's CTAs would not quantize beside their routing: X once,
  // here, launched after everything before it; gemv1 then starts under it and routes meanwhile.
  const bool dependent_launch = arch_has_dependent_launch(runtime_.device_arch());
  const bool x_first = spec_.quant == kQuantFp8Block &&
                       !moe_decode_quantize_overlaps(act_scales_per_row(spec_.quant, spec_.hidden), m);
  if (x_first) {
    quantize_activations(stream, k, {args.hidden.data, args.hidden.strides[0], w.hidden_q, w.hidden_scale, spec_.hidden, m,
                                     nullptr, nullptr, args.a1_scale},
                         false);
    a.xq = reinterpret_cast<const unsigned char*>(w.hidden_q);
    a.xq_scale = reinterpret_cast<const float*>(w.hidden_scale);
  }
  // Weights as stored (byte strides), fp8_block's scales.
  const long long es = static_cast<long long>(scalar_type_size(args.w1.dtype));
  a.w1 = ptr(args.w1);
  a.w1_expert_stride = args.w1.strides[0] * es;
  a.ldw1 = args.w1.strides[1] * es;
  a.w2 = ptr(args.w2);
  a.w2_expert_stride = args.w2.strides[0] * es;
  a.ldw2 = args.w2.strides[1] * es;
  if (spec_.quant == kQuantFp8Block) {
    a.w1_scale = static_cast<const float*>(ptr(args.w1_scale));
    a.w1_scale_expert_stride = args.w1_scale.strides[0];
    a.w1_scale_row_stride = args.w1_scale.strides[1];
    a.w2_scale = static_cast<const float*>(ptr(args.w2_scale));
    a.w2_scale_expert_stride = args.w2_scale.strides[0];
    a.w2_scale_row_stride = args.w2_scale.strides[1];
  }
  if (spec_.has_bias) {
    a.b1 = static_cast<const float*>(ptr(args.b1));
    a.b1_expert_stride = args.b1.strides[0];
    a.b2 = static_cast<const float*>(ptr(args.b2));
    a.b2_expert_stride = args.b2.strides[0];
  }
  a.inter = reinterpret_cast<void*>(w.intermediate);
  a.out = reinterpret_cast<void*>(args.out.data);
  a.ldo = args.out.strides[0];
  a.weight_on_input = spec_.router_weight_on_input ? 1 : 0;
  a.alpha = spec_.swiglu_alpha;
  a.limit = spec_.swiglu_limit;
  // One wave each (at least kMoeDecodeMinGrid CTAs); every CTA takes an even share of the items (at
  // least one). fp8_block: each CTA's shared memory holds its own tokens' quantized rows
  // (moe_decode_cta_token_span of the grid), so a smaller span may leave room for more CTAs an SM:
  // the most that fit with one token row down to one, the first whose span's rows fit that many.
  const DeviceInfo& device = runtime_.device().info();
  struct Launch {
    unsigned grid, smem;
    int tokens;
  };
  auto plan = [&](const Kernel& kernel, long long items, long long per_token, auto smem_of) {
    const int most = std::max(1, resident_ctas_per_sm(kernel, kMoeDecodeThreads, smem_of(1), device));
    for (int ctas = most;; --ctas) {
      const long long grid =
          std::clamp<long long>(items, 1, std::max<long long>(static_cast<long long>(device.sm_count) * ctas, kMoeDecodeMinGrid));
      const int tokens = moe_decode_cta_token_span(items, per_token, grid, m);
      const auto smem = static_cast<unsigned>(smem_of(tokens));
      if (ctas == 1 || resident_ctas_per_sm(kernel, kMoeDecodeThreads, smem, device) >= ctas)
        return Launch{static_cast<unsigned>(grid), smem, tokens};
    }
  };
  const Launch l1 = plan(*k.gemv1, moe_decode_gemv1_items(m, spec_.top_k, spec_.intermediate),
                         static_cast<long long>(spec_.top_k) * spec_.intermediate,
                         [&](int tokens) { return moe_decode_gemv1_smem(spec_.quant, tokens, spec_.hidden); });
  const Kernel& gemv2 = m >= kMoeDecodeManyTokens ? *k.gemv2_many : *k.gemv2;
  const Launch l2 = plan(gemv2, moe_decode_gemv2_items(m, spec_.hidden), spec_.hidden, [&](int tokens) {
    return moe_decode_gemv2_smem(spec_.quant, tokens, spec_.top_k, spec_.intermediate);
  });
  a.gemv1_smem_tokens = l1.tokens;
  a.gemv2_smem_tokens = l2.tokens;
  k.gemv1->launch(stream, {l1.grid, 1, 1, kMoeDecodeThreads, 1, 1, l1.smem, x_first && dependent_launch}, a);
  gemv2.launch(stream, {l2.grid, 1, 1, kMoeDecodeThreads, 1, 1, l2.smem, dependent_launch}, a);
}

}  // namespace moejit
