// routing_sort: topk ids -> per-expert counts, offsets, a gather index sorted by expert (stable by
// token*TOPK+slot), its inverse (scatter index) and a tile map padded to block_m rows per expert.
//
// Three kernels, no host synchronization between them (CUDA-graph capturable):
//   count   grid = num_ctas: per-CTA histogram of TOKENS_PER_CTA*TOPK keys        -> cta_counts
//   scan    grid = 1:       per-expert prefix over CTAs, prefix over experts, tiles -> offsets, tiles
//   scatter grid = num_ctas: block-wide sort of the CTA's keys, rank inside expert  -> gather/scatter
// Each CTA owns BLOCK = TOKENS_PER_CTA*TOPK consecutive keys and sorts them with a bitonic network of
// width PADDED = next_pow2(BLOCK); keys at positions >= BLOCK are masked and sort last. PADDED is
// computed by the host, so any TOPK (3, 5, 6, 7, ...) works by construction.
#pragma once

#include "common/bitonic_sort.cuh"
#include "common/block_scan.cuh"
#include "routing/routing_sort_args.cuh"

namespace moejit {
namespace routing_sort_detail {

// Enumerators, not constexpr variables: namespace-scope variables are emitted into the module under
// names NVRTC derives per compile, which would make identical sources give different cubins.
enum : unsigned int {
  kPosBits = 13,                    // position inside a CTA's keys: < 8192
  kPosMask = (1u << kPosBits) - 1,
  kMaskedKey = 0xffffffffu,         // tail and dropped keys: expert field >= E_local
  kScanThreads = 1024,
};

template <int TOPK, int TOKENS_PER_CTA, int PADDED>
struct Shape {
  enum : int { BLOCK = TOPK * TOKENS_PER_CTA };  // keys per CTA
  static_assert(TOPK >= 1 && TOKENS_PER_CTA >= 1, "TOPK and TOKENS_PER_CTA must be positive");
  static_assert((PADDED & (PADDED - 1)) == 0, "PADDED must be a power of two");
  static_assert(PADDED >= BLOCK && PADDED < 2 * BLOCK + 1, "PADDED must be next_pow2(BLOCK)");
  static_assert(PADDED <= (1 << kPosBits), "too many keys per CTA for the key encoding");
};

// Global expert id -> local id, or -1 when the expert is not local (dropped). Invalid input is
// flagged for the host and dropped: never an out-of-bounds access.
__device__ inline int local_expert(const RoutingSortArgs& a, int id) {
  if (id < 0 || id >= a.num_experts) {
    atomicOr(a.error_flags, kRoutingBadExpertId);
    return -1;
  }
  if (a.expert_map == nullptr) return id;
  const int local = a.expert_map[id];
  if (local < -1 || local >= a.num_local_experts) {
    atomicOr(a.error_flags, kRoutingBadExpertMap);
    return -1;
  }
  return local;
}

}  // namespace routing_sort_detail

// The three stages as device functions over one CTA's share (`cta`), so that the fused small-batch
// kernel (routing_fused.cuh) runs them back to back in one CTA; the kernels below wrap them.
namespace routing_sort_detail {

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__device__ inline void count_cta(const RoutingSortArgs& a, int cta, int* hist /* [E_local] shared */) {
  using S = Shape<TOPK, TOKENS_PER_CTA, PADDED>;
  for (int e = threadIdx.x; e < a.num_local_experts; e += THREADS) hist[e] = 0;
  __syncthreads();
  const long long base = static_cast<long long>(cta) * S::BLOCK;
  const long long total = static_cast<long long>(a.num_tokens) * TOPK;
  for (int i = threadIdx.x; i < S::BLOCK; i += THREADS) {
    if (base + i >= total) break;
    const int e = local_expert(a, a.topk_ids[base + i]);
    if (e >= 0) atomicAdd(&hist[e], 1);  // counts only: order does not matter here
  }
  __syncthreads();
  int* row = a.cta_counts + static_cast<long long>(cta) * a.num_local_experts;
  for (int e = threadIdx.x; e < a.num_local_experts; e += THREADS) row[e] = hist[e];
}

// One CTA of kThreads threads (>= E). Thread t works on expert t % E over chunk t / E of the CTA
// rows, so loads of one row are coalesced across consecutive threads. Shared memory:
// 2 * kThreads + E + 34 ints.
template <int kThreads>
__device__ inline void scan_all(const RoutingSortArgs& a, int* smem) {
  int* chunk_sum = smem;                      // [chunks * E]
  int* chunk_base = smem + kThreads;          // [chunks * E]
  int* tile_offsets = smem + 2 * kThreads;    // [E + 1] first tile of each expert
  int* scan_scratch = tile_offsets + a.num_local_experts + 1;  // [33]

  const int E = a.num_local_experts;
  const int chunks = kThreads / E;  // >= 1: the host keeps E <= kThreads
  const int tid = threadIdx.x;
  const int e = tid % E;
  const int chunk = tid / E;
  const bool worker = chunk < chunks;
  const int per_chunk = (a.num_ctas + chunks - 1) / chunks;
  const int cta_begin = worker ? min(a.num_ctas, chunk * per_chunk) : 0;
  const int cta_end = worker ? min(a.num_ctas, cta_begin + per_chunk) : 0;

  // 1. Sum of each (expert, chunk).
  int sum = 0;
  for (int c = cta_begin; c < cta_end; ++c) sum += a.cta_counts[static_cast<long long>(c) * E + e];
  if (worker) chunk_sum[chunk * E + e] = sum;
  __syncthreads();
  // 2. Exclusive prefix over chunks, per expert (E threads, at most 1024 / E chunks each).
  int expert_total = 0;
  if (tid < E) {
    for (int c = 0; c < chunks; ++c) {
      chunk_base[c * E + tid] = expert_total;
      expert_total += chunk_sum[c * E + tid];
    }
  }
  __syncthreads();
  // 3. Rewrite cta_counts in place as each CTA's first row inside its expert.
  int running = worker ? chunk_base[chunk * E + e] : 0;
  for (int c = cta_begin; c < cta_end; ++c) {
    int* cell = a.cta_counts + static_cast<long long>(c) * E + e;
    const int count = *cell;
    *cell = running;
    running += count;
  }
  // 4. Prefix over experts: unpadded offsets, padded offsets and tiles.
  const int count = tid < E ? expert_total : 0;
  const int tiles = (count + a.block_m - 1) / a.block_m;
  int routed = 0;
  int total_tiles = 0;
  const int offset = block_exclusive_sum<kThreads>(count, scan_scratch, &routed);
  const int tile_offset = block_exclusive_sum<kThreads>(tiles, scan_scratch, &total_tiles);
  if (tid < E) {
    a.expert_counts[tid] = count;
    a.expert_offsets[tid] = offset;
    a.padded_offsets[tid] = tile_offset * a.block_m;
    tile_offsets[tid] = tile_offset;
  }
  if (tid == 0) {
    a.expert_offsets[E] = routed;
    a.padded_offsets[E] = total_tiles * a.block_m;
    tile_offsets[E] = total_tiles;
    a.totals[0] = routed;
    a.totals[1] = total_tiles * a.block_m;
    a.totals[2] = total_tiles;
  }
  __syncthreads();
  // 5. Tile map: each tile finds its expert by binary search; padding rows of a tile get -1.
  for (int t = tid; t < total_tiles; t += kThreads) {
    int lo = 0, hi = E - 1;  // last expert with tile_offsets[x] <= t (empty experts share offsets)
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (tile_offsets[mid] <= t) lo = mid; else hi = mid - 1;
    }
    const int first_row = (t - tile_offsets[lo]) * a.block_m;
    const int rows = min(a.block_m, a.expert_counts[lo] - first_row);
    a.tile_expert[t] = lo;
    a.tile_rows[t] = rows;
    for (int r = rows; r < a.block_m; ++r) a.gather_index[static_cast<long long>(t) * a.block_m + r] = -1;
  }
}

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__device__ inline void scatter_cta(const RoutingSortArgs& a, int cta, int* segment_start /* [E_local] shared */) {
  using S = Shape<TOPK, TOKENS_PER_CTA, PADDED>;
  __shared__ unsigned int keys[PADDED];  // (local expert << kPosBits) | position, sorted in place
  const long long base = static_cast<long long>(cta) * S::BLOCK;
  const long long total = static_cast<long long>(a.num_tokens) * TOPK;
  for (int i = threadIdx.x; i < PADDED; i += THREADS) {
    unsigned int key = kMaskedKey;  // masked tail: i >= BLOCK or past M
    if (i < S::BLOCK && base + i < total) {
      const int e = local_expert(a, a.topk_ids[base + i]);
      if (e >= 0) key = (static_cast<unsigned int>(e) << kPosBits) | static_cast<unsigned int>(i);
      else a.scatter_index[base + i] = -1;  // dropped: not on this rank, contributes zero
    }
    keys[i] = key;
  }
  block_bitonic_sort<PADDED, THREADS>(keys);  // ties impossible: positions are unique => stable
  const unsigned int num_local = static_cast<unsigned int>(a.num_local_experts);
  for (int i = threadIdx.x; i < PADDED; i += THREADS) {
    const unsigned int e = keys[i] >> kPosBits;
    if (e < num_local && (i == 0 || (keys[i - 1] >> kPosBits) != e)) segment_start[e] = i;
  }
  __syncthreads();
  const int* cta_offsets = a.cta_counts + static_cast<long long>(cta) * a.num_local_experts;
  for (int i = threadIdx.x; i < PADDED; i += THREADS) {
    const unsigned int key = keys[i];
    const unsigned int e = key >> kPosBits;
    if (e >= num_local) continue;
    const long long flat = base + (key & kPosMask);
    const int row = a.padded_offsets[e] + cta_offsets[e] + (i - segment_start[e]);
    a.gather_index[row] = static_cast<int>(flat);
    a.scatter_index[flat] = row;
  }
}

}  // namespace routing_sort_detail

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__global__ void __launch_bounds__(THREADS) routing_count_kernel(RoutingSortArgs a) {
  extern __shared__ int hist[];  // [E_local]
  routing_sort_detail::count_cta<TOPK, TOKENS_PER_CTA, PADDED, THREADS>(a, blockIdx.x, hist);
}

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__global__ void __launch_bounds__(routing_sort_detail::kScanThreads) routing_scan_kernel(RoutingSortArgs a) {
  extern __shared__ int smem[];
  routing_sort_detail::scan_all<routing_sort_detail::kScanThreads>(a, smem);
}

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__global__ void __launch_bounds__(THREADS) routing_scatter_kernel(RoutingSortArgs a) {
  extern __shared__ int segment_start[];  // [E_local] first sorted position of each expert
  routing_sort_detail::scatter_cta<TOPK, TOKENS_PER_CTA, PADDED, THREADS>(a, blockIdx.x, segment_start);
}

}  // namespace moejit
