// routing_fused: top-k (routing_topk.cuh) fused with routing_sort's count stage, in two kernels.
//   route      small batches (num_tokens <= TOKENS, E_local <= 1024): the whole routing in one CTA
//              and one launch. Keys, ranks and counts never leave shared memory; the only global
//              reads are the logits (and bias / expert_map). An earlier version re-read its own
//              global writes between stages and sorted with a bitonic network: ~12 us for one
//              DeepSeek-V3 token on an H200, ~2 us of it global round trips.
//   topk_rank  large batches: CTA c takes tokens [c*TOKENS, (c+1)*TOKENS), picks their experts and
//              ranks the keys like routing_sort's count kernel (same workspace, same TOKENS_PER_CTA),
//              so routing_sort's scan and scatter finish the job: three launches in all.
//   route, few keys  (num_tokens * TOPK <= 32: decode) the same kernel without the ranking stages:
//              warp 0 holds every key, ranks them by match.any, finds each expert's first tile
//              by shuffles and writes the rows, the tile map and the totals itself; the per-expert
//              arrays follow from its <= 32 distinct experts. Two barriers instead of ~8 (the
//              block-wide rank, scan and tile search cost ~3 us of the ~5 us this kernel took for
//              one gpt-oss-120b token on an H100; the top-k itself ~1.5 us).
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

// The few-keys route (num_tokens * TOPK <= 32; every thread calls it). Warp t routes token t; warp 0
// then holds key i in lane i. Expert leader lanes (the lowest lane of each expert) describe their
// expert in one word: local expert << 12 | rows << 6 | tiles (E_local <= 1024, rows and tiles <= 32).
template <int TOPK, int NUM_EXPERTS, int EXPERTS_PER_LANE, int SCORING, bool RENORMALIZE, int N_GROUP, int TOPK_GROUP,
          int LOGIT_DTYPE>
__device__ inline void route_few_keys(const RoutingFusedArgs& args, int* keys, int* key_flags, unsigned* leaders) {
  const RoutingSortArgs& s = args.sort;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slots = s.num_tokens * TOPK;
  if (warp < s.num_tokens) {
    const int id = routing_topk_detail::topk_one_token<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE,
                                                       N_GROUP, TOPK_GROUP, LOGIT_DTYPE>(args.topk, warp, lane);
    if (lane < TOPK) {
      int flags = 0;  // per key: no shared word to zero (and wait for) before the top-k
      keys[warp * TOPK + lane] = routing_sort_detail::local_expert_flagged(s, id, flags);
      key_flags[warp * TOPK + lane] = flags;
    }
  }
  __syncthreads();
  if (warp == 0) {
    const int e = lane < slots ? keys[lane] : -1;
    const int flags = __reduce_or_sync(0xffffffffu, lane < slots ? key_flags[lane] : 0);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));  // stable: lanes are slots in token order
    const int count = __popc(peers);
    const bool leader = e >= 0 && rank == 0;
    const int tiles = leader ? (count + s.block_m - 1) / s.block_m : 0;
    const unsigned word = leader ? static_cast<unsigned>(e) << 12 | static_cast<unsigned>(count) << 6 | tiles : ~0u;
    int first_tile = 0;  // tiles of the experts below this lane's
#pragma unroll 8
    for (int j = 0; j < 32; ++j) {
      const unsigned other = __shfl_sync(0xffffffffu, word, j);
      if (other != ~0u && static_cast<int>(other >> 12) < e) first_tile += other & 63u;
    }
    const int total_tiles = __reduce_add_sync(0xffffffffu, tiles);
    const int routed = __reduce_add_sync(0xffffffffu, leader ? count : 0);
    leaders[lane] = word;
    if (e >= 0) {
      const int row = first_tile * s.block_m + rank;
      s.gather_index[row] = lane;
      s.scatter_index[lane] = row;
    } else if (lane < slots) {
      s.scatter_index[lane] = -1;  // dropped: not on this rank, contributes zero
    }
    if (leader) {
      for (int i = 0; i < tiles; ++i) {
        s.tile_expert[first_tile + i] = e;
        s.tile_rows[first_tile + i] = min(s.block_m, count - i * s.block_m);
      }
      for (int r = first_tile * s.block_m + count; r < (first_tile + tiles) * s.block_m; ++r) s.gather_index[r] = -1;
    }
    if (lane == 0) {
      s.totals[0] = routed;
      s.totals[1] = total_tiles * s.block_m;
      s.totals[2] = total_tiles;
      for (int c = 0; c < kRoutingWorkCounters; ++c) s.totals[3 + c] = 0;
      *s.error_flags = flags;
    }
  }
  __syncthreads();
  // Per-expert counts and (padded) offsets of every local expert, from the <= 32 leader words.
  const int E = s.num_local_experts;
  for (int x = threadIdx.x; x <= E; x += kThreads) {
    int count = 0, rows_below = 0, tiles_below = 0;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) {
      const unsigned w = leaders[j];
      if (w == ~0u) continue;
      const int ex = static_cast<int>(w >> 12);
      if (ex < x) {
        rows_below += (w >> 6) & 63u;
        tiles_below += w & 63u;
      } else if (ex == x) {
        count = (w >> 6) & 63u;
      }
    }
    if (x < E) s.expert_counts[x] = count;
    s.expert_offsets[x] = rows_below;
    s.padded_offsets[x] = tiles_below * s.block_m;
  }
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
  if (s.num_tokens * TOPK <= 32) {  // uniform over the CTA: both paths' barriers are whole-CTA
    __shared__ int key_flags[32];
    __shared__ unsigned leaders[32];
    static_assert(PADDED >= 32, "keys[] holds the few-keys path's 32 keys");
    routing_fused_detail::route_few_keys<TOPK, NUM_EXPERTS, EXPERTS_PER_LANE, SCORING, RENORMALIZE, N_GROUP,
                                         TOPK_GROUP, LOGIT_DTYPE>(args, keys, key_flags, leaders);
    pdl::wait();  // see the end of the kernel
    return;
  }
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
  // Launched beside the previous kernel (Router::route's beside_previous: the MoE layer's fp8 x
  // quantization), this kernel ends only after it, so that the kernels waiting for this one (GEMM1)
  // find that one's results too. Launched after it, this returns at once.
  pdl::wait();
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
  pdl::wait();  // as routing_fused_kernel's end: the scan after this kernel then follows the one before it too
}

}  // namespace moejit
