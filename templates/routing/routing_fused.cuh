// routing_fused: top-k (routing_topk.cuh) fused with routing_sort's count stage, in two kernels.
//   route      small batches (num_tokens <= TOKENS, E_local <= 1024): the whole routing in one CTA
//              and one launch. Keys, ranks and counts never leave shared memory; the only global
//              reads are the logits (and bias / expert_map). An earlier version re-read its own
//              global writes between stages and sorted with a bitonic network: ~12 us for one
//              DeepSeek-V3 token on an H200, ~2 us of it global round trips.
//   topk_rank  large batches: CTA c takes tokens [c*TOKENS, (c+1)*TOKENS), picks their experts and
//              ranks the keys like routing_sort's count kernel (same workspace, same TOKENS_PER_CTA),
//              so routing_sort's scan and scatter finish the job: three launches in all.
// CTAs of kRoutingFusedThreads threads; one warp per token.
#pragma once

#include "routing/routing_fused_args.cuh"
#include "routing/routing_sort.cuh"
#include "routing/routing_topk.cuh"

namespace moejit {
namespace routing_fused_detail {

inline constexpr int kThreads = kRoutingFusedThreads;

// The first half of both kernels: top-k of CTA `cta`'s tokens, their keys (local experts; -1 for
// the masked tail and dropped experts) in keys[PADDED], then each key's stable rank inside its
// expert and the CTA's count per expert (routing_sort's rank_cta). Invalid ids set bits in *flags.
template <int TOPK, int NUM_EXPERTS, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE, int TOKENS, int PADDED>
__device__ inline void select_and_rank(const RoutingFusedArgs& args, int cta, int* keys, int* rank,
                                       unsigned short* table, int* expert_total, int* flags) {
  static_assert(routing_sort_detail::Shape<TOPK, TOKENS, PADDED>::BLOCK > 0, "shape checks");
  if (threadIdx.x == 0) *flags = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int first_token = cta * TOKENS;
  const int tokens = min(TOKENS, args.topk.num_tokens - first_token);
  for (int i = tokens * TOPK + threadIdx.x; i < PADDED; i += kThreads) keys[i] = -1;
  for (int t = threadIdx.x >> 5; t < tokens; t += kThreads / 32) {
    const int id = routing_topk_detail::topk_one_token<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP,
                                                       TOPK_GROUP, LOGIT_DTYPE>(args.topk, first_token + t, lane);
    if (lane < TOPK) keys[t * TOPK + lane] = routing_sort_detail::local_expert(args.sort, id, flags);
  }
  // rank_cta starts with the barrier that makes keys visible.
  routing_sort_detail::rank_cta<PADDED, kThreads>(keys, rank, table, expert_total, args.sort.num_local_experts);
}

}  // namespace routing_fused_detail

template <int TOPK, int NUM_EXPERTS, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE, int TOKENS, int PADDED>
__global__ void __launch_bounds__(routing_fused_detail::kThreads) routing_fused_kernel(const RoutingFusedArgs args) {
  constexpr int kThreads = routing_fused_detail::kThreads;
  __shared__ int keys[PADDED];
  __shared__ int rank[PADDED];
  __shared__ unsigned long long scratch[33];  // block-scan scratch
  __shared__ int flags;
  extern __shared__ int smem[];  // routing_fused_smem_bytes(PADDED, E_local)
  const RoutingSortArgs& s = args.sort;
  const int E = s.num_local_experts;  // <= kThreads (the block scan over experts); the host checks
  int* expert_total = smem;                  // [E]
  int* tile_offsets = smem + E;              // [E + 1]
  unsigned short* table = reinterpret_cast<unsigned short*>(smem + 2 * E + 1);
  pdl::launch_dependents();  // the MoE layer's GEMM1 waits for this kernel on the device
  // At M = 1 only warp 0 picks experts; the others' stores are off the critical path.
  for (long long i = threadIdx.x; i < args.zero_vec4; i += kThreads)
    reinterpret_cast<uint4*>(args.zero)[i] = make_uint4(0u, 0u, 0u, 0u);
  routing_fused_detail::select_and_rank<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP,
                                        LOGIT_DTYPE, TOKENS, PADDED>(args, 0, keys, rank, table, expert_total, &flags);
  for (int e = threadIdx.x; e < E; e += kThreads) s.expert_counts[e] = expert_total[e];
  routing_sort_detail::write_offsets_and_tiles<kThreads>(s, expert_total, tile_offsets, scratch, true, 0, 1);
  // Rows straight from shared memory: padded offset (tile offset * block_m) + rank.
  const int total = s.num_tokens * TOPK;
  for (int i = threadIdx.x; i < total; i += kThreads) {
    const int e = keys[i];
    if (e < 0) {
      s.scatter_index[i] = -1;  // dropped: not on this rank, contributes zero
      continue;
    }
    const int row = tile_offsets[e] * s.block_m + rank[i];
    s.gather_index[row] = i;
    s.scatter_index[i] = row;
  }
  if (threadIdx.x == 0) *s.error_flags = flags;
}

template <int TOPK, int NUM_EXPERTS, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE, int TOKENS, int PADDED>
__global__ void __launch_bounds__(routing_fused_detail::kThreads) routing_topk_rank_kernel(const RoutingFusedArgs args) {
  constexpr int kThreads = routing_fused_detail::kThreads;
  __shared__ int keys[PADDED];
  __shared__ int rank[PADDED];
  __shared__ int flags;
  extern __shared__ int smem[];  // routing_rank_smem_bytes(PADDED, E_local)
  int* expert_total = smem;
  unsigned short* table = reinterpret_cast<unsigned short*>(smem + args.sort.num_local_experts);
  pdl::launch_dependents();  // the scan waits for this kernel on the device
  routing_fused_detail::select_and_rank<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP, TOPK_GROUP,
                                        LOGIT_DTYPE, TOKENS, PADDED>(args, blockIdx.x, keys, rank, table, expert_total,
                                                                     &flags);
  routing_sort_detail::publish_cta<TOPK, TOKENS, kThreads>(args.sort, blockIdx.x, keys, rank, expert_total, flags);
}

}  // namespace moejit
