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
  gemv1_span = gemv.find_kernel("gemv1_span");  // fp8_block layers of wide rows only
  gemv2_span = gemv.find_kernel("gemv2_span");
  const Kernel* many_span = gemv.find_kernel("gemv2_many_span");
  gemv2_many_span = many_span != nullptr ? many_span : gemv2_span;
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
  // One wave each; every CTA takes an even share of the items (at least one). fp8_block: SPAN or
  // every token's rows in shared memory (plan_decode_gemv_launch).
  const DeviceInfo& device = runtime_.device().info();
  // The rows' shared memory is linear in tokens (moe_decode_quant_smem): one token's, times the span.
  auto plan = [&](const Kernel& whole, const Kernel* span, long long items, long long per_token, long long smem_per_token) {
    const DecodeGemvLaunch l = plan_decode_gemv_launch(m, items, per_token, smem_per_token, device.sm_count,
                                                       device.shared_per_sm, whole.resources(),
                                                       span != nullptr ? &span->resources() : nullptr);
    return std::pair(l.span ? span : &whole, l);
  };
  const bool many = m >= kMoeDecodeManyTokens;
  const auto [gemv1, l1] = plan(*k.gemv1, k.gemv1_span, moe_decode_gemv1_items(m, spec_.top_k, spec_.intermediate),
                                static_cast<long long>(spec_.top_k) * spec_.intermediate,
                                moe_decode_gemv1_smem(spec_.quant, 1, spec_.hidden));
  const auto [gemv2, l2] =
      plan(many ? *k.gemv2_many : *k.gemv2, many ? k.gemv2_many_span : k.gemv2_span, moe_decode_gemv2_items(m, spec_.hidden),
           spec_.hidden, moe_decode_gemv2_smem(spec_.quant, 1, spec_.top_k, spec_.intermediate));
  // decode_gemv_max_tokens bounds m by what fits (moe_decode_gemv_fits); this is its check.
  MOEJIT_REQUIRE(l1.ctas >= 1 && l2.ctas >= 1,
                 "moe: the decode GEMV's shared memory for {} tokens does not fit ({} / {} bytes)", m, l1.smem, l2.smem);
  a.gemv1_smem_tokens = l1.tokens;
  a.gemv2_smem_tokens = l2.tokens;
  gemv1->launch(stream, {l1.grid, 1, 1, kMoeDecodeThreads, 1, 1, l1.smem, x_first && dependent_launch}, a);
  gemv2->launch(stream, {l2.grid, 1, 1, kMoeDecodeThreads, 1, 1, l2.smem, dependent_launch}, a);
}

DecodeGemvLaunch plan_decode_gemv_launch(int m, long long items, long long per_token, long long smem_per_token,
                                         long long sm_count, int shared_per_sm, const KernelResources& whole,
                                         const KernelResources* span) {
  auto resident = [&](const KernelResources& e, long long smem) {
    return resident_ctas_per_sm(e.registers, e.static_shared_bytes, kMoeDecodeThreads, static_cast<unsigned>(smem),
                                shared_per_sm);
  };
  // Every token's rows (the kernel without SPAN: its code as before SPAN existed).
  const long long all_smem = smem_per_token * m;
  DecodeGemvLaunch all;
  all.ctas = all_smem <= kMoeDecodeMaxSmemBytes ? resident(whole, all_smem) : 0;
  all.grid = static_cast<unsigned>(std::clamp<long long>(items, 1, sm_count * std::max(all.ctas, 1)));
  all.smem = static_cast<unsigned>(all_smem);
  all.tokens = m;
  if (span == nullptr || m == 1) return all;
  // SPAN: the most CTAs an SM first, down to one more than every token's rows allow.
  const int most = std::max(1, resident(*span, smem_per_token));
  for (int ctas = most; ctas > all.ctas; --ctas) {
    const long long grid = std::clamp<long long>(items, 1, std::max(sm_count * ctas, kMoeDecodeMinGrid));
    const int tokens = moe_decode_cta_token_span(items, per_token, grid, m);
    const long long smem = smem_per_token * tokens;
    if (smem <= kMoeDecodeMaxSmemBytes && (ctas == 1 || resident(*span, smem) >= ctas))
      return {true, static_cast<unsigned>(grid), static_cast<unsigned>(smem), tokens, ctas};
  }
  return all;
}

}  // namespace moejit
