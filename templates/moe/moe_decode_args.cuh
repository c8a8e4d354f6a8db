// Arguments and constants of the decode GEMV kernels (moe_decode_gemv.cuh): the whole fused MoE
// layer for a few tokens in two launches, routing included. Plain C++: the host includes this too.
#pragma once

#include "routing/routing_topk_args.cuh"

namespace moejit {

// Threads per CTA of both kernels; tokens one forward may have (one routing warp per token).
enum : int { kMoeDecodeThreads = 256, kMoeDecodeMaxTokens = 8 };

struct MoeDecodeArgs {
  // Routing. topk.logits non-null: every CTA picks the experts from the logits itself (its
  // topk_ids / topk_weights are ignored: the kernels keep the picks in shared memory); null: the
  // caller's given_ids / given_weights [num_tokens, TOPK].
  RoutingTopkArgs topk;
  const int* given_ids;
  const float* given_weights;
  const int* expert_map;  // [num_experts] global -> local (-1 = not here, dropped); null = identity
  int num_local_experts;
  int num_tokens;  // 1 .. kMoeDecodeMaxTokens
  // CTA 0 of gemv1 publishes the routing for routing_result / experts_touched / error flags.
  int* topk_ids;       // [num_tokens, TOPK] global ids
  float* topk_weights;  // [num_tokens, TOPK]
  int* expert_counts;  // [num_local_experts] routed slots per local expert
  int* error_flags;    // RoutingErrorFlags bits
  // Experts (row-major, reduction dim contiguous; strides in elements).
  const void* x;  // [num_tokens, ldx] DTYPE
  long long ldx;
  const void* w1;  // [E_local, W1 rows, K]
  long long w1_expert_stride, ldw1;
  const float* b1;  // [E_local, b1_expert_stride] or null
  long long b1_expert_stride;
  const void* w2;  // [E_local, K, N]
  long long w2_expert_stride, ldw2;
  const float* b2;  // [E_local, b2_expert_stride] or null
  long long b2_expert_stride;
  void* inter;  // [num_tokens * TOPK, N] DTYPE, by routed slot (gemv1 writes, gemv2 reads)
  void* out;    // [num_tokens, ldo] DTYPE
  long long ldo;
  int weight_on_input;  // router weight scales GEMM1's product (before bias) instead of GEMM2's result
  float alpha, limit;   // swigluoai / swiglustep
};

}  // namespace moejit
