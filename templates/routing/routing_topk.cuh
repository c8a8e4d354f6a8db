// routing_topk: router logits [M, E] -> top-k expert ids [M, TOPK] (int32) and weights (fp32).
// One warp per token; lane l holds the EXPERTS_PER_LANE consecutive experts l*EPL .. l*EPL+EPL-1,
// so lane order is expert order. Selection is an iterated warp arg-max on order-preserving 32-bit
// keys: one redux.sync max, one ballot (the lowest tied lane holds the lowest id: ties go to the
// lower expert id, deterministically) and one shuffle per pick, and only the winning lane rescans
// its experts. An earlier version with a 15-shuffle (value, id, payload) butterfly per pick and
// strided experts ran ~2900 instructions per DeepSeek-V3 token (~10 us for one token on an H200).
// Grouped top-k (DeepSeek): the N_GROUP contiguous groups are ranked by the sum of their top-2
// biased scores when a correction bias is given, else by their max; experts outside the
// TOPK_GROUP best groups are masked before the top-k.
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

// Loads EPL consecutive values starting at element `first` of `base` (LOGIT_DTYPE elements) as
// floats, with 16/8/4-byte loads when the lane's span is aligned (one 16-byte load for DeepSeek-V3's
// 8 bf16 logits instead of 8 loads), else one load per element. Experts at or past E read -inf.
template <int LOGIT_DTYPE, int EPL, int E>
__device__ inline void load_lane(const void* base, long long first, int first_expert, float (&out)[EPL]) {
  constexpr int kElem = LOGIT_DTYPE == kLogitF32 ? 4 : 2;
  constexpr int kBytes = EPL * kElem;
  constexpr int kVec = kBytes % 16 == 0 ? 16 : kBytes % 8 == 0 ? 8 : kBytes % 4 == 0 ? 4 : 0;
  if constexpr (kVec > 0 && E % EPL == 0) {  // a lane's experts are all valid or all past E
    const char* p = static_cast<const char*>(base) + first * kElem;
    if (reinterpret_cast<unsigned long long>(p) % kVec == 0) {
      if (first_expert >= E) {
#pragma unroll
        for (int i = 0; i < EPL; ++i) out[i] = neg_inf();
        return;
      }
      unsigned int words[kBytes / 4];
#pragma unroll
      for (int v = 0; v < kBytes / kVec; ++v) {
        if constexpr (kVec == 16) {
          const uint4 q = reinterpret_cast<const uint4*>(p)[v];
          words[4 * v] = q.x;
          words[4 * v + 1] = q.y;
          words[4 * v + 2] = q.z;
          words[4 * v + 3] = q.w;
        } else if constexpr (kVec == 8) {
          const uint2 q = reinterpret_cast<const uint2*>(p)[v];
          words[2 * v] = q.x;
          words[2 * v + 1] = q.y;
        } else {
          words[v] = reinterpret_cast<const unsigned int*>(p)[v];
        }
      }
#pragma unroll
      for (int i = 0; i < EPL; ++i) {
        if constexpr (LOGIT_DTYPE == kLogitF32) {
          out[i] = __uint_as_float(words[i]);
        } else {
          const unsigned short bits = static_cast<unsigned short>(words[i / 2] >> (16 * (i % 2)));  // little endian
          if constexpr (LOGIT_DTYPE == kLogitBF16) {
            out[i] = __uint_as_float(static_cast<unsigned int>(bits) << 16);
          } else {
            float f;
            asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
            out[i] = f;
          }
        }
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < EPL; ++i) out[i] = first_expert + i < E ? load_logit<LOGIT_DTYPE>(base, first + i) : neg_inf();
}

// Order-preserving map float -> uint32 (a > b  <=>  key(a) > key(b)): negative floats have every
// bit flipped, others only the sign bit (one shift and one LOP3). Key 0 is below every non-NaN
// float's key: it marks "not selectable". -0 would map one below +0; callers add +0.0f first
// (select = score + bias, bias +0 when absent), which turns -0 into +0 so equal scores tie.
__device__ inline unsigned int ordered_key(float f) {
  const unsigned int u = __float_as_uint(f);
  return u ^ (static_cast<unsigned int>(static_cast<int>(u) >> 31) | 0x80000000u);
}
__device__ inline float key_value(unsigned int k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// e^x as one FMUL + MUFU.EX2 (flush-to-zero: __expf adds denormal range fix-ups around it).
__device__ inline float fast_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}

// One MUFU.RCP instead of an IEEE division (~10 instructions with its slow-path check) per expert.
__device__ inline float sigmoid(float x) { return __fdividef(1.f, 1.f + fast_exp(-x)); }

// (A -0 maximum may come back as +0: the same value.)
__device__ inline float warp_max(float v) { return key_value(__reduce_max_sync(0xffffffffu, ordered_key(v))); }

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
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

template <int EPL>
__device__ inline void lane_top2(const float (&select)[EPL], int first_expert, int E, float& first, float& second) {
  first = neg_inf();
  second = neg_inf();
#pragma unroll
  for (int i = 0; i < EPL; ++i)
    if (first_expert + i < E) {
      second = fmaxf(second, fminf(first, select[i]));
      first = fmaxf(first, select[i]);
    }
}

// Grouped top-k for shapes where a lane's experts straddle groups: one warp reduction per group.
template <int E, int EPL, int N_GROUP, int TOPK_GROUP>
__device__ inline void mask_groups_general(const float (&select)[EPL], unsigned int (&key)[EPL], int lane,
                                           bool biased) {
  constexpr int group_size = E / N_GROUP;
  const int first_expert = lane * EPL;
  float group_score[N_GROUP];
#pragma unroll
  for (int g = 0; g < N_GROUP; ++g) {
    float first = neg_inf(), second = neg_inf();
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int e = first_expert + i;
      if (e < E && e / group_size == g) {
        second = fmaxf(second, fminf(first, select[i]));
        first = fmaxf(first, select[i]);
      }
    }
    warp_top2(first, second);
    group_score[g] = (biased && group_size > 1) ? first + second : first;
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
  for (int i = 0; i < EPL; ++i) {
    const int e = first_expert + i;
    if (e < E && !((chosen >> (e / group_size)) & 1ull)) key[i] = 0;
  }
}

// Grouped top-k: clears the keys of experts outside the TOPK_GROUP best groups. Every lane calls it.
template <int E, int EPL, int N_GROUP, int TOPK_GROUP>
__device__ inline void mask_groups(const float (&select)[EPL], unsigned int (&key)[EPL], int lane, bool biased) {
  constexpr int group_size = E / N_GROUP;
  const int first_expert = lane * EPL;
  if constexpr (group_size % EPL == 0) {
    // Each lane's experts lie in one group; group g is lanes [g*lpg, (g+1)*lpg). Gathering the
    // group's lanes in a fixed order gives every lane of the group the same score.
    constexpr int lpg = group_size / EPL;
    const int g = lane / lpg;
    float lf, ls;
    lane_top2<EPL>(select, first_expert, E, lf, ls);
    float first = lf, second = ls;
    if constexpr ((lpg & (lpg - 1)) == 0) {
      // Aligned power-of-two lane segments: a butterfly inside the segment (max/min are exact, so
      // every lane ends with the same pair).
#pragma unroll
      for (int o = 1; o < lpg; o <<= 1) {
        const float f = __shfl_xor_sync(0xffffffffu, first, o);
        const float s = __shfl_xor_sync(0xffffffffu, second, o);
        second = fmaxf(fminf(first, f), fmaxf(second, s));
        first = fmaxf(first, f);
      }
    } else {
      first = neg_inf();
      second = neg_inf();
#pragma unroll
      for (int j = 0; j < lpg; ++j) {
        const int src = (g * lpg + j) & 31;  // lanes past the last group read anything: never used
        const float f = __shfl_sync(0xffffffffu, lf, src);
        const float s = __shfl_sync(0xffffffffu, ls, src);
        second = fmaxf(fminf(first, f), fmaxf(second, s));
        first = fmaxf(first, f);
      }
    }
    const float score = (biased && group_size > 1) ? first + second : first;
    // Keep the TOPK_GROUP best groups: one redux + ballot per kept group (or per dropped group,
    // whichever is fewer). Equal scores go to the lower group, i.e. the lower lane. (Counting each
    // group's rank by N_GROUP shuffles and float compares cost ~75 instructions per token.)
    const unsigned int gkey = ordered_key(score + 0.0f);
    const bool real_group = g < N_GROUP;  // lanes past the last group (32 % lpg) hold no experts
    bool keep;
    if constexpr (TOPK_GROUP <= N_GROUP - TOPK_GROUP) {
      keep = false;
#pragma unroll 1
      for (int t = 0; t < TOPK_GROUP; ++t) {
        const unsigned int candidate = real_group && !keep ? gkey : 0u;
        const unsigned int top = __reduce_max_sync(0xffffffffu, candidate);
        const int first_lane = __ffs(__ballot_sync(0xffffffffu, real_group && !keep && gkey == top)) - 1;
        keep = keep || g == first_lane / lpg;
      }
    } else {
      keep = real_group;
#pragma unroll 1
      for (int t = 0; t < N_GROUP - TOPK_GROUP; ++t) {  // drop the worst: lowest score, then highest group
        const unsigned int candidate = keep ? gkey : 0xffffffffu;
        const unsigned int bottom = __reduce_min_sync(0xffffffffu, candidate);
        const int last_lane = 31 - __clz(__ballot_sync(0xffffffffu, keep && gkey == bottom));
        keep = keep && g != last_lane / lpg;
      }
    }
    if (!keep) {
#pragma unroll
      for (int i = 0; i < EPL; ++i) key[i] = 0;
    }
  } else {
    mask_groups_general<E, EPL, N_GROUP, TOPK_GROUP>(select, key, lane, biased);
  }
}
// The top-k of one token by one whole warp (every lane calls it: the reductions are full-warp).
// Writes ids and weights; returns the id of pick `lane` on lanes < TOPK (-1 on the others).
template <int TOPK, int NUM_EXPERTS, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE>
__device__ inline int topk_one_token(const RoutingTopkArgs& a, int token, int lane) {
  constexpr int EPL = EXPERTS_PER_LANE;
  constexpr int E = NUM_EXPERTS;  // compile-time: group shapes and the tail masks fold away
  static_assert(TOPK >= 1 && TOPK <= 32, "one lane holds each selected expert");
  static_assert(EPL >= 1 && EPL <= 32, "at most 1024 experts");
  static_assert(N_GROUP >= 1 && N_GROUP <= 64 && TOPK_GROUP >= 1 && TOPK_GROUP <= N_GROUP, "bad grouping");
  static_assert(E >= 1 && E <= 32 * EPL && E % N_GROUP == 0, "E must fit the lanes and split into groups");
  const int first_expert = lane * EPL;
  const long long row = static_cast<long long>(token) * a.row_stride;

  float score[EPL];  // what weights are made of: probability, sigmoid, or raw logit
  load_lane<LOGIT_DTYPE, EPL, E>(a.logits, row + first_expert, first_expert, score);
  // The bias is loaded with the logits (both in flight together), except for the widest routers
  // (more than 16 experts per lane), where a second array of them would spill.
  constexpr bool kPreloadBias = EPL <= 16;
  float bias[kPreloadBias ? EPL : 1];
  if constexpr (kPreloadBias)
    if (a.correction_bias) load_lane<kLogitF32, EPL, E>(a.correction_bias, first_expert, first_expert, bias);
  float softmax_max = 0.f, softmax_inv = 1.f;
  if constexpr (SCORING == kScoringSoftmax) {
    float m = neg_inf();
#pragma unroll
    for (int i = 0; i < EPL; ++i) m = fmaxf(m, score[i]);
    softmax_max = warp_max(m);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      score[i] = first_expert + i < E ? fast_exp(score[i] - softmax_max) : 0.f;
      sum += score[i];
    }
    softmax_inv = __fdividef(1.f, warp_sum(sum));
#pragma unroll
    for (int i = 0; i < EPL; ++i) score[i] *= softmax_inv;
  } else if constexpr (SCORING == kScoringSigmoid) {
#pragma unroll
    for (int i = 0; i < EPL; ++i) score[i] = first_expert + i < E ? sigmoid(score[i]) : 0.f;
  }
  float select[EPL];     // what the top-k ranks: score (+ bias)
  unsigned int key[EPL];  // ordered_key(select); 0 = not selectable
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = first_expert + i;
    float b = 0.f;
    if (a.correction_bias) {
      if constexpr (kPreloadBias) b = bias[i];
      else b = e < E ? a.correction_bias[e] : 0.f;
    }
    select[i] = e < E ? score[i] + b : neg_inf();
    key[i] = e < E ? ordered_key(select[i]) : 0u;
  }
  if constexpr (N_GROUP > 1) mask_groups<E, EPL, N_GROUP, TOPK_GROUP>(select, key, lane, a.correction_bias != nullptr);

  // This lane's two best remaining keys and their indices (the lower index first on ties). A pick
  // takes the winner's best; its second becomes its best, and only a lane that wins again rescans
  // its experts (for DeepSeek-V3 ~1.5 rescans per token instead of one per pick).
  unsigned int taken = 0;  // bit i: expert first_expert + i picked
  unsigned int best = 0, second = 0;
  int best_i = 0, second_i = 0;
  auto rescan = [&]() {
    best = second = 0;
    best_i = second_i = 0;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const unsigned int k = (taken >> i) & 1u ? 0u : key[i];
      if (k > best) {
        second = best;
        second_i = best_i;
        best = k;
        best_i = i;
      } else if (k > second) {
        second = k;
        second_i = i;
      }
    }
  };
  rescan();
  bool second_known = true;
  int my_id = -1;  // lane k < TOPK keeps pick k
