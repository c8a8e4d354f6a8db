// Arguments of the routing_sort kernels. Plain C types only: the host includes this header too, so
// both sides agree on the layout by construction (runtime/ static_asserts its size).
#pragma once

namespace moejit {

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
  int* totals;             // [3]: routed rows, padded rows, tiles
  int* error_flags;        // [1] RoutingErrorFlags, OR-ed; the caller zeroes it
};

}  // namespace moejit
