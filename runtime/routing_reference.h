// CPU reference of routing_sort's outputs, written the obvious way (per expert, in token order), for
// tests, the demo and the benchmark's verification.
#pragma once

#include <string>
#include <vector>

namespace moejit {

struct RoutingSortReference {
  std::vector<int> expert_counts, expert_offsets, padded_offsets;
  std::vector<int> gather_index;   // padded rows, -1 on padding
  std::vector<int> scatter_index;  // -1 when dropped
  std::vector<int> tile_expert, tile_rows;
  int routed_rows = 0, padded_rows = 0, tiles = 0;
  bool bad_ids = false;  // an id outside [0, E) or a bad expert_map entry was seen (and dropped)
};

// topk_ids: [num_tokens * top_k]; expert_map: empty = identity, else [num_experts].
RoutingSortReference reference_routing_sort(const std::vector<int>& topk_ids, int num_tokens, int top_k,
                                            int num_experts, int num_local_experts,
                                            const std::vector<int>& expert_map, int block_m);

}  // namespace moejit

namespace moejit {
// Router logits for checks: per token a shuffled ramp of distinct integers (|k| <= 256) / 128, so
// they are exact in bf16, f16 and f32 and never nearly tied: the fp64 reference's selection is the
// only right answer. [tokens, experts], deterministic in `seed`.
std::vector<double> grid_router_logits(int tokens, int experts, unsigned seed);

// "" when equal, else a description of the first difference.
std::string describe_routing_difference(const RoutingSortReference& expected, const RoutingSortReference& got);
}  // namespace moejit
