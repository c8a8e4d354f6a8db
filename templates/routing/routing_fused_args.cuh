// Arguments of the fused routing kernels (routing_fused.cuh). Plain C++: the host includes this header too.
#pragma once

#include "routing/routing_sort_args.cuh"
#include "routing/routing_topk_args.cuh"

namespace moejit {

struct RoutingFusedArgs {
  RoutingTopkArgs topk;  // its topk_ids / topk_weights are what sort.topk_ids reads
  RoutingSortArgs sort;  // route: num_ctas = 1, error_flags written by the kernel; topk_rank: cta_flags
  // route only: zero_vec4 16-byte words at zero (16-byte aligned) are zeroed while routing (the MoE
  // layer's fp32 accumulator and split-K counters of a small batch, instead of a memset before the
  // launch). 0 = none.
  void* zero;
  long long zero_vec4;
};

// Threads of a routing_fused CTA: a warp per token of the CTA's 32 (one pick chain each: at M <= 32
// the route kernel's time is one token's top-k latency), and E_local <= 1024 for its block scan.
enum : int { kRoutingFusedThreads = 1024 };

// Dynamic shared memory of the one-CTA route kernel: the ranking stage's, plus tile offsets.
MOEJIT_HOST_DEVICE constexpr unsigned routing_fused_smem_bytes(int padded, int local_experts) {
  return routing_rank_smem_bytes(padded, local_experts) + static_cast<unsigned>(local_experts + 1) * 4;
}

}  // namespace moejit
