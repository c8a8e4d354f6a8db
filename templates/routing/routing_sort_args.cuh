// Arguments of the routing_sort kernels. Plain C types only: the host includes this header too, so
// both sides agree on the layout by construction (runtime/ static_asserts its size).
#pragma once

#include "common/host_device.cuh"

namespace moejit {

// RoutingSortArgs::totals: routed rows, padded rows, tiles, then one work queue counter per grouped
// GEMM of the layer (the persistent wgmma kernels hand out their work items through them: GEMM1,
// GEMM2), zeroed by the routing so that every forward's GEMMs start from item 0. Enumerators, not
// constexpr variables: NVRTC emits those as globals named per compile, and the kernel's cubin then
// differs from one build to the next (the cache's damaged-entry test rebuilds it byte for byte).
enum : int { kRoutingWorkCounters = 2, kRoutingTotals = 3 + kRoutingWorkCounters };

// Bits of RoutingSortArgs::error_flags.
enum RoutingErrorFlags : int {
  kRoutingBadExpertId = 1,   // a topk id outside [0, num_experts): treated as dropped
  kRoutingBadExpertMap = 2,  // an expert_map entry outside [-1, num_local_experts): dropped
};

struct RoutingSortArgs {
  const int* topk_ids;     // [num_tokens, TOPK] global expert ids, row-major
  const int* expert_map;   // [num_experts] global -> local id, -1 = not on this rank; null = identity
  int num_tokens;          // M
  int num_experts;         // E (global)
  int num_local_experts;   // E_local; equals E without expert_map
  int block_m;             // GEMM tile rows: each expert's rows are padded to a multiple of it
  int num_ctas;            // ceil(M / TOKENS_PER_CTA): grid of the count and scatter kernels
  int* cta_counts;         // [num_ctas, E_local] workspace: per-CTA counts, then in-expert offsets
  int* expert_counts;      // [E_local] routed rows per local expert
  int* expert_offsets;     // [E_local + 1] unpadded exclusive prefix of expert_counts
  int* padded_offsets;     // [E_local + 1] prefix of counts rounded up to block_m
  int* gather_index;       // [capacity] padded row -> token * TOPK + slot; -1 on padding rows
  int* scatter_index;      // [M * TOPK] token * TOPK + slot -> padded row; -1 when dropped
  int* tile_expert;        // [max_tiles] local expert of tile t (rows [t*block_m, (t+1)*block_m))
  int* tile_rows;          // [max_tiles] valid (non-padding) rows of tile t
  int* totals;             // [kRoutingTotals]: routed rows, padded rows, tiles, then the GEMMs' work
                           // queue counters (kRoutingWorkCounters; zeroed with the totals)
  int* cta_flags;          // [num_ctas] workspace: each count CTA's RoutingErrorFlags
  int* error_flags;        // [1] RoutingErrorFlags of the run (the scan ORs cta_flags into it)
};

// Threads per CTA of the scan and of the element-wise scatter kernel; experts per scan CTA (a warp
// reads 32 consecutive experts of one CTA row: 128 bytes).
// (The scatter's block scan over experts needs kRoutingScatterThreads >= E_local.)
enum : int { kRoutingScanThreads = 1024, kRoutingScatterThreads = 1024, kRoutingScanExpertsPerCta = 32 };

// CTAs of the scan kernel (one per 32 local experts) and of the scatter kernel (one per
// kRoutingScatterThreads keys; at least one, which writes the result of M = 0).
MOEJIT_HOST_DEVICE constexpr int routing_scan_ctas(int local_experts) {
  return (local_experts + kRoutingScanExpertsPerCta - 1) / kRoutingScanExpertsPerCta;
}
MOEJIT_HOST_DEVICE constexpr int routing_scatter_ctas(long long keys) {
  return keys > 0 ? static_cast<int>((keys + kRoutingScatterThreads - 1) / kRoutingScatterThreads) : 1;
}

// A key's (local expert, rank inside its CTA's keys of that expert), as the count stage leaves it in
// scatter_index for the scatter stage: rank < 1024 keys per CTA, local expert < 1024.
enum : int { kRoutingRankBits = 16 };

// Chunks of 32 keys in a CTA's padded key block (one warp ranks one chunk).
MOEJIT_HOST_DEVICE constexpr int routing_rank_chunks(int padded) { return padded >= 32 ? padded / 32 : 1; }

// Dynamic shared memory of the ranking stage: a [chunks][E_local] table of 16-bit chunk counts
// (rounded to whole words) and the CTA's count per expert.
MOEJIT_HOST_DEVICE constexpr unsigned routing_rank_smem_bytes(int padded, int local_experts) {
  return static_cast<unsigned>((routing_rank_chunks(padded) * local_experts + 1) / 2 * 4 + local_experts * 4);
}

// Dynamic shared memory of a scan CTA of `threads` threads: chunk sums and bases.
MOEJIT_HOST_DEVICE constexpr unsigned routing_scan_smem_bytes(int threads) { return static_cast<unsigned>(2 * threads * 4); }

// Dynamic shared memory of a scatter CTA: block-scan scratch (33 64-bit values, first: aligned),
// counts (E), tile offsets (E + 1).
MOEJIT_HOST_DEVICE constexpr unsigned routing_scatter_smem_bytes(int local_experts) {
  return static_cast<unsigned>((66 + 2 * local_experts + 1) * 4);
}

}  // namespace moejit
