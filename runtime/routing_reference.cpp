#include "runtime/routing_reference.h"

namespace moejit {

RoutingSortReference reference_routing_sort(const std::vector<int>& topk_ids, int num_tokens, int top_k,
                                            int num_experts, int num_local_experts,
                                            const std::vector<int>& expert_map, int block_m) {
  RoutingSortReference r;
  const int slots = num_tokens * top_k;
  std::vector<std::vector<int>> rows(num_local_experts);
  r.scatter_index.assign(slots, -1);
  for (int flat = 0; flat < slots; ++flat) {
    int id = topk_ids[flat];
    int local = -1;
    if (id < 0 || id >= num_experts) {
      r.bad_ids = true;
    } else {
      local = expert_map.empty() ? id : expert_map[id];
      if (local < -1 || local >= num_local_experts) {
        r.bad_ids = true;
        local = -1;
      }
    }
    if (local >= 0) rows[local].push_back(flat);
  }
  r.expert_counts.resize(num_local_experts);
  r.expert_offsets.assign(num_local_experts + 1, 0);
  r.padded_offsets.assign(num_local_experts + 1, 0);
  for (int e = 0; e < num_local_experts; ++e) {
    const int count = static_cast<int>(rows[e].size());
    const int padded = (count + block_m - 1) / block_m * block_m;
    r.expert_counts[e] = count;
    r.expert_offsets[e + 1] = r.expert_offsets[e] + count;
    r.padded_offsets[e + 1] = r.padded_offsets[e] + padded;
    for (int i = 0; i < padded; i += block_m) {
      r.tile_expert.push_back(e);
      r.tile_rows.push_back(std::min(block_m, count - i));
    }
    for (int i = 0; i < padded; ++i) {
      const int row = r.padded_offsets[e] + i;
      r.gather_index.push_back(i < count ? rows[e][i] : -1);
      if (i < count) r.scatter_index[rows[e][i]] = row;
    }
  }
  r.routed_rows = r.expert_offsets[num_local_experts];
  r.padded_rows = r.padded_offsets[num_local_experts];
  r.tiles = static_cast<int>(r.tile_expert.size());
  return r;
}

}  // namespace moejit

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace moejit {

std::vector<double> grid_router_logits(int tokens, int experts, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<double> out(std::size_t(tokens) * experts);
  std::vector<int> ramp(experts);
  for (int t = 0; t < tokens; ++t) {
    std::iota(ramp.begin(), ramp.end(), -experts / 2);
    std::shuffle(ramp.begin(), ramp.end(), rng);
    for (int e = 0; e < experts; ++e) out[std::size_t(t) * experts + e] = ramp[e] / 128.0;
  }
  return out;
}

std::string describe_routing_difference(const RoutingSortReference& want, const RoutingSortReference& got) {
  auto vec = [](const char* what, const std::vector<int>& a, const std::vector<int>& b) -> std::string {
    if (a.size() != b.size()) return fmt::format("{}: {} entries expected, {} found", what, a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) return fmt::format("{}[{}] = {}, expected {}", what, i, b[i], a[i]);
    return {};
  };
  if (want.routed_rows != got.routed_rows) return fmt::format("routed rows {} != {}", got.routed_rows, want.routed_rows);
  if (want.padded_rows != got.padded_rows) return fmt::format("padded rows {} != {}", got.padded_rows, want.padded_rows);
  if (want.tiles != got.tiles) return fmt::format("tiles {} != {}", got.tiles, want.tiles);
  if (want.bad_ids != got.bad_ids) return fmt::format("bad-id flag {} != {}", got.bad_ids, want.bad_ids);
  for (auto [name, a, b] : {std::tuple{"expert_counts", &want.expert_counts, &got.expert_counts},
                            {"expert_offsets", &want.expert_offsets, &got.expert_offsets},
                            {"padded_offsets", &want.padded_offsets, &got.padded_offsets},
                            {"gather_index", &want.gather_index, &got.gather_index},
                            {"scatter_index", &want.scatter_index, &got.scatter_index},
                            {"tile_expert", &want.tile_expert, &got.tile_expert},
                            {"tile_rows", &want.tile_rows, &got.tile_rows}})
    if (auto d = vec(name, *a, *b); !d.empty()) return d;
  return {};
}

}  // namespace moejit
