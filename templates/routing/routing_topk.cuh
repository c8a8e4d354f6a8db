// routing_topk: router logits [M, E] -> top-k expert ids [M, TOPK] (int32) and weights (fp32).
// One warp per token; lane l holds experts l, l+32, ... (EXPERTS_PER_LANE of them), so loads are
// coalesced and every reduction is a warp shuffle. Selection is an iterated warp arg-max with ties
// to the lower expert id (deterministic). Grouped top-k (DeepSeek): the N_GROUP contiguous groups
// are ranked by the sum of their top-2 biased scores when a correction bias is given, else by their
// max; experts outside the TOPK_GROUP best groups are masked before the top-k.
#pragma once

#include "routing/routing_topk_args.cuh"

namespace moejit {
namespace routing_topk_detail {

__device__ inline float neg_inf() { return __int_as_float(0xff800000); }

template <int LOGIT_DTYPE>
__device__ inline float load_logit(const void* base, long long index) {
  if constexpr (LOGIT_DTYPE == kLogitF32) {
    return static_cast<const float*>(base)[index];
  } else if constexpr (LOGIT_DTYPE == kLogitBF16) {
    const unsigned short bits = static_cast<const unsigned short*>(base)[index];
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);  // bf16 is the top half of fp32
  } else {
    const unsigned short bits = static_cast<const unsigned short*>(base)[index];
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
}

__device__ inline float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Arg-max over the warp: larger value wins, equal values go to the lower id. All lanes get the result.
__device__ inline void warp_argmax(float& value, int& id, float& payload) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, value, o);
    const int i = __shfl_xor_sync(0xffffffffu, id, o);
    const float p = __shfl_xor_sync(0xffffffffu, payload, o);
    if (v > value || (v == value && i < id)) {
      value = v;
      id = i;
      payload = p;
    }
  }
}

// Merges (first, second) largest values across the warp.
__device__ inline void warp_top2(float& first, float& second) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float f = __shfl_xor_sync(0xffffffffu, first, o);
    const float s = __shfl_xor_sync(0xffffffffu, second, o);
    second = fmaxf(fminf(first, f), fmaxf(second, s));
    first = fmaxf(first, f);
  }
}

// The top-k of one token by one whole warp (every lane calls it: the shuffles are full-warp).
template <int TOPK, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP, int LOGIT_DTYPE>
__device__ inline void topk_one_token(const RoutingTopkArgs& a, int token, int lane) {
  static_assert(TOPK >= 1 && TOPK <= 32, "one lane holds each selected expert");
  static_assert(EXPERTS_PER_LANE >= 1 && EXPERTS_PER_LANE <= 32, "at most 1024 experts");
  static_assert(N_GROUP >= 1 && N_GROUP <= 64 && TOPK_GROUP >= 1 && TOPK_GROUP <= N_GROUP, "bad grouping");
  const int E = a.num_experts;
  const long long row = static_cast<long long>(token) * a.row_stride;

  float score[EXPERTS_PER_LANE];  // what weights are made of: probability, sigmoid, or raw logit
  float select[EXPERTS_PER_LANE];  // what the top-k ranks: score (+ bias); -inf when not selectable
#pragma unroll
  for (int i = 0; i < EXPERTS_PER_LANE; ++i) {
    const int e = lane + 32 * i;
    score[i] = e < E ? load_logit<LOGIT_DTYPE>(a.logits, row + e) : neg_inf();
  }
  if constexpr (SCORING == kScoringSoftmax) {
    float m = neg_inf();
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i) m = fmaxf(m, score[i]);
    m = warp_max(m);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i) {
      score[i] = lane + 32 * i < E ? __expf(score[i] - m) : 0.f;
      sum += score[i];
    }
    const float inv = 1.f / warp_sum(sum);
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i) score[i] *= inv;
  } else if constexpr (SCORING == kScoringSigmoid) {
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i) score[i] = lane + 32 * i < E ? 1.f / (1.f + __expf(-score[i])) : 0.f;
  }
