// routing_fused: the whole routing of a small batch (num_tokens <= TOKENS, E_local <= 512) in one
// CTA of 512 threads (1024 would cap registers at 64 and spill) and one launch — top-k (one warp per token), then count, scan and scatter of
// routing_sort over the single CTA's TOKENS * TOPK keys (bitonic width PADDED = next_pow2 of that).
// Five launches (memset + 4 kernels) cost ~15 us at M = 1 on an H200 whatever the work; this path
// is one. Global writes are ordered for the next stage by __syncthreads (same CTA).
#pragma once

#include "routing/routing_fused_args.cuh"
#include "routing/routing_sort.cuh"
#include "routing/routing_topk.cuh"

namespace moejit {

template <int TOPK, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE, int TOKENS, int PADDED>
__global__ void __launch_bounds__(512) routing_fused_kernel(const RoutingFusedArgs args) {
  constexpr int kThreads = 512;  // the host sends only E_local <= kThreads here (the scan's rule)
  static_assert(PADDED <= 2 * kThreads, "one compare-exchange per thread per bitonic step");
  extern __shared__ int smem[];  // scan: 2 * kThreads + E_local + 34 ints; count / scatter use less
  const RoutingSortArgs& s = args.sort;
  if (threadIdx.x == 0) *s.error_flags = 0;
  const int lane = threadIdx.x & 31;
  for (int token = threadIdx.x >> 5; token < args.topk.num_tokens; token += kThreads / 32)
    routing_topk_detail::topk_one_token<TOPK, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP,
                                        LOGIT_DTYPE>(args.topk, token, lane);
  __syncthreads();  // ids visible to the whole CTA; error flag cleared before anyone sets it
  routing_sort_detail::count_cta<TOPK, TOKENS, PADDED, kThreads>(s, 0, smem);
  __syncthreads();
  routing_sort_detail::scan_all<kThreads>(s, smem);
  __syncthreads();
  routing_sort_detail::scatter_cta<TOPK, TOKENS, PADDED, kThreads>(s, 0, smem);
}

}  // namespace moejit
