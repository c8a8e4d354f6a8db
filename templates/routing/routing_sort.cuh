// routing_sort: topk ids -> per-expert counts, offsets, a gather index sorted by expert (stable by
// token*TOPK+slot), its inverse (scatter index) and a tile map padded to block_m rows per expert.
//
// Three kernels, no host synchronization and no memset between them (CUDA-graph capturable):
//   count   grid = num_ctas: ranks the CTA's TOKENS_PER_CTA*TOPK keys inside their expert     -> cta_counts,
//           (local expert, rank) per key parked in scatter_index, error bits in cta_flags
//   scan    grid = E / 32:  per-expert prefix over CTAs                                      -> CTA bases, totals
//   scatter 1024 keys/CTA:  padded offsets (block scan of totals), row = offset + base + rank -> gather/scatter;
//                           CTA 0 also writes offsets, totals, tile map, error bits
// Each CTA owns BLOCK = TOKENS_PER_CTA*TOPK consecutive keys in a key block of width
// PADDED = next_pow2(BLOCK) (computed by the host, so any TOPK — 3, 5, 6, 7, ... — works by
// construction); keys at positions >= BLOCK are masked. A warp ranks each chunk of 32 keys with
// match.any (stable: a key's rank counts the equal keys of lower lanes), and a [chunks][E_local]
// table of chunk counts gives every chunk its base. This replaced a block-wide bitonic sort whose
// 36 barrier steps (PADDED = 256) and global round trips dominated small batches.
// The fused routing kernels (routing_fused.cuh) run the same stages after their top-k.
#pragma once

#include "common/block_scan.cuh"
#include "common/dependent_launch.cuh"
#include "routing/routing_sort_args.cuh"