#pragma unroll
  for (int i = 0; i < EXPERTS_PER_LANE; ++i) {
    const int e = lane + 32 * i;
    select[i] = e < E ? score[i] + (a.correction_bias ? a.correction_bias[e] : 0.f) : neg_inf();
  }

  if constexpr (N_GROUP > 1) {
    // Each element's group, computed once: a run-time division per (group, element) pair made this
    // the slowest kernel of the routing (DeepSeek-V3, ~24 us for one token under ncu).
    const int group_size = E / N_GROUP;
    int group_of[EXPERTS_PER_LANE];
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i) group_of[i] = (lane + 32 * i) / group_size;
    float group_score[N_GROUP];
#pragma unroll
    for (int g = 0; g < N_GROUP; ++g) {
      float first = neg_inf(), second = neg_inf();
#pragma unroll
      for (int i = 0; i < EXPERTS_PER_LANE; ++i) {
        if (lane + 32 * i < E && group_of[i] == g) {
          second = fmaxf(second, fminf(first, select[i]));
          first = fmaxf(first, select[i]);
        }
      }
      warp_top2(first, second);
      group_score[g] = (a.correction_bias != nullptr && group_size > 1) ? first + second : first;
    }
    unsigned long long chosen = 0;  // bit g: group g kept
#pragma unroll
    for (int t = 0; t < TOPK_GROUP; ++t) {
      int best = 0;
      float best_score = neg_inf();
      bool found = false;
#pragma unroll
      for (int g = 0; g < N_GROUP; ++g) {  // constant indices only: group_score stays in registers
        if (!((chosen >> g) & 1ull) && (!found || group_score[g] > best_score)) {
          best = g;
          best_score = group_score[g];
          found = true;
        }
      }
      chosen |= 1ull << best;
    }
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i)
      if (lane + 32 * i < E && !((chosen >> group_of[i]) & 1ull)) select[i] = neg_inf();
  }

  int my_id = 0;        // lane k < TOPK keeps the k-th selection
  float my_weight = 0.f;
  float selected_sum = 0.f;
#pragma unroll 1
  for (int k = 0; k < TOPK; ++k) {
    float best = neg_inf();
    int best_id = 0x7fffffff;
    float best_score = 0.f;
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i) {
      const int e = lane + 32 * i;
      if (e < E && (select[i] > best || best_id == 0x7fffffff)) {  // ascending e: ties keep the lower id
        best = select[i];
        best_id = e;
        best_score = score[i];
      }
    }
    warp_argmax(best, best_id, best_score);
    if (lane == k) {
      my_id = best_id;
      my_weight = best_score;
    }
    selected_sum += best_score;
#pragma unroll
    for (int i = 0; i < EXPERTS_PER_LANE; ++i)
      if (lane + 32 * i == best_id) select[i] = neg_inf();  // taken: never selected again
  }
  // The host guarantees top_k <= selectable experts, so every pick above was a finite score.

  if constexpr (SCORING == kScoringSoftmaxAfterTopk) {
    const float m = warp_max(lane < TOPK ? my_weight : neg_inf());
    const float ex = lane < TOPK ? __expf(my_weight - m) : 0.f;
    my_weight = ex / warp_sum(ex);
  } else if constexpr (RENORMALIZE) {
    my_weight = my_weight / (selected_sum + 1e-20f);
  }
  my_weight *= a.routed_scaling_factor;
  if (lane < TOPK) {
    a.topk_ids[static_cast<long long>(token) * TOPK + lane] = my_id;
    a.topk_weights[static_cast<long long>(token) * TOPK + lane] = my_weight;
  }
}

}  // namespace routing_topk_detail

template <int TOPK, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) routing_topk_kernel(RoutingTopkArgs a) {
  const int token = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (token >= a.num_tokens) return;  // whole warps exit together: shuffles stay full-warp
  routing_topk_detail::topk_one_token<TOPK, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(
      a, token, threadIdx.x & 31);
}

}  // namespace moejit