#pragma unroll 1
  for (int k = 0; k < TOPK; ++k) {
    const unsigned int top = __reduce_max_sync(0xffffffffu, best);
    const int winner = __ffs(__ballot_sync(0xffffffffu, best == top)) - 1;  // lowest lane: lowest id
    const int id = winner * EPL + __shfl_sync(0xffffffffu, best_i, winner);
    if (lane == k) my_id = id;
    if (lane == winner) {
      taken |= 1u << best_i;
      if (second_known) {
        best = second;
        best_i = second_i;
        second_known = false;
      } else {
        rescan();
        second_known = true;
      }
    }
  }
  // The host guarantees top_k <= selectable experts, so every pick was a real expert.

  // Pick k's weight, recomputed by lane k from its logit with the same operations as above (the
  // logit is an L1 hit), instead of carrying scores through the selection loop.
  float w = 0.f;
  if (lane < TOPK) {
    const float x = load_logit<LOGIT_DTYPE>(a.logits, row + my_id);
    if constexpr (SCORING == kScoringSoftmax) w = fast_exp(x - softmax_max) * softmax_inv;
    else if constexpr (SCORING == kScoringSigmoid) w = sigmoid(x);
    else w = x;
  }
  if constexpr (SCORING == kScoringSoftmaxAfterTopk) {
    const float m = warp_max(lane < TOPK ? w : neg_inf());
    const float ex = lane < TOPK ? fast_exp(w - m) : 0.f;
    w = __fdividef(ex, warp_sum(ex));
  } else if constexpr (RENORMALIZE) {
    w = __fdividef(w, warp_sum(w) + 1e-20f);  // IEEE division's slow path ran for every token
  }
  w *= a.routed_scaling_factor;
  if (lane < TOPK) {
    a.topk_ids[static_cast<long long>(token) * TOPK + lane] = my_id;
    a.topk_weights[static_cast<long long>(token) * TOPK + lane] = w;
  }
  return my_id;
}

}  // namespace routing_topk_detail

template <int TOPK, int NUM_EXPERTS, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) routing_topk_kernel(RoutingTopkArgs a) {
  const int token = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (token >= a.num_tokens) return;  // whole warps exit together: reductions stay full-warp
  routing_topk_detail::topk_one_token<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP,
                                      LOGIT_DTYPE>(
      a, token, threadIdx.x & 31);
}

}  // namespace moejit