namespace moejit {
namespace routing_sort_detail {

template <int TOPK, int TOKENS_PER_CTA, int PADDED>
struct Shape {
  enum : int { BLOCK = TOPK * TOKENS_PER_CTA, CHUNKS = routing_rank_chunks(PADDED) };  // keys per CTA
  static_assert(TOPK >= 1 && TOKENS_PER_CTA >= 1, "TOPK and TOKENS_PER_CTA must be positive");
  static_assert((PADDED & (PADDED - 1)) == 0, "PADDED must be a power of two");
  static_assert(PADDED >= BLOCK && PADDED < 2 * BLOCK + 1, "PADDED must be next_pow2(BLOCK)");
  static_assert(PADDED <= 1024, "ranks and chunk counts are 16-bit; at most 1024 keys per CTA");
};

// Global expert id -> local id, or -1 when the expert is not local (dropped). Invalid input ORs
// a bit into `flags` (a register) and is dropped: never an out-of-bounds access.
__device__ inline int local_expert_flagged(const RoutingSortArgs& a, int id, int& flags) {
  if (id < 0 || id >= a.num_experts) {
    flags |= kRoutingBadExpertId;
    return -1;
  }
  if (a.expert_map == nullptr) return id;
  const int local = a.expert_map[id];
  if (local < -1 || local >= a.num_local_experts) {
    flags |= kRoutingBadExpertMap;
    return -1;
  }
  return local;
}
// The same with the bits ORed into *flags in shared memory.
__device__ inline int local_expert(const RoutingSortArgs& a, int id, int* flags) {
  int bits = 0;
  const int local = local_expert_flagged(a, id, bits);
  if (bits) atomicOr(flags, bits);
  return local;
}

// Stable rank of every key of a CTA inside its expert, and the CTA's count per expert.
// keys[PADDED]: local expert, or -1 (masked tail, dropped). Writes rank[i] for every key >= 0 and
// expert_total[E_local]; `table` is [CHUNKS][E_local] 16-bit scratch. All THREADS threads call it;
// it begins and ends with a barrier.
template <int PADDED, int THREADS>
__device__ inline void rank_cta(const int* keys, int* rank, unsigned short* table, int* expert_total, int E) {
  constexpr int CHUNKS = routing_rank_chunks(PADDED);
  constexpr int WARPS = THREADS / 32;
  static_assert(THREADS % 32 == 0, "whole warps");
  unsigned int* words = reinterpret_cast<unsigned int*>(table);
  for (int i = threadIdx.x; i < (CHUNKS * E + 1) / 2; i += THREADS) words[i] = 0;
  __syncthreads();  // table zeroed; keys written by the caller visible
  const int lane = threadIdx.x & 31;
  for (int c = threadIdx.x >> 5; c < CHUNKS; c += WARPS) {
    const int i = c * 32 + lane;
    const int e = i < PADDED ? keys[i] : -1;
    const unsigned int peers = __match_any_sync(0xffffffffu, e);
    const int r = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0) {
      rank[i] = r;
      if (r == 0) table[c * E + e] = static_cast<unsigned short>(__popc(peers));
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += THREADS) {  // chunk counts -> each chunk's base per expert
    int running = 0;
#pragma unroll 4
    for (int c = 0; c < CHUNKS; ++c) {
      const int count = table[c * E + e];
      table[c * E + e] = static_cast<unsigned short>(running);
      running += count;
    }
    expert_total[e] = running;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < PADDED; i += THREADS) {
    const int e = keys[i];
    if (e >= 0) rank[i] += table[(i >> 5) * E + e];
  }
  __syncthreads();
}

// Count stage of one CTA of a multi-CTA run (after rank_cta): the CTA's count per expert, each
// key's (expert, rank) parked in scatter_index for the scatter stage (-1 when dropped), and the
// CTA's error bits.
template <int TOPK, int TOKENS_PER_CTA, int THREADS>
__device__ inline void publish_cta(const RoutingSortArgs& a, int cta, const int* keys, const int* rank,
                                   const int* expert_total, int flags) {
  constexpr int BLOCK = TOPK * TOKENS_PER_CTA;
  const int E = a.num_local_experts;
  int* row = a.cta_counts + static_cast<long long>(cta) * E;
  for (int e = threadIdx.x; e < E; e += THREADS) row[e] = expert_total[e];
  const long long base = static_cast<long long>(cta) * BLOCK;
  const long long total = static_cast<long long>(a.num_tokens) * TOPK;
  for (int i = threadIdx.x; i < BLOCK && base + i < total; i += THREADS)
    a.scatter_index[base + i] = keys[i] >= 0 ? (keys[i] << kRoutingRankBits) | rank[i] : -1;
  if (threadIdx.x == 0) a.cta_flags[cta] = flags;
}

// Loads a CTA's topk ids as local-expert keys (masked tail = -1) into keys[PADDED].
template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__device__ inline void load_keys(const RoutingSortArgs& a, int cta, int* keys, int* flags) {
  constexpr int BLOCK = TOPK * TOKENS_PER_CTA;
  const long long base = static_cast<long long>(cta) * BLOCK;
  const long long total = static_cast<long long>(a.num_tokens) * TOPK;
  for (int i = threadIdx.x; i < PADDED; i += THREADS)
    keys[i] = i < BLOCK && base + i < total ? local_expert(a, a.topk_ids[base + i], flags) : -1;
}

// Per-expert exclusive prefix of CTA counts, read in batches so that many loads are in flight (the
// in-place rewrite otherwise serializes one L2 round trip per CTA row).
enum : int { kScanBatch = 8 };

// Each expert's first tile (tile_offsets, shared, E_local + 1 entries) from the per-expert counts in
// count_s (shared, E_local entries); with `publish`, also the offsets, padded offsets and totals in
// global memory. Then part `part` of `parts` of the tile map and of the padding rows: the scatter's
// CTAs split them (CTA 0 writing all of them was ~4 us of DeepSeek-V3's critical path on an H200).
// `scratch` holds 33 shared 64-bit values. Every thread of the CTA (THREADS >= E_local) calls it;
// tile_offsets is complete after it returns.
template <int THREADS>
__device__ inline void write_offsets_and_tiles(const RoutingSortArgs& a, const int* count_s, int* tile_offsets,
                                               unsigned long long* scratch, bool publish, int part, int parts) {
  const int E = a.num_local_experts;
  const int tid = threadIdx.x;
  const int count = tid < E ? count_s[tid] : 0;
  const int tiles = (count + a.block_m - 1) / a.block_m;
  // Rows and tiles in one block scan: rows in the high word, tiles in the low word (both < 2^31).
  unsigned long long total = 0;
  const unsigned long long prefix = block_exclusive_sum<THREADS, unsigned long long>(
      (static_cast<unsigned long long>(count) << 32) | static_cast<unsigned int>(tiles), scratch, &total);
  const int tile_offset = static_cast<int>(prefix & 0xffffffffu);
  const int total_tiles = static_cast<int>(total & 0xffffffffu);
  if (tid < E) tile_offsets[tid] = tile_offset;
  if (tid == 0) tile_offsets[E] = total_tiles;
  if (publish) {
    const int routed = static_cast<int>(total >> 32);
    if (tid < E) {
      a.expert_offsets[tid] = static_cast<int>(prefix >> 32);
      a.padded_offsets[tid] = tile_offset * a.block_m;
    }
    if (tid == 0) {
      a.expert_offsets[E] = routed;
      a.padded_offsets[E] = total_tiles * a.block_m;
      a.totals[0] = routed;
      a.totals[1] = total_tiles * a.block_m;
      a.totals[2] = total_tiles;
      // The persistent GEMMs' work queue counters start from zero in every forward.
      for (int c = 0; c < kRoutingWorkCounters; ++c) a.totals[3 + c] = 0;
    }
  }
  __syncthreads();
  // Tile map: each tile finds its expert by binary search.
  for (int t = part * THREADS + tid; t < total_tiles; t += parts * THREADS) {
    int lo = 0, hi = E - 1;  // last expert with tile_offsets[x] <= t (empty experts share offsets)
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (tile_offsets[mid] <= t) lo = mid; else hi = mid - 1;
    }
    const int first_row = (t - tile_offsets[lo]) * a.block_m;
    a.tile_expert[t] = lo;
    a.tile_rows[t] = min(a.block_m, count_s[lo] - first_row);
  }
  // Padding rows (each expert's last tile past its count) get -1: one warp per expert, lanes on
  // consecutive rows. A thread per tile writing its own padding rows made every store touch 32
  // sectors and serialized ~60 of them per thread: 6-16 us of the scan at any M.
  constexpr int kWarps = THREADS / 32;
  const int lane = tid & 31;
  for (int x = part * kWarps + (tid >> 5); x < E; x += parts * kWarps) {
    const int end = tile_offsets[x + 1] * a.block_m;
    for (int r = tile_offsets[x] * a.block_m + count_s[x] + lane; r < end; r += 32) a.gather_index[r] = -1;
  }
}

// The run's error bits: OR of every count CTA's (cta_flags), written by one warp of the scan.
// `flags` is this lane's share, loaded early so the loads overlap the scan's own.
__device__ inline void publish_error_flags(const RoutingSortArgs& a, unsigned int flags) {
  flags = __reduce_or_sync(0xffffffffu, flags);
  if ((threadIdx.x & 31) == 0) *a.error_flags = static_cast<int>(flags);
}

// The scan stage, routing_scan_ctas() CTAs of kThreads threads. CTA b takes local experts
// [32b, 32b + 32): thread t works on expert 32b + t % 32 over chunk t / 32 of the CTA rows, so each
// thread reads a handful of rows (8 at M = 8192) and the loads of one row are coalesced. It rewrites
// cta_counts in place as each count CTA's first row inside its expert and writes the expert totals
// to expert_counts (the scatter kernel turns those into offsets) and, in CTA 0, the run's error bits. (One CTA walking ~64 rows per
// thread was half of DeepSeek-V3's routing time at M = 8192; a last-CTA finisher put fences and an
// atomic ticket on the critical path.) Shared memory: routing_scan_smem_bytes(kThreads).
template <int kThreads>
__device__ inline void scan_columns(const RoutingSortArgs& a, int* smem) {
  const int E = a.num_local_experts;
  int* chunk_sum = smem;              // [chunks * width]
  int* chunk_base = smem + kThreads;  // [chunks * width]

  // 32 expert columns per CTA (idle lanes when E < 32) and 32 row chunks: shifts, not divisions.
  constexpr int width = kRoutingScanExpertsPerCta;
  constexpr int chunks = kThreads / width;
  const int tid = threadIdx.x;
  const int e = blockIdx.x * width + (tid & (width - 1));
  const int chunk = tid / width;
  const bool worker = e < E;
  const int per_chunk = (a.num_ctas + chunks - 1) / chunks;
  const int cta_begin = worker ? min(a.num_ctas, chunk * per_chunk) : 0;
  const int cta_end = worker ? min(a.num_ctas, cta_begin + per_chunk) : 0;
  // Row c of this expert is column[c * E]; 32-bit offsets: the workspace holds num_ctas * E < 2^31 ints.
  int* column = a.cta_counts + (worker ? e : 0);

  // 1. Sum of each (expert, chunk). Up to kScanBatch rows per thread (M <= 8192 with 32 tokens per
  // count CTA) stay in registers for step 3.
  const bool in_registers = per_chunk <= kScanBatch;
  int v[kScanBatch];
  int sum = 0;
  if (in_registers) {
#pragma unroll
    for (int j = 0; j < kScanBatch; ++j) {
      v[j] = cta_begin + j < cta_end ? column[(cta_begin + j) * E] : 0;
      sum += v[j];
    }
  } else {
#pragma unroll kScanBatch
    for (int c = cta_begin; c < cta_end; ++c) sum += column[c * E];
  }
  // CTA 0's first warp also ORs the count CTAs' error bits (loads in flight with the rows above).
  const bool flag_warp = blockIdx.x == 0 && tid < 32;
  unsigned int flags = 0;
  if (flag_warp) {
#pragma unroll 8
    for (int c = tid; c < a.num_ctas; c += 32) flags |= static_cast<unsigned int>(a.cta_flags[c]);
  }
  chunk_sum[tid] = sum;  // = [chunk * width + column]
  if (flag_warp) publish_error_flags(a, flags);
  __syncthreads();
  // 2. Exclusive prefix over chunks, per expert, by one warp per expert (a thread walking up to 128
  // chunks in shared memory cost ~2 us); the expert's total goes out for the finisher.
  {
    const int warp = tid >> 5, lane = tid & 31;
    const int expert = blockIdx.x * width + warp;
    if (warp < width && expert < E) {
      const int per_lane = (chunks + 31) / 32;
      const int c0 = lane * per_lane;
      int mine = 0;
      for (int j = 0; j < per_lane && c0 + j < chunks; ++j) mine += chunk_sum[(c0 + j) * width + warp];
      int inclusive = mine;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += up;
      }
      int running_base = inclusive - mine;
      for (int j = 0; j < per_lane && c0 + j < chunks; ++j) {
        chunk_base[(c0 + j) * width + warp] = running_base;
        running_base += chunk_sum[(c0 + j) * width + warp];
      }
      const int expert_total = __shfl_sync(0xffffffffu, inclusive, 31);  // 0 when M = 0
      if (lane == 0) a.expert_counts[expert] = expert_total;
    }
  }
  __syncthreads();
  // 3. Rewrite cta_counts in place as each CTA's first row inside its expert.
  int running = chunk_base[tid];
  if (in_registers) {
#pragma unroll
    for (int j = 0; j < kScanBatch; ++j)
      if (cta_begin + j < cta_end) {
        column[(cta_begin + j) * E] = running;
        running += v[j];
      }
  } else {  // kScanBatch rows at a time: all loads of a batch are issued before its stores
    for (int c0 = cta_begin; c0 < cta_end; c0 += kScanBatch) {
#pragma unroll
      for (int j = 0; j < kScanBatch; ++j) v[j] = c0 + j < cta_end ? column[(c0 + j) * E] : 0;
#pragma unroll
      for (int j = 0; j < kScanBatch; ++j)
        if (c0 + j < cta_end) {
          column[(c0 + j) * E] = running;
          running += v[j];
        }
    }
  }
}

// The scatter stage, kRoutingScatterThreads keys per CTA. Every CTA derives each expert's padded
// offset from the totals (a block scan over E_local) and places its keys: row = padded offset +
// the key's CTA's first row inside the expert + its rank inside that CTA. CTA 0 also publishes the
// offsets and totals; all CTAs share the tile map and the padding rows. Shared memory:
// routing_scatter_smem_bytes(E_local).
template <int TOPK, int TOKENS_PER_CTA>
__device__ inline void scatter_all(const RoutingSortArgs& a, int* smem) {
  constexpr int kThreads = kRoutingScatterThreads;
  const int E = a.num_local_experts;
  unsigned long long* scratch = reinterpret_cast<unsigned long long*>(smem);  // [33]
  int* count_s = smem + 66;                                                  // [E]
  int* tile_offsets = count_s + E;                                           // [E + 1]
  const int tid = threadIdx.x;
  const long long flat = static_cast<long long>(blockIdx.x) * kThreads + tid;
  const bool has_key = flat < static_cast<long long>(a.num_tokens) * TOPK;
  const int info = has_key ? a.scatter_index[flat] : -1;  // loaded before the block scan: overlaps it
  const int cta = static_cast<int>(flat / (TOPK * TOKENS_PER_CTA));
  const int e = info >> kRoutingRankBits;
  const int cta_base = info >= 0 ? a.cta_counts[static_cast<long long>(cta) * E + e] : 0;
  for (int x = tid; x < E; x += kThreads) count_s[x] = a.expert_counts[x];
  __syncthreads();
  write_offsets_and_tiles<kThreads>(a, count_s, tile_offsets, scratch, blockIdx.x == 0, blockIdx.x, gridDim.x);
  if (info < 0) return;  // no key here, or dropped (scatter_index stays -1)
  const int row = tile_offsets[e] * a.block_m + cta_base + (info & ((1 << kRoutingRankBits) - 1));
  a.gather_index[row] = static_cast<int>(flat);
  a.scatter_index[flat] = row;
}

}  // namespace routing_sort_detail

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__global__ void __launch_bounds__(THREADS) routing_count_kernel(RoutingSortArgs a) {
  static_assert(routing_sort_detail::Shape<TOPK, TOKENS_PER_CTA, PADDED>::BLOCK > 0, "shape checks");
  __shared__ int keys[PADDED];
  __shared__ int rank[PADDED];
  __shared__ int flags;
  extern __shared__ int dynamic_smem[];  // routing_rank_smem_bytes(PADDED, E_local)
  const int E = a.num_local_experts;
  int* expert_total = dynamic_smem;
  unsigned short* table = reinterpret_cast<unsigned short*>(dynamic_smem + E);
  pdl::launch_dependents();
  if (threadIdx.x == 0) flags = 0;
  __syncthreads();
  routing_sort_detail::load_keys<TOPK, TOKENS_PER_CTA, PADDED, THREADS>(a, blockIdx.x, keys, &flags);
  routing_sort_detail::rank_cta<PADDED, THREADS>(keys, rank, table, expert_total, E);
  routing_sort_detail::publish_cta<TOPK, TOKENS_PER_CTA, THREADS>(a, blockIdx.x, keys, rank, expert_total, flags);
}

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__global__ void __launch_bounds__(kRoutingScanThreads, 1) routing_scan_kernel(RoutingSortArgs a) {
  extern __shared__ int smem[];
  pdl::launch_dependents();
  pdl::wait();
  routing_sort_detail::scan_columns<kRoutingScanThreads>(a, smem);
}

template <int TOPK, int TOKENS_PER_CTA, int PADDED, int THREADS>
__global__ void __launch_bounds__(kRoutingScatterThreads) routing_scatter_kernel(RoutingSortArgs a) {
  extern __shared__ int smem[];
  pdl::launch_dependents();  // the MoE layer's next kernel waits for this one on the device
  pdl::wait();
  routing_sort_detail::scatter_all<TOPK, TOKENS_PER_CTA>(a, smem);
}

}  // namespace moejit
